#include "backend/layout.h"

#include <cstring>
#include <sstream>

#include "backend/naming.h"
#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::backend {
namespace {

constexpr uint32_t kLayoutVersion = 1;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMinDataBlocks = 16;
constexpr uint64_t kMaxPoolSize = 1ull << 60;
// Header fields: magic u64 | crc u32 | version u32 | pool_size u64 | block_size u32 |
// naming_slots u32 | rowan_segment u32 | reserved u32 | 5 × (offset u64, size u64).
constexpr size_t kCrcOffset = 8;
constexpr size_t kBodyBegin = 12;
constexpr size_t kRegionsOffset = 40;
constexpr size_t kHeaderUsed = kRegionsOffset + 5 * 16;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string Mib(uint64_t b) {
  std::ostringstream s;
  s.precision(3);
  s << static_cast<double>(b) / (1 << 20) << " MiB";
  return s.str();
}

}  // namespace

std::string Layout::Describe() const {
  std::ostringstream s;
  s << "naming " << naming_slots << " slots @" << naming.offset << ", bitmap " << Mib(bitmap.size)
    << " @" << bitmap.offset << ", b-log " << Mib(rowan.size) << " (" << rowan_segment / 1024
    << " KiB segments) @" << rowan.offset << ", OQ " << Mib(oq.size) << " @" << oq.offset
    << ", data " << Mib(data.size) << " @" << data.offset << " (" << block_size << " B blocks)";
  return s.str();
}

Result<Layout> PlanLayout(uint64_t pool_size, const LayoutParams& p) {
  if (p.block_size < 64 || (p.block_size & (p.block_size - 1)) != 0) {
    return Status::InvalidArgument("layout: block size " + std::to_string(p.block_size) +
                                   " is not a power of two >= 64");
  }
  if (p.naming_slots == 0) return Status::InvalidArgument("layout: naming space needs slots");
  if (p.rowan_segment < kPage || p.rowan_segment % kPage != 0) {
    return Status::InvalidArgument("layout: b-log segment size must be a multiple of 4 KiB");
  }
  if (p.oq_bytes == 0 || p.oq_bytes % kPage != 0) {
    return Status::InvalidArgument("layout: the OQ area size must be a non-zero multiple of 4 KiB");
  }
  if (!p.bitmap_bytes) return Status::InvalidArgument("layout: no bitmap size function");
  // Sizes beyond any real pool would overflow the offset arithmetic below (found by layout_fuzz:
  // a huge b-log or OQ size wrapped around and planned regions outside the pool).
  if (pool_size > kMaxPoolSize) {
    return Status::InvalidArgument("layout: pool size " + std::to_string(pool_size) +
                                   " is above the 1 EiB limit");
  }
  if (p.rowan_bytes > kMaxPoolSize || p.oq_bytes > kMaxPoolSize) {
    return Status::InvalidArgument("layout: a b-log of " + std::to_string(p.rowan_bytes) +
                                   " bytes or an OQ area of " + std::to_string(p.oq_bytes) +
                                   " bytes is above the 1 EiB limit");
  }
  Layout l;
  l.pool_size = pool_size;
  l.block_size = p.block_size;
  l.naming_slots = p.naming_slots;
  l.rowan_segment = p.rowan_segment;
  uint64_t off = kBackendHeaderOffset + kBackendHeaderSize;
  l.naming = {off, RoundUp(uint64_t{p.naming_slots} * kNamingSlotSize, kPage)};
  off = l.naming.end();
  uint64_t rowan = p.rowan_bytes;
  if (rowan == 0) rowan = std::max<uint64_t>(pool_size / 8, 2ull * p.rowan_segment + kPage * 64);
  rowan = RoundUp(rowan, kPage);
  const uint64_t fixed = off + rowan + p.oq_bytes;
  const uint64_t min_data = kMinDataBlocks * p.block_size;
  auto too_small = [&](uint64_t bitmap) {
    return Status::ResourceExhausted(
        "layout: a pool of " + Mib(pool_size) + " cannot hold the back-end metadata (" +
            Mib(fixed + bitmap) + ") plus " + std::to_string(kMinDataBlocks) +
            " data blocks; use --size of at least " +
            Mib(RoundUp(fixed + bitmap + min_data + p.block_size, 1 << 20)),
        false);
  };
  if (pool_size <= fixed + min_data) return too_small(0);
  // The bitmap covers the data area, which is what is left after the bitmap: size it for the
  // whole remainder (a slight over-estimate).
  const uint64_t bitmap = RoundUp(p.bitmap_bytes(pool_size - fixed, p.block_size), kPage);
  l.bitmap = {off, bitmap};
  off = l.bitmap.end();
  l.rowan = {off, rowan};
  off = l.rowan.end();
  l.oq = {off, p.oq_bytes};
  off = RoundUp(l.oq.end(), std::max<uint64_t>(p.block_size, kPage));
  if (off >= pool_size || (pool_size - off) / p.block_size < kMinDataBlocks) {
    return too_small(bitmap);
  }
  l.data = {off, (pool_size - off) / p.block_size * p.block_size};
  return l;
}

void EncodeLayout(const Layout& l, uint8_t* h) {
  std::memset(h, 0, kBackendHeaderSize);
  PutLe64(h, kBackendMagic);
  PutLe32(h + 12, kLayoutVersion);
  PutLe64(h + 16, l.pool_size);
  PutLe32(h + 24, l.block_size);
  PutLe32(h + 28, l.naming_slots);
  PutLe32(h + 32, l.rowan_segment);
  const Region* regions[] = {&l.naming, &l.bitmap, &l.rowan, &l.oq, &l.data};
  for (int i = 0; i < 5; i++) {
    PutLe64(h + kRegionsOffset + 16 * i, regions[i]->offset);
    PutLe64(h + kRegionsOffset + 16 * i + 8, regions[i]->size);
  }
  PutLe32(h + kCrcOffset, Crc32c(h + kBodyBegin, kHeaderUsed - kBodyBegin));
}

Result<Layout> DecodeLayout(const uint8_t* h, uint64_t pool_size) {
  bool zero = true;
  for (size_t i = 0; i < kHeaderUsed && zero; i++) zero = h[i] == 0;
  if (zero) return Status::NotFound("back-end header: pool not formatted by a back-end");
  if (GetLe64(h) != kBackendMagic) {
    return Status::Corruption("back-end header: bad magic (not an AsymNVM back-end pool)");
  }
  if (GetLe32(h + kCrcOffset) != Crc32c(h + kBodyBegin, kHeaderUsed - kBodyBegin)) {
    return Status::Corruption("back-end header: checksum mismatch");
  }
  if (GetLe32(h + 12) != kLayoutVersion) {
    return Status::Corruption("back-end header: unknown layout version " +
                              std::to_string(GetLe32(h + 12)));
  }
  Layout l;
  l.pool_size = GetLe64(h + 16);
  l.block_size = GetLe32(h + 24);
  l.naming_slots = GetLe32(h + 28);
  l.rowan_segment = GetLe32(h + 32);
  Region* regions[] = {&l.naming, &l.bitmap, &l.rowan, &l.oq, &l.data};
  for (int i = 0; i < 5; i++) {
    regions[i]->offset = GetLe64(h + kRegionsOffset + 16 * i);
    regions[i]->size = GetLe64(h + kRegionsOffset + 16 * i + 8);
  }
  if (l.pool_size != pool_size) {
    return Status::Corruption("back-end header: formatted for " + std::to_string(l.pool_size) +
                              " bytes, the pool has " + std::to_string(pool_size));
  }
  uint64_t prev = kBackendHeaderOffset + kBackendHeaderSize;
  for (int i = 0; i < 5; i++) {
    const Region& r = *regions[i];
    if (r.offset < prev || r.size > pool_size || r.offset > pool_size - r.size) {
      return Status::Corruption("back-end header: region " + std::to_string(i) +
                                " overlaps or does not fit the pool");
    }
    prev = r.end();
  }
  if (l.block_size < 64 || (l.block_size & (l.block_size - 1)) != 0 ||
      l.naming.size < uint64_t{l.naming_slots} * kNamingSlotSize ||
      l.data.offset % l.block_size != 0) {
    return Status::Corruption("back-end header: impossible geometry");
  }
  return l;
}

}  // namespace asymnvm::backend
