// The back-end's request protocol over the Ordered Queue (doc/backend.md §Requests): request
// types, and bounds-checked little-endian readers/writers for their payloads. Shared by the
// back-end service and the front-end SDK.
//
// Thread safety: value types.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/status.h"
#include "backend/naming.h"
#include "common/coding.h"

namespace asymnvm::backend {

enum RequestType : uint16_t {
  kRegister = 10,       // fe_id u64 [| epoch u64 [| group term u64]] → RegisterReply (§Fencing)
  kNamingCreate = 11,   // type u32 | name_len u32 | params u64×4 | name → NamingReply
  kNamingLookup = 12,   // name → NamingReply
  kNamingRemove = 13,   // name → (empty)
  kClearRejected = 14,  // fe_id u64 → (empty): the front-end saw its rejected txn and resends
  kFetchOpLogs = 15,    // fe_id u64 | after u64 | before u64 → FetchedOpLogs (see below)
  kNamingAt = 16,       // slot u32 → NamingReply (kNotFound: no live structure there)
  kLockedBy =
      17,  // fe_id u64 → count u32 | slot u32 × count: structures whose writer lock it holds
  kAllocSlab = 20,     // (empty) → addr u64
  kAllocLarge = 21,    // bytes u64 → addr u64
  kFree = 22,          // addr u64 → (empty)
  kFreeDeferred = 23,  // addr u64 → (empty); reclaimed after the grace period
  kExtentOf =
      24,     // addr u64 → start u64 | bytes u64 of the live allocation holding addr (0, 0: none)
  kTxn = 30,  // memory-log transaction bytes (nilext) → (empty)
  kStatus = 40,  // (empty) → JSON text
};

class PayloadWriter {
 public:
  PayloadWriter& U8(uint8_t v) {
    out_.push_back(v);
    return *this;
  }
  PayloadWriter& U32(uint32_t v) {
    const size_t n = out_.size();
    out_.resize(n + 4);
    PutLe32(out_.data() + n, v);
    return *this;
  }
  PayloadWriter& U64(uint64_t v) {
    const size_t n = out_.size();
    out_.resize(n + 8);
    PutLe64(out_.data() + n, v);
    return *this;
  }
  PayloadWriter& Bytes(std::span<const uint8_t> b) {
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  PayloadWriter& Str(const std::string& s) {
    out_.insert(out_.end(), s.begin(), s.end());
    return *this;
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Reads fields in order; the first read past the end makes status() kInvalidArgument and every
// later read return 0 / empty.
class PayloadReader {
 public:
  PayloadReader(std::span<const uint8_t> in, const char* what) : in_(in), what_(what) {}
  uint8_t U8() { return Need(1) ? *Take(1) : 0; }
  uint32_t U32() { return Need(4) ? GetLe32(Take(4)) : 0; }
  uint64_t U64() { return Need(8) ? GetLe64(Take(8)) : 0; }
  std::span<const uint8_t> Bytes(size_t n) {
    if (!Need(n)) return {};
    return {Take(n), n};
  }
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), in_.size() - pos_);
    pos_ = in_.size();
    return s;
  }
  size_t remaining() const { return in_.size() - pos_; }
  Status status() const {
    if (!short_) return Status::Ok();
    return Status::InvalidArgument(std::string(what_) + ": request payload too short (" +
                                   std::to_string(in_.size()) + " bytes)");
  }

 private:
  bool Need(size_t n) {
    if (short_ || in_.size() - pos_ < n) short_ = true;
    return !short_;
  }
  const uint8_t* Take(size_t n) {
    const uint8_t* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::span<const uint8_t> in_;
  const char* what_;
  size_t pos_ = 0;
  bool short_ = false;
};

// The register reply (layout in doc/backend.md §The service and the daemon).
struct RegisterReply {
  uint64_t lpn = 0, opn = 0, rejected = 0;                 // the front-end record's words
  uint64_t lpn_addr = 0, opn_addr = 0, rejected_addr = 0;  // ... and their pool offsets
  uint64_t naming_begin = 0, data_begin = 0, data_end = 0;
  uint32_t block_size = 0;
  uint32_t incarnation = 0;  // this registration's: the front-end puts it in every txn header
  fabric::RegionDescriptor naming_region, data_region;
  std::string log_address;              // the Rowan receiver's
  std::array<uint8_t, 16> pool_uuid{};  // the pool's identity (pm superblock), fixed at creation
};
std::vector<uint8_t> EncodeRegisterReply(const RegisterReply& reply);
// kInvalidArgument (short), kCorruption (bad region descriptor).
Result<RegisterReply> DecodeRegisterReply(std::span<const uint8_t> bytes);

// Naming entries as naming create/lookup reply with them.
void EncodeNamingEntry(const NamingEntry& entry, PayloadWriter* out);
Result<NamingEntry> DecodeNamingEntry(std::span<const uint8_t> bytes);

// The naming create request.
std::vector<uint8_t> EncodeNamingCreate(const std::string& name, uint32_t type,
                                        const std::array<uint64_t, kNamingParams>& params);
struct NamingCreateRequest {
  uint32_t type = 0;
  std::array<uint64_t, kNamingParams> params{};
  std::string name;
};
// kInvalidArgument (short: the name runs past the payload). The name is not checked here (the
// naming space refuses bad ones).
Result<NamingCreateRequest> DecodeNamingCreate(std::span<const uint8_t> bytes);

// Reply of kFetchOpLogs: the front-end's op logs still in the b-log with after < op_seq < before,
// in op_seq order, as many as fit in one reply; `more` says the caller should ask again with
// after = the last op_seq returned. Layout: more u32 | count u32 | count × (op_seq u64 |
// structure_id u32 | op_type u32 | len u32 | payload).
struct FetchedOp {
  uint64_t op_seq = 0;
  uint32_t structure_id = 0;
  uint16_t op_type = 0;
  std::vector<uint8_t> payload;
};
std::vector<uint8_t> EncodeFetchedOps(const std::vector<FetchedOp>& ops, bool more);
// kProtocolError on a malformed reply.
Result<std::vector<FetchedOp>> DecodeFetchedOps(std::span<const uint8_t> bytes, bool* more);

}  // namespace asymnvm::backend
