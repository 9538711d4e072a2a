// libFuzzer target: Rowan b-log entries and the scanner (fabric/rowan/entry.h, scanner.h,
// doc/rowan.md) — what a back-end reads back from its b-log after a crash. MTU 256, so entries of a
// few hundred bytes span several blocks. Input: byte 0 = mode (low bit) | 0x80 "fix the checksums"
// (mode 0: every stride whose header fits gets a CRC that verifies).
//  mode 0: the rest is a segment, scanned as landed.
//  mode 1: entries built from the input (type, owner, payload), encoded with EncodeEntry and laid
//          out block by block (optionally with empty strides between and blocks of one entry out
//          of order), then damaged at input-chosen bytes, then scanned.
// Properties: the scanner never reads outside the segment; every block it counts validates
// (DecodeBlock OK, so its CRC verifies); every entry it yields is made of validated blocks, has
// the length its blocks declare and is yielded once; in mode 1 without damage exactly the encoded
// entries are yielded. (With damage a yielded entry need not be an encoded one: a payload may
// contain bytes that form a valid block, which the scanner finds once the block around it is
// damaged — the b-log trusts its authenticated senders.)
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/checksum.h"
#include "common/coding.h"
#include "fabric/rowan/entry.h"
#include "fabric/rowan/scanner.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::rowan;

namespace {

constexpr size_t kMtu = 256;

using Key = std::pair<uint16_t, uint64_t>;

void FixChecksums(std::vector<uint8_t>& seg) {
  for (size_t off = 0; off + kBlockHeaderSize <= seg.size(); off += kStride) {
    const uint32_t len = GetLe32(seg.data() + off + 16);
    if (len > MaxBlockPayload(kMtu) || kBlockHeaderSize + len > seg.size() - off) continue;
    PutLe32(seg.data() + off, Crc32c(seg.data() + off + 4, kBlockHeaderSize - 4 + len));
  }
}

// Scans `seg` and checks the properties that hold for any bytes; returns what was yielded.
std::map<Key, std::vector<uint8_t>> Scan(const std::vector<uint8_t>& seg) {
  // Every stride offset where a valid block starts, by entry.
  std::map<Key, std::set<uint16_t>> valid;
  for (size_t off = 0; off + kBlockHeaderSize <= seg.size(); off += kStride) {
    BlockHeader h;
    if (DecodeBlock(seg.data() + off, seg.size() - off, kMtu, &h).ok()) {
      ASYMNVM_FUZZ_CHECK(GetLe32(seg.data() + off) ==
                         Crc32c(seg.data() + off + 4, kBlockHeaderSize - 4 + h.payload_len));
      valid[{h.meta.owner, h.meta.version}].insert(h.block_seq);
    }
  }
  Scanner sc(kMtu);
  std::map<Key, std::vector<uint8_t>> out;
  uint64_t bad = 0;
  sc.set_bad_sink([&](const BadBlock& b) {
    ASYMNVM_FUZZ_CHECK(b.offset < seg.size());
    bad++;
  });
  sc.ScanSegment(seg, 1, [&](const ScannedEntry& e) {
    const Key key{e.meta.owner, e.meta.version};
    ASYMNVM_FUZZ_CHECK(e.meta.type != 0);
    ASYMNVM_FUZZ_CHECK(out.count(key) == 0);  // once
    auto it = valid.find(key);
    ASYMNVM_FUZZ_CHECK(it != valid.end());
    const size_t blocks =
        e.payload.empty() ? 1
                          : (e.payload.size() + MaxBlockPayload(kMtu) - 1) / MaxBlockPayload(kMtu);
    for (uint16_t s = 0; s < blocks; s++) ASYMNVM_FUZZ_CHECK(it->second.count(s) == 1);
    out[key].assign(e.payload.begin(), e.payload.end());
  });
  sc.Finish();
  ASYMNVM_FUZZ_CHECK(sc.report().entries == out.size());
  ASYMNVM_FUZZ_CHECK(sc.report().corrupt_runs == bad);
  return out;
}

struct Built {
  EntryMeta meta;
  std::vector<uint8_t> payload;
};

void Structured(fuzz::Input& in) {
  const uint8_t n = in.U8() % 8;
  std::vector<Built> entries;
  std::vector<std::vector<uint8_t>> blocks;
  for (uint8_t i = 0; i < n; i++) {
    Built b;
    b.meta.type = static_cast<uint16_t>(1 + in.U8());
    b.meta.owner = in.U8() % 4;
    b.meta.version = i;  // (owner, version) unique
    const size_t len = in.U16() % 700;
    b.payload = in.Bytes(len);
    auto enc = EncodeEntry(b.meta, b.payload, kMtu);
    ASYMNVM_FUZZ_CHECK(enc.ok());
    const uint8_t order = in.U8();
    if (order & 1) std::reverse(enc->begin(), enc->end());  // blocks land out of order
    for (auto& blk : *enc) blocks.push_back(std::move(blk));
    entries.push_back(std::move(b));
  }
  // Layout: each block at the next stride, sometimes after an empty stride.
  std::vector<uint8_t> seg;
  const uint8_t gaps = in.U8();
  for (size_t i = 0; i < blocks.size(); i++) {
    if ((gaps >> (i % 8)) & 1) seg.resize(seg.size() + kStride, 0);
    const size_t at = seg.size();
    seg.resize(at + BlockFootprint(blocks[i].size() - kBlockHeaderSize), 0);
    std::memcpy(seg.data() + at, blocks[i].data(), blocks[i].size());
  }
  seg.resize(seg.size() + kStride, 0);
  // Damage: (offset u16, xor u8) pairs from the rest of the input.
  bool damaged = false;
  while (in.remaining() >= 3 && !seg.empty()) {
    const size_t off = in.U16() % seg.size();
    const uint8_t x = in.U8();
    if (x != 0) {
      seg[off] ^= x;
      damaged = true;
    }
  }
  const auto got = Scan(seg);
  if (!damaged) {
    // Exactly the encoded entries.
    ASYMNVM_FUZZ_CHECK(got.size() == entries.size());
    for (const Built& b : entries) {
      auto it = got.find({b.meta.owner, b.meta.version});
      ASYMNVM_FUZZ_CHECK(it != got.end() && it->second == b.payload);
    }
  }
  // Damaged: only validated blocks (Scan). A payload may itself hold bytes that form a valid
  // block; once the block around it is damaged the scanner resynchronizes onto it at the next
  // stride and yields it (doc/rowan.md §Scanning: the b-log trusts what its senders wrote).
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t mode = in.U8();
  if (mode & 1) {
    Structured(in);
  } else {
    auto seg = in.Rest();
    if (mode & 0x80) FixChecksums(seg);
    (void)Scan(seg);
  }
  return 0;
}
