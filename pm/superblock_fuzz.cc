// libFuzzer target: DecodeSuperblock on arbitrary bytes must never crash, and every superblock it
// accepts must re-encode to exactly the input's first kSuperblockSize bytes and decode again to the
// same fields.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "asymnvm/pm.h"

using asymnvm::pm::DecodeSuperblock;
using asymnvm::pm::EncodeSuperblock;
using asymnvm::pm::kSuperblockSize;
using asymnvm::pm::Superblock;

namespace {

bool SameFields(const Superblock& a, const Superblock& b) {
  return a.layout_version == b.layout_version && a.pool_size == b.pool_size && a.uuid == b.uuid &&
         a.layout == b.layout && a.create_time_ns == b.create_time_ns && a.flags == b.flags;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Superblock sb;
  if (!DecodeSuperblock(data, size, &sb).ok()) {
    // Also exercise the path most random inputs would otherwise never reach: the input's fields
    // under a valid magic and checksum.
    if (size < 96) return 0;
    std::vector<uint8_t> buf(kSuperblockSize, 0);
    std::memcpy(buf.data(), data, std::min<size_t>(size, kSuperblockSize));
    Superblock probe;
    probe.layout_version = asymnvm::pm::kLayoutVersion;
    std::memcpy(&probe.pool_size, data + 16, 8);
    std::memcpy(probe.uuid.data(), data + 24, 16);
    probe.layout.assign(reinterpret_cast<const char*>(data + 40), 32);
    std::memcpy(&probe.create_time_ns, data + 72, 8);
    std::memcpy(&probe.flags, data + 80, 8);
    EncodeSuperblock(probe, buf.data());
    Superblock again;
    if (DecodeSuperblock(buf.data(), buf.size(), &again).ok() &&
        again.pool_size != probe.pool_size) {
      std::abort();
    }
    return 0;
  }
  std::vector<uint8_t> encoded(kSuperblockSize);
  EncodeSuperblock(sb, encoded.data());
  if (std::memcmp(encoded.data(), data, kSuperblockSize) != 0) std::abort();
  Superblock again;
  if (!DecodeSuperblock(encoded.data(), encoded.size(), &again).ok()) std::abort();
  if (!SameFields(sb, again)) std::abort();
  return 0;
}
