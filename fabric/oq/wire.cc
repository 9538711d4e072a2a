#include "fabric/oq/wire.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::oq {

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kOq:
      return "oq";
    case Policy::kRawRpc:
      return "rawrpc";
    case Policy::kDeferred:
      return "deferred";
  }
  return "?";
}

Result<Policy> ParsePolicy(const std::string& name) {
  if (name == "oq") return Policy::kOq;
  if (name == "rawrpc") return Policy::kRawRpc;
  if (name == "deferred") return Policy::kDeferred;
  return Status::InvalidArgument("oq: unknown policy '" + name + "' (oq | rawrpc | deferred)");
}

size_t DurableAreaSize(uint32_t workers, uint32_t buffers_per_worker, uint32_t buffer_size) {
  return 4096 + size_t{workers} * buffers_per_worker * buffer_size;
}

void EncodeRequest(const RequestHeader& h, std::span<const uint8_t> payload,
                   std::vector<uint8_t>* out) {
  size_t start = out->size();
  out->resize(start + kRequestHeaderSize + payload.size());
  uint8_t* p = out->data() + start;
  uint32_t size = static_cast<uint32_t>(kRequestHeaderSize + payload.size());
  PutLe32(p + 8, size);
  PutLe16(p + 12, h.type);
  p[14] = h.nilext ? wire::kFlagNilext : 0;
  p[15] = wire::kVersion;
  PutLe64(p + 16, h.client_id);
  PutLe64(p + 24, h.seq);
  PutLe32(p + 32, h.worker);
  PutLe32(p + 36, 0);
  if (!payload.empty()) std::memcpy(p + kRequestHeaderSize, payload.data(), payload.size());
  PutLe64(p, Hash64(p + 8, size - 8));
}

Result<RequestHeader> ValidateRequest(std::span<const uint8_t> bytes, uint32_t max_request) {
  if (bytes.size() < kRequestHeaderSize) {
    return Status::Corruption("oq request: " + std::to_string(bytes.size()) +
                              " bytes, shorter than the 40-byte header");
  }
  const uint8_t* p = bytes.data();
  RequestHeader h;
  h.checksum = GetLe64(p);
  h.size = GetLe32(p + 8);
  if (h.size < kRequestHeaderSize || h.size > bytes.size()) {
    return Status::Corruption("oq request: size field " + std::to_string(h.size) +
                              " outside [40, " + std::to_string(bytes.size()) + "]");
  }
  if (Hash64(p + 8, h.size - 8) != h.checksum) {
    return Status::Corruption("oq request: checksum mismatch");
  }
  if (p[15] != wire::kVersion || (p[14] & ~wire::kFlagNilext) != 0 || GetLe32(p + 36) != 0) {
    return Status::Corruption("oq request: unknown version or flags");
  }
  if (h.size > max_request) {
    return Status::InvalidArgument("oq request: " + std::to_string(h.size) +
                                   " bytes, above max_request " + std::to_string(max_request));
  }
  h.type = GetLe16(p + 12);
  h.nilext = (p[14] & wire::kFlagNilext) != 0;
  h.client_id = GetLe64(p + 16);
  h.seq = GetLe64(p + 24);
  h.worker = GetLe32(p + 32);
  return h;
}

namespace wire {

void EncodeResponse(const ResponseHeader& h, std::span<const uint8_t> body,
                    std::vector<uint8_t>* out) {
  size_t start = out->size();
  uint32_t size = static_cast<uint32_t>(kResponseHeaderSize + body.size());
  out->resize(start + size);
  uint8_t* p = out->data() + start;
  PutLe32(p + 8, size);
  PutLe16(p + 12, static_cast<uint16_t>(h.code));
  p[14] = static_cast<uint8_t>(h.subcode);
  p[15] = kVersion;
  PutLe64(p + 16, h.seq);
  PutLe32(p + 24, h.worker);
  PutLe32(p + 28, 0);
  if (!body.empty()) std::memcpy(p + kResponseHeaderSize, body.data(), body.size());
  PutLe64(p, Hash64(p + 8, size - 8));
}

Result<ResponseHeader> ValidateResponse(std::span<const uint8_t> bytes) {
  if (bytes.size() < kResponseHeaderSize) return Status::Corruption("oq response: too short");
  const uint8_t* p = bytes.data();
  ResponseHeader h;
  h.size = GetLe32(p + 8);
  if (h.size < kResponseHeaderSize || h.size > bytes.size()) {
    return Status::Corruption("oq response: bad size field");
  }
  if (Hash64(p + 8, h.size - 8) != GetLe64(p)) {
    return Status::Corruption("oq response: checksum mismatch");
  }
  uint16_t code = GetLe16(p + 12);
  if (p[15] != kVersion || code > static_cast<uint16_t>(StatusCode::kUnavailable)) {
    return Status::Corruption("oq response: unknown version or status code");
  }
  // The reserved word is zero in every response this version sends, and so is the sub-code of an
  // OK response (found by oq_wire_fuzz: they were not checked, so a response could not be
  // re-encoded to its bytes).
  if (p[14] > static_cast<uint8_t>(kLastStatusSubCode) || (code == 0 && p[14] != 0)) {
    return Status::Corruption("oq response: unknown status sub-code " + std::to_string(p[14]));
  }
  if (GetLe32(p + 28) != 0) return Status::Corruption("oq response: reserved bits set");
  h.code = static_cast<StatusCode>(code);
  h.subcode = static_cast<StatusSubCode>(p[14]);
  h.seq = GetLe64(p + 16);
  h.worker = GetLe32(p + 24);
  return h;
}

void EncodeErrorResponse(const Status& st, uint64_t seq, uint32_t worker,
                         std::vector<uint8_t>* out) {
  if (st.ok()) {  // a bug in the caller: never send it as a success
    EncodeErrorResponse(Status::Internal("an OK Status sent as an error"), seq, worker, out);
    return;
  }
  ResponseHeader h;
  h.code = st.code();
  h.subcode = st.subcode();
  h.seq = seq;
  h.worker = worker;
  const std::string& m = st.message();
  const size_t n = std::min(m.size(), kMaxErrorMessage);
  EncodeResponse(h, {reinterpret_cast<const uint8_t*>(m.data()), n}, out);
}

Status DecodeErrorStatus(const ResponseHeader& h, std::span<const uint8_t> body) {
  return Status(h.code, "oq server: " + std::string(body.begin(), body.end()))
      .WithSubCode(h.subcode);
}

// Server hello: magic[4] | version u32 | worker u32 | workers u32 | policy u8 | durable u8 |
// reserved u16 | max_request u32 | max_response u32 | reserved u32 | flush descriptor [32] |
// then per worker: u16 length + address bytes.
Result<std::vector<uint8_t>> EncodeServerHello(const ServerHello& h) {
  std::vector<uint8_t> b(64, 0);
  std::memcpy(b.data(), kServerMagic, 4);
  PutLe32(b.data() + 4, kVersion);
  PutLe32(b.data() + 8, h.worker);
  PutLe32(b.data() + 12, h.info.workers);
  b[16] = static_cast<uint8_t>(h.info.policy);
  b[17] = h.info.durable ? 1 : 0;
  PutLe32(b.data() + 20, h.info.max_request);
  PutLe32(b.data() + 24, h.info.max_response);
  h.flush_target.EncodeTo(b.data() + 32);
  for (const auto& a : h.addresses) {
    size_t at = b.size();
    b.resize(at + 2 + a.size());
    PutLe16(b.data() + at, static_cast<uint16_t>(a.size()));
    std::memcpy(b.data() + at + 2, a.data(), a.size());
  }
  if (b.size() > 1024) {
    return Status::InvalidArgument("oq server: worker addresses do not fit the 1024-byte hello");
  }
  return b;
}

Result<ServerHello> DecodeServerHello(const std::vector<uint8_t>& b) {
  if (b.size() < 64 || std::memcmp(b.data(), kServerMagic, 4) != 0 ||
      GetLe32(b.data() + 4) != kVersion) {
    return Status::ProtocolError("oq client: peer is not an OQ server (bad hello)");
  }
  ServerHello h;
  h.worker = GetLe32(b.data() + 8);
  h.info.workers = GetLe32(b.data() + 12);
  if (b[16] > 2) return Status::ProtocolError("oq client: unknown policy in hello");
  h.info.policy = static_cast<Policy>(b[16]);
  h.info.durable = b[17] != 0;
  h.info.max_request = GetLe32(b.data() + 20);
  h.info.max_response = GetLe32(b.data() + 24);
  auto fd = fabric::RegionDescriptor::Decode(b.data() + 32, 32);
  if (!fd.ok()) return Status::ProtocolError("oq client: bad flush descriptor in hello");
  h.flush_target = *fd;
  if (h.info.workers == 0 || h.info.workers > kMaxWorkers || h.worker >= h.info.workers ||
      h.info.max_request < kRequestHeaderSize || h.info.max_request > (64u << 20) ||
      h.info.max_response > (64u << 20)) {
    return Status::ProtocolError("oq client: impossible parameters in hello");
  }
  size_t at = 64;
  for (uint32_t i = 0; i < h.info.workers; i++) {
    if (at + 2 > b.size()) return Status::ProtocolError("oq client: truncated hello");
    uint16_t n = GetLe16(b.data() + at);
    if (at + 2 + n > b.size()) return Status::ProtocolError("oq client: truncated hello");
    h.addresses.emplace_back(reinterpret_cast<const char*>(b.data() + at + 2), n);
    at += 2 + n;
  }
  return h;
}

// Client hello: magic[4] | version u32 | worker u32 | window u32 | client_id u64.
std::vector<uint8_t> EncodeClientHello(const ClientHello& h) {
  std::vector<uint8_t> b(24, 0);
  std::memcpy(b.data(), kClientMagic, 4);
  PutLe32(b.data() + 4, kVersion);
  PutLe32(b.data() + 8, h.worker);
  PutLe32(b.data() + 12, h.window);
  PutLe64(b.data() + 16, h.client_id);
  return b;
}

Result<ClientHello> DecodeClientHello(const std::vector<uint8_t>& b) {
  if (b.size() < 24 || std::memcmp(b.data(), kClientMagic, 4) != 0 ||
      GetLe32(b.data() + 4) != kVersion) {
    return Status::ProtocolError("oq server: peer is not an OQ client (bad hello)");
  }
  ClientHello h;
  h.worker = GetLe32(b.data() + 8);
  h.window = GetLe32(b.data() + 12);
  h.client_id = GetLe64(b.data() + 16);
  return h;
}

uint64_t EncodeWord(uint64_t value) {
  uint8_t b[8];
  PutLe64(b, value & ((uint64_t{1} << 56) - 1));
  b[7] = static_cast<uint8_t>(Crc32c(b, 7));
  return GetLe64(b);
}

bool DecodeWord(uint64_t word, uint64_t* value) {
  uint8_t b[8];
  PutLe64(b, word);
  if (b[7] != static_cast<uint8_t>(Crc32c(b, 7))) return false;
  *value = word & ((uint64_t{1} << 56) - 1);
  return true;
}

}  // namespace wire
}  // namespace asymnvm::oq
