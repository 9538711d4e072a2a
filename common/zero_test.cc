#include "common/zero.h"

#include <gtest/gtest.h>

#include <vector>

namespace asymnvm {
namespace {

TEST(ZeroPages, WritesOnlyNonZeroPiecesAndLeavesAllZero) {
  std::vector<uint8_t> buf(5 * 4096 + 100, 0);
  EXPECT_EQ(ZeroPages(buf.data(), buf.size()), 0u);  // already zero: nothing written
  buf[4096 + 7] = 1;                                 // second piece
  buf[5 * 4096 + 99] = 2;                            // the short last piece
  EXPECT_EQ(ZeroPages(buf.data(), buf.size()), 4096u + 100u);
  EXPECT_TRUE(IsZero(buf.data(), buf.size()));
  // An unaligned start and a length that is not a multiple of the piece.
  buf[10] = 3;
  EXPECT_EQ(ZeroPages(buf.data() + 5, 4000), 4000u);
  EXPECT_TRUE(IsZero(buf.data(), buf.size()));
  EXPECT_EQ(ZeroPages(buf.data(), 0), 0u);
  EXPECT_FALSE(IsZero(std::vector<uint8_t>{0, 0, 9}.data(), 3));
}

}  // namespace
}  // namespace asymnvm
