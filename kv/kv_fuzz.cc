// libFuzzer target: Rowan-KV's request/response payloads (kv/wire.h, what a KV server and client
// parse from each other) and its on-PM records (kv/format.h: header page, segment headers, t-log
// entries, parsed at open and by GC). Input: byte 0 = mode (low 3 bits); mode 0: u16 request type
// then the request payload; 1: a response payload; 2: a header page; 3: a segment header;
// 4: u64 generation then t-log bytes.
// Properties: never reads outside the input; an accepted request re-encodes to exactly its bytes
// and its key/value views lie inside them; an accepted response's body lies inside it; an
// accepted header page / segment header / entry re-encodes to a record that decodes to the same
// fields (entries: same key and value).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kv/format.h"
#include "kv/wire.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::kv;

namespace {

bool Inside(std::string_view v, const std::vector<uint8_t>& b) {
  return v.empty() ||
         (reinterpret_cast<const uint8_t*>(v.data()) >= b.data() &&
          reinterpret_cast<const uint8_t*>(v.data()) + v.size() <= b.data() + b.size());
}

void Request(fuzz::Input& in) {
  const uint16_t type = in.U16();
  const auto b = in.Rest();
  auto r = wire::DecodeRequest(type, b);
  if (!r.ok()) return;
  ASYMNVM_FUZZ_CHECK(Inside(r->key, b) && Inside(r->value, b));
  std::vector<uint8_t> again;
  wire::EncodeRequest(*r, &again);
  ASYMNVM_FUZZ_CHECK(again.size() <= b.size());
  ASYMNVM_FUZZ_CHECK(std::memcmp(again.data(), b.data(), again.size()) == 0);
}

void Response(fuzz::Input& in) {
  const auto b = in.Rest();
  auto r = wire::DecodeResponse(b);
  if (!r.ok()) return;
  ASYMNVM_FUZZ_CHECK(Inside(r->body, b));
}

void HeaderPage(fuzz::Input& in) {
  std::vector<uint8_t> page(format::kHeaderPage, 0);
  const auto b = in.Bytes(page.size());
  if (!b.empty()) std::memcpy(page.data(), b.data(), b.size());
  format::ServerHeader h;
  if (!format::DecodeServerHeader(page.data(), &h).ok()) return;
  std::vector<uint8_t> again(format::kHeaderPage, 0);
  format::EncodeServerHeader(h, again.data());
  format::ServerHeader h2;
  ASYMNVM_FUZZ_CHECK(format::DecodeServerHeader(again.data(), &h2).ok());
  ASYMNVM_FUZZ_CHECK(h2.workers == h.workers && h2.shards == h.shards &&
                     h2.segment_size == h.segment_size && h2.segments == h.segments &&
                     h2.generation_bound == h.generation_bound && h2.blog_bytes == h.blog_bytes);
}

void Segment(fuzz::Input& in) {
  std::vector<uint8_t> s(format::kSegmentHeaderSize, 0);
  const auto b = in.Bytes(s.size());
  if (!b.empty()) std::memcpy(s.data(), b.data(), b.size());
  format::SegmentHeader h;
  if (!format::DecodeSegmentHeader(s.data(), &h).ok()) return;
  std::vector<uint8_t> again(format::kSegmentHeaderSize, 0);
  format::EncodeSegmentHeader(h, again.data());
  format::SegmentHeader h2;
  ASYMNVM_FUZZ_CHECK(format::DecodeSegmentHeader(again.data(), &h2).ok());
  ASYMNVM_FUZZ_CHECK(h2.generation == h.generation && h2.kind == h.kind && h2.owner == h.owner);
}

void Entries(fuzz::Input& in) {
  const uint64_t generation = in.U64();
  const auto b = in.Rest();
  for (size_t off = 0; off + format::kEntryHeaderSize <= b.size(); off += format::kAlign) {
    format::EntryHeader h;
    if (!format::DecodeEntry(b.data() + off, b.size() - off, generation, &h).ok()) continue;
    const size_t n = format::kEntryHeaderSize + h.key_len + h.value_len;
    ASYMNVM_FUZZ_CHECK(n <= b.size() - off);
    const std::string key(format::EntryKey(b.data() + off, h));
    const std::string value(format::EntryValue(b.data() + off, h));
    std::vector<uint8_t> again(format::Footprint(h), 0);
    if (h.type == format::EntryType::kPutBypass) {
      // An RDMP slot: the server's header + key, the client's value and persist-flag word.
      format::EncodeBypassSlot(h, key, again.data());
      std::memcpy(again.data() + format::kEntryHeaderSize + key.size(), value.data(), value.size());
      const size_t flags = format::BypassFlagOffset(h.key_len, h.value_len);
      std::memcpy(again.data() + flags, b.data() + off + flags, 8);
    } else {
      format::EncodeEntry(h, key, value, again.data());
    }
    format::EntryHeader h2;
    ASYMNVM_FUZZ_CHECK(format::DecodeEntry(again.data(), again.size(), generation, &h2).ok());
    ASYMNVM_FUZZ_CHECK(h2.persisted == h.persisted && h2.batch_count == h.batch_count &&
                       h2.batch_index == h.batch_index);
    ASYMNVM_FUZZ_CHECK(h2.type == h.type && h2.version == h.version && h2.shard == h.shard &&
                       format::EntryKey(again.data(), h2) == key &&
                       format::EntryValue(again.data(), h2) == value);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  switch (in.U8() % 5) {
    case 0:
      Request(in);
      break;
    case 1:
      Response(in);
      break;
    case 2:
      HeaderPage(in);
      break;
    case 3:
      Segment(in);
      break;
    default:
      Entries(in);
      break;
  }
  return 0;
}
