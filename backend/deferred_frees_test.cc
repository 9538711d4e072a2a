// The persistent deferred-free table's slot format (backend/deferred_frees.h): empty slots are
// skipped, valid ones decoded in slot order, a torn or moved record is reported as bad.
#include "backend/deferred_frees.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace asymnvm::backend {
namespace {

TEST(DeferredFreeTable, ValidEmptyTornAndMovedSlots) {
  std::vector<uint8_t> table(kDeferredFreeSlots * kDeferredFreeSlotSize, 0);
  auto slot = [&](uint32_t i) { return table.data() + i * kDeferredFreeSlotSize; };
  EXPECT_TRUE(DecodeDeferredFrees(table.data()).empty());
  EncodeDeferredFree(3, 0x10000, slot(3));
  EncodeDeferredFree(95, 0x23000, slot(95));
  std::vector<uint32_t> bad;
  auto got = DecodeDeferredFrees(table.data(), &bad);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].slot, 3u);
  EXPECT_EQ(got[0].addr, 0x10000u);
  EXPECT_EQ(got[1].slot, 95u);
  EXPECT_EQ(got[1].addr, 0x23000u);
  EXPECT_TRUE(bad.empty());

  // A torn record (address written, CRC not), a record copied into another slot (the CRC is
  // seeded with the slot index), a non-zero reserved word: all bad, none decoded.
  slot(7)[0] = 0x40;
  std::memcpy(slot(8), slot(3), kDeferredFreeSlotSize);
  EncodeDeferredFree(9, 0x30000, slot(9));
  slot(9)[12] = 1;
  bad.clear();
  got = DecodeDeferredFrees(table.data(), &bad);
  EXPECT_EQ(got.size(), 2u);
  EXPECT_EQ(bad, (std::vector<uint32_t>{7, 8, 9}));

  // Clearing writes the empty slot.
  EncodeDeferredFree(3, 0, slot(3));
  for (uint64_t k = 0; k < kDeferredFreeSlotSize; k++) EXPECT_EQ(slot(3)[k], 0) << k;
  got = DecodeDeferredFrees(table.data());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].slot, 95u);
}

}  // namespace
}  // namespace asymnvm::backend
