// The OQ demo key-value store: u64 key → u64 value, with nilext `set` and non-nilext `get`
// (doc/oq.md §Demo KV). DRAM mode keeps a hash map; durable mode keeps a fixed open-addressing
// table in a PM area so state survives kill -9.
//
// Exactly-once under recovery: every entry records the queue position (worker, position) of the
// last applied set and how many sets were applied. A set re-executed by OQ recovery
// (ctx.recovering) at or below the recorded position of the same worker is skipped and counted.
//
// Request types: kSet (payload key u64 | value u64, little-endian; no response), kGet (payload key;
// response value u64, 0 = absent), kInfo (payload key; response value u64 | applied_sets u64).
// Unknown types or bad payload sizes → kInvalidArgument; table full → kResourceExhausted.
//
// Thread safety: all methods are thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"
#include "fabric/oq/oq.h"

namespace asymnvm::oq {

enum KvType : uint16_t { kKvSet = 1, kKvGet = 2, kKvInfo = 3 };

struct KvInfo {
  uint64_t value = 0;
  uint64_t applied_sets = 0;
};

class KvStore {
 public:
  static std::unique_ptr<KvStore> OpenDram();
  // Formats a blank area, otherwise validates the header. Errors: kInvalidArgument (area under
  // 4 KiB + one entry, misaligned, null), kCorruption (header checksum, or an entry whose both
  // versions fail their checksum while not blank).
  static Result<std::unique_ptr<KvStore>> OpenDurable(uint8_t* area, size_t size,
                                                      pm::Persister* persister);

  Handler handler();
  Status Set(uint64_t key, uint64_t value, uint32_t worker, uint64_t position, bool recovering);
  KvInfo Get(uint64_t key) const;
  uint64_t skipped_reexecutions() const;
  uint64_t size() const;

  static uint32_t WorkerFor(uint64_t key, uint32_t workers);
  static std::vector<uint8_t> SetPayload(uint64_t key, uint64_t value);
  static std::vector<uint8_t> KeyPayload(uint64_t key);

 private:
  struct Entry {
    uint64_t value = 0, applied = 0, pos = 0;  // pos = worker << 56 | position
  };
  KvStore() = default;
  Status SetLocked(uint64_t key, uint64_t value, uint64_t pos, bool recovering)
      ASYMNVM_REQUIRES(mu_);
  // Durable table helpers.
  bool ReadSlot(size_t i, uint64_t* key, Entry* e, int* newest) const;
  size_t Probe(uint64_t key, bool* found) const;

  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> map_ ASYMNVM_GUARDED_BY(mu_);
  uint8_t* table_ = nullptr;  // durable: entries
  size_t capacity_ = 0;
  uint64_t used_ ASYMNVM_GUARDED_BY(mu_) = 0;
  pm::Persister* persister_ = nullptr;
  uint64_t skipped_ = 0;
};

}  // namespace asymnvm::oq
