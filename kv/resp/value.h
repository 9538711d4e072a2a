// How the RESP gateway stores a Redis string in a KV value. A value without a TTL is stored as
// its bytes, so the KV client API and the gateway read each other's values and INCR can use the
// store's atomic Incr. A value with a TTL — or one whose bytes happen to begin with the magic — is
// framed: magic "\xFF\xFE" "AX", one tag byte, (tag 1) the expiry as 8 little-endian bytes of Unix
// milliseconds, then the bytes. doc/resp.md §Values and TTL.
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
inline constexpr size_t kMaxValueOverhead = 4 + 1 + 8;

struct DecodedValue {
  std::string_view data;
  int64_t expire_at_ms = 0;  // 0: never expires
};

std::string EncodeValue(std::string_view data, int64_t expire_at_ms);
// Every stored value decodes: bytes that are not a well-formed frame are a plain value.
DecodedValue DecodeValue(std::string_view raw);

}  // namespace asymnvm::kv::resp
