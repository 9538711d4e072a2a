// The global naming space of a back-end pool (AsymNVM paper §5.1; doc/architecture.md;
// byte layout in doc/backend.md §Naming space): a persistent open-addressing hash table from a
// structure's name to its type, creation parameters and the words front-ends access one-sidedly —
// root reference, writer lock, reader sequence number and one spare word — which sit next to each
// other in the slot, so addresses handed out stay valid across restarts.
//
// Crash consistency: a slot is written (body + CRC32C) and persisted while its state word still
// says free; only then is the 4-byte state set to live and persisted. A crash therefore leaves
// either a free slot or a complete live one. A live slot whose CRC fails is corruption: reported
// (kCorruption from Open with strict = true, listed by Check()), never silently reused. Removal
// sets the state to tombstone (probing continues past it); the mutable words are outside the CRC.
//
// Thread safety: all methods are internally serialized (one mutex); the mutable words may be
// accessed concurrently by the fabric (remote READ/CAS) and the applier.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"

namespace asymnvm::backend {

inline constexpr size_t kNamingSlotSize = 256;
inline constexpr size_t kMaxNameLength = 63;
inline constexpr size_t kNamingParams = 4;
// Naming entries of this type, named "fe:<id>", are front-end records (doc/backend.md): root word =
// LPN, lock word = OPN, seq word = first rejected txn_seq, aux word = highest op_seq seen.
inline constexpr uint32_t kFrontendRecordType = 0xFE;

// Offsets of the mutable words inside a slot.
inline constexpr size_t kRootWordOffset = 128;
inline constexpr size_t kLockWordOffset = 136;
inline constexpr size_t kSeqWordOffset = 144;
inline constexpr size_t kAuxWordOffset = 152;

struct NamingEntry {
  uint32_t slot = 0;
  std::string name;
  uint32_t type = 0;                             // structure type (caller-defined, non-zero)
  std::array<uint64_t, kNamingParams> params{};  // creation parameters (value size, fan-out, ...)
  // Pool offsets of the one-sided words of this entry.
  uint64_t root_addr = 0, lock_addr = 0, seq_addr = 0, aux_addr = 0;
};

class NamingSpace {
 public:
  // `area` is a pool offset range [area_offset, area_offset + area_size) inside `base`, a multiple
  // of kNamingSlotSize and 64-byte aligned. `format` zeroes it (a new pool). Errors:
  // kInvalidArgument (geometry), kCorruption (strict and a live slot fails its CRC).
  static Result<std::unique_ptr<NamingSpace>> Open(uint8_t* base, uint64_t area_offset,
                                                   uint64_t area_size, pm::Persister* persister,
                                                   bool format, bool strict = true);

  // kAlreadyExists (same name; the existing entry is returned through *existing when non-null),
  // kInvalidArgument (empty or too long name, type 0), kResourceExhausted (table full).
  Result<NamingEntry> Create(const std::string& name, uint32_t type,
                             const std::array<uint64_t, kNamingParams>& params,
                             NamingEntry* existing = nullptr);
  // kNotFound, kInvalidArgument (bad name).
  Result<NamingEntry> Lookup(const std::string& name) const;
  // The live entry in `slot` (the structure id op logs carry). kNotFound: free, removed, out of
  // range; kCorruption: its CRC fails.
  Result<NamingEntry> At(uint32_t slot) const;
  // kNotFound. The slot's words are zeroed; its space is reusable.
  Status Remove(const std::string& name);
  std::vector<NamingEntry> List() const;
  // One message per live slot whose CRC fails (empty: consistent).
  std::vector<std::string> Check() const;

  uint32_t capacity() const { return slots_; }
  uint32_t live() const;

 private:
  NamingSpace(uint8_t* base, uint64_t off, uint32_t slots, pm::Persister* p)
      : base_(base), area_offset_(off), slots_(slots), persister_(p) {}
  uint8_t* Slot(uint32_t i) const { return base_ + area_offset_ + uint64_t{i} * kNamingSlotSize; }
  uint32_t State(uint32_t i) const;
  void SetState(uint32_t i, uint32_t state) ASYMNVM_REQUIRES(mu_);
  bool SlotValid(uint32_t i) const;
  NamingEntry Decode(uint32_t i) const;
  // Index of the live slot holding `name`, or -1.
  int64_t Find(const std::string& name) const ASYMNVM_REQUIRES(mu_);

  uint8_t* base_;
  uint64_t area_offset_;
  uint32_t slots_;
  pm::Persister* persister_;
  mutable Mutex mu_;  // the slots (in the pool, so no field is ASYMNVM_GUARDED_BY it)
};

}  // namespace asymnvm::backend
