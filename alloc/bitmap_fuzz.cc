// libFuzzer target: the allocator's persistent bitmap (alloc/backend_allocator.h, doc/alloc.md
// §Bitmap area) as a back-end recovers it at open. Geometry: 2000 blocks of 64 B (2 chunks).
// Input: byte 0 = mode (low bit) | 0x80 "fix the checksums" (header, intent and every chunk copy
// get CRCs that verify, so the fuzzer reaches the structural rules).
//  mode 0: the rest is the bitmap area (zero-filled), opened as found.
//  mode 1: a formatted bitmap, then operations from the input (slab, large, free: 3 bytes each)
//          checked against a model of live extents, then optional damage (offset u16, xor u8)
//          after a 0xFF marker, then a reopen.
// Properties: Open never reads or writes outside the area; a successful Open yields extents that
// are sorted, disjoint, block-aligned and inside the data area, counted by stats(); allocations
// after it never overlap a live extent and every free of one succeeds; without damage a reopen
// yields exactly the model's extents.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "alloc/backend_allocator.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::alloc;

namespace {

constexpr uint32_t kBlock = 64;
constexpr uint64_t kBlocks = 2000;
constexpr uint64_t kDataBegin = 64 * 1024;

// The bitmap area: 64-byte aligned, exactly its size (ASan flags any access past it).
struct Area {
  Area()
      : size((BackendAllocator::BitmapBytes(kBlocks * kBlock, kBlock) + 63) / 64 * 64),
        bytes(static_cast<uint8_t*>(std::aligned_alloc(64, size))) {
    std::memset(bytes, 0, size);
  }
  ~Area() { std::free(bytes); }
  Area(const Area&) = delete;
  Area& operator=(const Area&) = delete;
  size_t size;
  uint8_t* bytes;
};

BackendOptions Options(Area& area, bool format) {
  BackendOptions o;
  o.data_begin = kDataBegin;
  o.data_size = kBlocks * kBlock;
  o.block_size = kBlock;
  o.bitmap = area.bytes;
  o.bitmap_size = area.size;
  o.persister = pm::DramPersister();
  o.format_if_empty = format;
  return o;
}

void FixChecksums(uint8_t* a, size_t size) {
  PutLe32(a + 60, Crc32c(a, 60));
  PutLe32(a + 64 + 60, Crc32c(a + 64, 60));
  for (uint64_t c = 0; 256 + 512 * c + 512 <= size; c++) {
    for (int copy = 0; copy < 2; copy++) {
      uint8_t* p = a + 256 + 512 * c + 256 * copy;
      std::vector<uint8_t> buf(8 + 252);
      PutLe64(buf.data(), c);
      std::memcpy(buf.data() + 8, p + 4, 252);
      PutLe32(p, Crc32c(buf.data(), buf.size()));
    }
  }
}

// The properties of any allocator that opened; returns its extents.
std::vector<Extent> Exercise(BackendAllocator& al) {
  const auto ext = al.Extents();
  uint64_t prev_end = kDataBegin, blocks = 0;
  for (const Extent& e : ext) {
    ASYMNVM_FUZZ_CHECK(e.addr >= prev_end && e.bytes > 0 && e.bytes % kBlock == 0 &&
                       e.addr % kBlock == 0);
    ASYMNVM_FUZZ_CHECK(e.addr + e.bytes <= al.data_end());
    auto n = al.ExtentBytes(e.addr);
    ASYMNVM_FUZZ_CHECK(n.ok() && *n == e.bytes);
    prev_end = e.addr + e.bytes;
    blocks += e.bytes / kBlock;
  }
  ASYMNVM_FUZZ_CHECK(al.stats().blocks_used == blocks && al.stats().extents_used == ext.size());
  // Allocate from what is free (some slabs, then the largest free run): nothing handed out
  // overlaps a live extent or another allocation; every one frees.
  std::vector<Extent> got;
  auto overlaps = [&](uint64_t a, uint64_t n) {
    for (const Extent& e : ext) {
      if (a < e.addr + e.bytes && e.addr < a + n) return true;
    }
    for (const Extent& e : got) {
      if (a < e.addr + e.bytes && e.addr < a + n) return true;
    }
    return false;
  };
  for (int i = 0; i < 16; i++) {
    auto a = al.AllocSlab();
    if (!a.ok()) {
      ASYMNVM_FUZZ_CHECK(a.status().code() == StatusCode::kResourceExhausted &&
                         blocks + got.size() == kBlocks);
      break;
    }
    ASYMNVM_FUZZ_CHECK(*a >= kDataBegin && *a + kBlock <= al.data_end() && !overlaps(*a, kBlock));
    got.push_back(Extent{*a, kBlock});
  }
  const uint64_t run = al.stats().largest_free_run;
  if (run > 0) {
    auto a = al.AllocLarge(run * kBlock);
    ASYMNVM_FUZZ_CHECK(a.ok() && !overlaps(*a, run * kBlock) && *a + run * kBlock <= al.data_end());
    got.push_back(Extent{*a, run * kBlock});
  }
  for (const Extent& e : got) ASYMNVM_FUZZ_CHECK(al.Free(e.addr).ok());
  ASYMNVM_FUZZ_CHECK(al.Extents() == ext);
  return ext;
}

void Raw(fuzz::Input& in, bool fix) {
  Area area;
  const auto bytes = in.Bytes(area.size);
  if (!bytes.empty()) std::memcpy(area.bytes, bytes.data(), bytes.size());
  if (fix) FixChecksums(area.bytes, area.size);
  auto al = BackendAllocator::Open(Options(area, false));
  if (!al.ok()) {
    const StatusCode c = al.status().code();
    ASYMNVM_FUZZ_CHECK(c == StatusCode::kCorruption || c == StatusCode::kInvalidArgument ||
                       c == StatusCode::kNotSupported);
    return;
  }
  const auto ext = Exercise(**al);
  al->reset();
  // What it recovered (and possibly repaired) opens again to the same extents.
  auto again = BackendAllocator::Open(Options(area, false));
  ASYMNVM_FUZZ_CHECK(again.ok());
  ASYMNVM_FUZZ_CHECK((*again)->Extents() == ext);
}

void Ops(fuzz::Input& in, bool fix) {
  Area area;
  std::map<uint64_t, uint64_t> model;  // addr -> bytes
  {
    auto al = BackendAllocator::Open(Options(area, true));
    ASYMNVM_FUZZ_CHECK(al.ok());
    while (in.remaining() >= 3) {
      const uint8_t op = in.U8();
      if (op == 0xFF) break;  // damage follows
      const uint16_t arg = in.U16();
      if (op % 3 == 0) {
        auto a = (*al)->AllocSlab();
        if (a.ok()) model[*a] = kBlock;
      } else if (op % 3 == 1) {
        const uint64_t want = 1 + arg % (kBlock * 300);
        auto a = (*al)->AllocLarge(want);
        if (a.ok()) model[*a] = (want + kBlock - 1) / kBlock * kBlock;
      } else if (!model.empty()) {
        auto it = model.begin();
        std::advance(it, arg % model.size());
        ASYMNVM_FUZZ_CHECK((*al)->Free(it->first).ok());
        model.erase(it);
      }
    }
    std::vector<Extent> want;
    for (const auto& [a, b] : model) want.push_back(Extent{a, b});
    ASYMNVM_FUZZ_CHECK((*al)->Extents() == want);
  }
  bool damaged = false;
  while (in.remaining() >= 3) {
    const size_t off = in.U16() % area.size;
    const uint8_t x = in.U8();
    area.bytes[off] ^= x;
    damaged = damaged || x != 0;
  }
  if (fix && damaged) FixChecksums(area.bytes, area.size);
  auto al = BackendAllocator::Open(Options(area, false));
  if (!damaged) {
    ASYMNVM_FUZZ_CHECK(al.ok());
    std::vector<Extent> want;
    for (const auto& [a, b] : model) want.push_back(Extent{a, b});
    ASYMNVM_FUZZ_CHECK((*al)->Extents() == want);
  }
  if (al.ok()) (void)Exercise(**al);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t mode = in.U8();
  if (mode & 1) {
    Ops(in, (mode & 0x80) != 0);
  } else {
    Raw(in, (mode & 0x80) != 0);
  }
  return 0;
}
