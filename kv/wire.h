// Rowan-KV request and response payloads carried in Ordered Queue requests (doc/kv.md §Wire).
// The OQ header around them already carries a CRC32C over the whole request/response.
//
// Every request payload: a 32-byte header + key + value bytes.
//   [shard u32][key_len u16][flags u16][value_len u32][offset u32][arg1 u64][arg2 u64] key value
// Every response payload: a 32-byte header + body.
//   [flag u8][zero 7][version u64][arg u64][count u32][zero u32] body
// What arg1/arg2/flag/arg/count mean depends on the request type (doc/kv.md §Wire).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::kv::wire {

enum Type : uint16_t {
  kPut = 1,  // nilext. value inline (<= kMaxInlineValue)
  kGet = 2,  // offset = first value byte wanted; arg1 = expected version (0: any)
  kDelete = 3,
  kPutIf = 4,     // arg1 = expected version
  kIncr = 5,      // arg1 = delta (two's complement)
  kScan = 6,      // arg1 = cursor, arg2 = count; no key
  kInfo = 7,      // no key
  kPutChunk = 8,  // arg1 = upload id, arg2 = total length; offset = where these bytes go; no key
  kPutLarge = 9,  // the last chunk + key; arg1 = upload id, arg2 = expected version
                  // (flags & kFlagConditional), offset = where the carried bytes go
  // RDMP server-bypass (doc/kv.md §RDMP):
  kReserve = 10,  // key; arg1 = value_len | value CRC32C << 32; arg2 = bypass token.
                  // Reply: version, arg = log offset of the slot, count = footprint
  kPublish = 11,  // key; arg1 = log offset, arg2 = version. nilext on unreplicated shards.
                  // Reply: version now current
  kBatch = 12,    // no key; value = encoded ops (EncodeBatch). Reply: flag applied, count = ops,
                  // body = one u64 version per op
};
inline constexpr uint16_t kFlagConditional = 1;
// kGet: values of at least arg2 bytes are answered with their location instead (flag 3,
// version, arg = log offset, count = footprint, body = generation u64 + value_len u32).
inline constexpr uint16_t kFlagLocate = 2;
inline constexpr uint8_t kFlagLocated = 3;
inline constexpr size_t kRequestHeader = 32;
inline constexpr size_t kResponseHeader = 32;

struct Request {
  uint16_t type = 0;
  uint32_t shard = 0;
  uint16_t flags = 0;
  uint32_t offset = 0;
  uint64_t arg1 = 0;
  uint64_t arg2 = 0;
  std::string_view key;
  std::string_view value;
};
void EncodeRequest(const Request& r, std::vector<uint8_t>* out);  // payload only (type separate)
// kInvalidArgument for a short payload or lengths that do not add up. Views point into `payload`.
Result<Request> DecodeRequest(uint16_t type, std::span<const uint8_t> payload);

struct Response {
  uint8_t flag = 0;
  uint64_t version = 0;
  uint64_t arg = 0;
  uint32_t count = 0;
  std::string_view body;
};
void EncodeResponseHeader(const Response& r, std::vector<uint8_t>* out);  // appends header only
Result<Response> DecodeResponse(std::span<const uint8_t> payload);        // kCorruption if short

// An atomic batch's ops in a kBatch request's value: [count u16][zero u16] then per op
// [key_len u16][flags u8: 1 delete, 2 conditional, 4 check only][zero u8][value_len u32][expected
// u64] key value. Views point into `bytes`.
struct BatchOpView {
  std::string_view key;
  bool is_delete = false;
  bool conditional = false;
  bool check_only = false;
  uint64_t expected_version = 0;
  std::string_view value;
};
void EncodeBatch(std::span<const BatchOpView> ops, std::string* out);
// kInvalidArgument when the bytes do not parse exactly.
Result<std::vector<BatchOpView>> DecodeBatch(std::string_view bytes);

// An error reply the client may resend after re-reading the shard map: kUnavailable with sub-code
// kNotPrimary (the server is not the shard's primary at its map epoch) or kFenced (its lease
// lapsed, so it may no longer be). Either way the server refused before applying anything. The
// sub-code crosses the wire in the OQ response header (fabric/oq/wire.h); the message is context.
inline bool RefusedBeforeApply(const Status& s) {
  return s.code() == StatusCode::kUnavailable &&
         (s.subcode() == StatusSubCode::kNotPrimary || s.subcode() == StatusSubCode::kFenced);
}

// Scan items in a response body: [key_len u16][truncated u8][zero u8][value_len u32][version u64]
// key, value (absent when truncated: the value is larger than a scan carries).
inline constexpr size_t kScanItemHeader = 16;

}  // namespace asymnvm::kv::wire
