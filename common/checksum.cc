#include "common/checksum.h"

#include <isa-l/crc.h>
#include <xxhash.h>

namespace asymnvm {

uint32_t Crc32c(const void* data, size_t len, uint32_t seed) {
  // ISA-L's crc32_iscsi takes and returns the raw (non-inverted) register; the standard CRC-32C
  // pre- and post-inverts.
  return ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), static_cast<int>(len),
                      ~seed);
}

uint64_t Hash64(const void* data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

}  // namespace asymnvm
