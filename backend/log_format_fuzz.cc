// libFuzzer target: the back-end's log records (backend/log_format.h, doc/backend.md §Log records)
// — operation logs as the back-end finds them in its b-log, and memory-log transactions as it
// receives them over the Ordered Queue and applies them (backend/applier.h) — plus TxnBuilder, the
// front-end's encoder. Input: byte 0 = mode (low 2 bits) | 0x80 "fix the checksum" (so the fuzzer
// gets past the CRC into the fields); the rest is the record (modes 0, 1) or builder operations
// (mode 2).
// Properties:
//  * an accepted op log carries a CRC32C that verifies, and re-encodes to exactly its bytes;
//  * an accepted transaction's CRC verifies, its entries lie inside the input, PeekTxnHeader
//    agrees, rebuilding it with TxnBuilder gives a transaction that decodes and writes the same
//    bytes; applying it to a small pool writes exactly its entries (and the sequence word) when
//    the applier accepts it and nothing at all when it refuses;
//  * whatever TxnBuilder is given, its transaction decodes and writes what the writes in program
//    order write (coalescing never reorders a write past an overlapping one).
#include <cstdint>
#include <map>
#include <vector>

#include "backend/applier.h"
#include "backend/log_format.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::backend;

namespace {

constexpr uint64_t kPoolBytes = 4096;
constexpr uint64_t kDataBegin = 1024;

// Op logs 1..3 of any front-end exist, with a 256-byte payload.
class FakeOpLogs : public OpLogSource {
 public:
  FakeOpLogs() {
    for (size_t i = 0; i < payload_.size(); i++) payload_[i] = static_cast<uint8_t>(i * 13 + 1);
  }
  Result<std::span<const uint8_t>> Payload(uint64_t, uint64_t op_seq) override {
    if (op_seq == 0 || op_seq > 3) return Status::NotFound("no such op log");
    return std::span<const uint8_t>(payload_).subspan(0, 64 * op_seq + 64);
  }
  std::vector<uint8_t> payload_ = std::vector<uint8_t>(256);
};

uint8_t PointerByte(uint64_t op_seq, uint32_t op_offset, uint64_t i) {
  return static_cast<uint8_t>(op_seq * 7 + op_offset * 3 + i);
}

// What a list of entries writes, byte by byte (pointer entries write a pattern of their source).
using Image = std::map<uint64_t, uint8_t>;
void ApplySparse(const std::vector<MemLogEntry>& entries, Image* img) {
  for (const MemLogEntry& e : entries) {
    for (uint64_t i = 0; i < e.len; i++) {
      (*img)[e.addr + i] =
          e.kind == MemLogKind::kInline ? e.data[i] : PointerByte(e.op_seq, e.op_offset, i);
    }
  }
}

void OpLog(std::vector<uint8_t>& b, bool fix) {
  if (fix && b.size() >= kOpLogHeaderSize) {
    const uint32_t len = GetLe32(b.data() + 32);
    if (len <= b.size() - kOpLogHeaderSize)
      PutLe32(b.data(), Crc32c(b.data() + 4, kOpLogHeaderSize - 4 + len));
  }
  auto r = DecodeOpLog(b);
  if (!r.ok()) return;
  const size_t n = kOpLogHeaderSize + r->payload.size();
  ASYMNVM_FUZZ_CHECK(n <= b.size());
  ASYMNVM_FUZZ_CHECK(r->payload.data() == b.data() + kOpLogHeaderSize);
  ASYMNVM_FUZZ_CHECK(GetLe32(b.data()) == Crc32c(b.data() + 4, n - 4));
  const auto again = EncodeOpLog(*r);
  ASYMNVM_FUZZ_CHECK(again.size() == n);
  ASYMNVM_FUZZ_CHECK(std::memcmp(again.data(), b.data(), n) == 0);
}

void Txn(std::vector<uint8_t>& b, bool fix) {
  if (fix && b.size() >= kTxnHeaderSize) {
    const uint32_t total = GetLe32(b.data() + 44);
    if (total >= 8 && total <= b.size()) PutLe32(b.data(), Crc32c(b.data() + 4, total - 4));
  }
  (void)PeekTxnHeader(b);
  auto v = DecodeTxn(b);
  if (!v.ok()) return;
  const TxnHeader& h = v->header;
  ASYMNVM_FUZZ_CHECK(h.total_len <= b.size() && h.total_len >= kTxnHeaderSize + kTxnCommitSize);
  ASYMNVM_FUZZ_CHECK(GetLe32(b.data()) == Crc32c(b.data() + 4, h.total_len - 4));
  ASYMNVM_FUZZ_CHECK(v->entries.size() == h.entry_count);
  auto peek = PeekTxnHeader(b);
  ASYMNVM_FUZZ_CHECK(peek.ok() && peek->txn_seq == h.txn_seq &&
                     peek->frontend_id == h.frontend_id && peek->entry_count == h.entry_count);
  for (const MemLogEntry& e : v->entries) {
    if (e.kind == MemLogKind::kInline) {
      ASYMNVM_FUZZ_CHECK(e.data.size() == e.len);
      ASYMNVM_FUZZ_CHECK(e.data.data() >= b.data() &&
                         e.data.data() + e.len <= b.data() + h.total_len);
    }
  }

  // Rebuilt by the front-end's encoder: decodes, same header, same bytes written.
  TxnBuilder tb;
  for (const MemLogEntry& e : v->entries) {
    if (e.kind == MemLogKind::kInline) {
      tb.Write(e.addr, e.data);
    } else {
      tb.WritePointer(e.addr, e.len, e.op_seq, e.op_offset);
    }
  }
  const size_t predicted = tb.encoded_size();
  const auto rebuilt = tb.Finish(h.frontend_id, h.txn_seq, h.opn, h.seq_addr);
  ASYMNVM_FUZZ_CHECK(rebuilt.size() == predicted);
  auto rv = DecodeTxn(rebuilt);
  ASYMNVM_FUZZ_CHECK(rv.ok());
  ASYMNVM_FUZZ_CHECK(rv->header.frontend_id == h.frontend_id && rv->header.txn_seq == h.txn_seq &&
                     rv->header.opn == h.opn && rv->header.seq_addr == h.seq_addr);
  // Byte images of what both write (a map entry per byte: only for entries of bounded size; a
  // pointer entry may name up to kMaxRecordSize bytes — found as an out-of-memory timeout).
  uint64_t bytes_written = 0;
  for (const MemLogEntry& e : v->entries) bytes_written += e.len;
  if (bytes_written <= (1u << 16)) {
    Image a, c;
    ApplySparse(v->entries, &a);
    ApplySparse(rv->entries, &c);
    ASYMNVM_FUZZ_CHECK(a == c);
  }

  // Applied to a 4 KiB pool (data area [1024, 4096)): all of it or nothing.
  std::vector<uint64_t> words(kPoolBytes / 8);
  uint8_t* pool = reinterpret_cast<uint8_t*>(words.data());
  for (uint64_t i = 0; i < kPoolBytes; i++) pool[i] = static_cast<uint8_t>(i * 31);
  const std::vector<uint8_t> before(pool, pool + kPoolBytes);
  FakeOpLogs logs;
  ApplyTarget t;
  t.base = pool;
  t.size = kPoolBytes;
  t.data_begin = kDataBegin;
  t.data_end = kPoolBytes;
  t.persister = pm::DramPersister();
  auto applied = ApplyTxn(*v, t, &logs);
  if (!applied.ok()) {
    ASYMNVM_FUZZ_CHECK(std::memcmp(before.data(), pool, kPoolBytes) == 0);
    return;
  }
  std::vector<uint8_t> model = before;
  for (const MemLogEntry& e : v->entries) {
    ASYMNVM_FUZZ_CHECK(e.addr >= kDataBegin && e.addr + e.len <= kPoolBytes);
    const uint8_t* src =
        e.kind == MemLogKind::kInline ? e.data.data() : logs.payload_.data() + e.op_offset;
    if (e.len > 0) std::memcpy(model.data() + e.addr, src, e.len);
  }
  if (h.seq_addr != 0) {
    ASYMNVM_FUZZ_CHECK(h.seq_addr % 8 == 0 && h.seq_addr + 8 <= kPoolBytes);
    const uint64_t old = GetLe64(before.data() + h.seq_addr);
    PutLe64(model.data() + h.seq_addr, (old | 1) + 1);
  }
  ASYMNVM_FUZZ_CHECK(std::memcmp(model.data(), pool, kPoolBytes) == 0);
}

// Builder operations: [kind u8][addr u8][len u8][bytes...]: inline writes and pointer entries over
// a 64-byte window so that they overlap, coalesce and supersede each other.
void Builder(fuzz::Input& in) {
  TxnBuilder tb;
  std::vector<MemLogEntry> program;
  std::vector<std::vector<uint8_t>> keep;
  keep.reserve(256);
  while (!in.empty() && program.size() < 256) {
    const uint8_t kind = in.U8();
    const uint64_t addr = 4096 + in.U8() % 64;
    const uint32_t len = in.U8() % 24;
    MemLogEntry e;
    e.addr = addr;
    e.len = len;
    if (kind & 1) {
      e.kind = MemLogKind::kOpLogPointer;
      e.op_seq = kind >> 1;
      e.op_offset = len * 2;
      tb.WritePointer(addr, len, e.op_seq, e.op_offset);
    } else {
      keep.push_back(in.Bytes(len));
      keep.back().resize(len, 0xEE);
      e.data = keep.back();
      tb.Write(addr, e.data);
    }
    program.push_back(e);
  }
  const size_t predicted = tb.encoded_size();
  const auto bytes = tb.Finish(7, 9, 8, 0);
  ASYMNVM_FUZZ_CHECK(bytes.size() == predicted);
  ASYMNVM_FUZZ_CHECK(tb.empty());
  auto v = DecodeTxn(bytes);
  ASYMNVM_FUZZ_CHECK(v.ok());
  ASYMNVM_FUZZ_CHECK(v->entries.size() <= program.size());
  Image want, got;
  ApplySparse(program, &want);
  ApplySparse(v->entries, &got);
  ASYMNVM_FUZZ_CHECK(want == got);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t mode = in.U8();
  const bool fix = (mode & 0x80) != 0;
  switch (mode & 3) {
    case 0: {
      auto b = in.Rest();
      OpLog(b, fix);
      break;
    }
    case 1: {
      auto b = in.Rest();
      Txn(b, fix);
      break;
    }
    default:
      Builder(in);
      break;
  }
  return 0;
}
