// libFuzzer target: the back-end's request and reply payloads (backend/rpc.h, doc/backend.md
// §Requests) — what a back-end parses from a front-end (naming create) and what a front-end parses
// from a back-end (register reply, naming entry, fetched op logs). Input: byte 0 = mode; the rest
// is the payload.
// Properties: never reads outside the payload; whatever decodes re-encodes to a payload that
// decodes to the same fields; a naming create request and a fetched-op-logs reply re-encode to
// exactly the bytes they were decoded from (a reply's `more` flag normalized to 0/1).
#include <cstdint>
#include <vector>

#include "backend/rpc.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::backend;

namespace {

bool SameReply(const RegisterReply& a, const RegisterReply& b) {
  return a.lpn == b.lpn && a.opn == b.opn && a.rejected == b.rejected && a.lpn_addr == b.lpn_addr &&
         a.opn_addr == b.opn_addr && a.rejected_addr == b.rejected_addr &&
         a.naming_begin == b.naming_begin && a.data_begin == b.data_begin &&
         a.data_end == b.data_end && a.block_size == b.block_size &&
         a.incarnation == b.incarnation && a.naming_region == b.naming_region &&
         a.data_region == b.data_region && a.log_address == b.log_address &&
         a.pool_uuid == b.pool_uuid;
}

bool SameEntry(const NamingEntry& a, const NamingEntry& b) {
  return a.slot == b.slot && a.name == b.name && a.type == b.type && a.params == b.params &&
         a.root_addr == b.root_addr && a.lock_addr == b.lock_addr && a.seq_addr == b.seq_addr &&
         a.aux_addr == b.aux_addr;
}

void Register(const std::vector<uint8_t>& b) {
  auto r = DecodeRegisterReply(b);
  if (!r.ok()) return;
  const auto enc = EncodeRegisterReply(*r);
  ASYMNVM_FUZZ_CHECK(enc.size() <= b.size());
  auto again = DecodeRegisterReply(enc);
  ASYMNVM_FUZZ_CHECK(again.ok());
  ASYMNVM_FUZZ_CHECK(SameReply(*r, *again));
}

void Entry(const std::vector<uint8_t>& b) {
  auto e = DecodeNamingEntry(b);
  if (!e.ok()) return;
  PayloadWriter w;
  EncodeNamingEntry(*e, &w);
  ASYMNVM_FUZZ_CHECK(w.bytes().size() <= b.size());
  ASYMNVM_FUZZ_CHECK(std::memcmp(w.bytes().data(), b.data(), w.bytes().size()) == 0);
  auto again = DecodeNamingEntry(w.bytes());
  ASYMNVM_FUZZ_CHECK(again.ok());
  ASYMNVM_FUZZ_CHECK(SameEntry(*e, *again));
}

void Fetched(const std::vector<uint8_t>& b) {
  bool more = false;
  auto ops = DecodeFetchedOps(b, &more);
  if (!ops.ok()) {
    ASYMNVM_FUZZ_CHECK(ops.status().code() == StatusCode::kProtocolError);
    return;
  }
  const auto enc = EncodeFetchedOps(*ops, more);
  ASYMNVM_FUZZ_CHECK(enc.size() == b.size());
  ASYMNVM_FUZZ_CHECK(std::memcmp(enc.data() + 4, b.data() + 4, enc.size() - 4) == 0);
  bool more2 = false;
  auto again = DecodeFetchedOps(enc, &more2);
  ASYMNVM_FUZZ_CHECK(again.ok() && more2 == more && again->size() == ops->size());
}

void Create(const std::vector<uint8_t>& b) {
  auto q = DecodeNamingCreate(b);
  if (!q.ok()) {
    ASYMNVM_FUZZ_CHECK(q.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  const auto enc = EncodeNamingCreate(q->name, q->type, q->params);
  ASYMNVM_FUZZ_CHECK(enc.size() <= b.size());
  ASYMNVM_FUZZ_CHECK(std::memcmp(enc.data(), b.data(), enc.size()) == 0);
}

// Structured: a reply built from fuzzed fields decodes to the same fields.
void BuiltReply(fuzz::Input& in) {
  RegisterReply r;
  r.lpn = in.U64();
  r.opn = in.U64();
  r.data_begin = in.U64();
  r.data_end = in.U64();
  r.block_size = in.U32();
  r.incarnation = in.U32();
  // Descriptors as a back-end sends them: a non-empty range that does not wrap.
  r.naming_region.addr = in.U64() >> 2;
  r.naming_region.length = 1 + (in.U64() >> 24);
  r.naming_region.rkey = in.U32();
  r.data_region.length = 4096;
  r.data_region.tag = in.U64();
  for (auto& u : r.pool_uuid) u = in.U8();
  const auto addr = in.Rest();
  r.log_address.assign(addr.begin(), addr.end());
  auto back = DecodeRegisterReply(EncodeRegisterReply(r));
  ASYMNVM_FUZZ_CHECK(back.ok());
  ASYMNVM_FUZZ_CHECK(SameReply(r, *back));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  switch (in.U8() % 5) {
    case 0:
      Register(in.Rest());
      break;
    case 1:
      Entry(in.Rest());
      break;
    case 2:
      Fetched(in.Rest());
      break;
    case 3:
      Create(in.Rest());
      break;
    default:
      BuiltReply(in);
      break;
  }
  return 0;
}
