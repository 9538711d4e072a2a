// How the RESP gateway stores a Redis string in a KV value. A value without a TTL is stored as
// its bytes, so the KV client API and the gateway read each other's values and INCR can use the
// store's atomic Incr. A value with a TTL — or one whose bytes happen to begin with the magic — is
// framed: magic "\xFF\xFE" "AX", one tag byte, (tag 1) the expiry as 8 little-endian bytes of Unix
// milliseconds, then the bytes. doc/resp.md §Values and TTL. Tag 2 frames the metadata record of a
// hash, list, set or sorted set: one type byte, the expiry (8 bytes, 0 = none), then the metadata
// (doc/types.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace asymnvm::kv::resp {

inline constexpr std::string_view kValueMagic =
    "\xFF\xFE"
    "AX";
inline constexpr uint8_t kValuePlain = 0;     // framed only because the bytes begin with the magic
inline constexpr uint8_t kValueExpiring = 1;  // 8-byte expiry follows
inline constexpr uint8_t kValueTyped = 2;     // type byte, 8-byte expiry, collection metadata
inline constexpr size_t kMaxValueOverhead = 4 + 1 + 8;

struct DecodedValue {
  std::string_view data;
  int64_t expire_at_ms = 0;  // 0: never expires
  uint8_t type = 0;          // 0: a string; else the collection type of a tag-2 frame (types.h)
};

// type 0: a string value (framed only when it must be); else a collection's metadata frame.
std::string EncodeValue(std::string_view data, int64_t expire_at_ms, uint8_t type = 0);
// Every stored value decodes: bytes that are not a well-formed frame are a plain value.
DecodedValue DecodeValue(std::string_view raw);

}  // namespace asymnvm::kv::resp
