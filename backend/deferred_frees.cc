#include "backend/deferred_frees.h"

#include <cstring>

#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::backend {
namespace {

uint32_t SlotCrc(uint32_t slot, uint64_t addr) {
  uint8_t b[16];
  PutLe64(b, slot);
  PutLe64(b + 8, addr);
  return Crc32c(b, sizeof(b));
}

}  // namespace

void EncodeDeferredFree(uint32_t slot, uint64_t addr, uint8_t* p) {
  std::memset(p, 0, kDeferredFreeSlotSize);
  if (addr == 0) return;
  PutLe64(p, addr);
  PutLe32(p + 8, SlotCrc(slot, addr));
}

std::vector<DeferredFreeSlot> DecodeDeferredFrees(const uint8_t* table,
                                                  std::vector<uint32_t>* bad) {
  std::vector<DeferredFreeSlot> out;
  for (uint32_t i = 0; i < kDeferredFreeSlots; i++) {
    const uint8_t* p = table + i * kDeferredFreeSlotSize;
    bool zero = true;
    for (uint64_t k = 0; k < kDeferredFreeSlotSize; k++) zero = zero && p[k] == 0;
    if (zero) continue;
    const uint64_t addr = GetLe64(p);
    if (addr != 0 && GetLe32(p + 8) == SlotCrc(i, addr) && GetLe32(p + 12) == 0) {
      out.push_back({i, addr});
    } else if (bad != nullptr) {
      bad->push_back(i);
    }
  }
  return out;
}

}  // namespace asymnvm::backend
