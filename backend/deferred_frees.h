// The persistent table of deferred frees (back-end request 23; doc/backend.md §Deferred frees,
// bytes in doc/pm-layout.md §Back-end header page). A deferred free is recorded here, in the
// back-end header page, before it is acknowledged, and its slot is cleared only after the block
// was freed, so a crash in between neither leaks the block (a restart re-arms the record) nor
// frees it twice (a restart finds the block already free and only clears the slot).
//
// Slot (16 bytes, little-endian): addr u64 (pool offset; 0 = empty) | CRC-32C u32 of (slot index
// u64 ‖ addr u64) | reserved u32 (0). A slot whose CRC does not match is a torn record or a torn
// clear (neither was acknowledged as pending): it is ignored and cleared.
//
// Thread safety: pure functions over caller-owned bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/layout.h"

namespace asymnvm::backend {

// Position of the table inside the back-end header page (after the layout fields at 0..119 and
// the redo-mode checkpoint slots at 2048..2175).
inline constexpr uint64_t kDeferredFreeTableOffset = 2560;  // from kBackendHeaderOffset
inline constexpr uint64_t kDeferredFreeSlotSize = 16;
inline constexpr uint32_t kDeferredFreeSlots = 96;  // 1536 bytes: to the end of the page
static_assert(kDeferredFreeTableOffset + kDeferredFreeSlots * kDeferredFreeSlotSize ==
              kBackendHeaderSize);

struct DeferredFreeSlot {
  uint32_t slot = 0;
  uint64_t addr = 0;
};

// Encodes slot `slot` recording `addr` (addr 0: the empty slot, all zero) into 16 bytes at `p`.
void EncodeDeferredFree(uint32_t slot, uint64_t addr, uint8_t* p);
// What the table at `table` (kDeferredFreeSlots × 16 bytes) records: the valid non-empty slots
// in slot order. Slots that are neither empty nor valid are returned in `*bad` when given.
std::vector<DeferredFreeSlot> DecodeDeferredFrees(const uint8_t* table,
                                                  std::vector<uint32_t>* bad = nullptr);

}  // namespace asymnvm::backend
