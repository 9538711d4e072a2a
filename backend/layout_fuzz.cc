// libFuzzer target: the back-end's pool header (backend/layout.h, doc/backend.md §Pool layout) as
// a back-end reads it at open, and the planner that writes it. Input: byte 0 = mode (low bit) |
// 0x80 "fix the checksum" (mode 0); then mode 0: pool size u64 + the header bytes (zero-filled
// to 4 KiB); mode 1: pool size u64 and the planner's parameters.
// Properties: DecodeLayout never reads past the 4 KiB header; an accepted header re-encodes to the
// same bytes (the reserved word at 36 aside) and describes regions in order, inside the pool, with
// a power-of-two block size; every layout PlanLayout accepts is accepted by DecodeLayout after
// EncodeLayout, unchanged, with regions that do not overlap.
#include <cstdint>
#include <vector>

#include "alloc/backend_allocator.h"
#include "backend/layout.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "tests/fuzz/fuzz_util.h"

using namespace asymnvm;
using namespace asymnvm::backend;

namespace {

constexpr size_t kCrcOffset = 8, kBodyBegin = 12, kHeaderUsed = 120;

bool SameRegion(const Region& a, const Region& b) {
  return a.offset == b.offset && a.size == b.size;
}
bool SameLayout(const Layout& a, const Layout& b) {
  return a.pool_size == b.pool_size && a.block_size == b.block_size &&
         a.naming_slots == b.naming_slots && a.rowan_segment == b.rowan_segment &&
         SameRegion(a.naming, b.naming) && SameRegion(a.bitmap, b.bitmap) &&
         SameRegion(a.rowan, b.rowan) && SameRegion(a.oq, b.oq) && SameRegion(a.data, b.data);
}

void CheckShape(const Layout& l, uint64_t pool_size) {
  const Region* r[] = {&l.naming, &l.bitmap, &l.rowan, &l.oq, &l.data};
  uint64_t prev = kBackendHeaderOffset + kBackendHeaderSize;
  for (const Region* x : r) {
    ASYMNVM_FUZZ_CHECK(x->offset >= prev && x->size <= pool_size &&
                       x->offset <= pool_size - x->size);
    prev = x->end();
  }
  ASYMNVM_FUZZ_CHECK(l.block_size >= 64 && (l.block_size & (l.block_size - 1)) == 0);
  ASYMNVM_FUZZ_CHECK(l.data.offset % l.block_size == 0);
}

void Header(fuzz::Input& in, bool fix) {
  const uint64_t pool_size = in.U64();
  std::vector<uint8_t> h(kBackendHeaderSize, 0);
  const auto bytes = in.Bytes(kBackendHeaderSize);
  if (!bytes.empty()) std::memcpy(h.data(), bytes.data(), bytes.size());
  if (fix) PutLe32(h.data() + kCrcOffset, Crc32c(h.data() + kBodyBegin, kHeaderUsed - kBodyBegin));
  auto l = DecodeLayout(h.data(), pool_size);
  if (!l.ok()) return;
  CheckShape(*l, pool_size);
  std::vector<uint8_t> again(kBackendHeaderSize);
  EncodeLayout(*l, again.data());
  PutLe32(again.data() + 36, GetLe32(h.data() + 36));  // reserved, ignored by the decoder
  PutLe32(again.data() + kCrcOffset, Crc32c(again.data() + kBodyBegin, kHeaderUsed - kBodyBegin));
  ASYMNVM_FUZZ_CHECK(std::memcmp(again.data(), h.data(), kHeaderUsed) == 0);
}

void Plan(fuzz::Input& in) {
  const uint64_t pool_size = in.U64();
  LayoutParams p;
  p.naming_slots = in.U32();
  p.block_size = in.U32();
  p.rowan_bytes = in.U64();
  p.rowan_segment = in.U32();
  p.oq_bytes = in.U64();
  p.bitmap_bytes = [](uint64_t data, uint32_t block) {
    return alloc::BackendAllocator::BitmapBytes(data, block);
  };
  auto l = PlanLayout(pool_size, p);
  if (!l.ok()) {
    const StatusCode c = l.status().code();
    ASYMNVM_FUZZ_CHECK(c == StatusCode::kInvalidArgument || c == StatusCode::kResourceExhausted);
    return;
  }
  CheckShape(*l, pool_size);
  ASYMNVM_FUZZ_CHECK(l->data.size >= 16ull * l->block_size);
  ASYMNVM_FUZZ_CHECK(l->bitmap.size >=
                     alloc::BackendAllocator::BitmapBytes(l->data.size, l->block_size));
  std::vector<uint8_t> h(kBackendHeaderSize);
  EncodeLayout(*l, h.data());
  auto back = DecodeLayout(h.data(), pool_size);
  ASYMNVM_FUZZ_CHECK(back.ok());
  ASYMNVM_FUZZ_CHECK(SameLayout(*l, *back));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t mode = in.U8();
  if (mode & 1) {
    Plan(in);
  } else {
    Header(in, (mode & 0x80) != 0);
  }
  return 0;
}
