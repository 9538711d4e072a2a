// libFuzzer target: the Ordered Queue's wire formats (fabric/oq/wire.h, doc/oq.md) — requests and
// responses as a server/client receives them, the server and client hellos of the handshake, and
// the self-validating PM word. Input: byte 0 = mode (low 3 bits) | 0x80 "fix the checksum" (so
// the fuzzer gets past the checksum into the fields); the rest is the message.
// Properties: never reads outside the input; every accepted request/response re-encodes to exactly
// the accepted bytes; every accepted hello re-encodes and decodes to the same fields; a word
// decodes iff it is what EncodeWord makes of its value.
#include <cstdint>
#include <vector>

#include "common/checksum.h"
#include "common/coding.h"
#include "fabric/oq/wire.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::oq;

namespace {

constexpr uint32_t kMaxRequest = 64 * 1024;

void FixChecksum(std::vector<uint8_t>& b, size_t header) {
  if (b.size() < header) return;
  const uint32_t size = GetLe32(b.data() + 8);
  if (size < header || size > b.size()) return;
  PutLe64(b.data(), Hash64(b.data() + 8, size - 8));
}

void Request(std::vector<uint8_t>& b, bool fix) {
  if (fix) FixChecksum(b, kRequestHeaderSize);
  auto h = ValidateRequest(b, kMaxRequest);
  if (!h.ok()) return;
  ASYMNVM_FUZZ_CHECK(h->size >= kRequestHeaderSize && h->size <= b.size() &&
                     h->size <= kMaxRequest);
  std::vector<uint8_t> again;
  EncodeRequest(
      *h, std::span<const uint8_t>(b).subspan(kRequestHeaderSize, h->size - kRequestHeaderSize),
      &again);
  ASYMNVM_FUZZ_CHECK(again.size() == h->size);
  ASYMNVM_FUZZ_CHECK(std::memcmp(again.data(), b.data(), again.size()) == 0);
}

void Response(std::vector<uint8_t>& b, bool fix) {
  if (fix) FixChecksum(b, kResponseHeaderSize);
  auto h = wire::ValidateResponse(b);
  if (!h.ok()) return;
  ASYMNVM_FUZZ_CHECK(h->size >= kResponseHeaderSize && h->size <= b.size());
  std::vector<uint8_t> again;
  wire::EncodeResponse(
      *h, std::span<const uint8_t>(b).subspan(kResponseHeaderSize, h->size - kResponseHeaderSize),
      &again);
  ASYMNVM_FUZZ_CHECK(again.size() == h->size);
  ASYMNVM_FUZZ_CHECK(std::memcmp(again.data(), b.data(), again.size()) == 0);
}

bool SameServerHello(const wire::ServerHello& a, const wire::ServerHello& b) {
  return a.worker == b.worker && a.info.workers == b.info.workers &&
         a.info.policy == b.info.policy && a.info.durable == b.info.durable &&
         a.info.max_request == b.info.max_request && a.info.max_response == b.info.max_response &&
         a.flush_target == b.flush_target && a.addresses == b.addresses;
}

void ServerHello(const std::vector<uint8_t>& b) {
  auto h = wire::DecodeServerHello(b);
  if (!h.ok()) return;
  ASYMNVM_FUZZ_CHECK(h->info.workers >= 1 && h->info.workers <= kMaxWorkers &&
                     h->worker < h->info.workers);
  ASYMNVM_FUZZ_CHECK(h->addresses.size() == h->info.workers);
  auto enc = wire::EncodeServerHello(*h);
  if (!enc.ok()) return;  // more than the 1024-byte hello a server sends
  auto again = wire::DecodeServerHello(*enc);
  ASYMNVM_FUZZ_CHECK(again.ok());
  ASYMNVM_FUZZ_CHECK(SameServerHello(*h, *again));
}

void ClientHello(const std::vector<uint8_t>& b) {
  auto h = wire::DecodeClientHello(b);
  if (!h.ok()) return;
  const auto enc = wire::EncodeClientHello(*h);
  ASYMNVM_FUZZ_CHECK(enc.size() <= b.size());
  ASYMNVM_FUZZ_CHECK(std::memcmp(enc.data(), b.data(), enc.size()) == 0);
}

void Word(fuzz::Input& in) {
  const uint64_t w = in.U64();
  uint64_t v = 0;
  if (wire::DecodeWord(w, &v)) {
    ASYMNVM_FUZZ_CHECK(wire::EncodeWord(v) == w);
  } else {
    ASYMNVM_FUZZ_CHECK(wire::EncodeWord(w & ((uint64_t{1} << 56) - 1)) != w);
  }
  uint64_t back = 0;
  ASYMNVM_FUZZ_CHECK(wire::DecodeWord(wire::EncodeWord(w), &back));
  ASYMNVM_FUZZ_CHECK(back == (w & ((uint64_t{1} << 56) - 1)));
}

// Structured: a request built from fuzzed fields validates back to the same fields.
void BuiltRequest(fuzz::Input& in) {
  RequestHeader h;
  h.type = in.U16();
  h.nilext = (in.U8() & 1) != 0;
  h.client_id = in.U64();
  h.seq = in.U64();
  h.worker = in.U32();
  const auto payload = in.Rest();
  std::vector<uint8_t> b;
  EncodeRequest(h, payload, &b);
  auto v = ValidateRequest(b, kMaxRequest);
  if (b.size() > kMaxRequest) {
    ASYMNVM_FUZZ_CHECK(!v.ok() && v.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  ASYMNVM_FUZZ_CHECK(v.ok());
  ASYMNVM_FUZZ_CHECK(v->type == h.type && v->nilext == h.nilext && v->client_id == h.client_id &&
                     v->seq == h.seq && v->worker == h.worker && v->size == b.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t mode = in.U8();
  const bool fix = (mode & 0x80) != 0;
  switch (mode & 7) {
    case 0: {
      auto b = in.Rest();
      Request(b, fix);
      break;
    }
    case 1: {
      auto b = in.Rest();
      Response(b, fix);
      break;
    }
    case 2:
      ServerHello(in.Rest());
      break;
    case 3:
      ClientHello(in.Rest());
      break;
    case 4:
      Word(in);
      break;
    default:
      BuiltRequest(in);
      break;
  }
  return 0;
}
