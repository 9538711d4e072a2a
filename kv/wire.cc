#include "kv/wire.h"

#include <cstring>

#include "common/coding.h"

namespace asymnvm::kv::wire {

void EncodeRequest(const Request& r, std::vector<uint8_t>* out) {
  size_t at = out->size();
  out->resize(at + kRequestHeader + r.key.size() + r.value.size());
  uint8_t* p = out->data() + at;
  PutLe32(p, r.shard);
  PutLe16(p + 4, static_cast<uint16_t>(r.key.size()));
  PutLe16(p + 6, r.flags);
  PutLe32(p + 8, static_cast<uint32_t>(r.value.size()));
  PutLe32(p + 12, r.offset);
  PutLe64(p + 16, r.arg1);
  PutLe64(p + 24, r.arg2);
  if (!r.key.empty()) std::memcpy(p + kRequestHeader, r.key.data(), r.key.size());
  if (!r.value.empty()) {
    std::memcpy(p + kRequestHeader + r.key.size(), r.value.data(), r.value.size());
  }
}

Result<Request> DecodeRequest(uint16_t type, std::span<const uint8_t> payload) {
  if (payload.size() < kRequestHeader) {
    return Status::InvalidArgument("kv request: payload of " + std::to_string(payload.size()) +
                                   " bytes is shorter than its 32-byte header");
  }
  const uint8_t* p = payload.data();
  Request r;
  r.type = type;
  r.shard = GetLe32(p);
  uint16_t key_len = GetLe16(p + 4);
  r.flags = GetLe16(p + 6);
  uint32_t value_len = GetLe32(p + 8);
  r.offset = GetLe32(p + 12);
  r.arg1 = GetLe64(p + 16);
  r.arg2 = GetLe64(p + 24);
  if (kRequestHeader + size_t{key_len} + value_len != payload.size()) {
    return Status::InvalidArgument("kv request: key " + std::to_string(key_len) + " + value " +
                                   std::to_string(value_len) + " bytes do not match payload of " +
                                   std::to_string(payload.size()));
  }
  const char* c = reinterpret_cast<const char*>(p + kRequestHeader);
  r.key = {c, key_len};
  r.value = {c + key_len, value_len};
  return r;
}

void EncodeResponseHeader(const Response& r, std::vector<uint8_t>* out) {
  size_t at = out->size();
  out->resize(at + kResponseHeader, 0);
  uint8_t* p = out->data() + at;
  p[0] = r.flag;
  PutLe64(p + 8, r.version);
  PutLe64(p + 16, r.arg);
  PutLe32(p + 24, r.count);
}

Result<Response> DecodeResponse(std::span<const uint8_t> payload) {
  if (payload.size() < kResponseHeader) {
    return Status::Corruption("kv response: " + std::to_string(payload.size()) +
                              " bytes, shorter than its 32-byte header");
  }
  const uint8_t* p = payload.data();
  Response r;
  r.flag = p[0];
  r.version = GetLe64(p + 8);
  r.arg = GetLe64(p + 16);
  r.count = GetLe32(p + 24);
  r.body = {reinterpret_cast<const char*>(p + kResponseHeader), payload.size() - kResponseHeader};
  return r;
}

}  // namespace asymnvm::kv::wire
