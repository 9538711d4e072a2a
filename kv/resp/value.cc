#include "kv/resp/value.h"

namespace asymnvm::kv::resp {

std::string EncodeValue(std::string_view data, int64_t expire_at_ms, uint8_t type) {
  if (type != 0) {
    std::string out;
    out.reserve(kMaxValueOverhead + 1 + data.size());
    out.append(kValueMagic);
    out.push_back(static_cast<char>(kValueTyped));
    out.push_back(static_cast<char>(type));
    uint64_t v = expire_at_ms > 0 ? static_cast<uint64_t>(expire_at_ms) : 0;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    out.append(data);
    return out;
  }
  bool framed = expire_at_ms > 0 || data.substr(0, kValueMagic.size()) == kValueMagic;
  if (!framed) return std::string(data);
  std::string out;
  out.reserve(kMaxValueOverhead + data.size());
  out.append(kValueMagic);
  if (expire_at_ms <= 0) {
    out.push_back(static_cast<char>(kValuePlain));
  } else {
    out.push_back(static_cast<char>(kValueExpiring));
    uint64_t v = static_cast<uint64_t>(expire_at_ms);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  out.append(data);
  return out;
}

DecodedValue DecodeValue(std::string_view raw) {
  DecodedValue d;
  d.data = raw;
  if (raw.size() < kValueMagic.size() + 1 || raw.substr(0, kValueMagic.size()) != kValueMagic) {
    return d;
  }
  uint8_t tag = static_cast<uint8_t>(raw[kValueMagic.size()]);
  size_t head = kValueMagic.size() + 1;
  if (tag == kValuePlain) {
    d.data = raw.substr(head);
    return d;
  }
  if (tag == kValueTyped) {
    if (raw.size() < head + 9 || raw[head] == 0) return d;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(raw[head + 1 + i])) << (8 * i);
    }
    if (v > static_cast<uint64_t>(INT64_MAX)) return d;
    d.type = static_cast<uint8_t>(raw[head]);
    d.expire_at_ms = static_cast<int64_t>(v);
    d.data = raw.substr(head + 9);
    return d;
  }
  if (tag != kValueExpiring || raw.size() < head + 8) return d;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(raw[head + i])) << (8 * i);
  }
  if (v == 0 || v > static_cast<uint64_t>(INT64_MAX)) return d;
  d.expire_at_ms = static_cast<int64_t>(v);
  d.data = raw.substr(head + 8);
  return d;
}

}  // namespace asymnvm::kv::resp
