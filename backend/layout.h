// Layout of a back-end pool (doc/architecture.md; bytes in doc/backend.md §Pool layout).
//
// Inside the pm::Pool user area (after the 4 KiB pool superblock) a back-end keeps, in order:
//   [back-end header 4 KiB][naming space][allocation bitmap][Rowan b-log area][OQ area][data area]
// Every region starts on a 4 KiB boundary; the data area starts on a block boundary. All offsets
// are pool offsets (from the pool base), so they survive restarts and are what front-ends use as
// remote addresses. The header is self-validating (CRC32C); a pool whose header fails its check or
// whose geometry does not fit the file is refused with kCorruption, never reformatted silently.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "asymnvm/status.h"

namespace asymnvm::backend {

inline constexpr uint64_t kBackendHeaderOffset = 4096;  // right after the pool superblock
inline constexpr uint64_t kBackendHeaderSize = 4096;
inline constexpr uint64_t kBackendMagic = 0x3130454B424D564EULL;  // "NVMBKE01" little-endian

struct LayoutParams {
  uint32_t naming_slots = 1024;
  uint32_t block_size = 4096;  // allocator block (slab) size; power of two >= 64
  uint64_t rowan_bytes = 0;    // 0: an eighth of the pool, at least 2 segments
  uint32_t rowan_segment = 1u << 20;
  uint64_t oq_bytes = 0;  // the OQ durable area (oq::DurableAreaSize), required
  // Bytes of allocation bitmap needed for a data area of the given size and block size
  // (alloc::BackendAllocator::BitmapBytes).
  std::function<uint64_t(uint64_t data_bytes, uint32_t block_size)> bitmap_bytes;
};

struct Region {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t end() const { return offset + size; }
};

struct Layout {
  uint64_t pool_size = 0;
  uint32_t block_size = 0;
  uint32_t naming_slots = 0;
  uint32_t rowan_segment = 0;
  Region naming, bitmap, rowan, oq, data;
  std::string Describe() const;
};

// Largest OQ request the back-end accepts (its OQ server's max_request) for a buffer size; OQ
// recovery and the start-up check of landed requests use the same bound.
inline uint32_t OqMaxRequest(uint32_t oq_buffer_size) {
  return oq_buffer_size < 64 * 1024 ? oq_buffer_size : 64 * 1024;
}

// Plans the regions for a pool of `pool_size` bytes. kInvalidArgument (bad parameters) or
// kResourceExhausted (the pool is too small to hold the metadata and at least 16 data blocks —
// the message says how large it must be).
Result<Layout> PlanLayout(uint64_t pool_size, const LayoutParams& params);

// Header (de)serialization: `header` points at kBackendHeaderSize bytes at kBackendHeaderOffset.
void EncodeLayout(const Layout& layout, uint8_t* header);
// kNotFound: all zero (a pool no back-end has formatted yet); kCorruption: bad magic, CRC, version,
// or regions that overlap, are out of order or do not fit `pool_size`.
Result<Layout> DecodeLayout(const uint8_t* header, uint64_t pool_size);

}  // namespace asymnvm::backend
