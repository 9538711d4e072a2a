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

void EncodeBatch(std::span<const BatchOpView> ops, std::string* out) {
  uint8_t h[16];
  PutLe16(h, static_cast<uint16_t>(ops.size()));
  PutLe16(h + 2, 0);
  out->append(reinterpret_cast<const char*>(h), 4);
  for (const auto& op : ops) {
    PutLe16(h, static_cast<uint16_t>(op.key.size()));
    h[2] = static_cast<uint8_t>((op.is_delete ? 1 : 0) | (op.conditional ? 2 : 0) |
                                (op.check_only ? 4 : 0));
    h[3] = 0;
    const bool carries = !op.is_delete && !op.check_only;
    PutLe32(h + 4, carries ? static_cast<uint32_t>(op.value.size()) : 0);
    PutLe64(h + 8, op.expected_version);
    out->append(reinterpret_cast<const char*>(h), 16);
    out->append(op.key);
    if (carries) out->append(op.value);
  }
}

Result<std::vector<BatchOpView>> DecodeBatch(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 4) return Status::InvalidArgument("kv batch: short payload");
  const size_t n = GetLe16(p);
  if (GetLe16(p + 2) != 0) return Status::InvalidArgument("kv batch: reserved bits set");
  std::vector<BatchOpView> ops;
  size_t off = 4;
  for (size_t i = 0; i < n; i++) {
    if (bytes.size() - off < 16)
      return Status::InvalidArgument("kv batch: op header runs past the payload");
    BatchOpView op;
    const size_t klen = GetLe16(p + off);
    const uint8_t flags = p[off + 2];
    const size_t vlen = GetLe32(p + off + 4);
    op.expected_version = GetLe64(p + off + 8);
    if ((flags & ~7u) != 0 || p[off + 3] != 0 || ((flags & 5) && vlen != 0) ||
        ((flags & 4) && (flags & 1))) {
      return Status::InvalidArgument("kv batch: bad op flags");
    }
    op.is_delete = flags & 1;
    op.conditional = flags & 2;
    op.check_only = flags & 4;
    off += 16;
    if (bytes.size() - off < klen || bytes.size() - off - klen < vlen) {
      return Status::InvalidArgument("kv batch: op runs past the payload");
    }
    op.key = bytes.substr(off, klen);
    op.value = bytes.substr(off + klen, vlen);
    off += klen + vlen;
    ops.push_back(op);
  }
  if (off != bytes.size()) return Status::InvalidArgument("kv batch: trailing bytes");
  return ops;
}

}  // namespace asymnvm::kv::wire
