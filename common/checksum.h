// Checksums and hashes used by persistent records and wire packets.
//   Crc32c  — CRC-32C (Castagnoli), from ISA-L (crc32_iscsi); self-validating PM records.
//   Hash64  — XXH3 64-bit, from libxxhash; hash tables, partitioning.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace asymnvm {

// CRC-32C of `len` bytes, continuing from `seed` (0 to start). Standard CRC-32C:
// Crc32c("123456789", 9) == 0xE3069283.
uint32_t Crc32c(const void* data, size_t len, uint32_t seed = 0);
uint64_t Hash64(const void* data, size_t len, uint64_t seed = 0);

}  // namespace asymnvm
