// OrderedExecutor with synthetic out-of-order completions (the soft NIC with one NIC thread
// happens to deliver in order, so the reordering logic is exercised here).
#include "fabric/oq/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace asymnvm::oq {
namespace {

using Event = OrderedExecutor::Event;

std::vector<Event> Drain(OrderedExecutor& e) {
  std::vector<Event> out;
  Event ev;
  while (e.Next(&ev)) out.push_back(ev);
  return out;
}

TEST(OrderedExecutor, InOrderMessages_ExecuteAndRetireOnZeroLengthMarker) {
  OrderedExecutor e(64);
  e.AddBuffer(7, 4096);
  e.AddBuffer(8, 4096);
  ASSERT_TRUE(e.OnCompletion(7, 0, 100, false, 1).ok());
  ASSERT_TRUE(e.OnCompletion(7, 128, 50, false, 2).ok());
  auto ev = Drain(e);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].offset, 0u);
  EXPECT_EQ(ev[0].length, 100u);
  EXPECT_EQ(ev[0].connection_id, 1u);
  EXPECT_EQ(ev[1].offset, 128u);
  ASSERT_TRUE(e.OnCompletion(7, 178, 0, true, 3).ok());  // roll-over marker: 178 bytes used
  ASSERT_TRUE(e.OnCompletion(8, 0, 40, false, 3).ok());
  ev = Drain(e);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, Event::kRetired);
  EXPECT_EQ(ev[0].buffer_id, 7u);
  EXPECT_EQ(ev[0].used, 192u);
  EXPECT_EQ(ev[1].kind, Event::kMessage);
  EXPECT_EQ(ev[1].buffer_id, 8u);
  EXPECT_EQ(e.out_of_order(), 0u);
}

TEST(OrderedExecutor, GapAtNextIndex_HoldsLaterMessagesUntilItArrives) {
  OrderedExecutor e(64);
  e.AddBuffer(1, 4096);
  ASSERT_TRUE(e.OnCompletion(1, 64, 50, false, 2).ok());
  ASSERT_TRUE(e.OnCompletion(1, 128, 50, false, 2).ok());
  EXPECT_TRUE(Drain(e).empty());
  EXPECT_EQ(e.out_of_order(), 2u);
  ASSERT_TRUE(e.OnCompletion(1, 0, 64, false, 1).ok());
  auto ev = Drain(e);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].offset, 0u);
  EXPECT_EQ(ev[1].offset, 64u);
  EXPECT_EQ(ev[2].offset, 128u);
}

TEST(OrderedExecutor, MessageWithBufferDone_RetiresAfterIt) {
  OrderedExecutor e(64);
  e.AddBuffer(1, 4096);
  e.AddBuffer(2, 4096);
  // The next buffer's message completes first (another connection).
  ASSERT_TRUE(e.OnCompletion(2, 0, 40, false, 9).ok());
  EXPECT_TRUE(Drain(e).empty());
  ASSERT_TRUE(e.OnCompletion(1, 0, 4000, true, 8).ok());  // fills buffer 1
  auto ev = Drain(e);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, Event::kMessage);
  EXPECT_EQ(ev[1].kind, Event::kRetired);
  EXPECT_EQ(ev[1].used, 4032u);
  EXPECT_EQ(ev[2].buffer_id, 2u);
}

TEST(OrderedExecutor, BadCompletions_RejectedWithoutStateChange) {
  OrderedExecutor e(64);
  e.AddBuffer(1, 4096);
  EXPECT_EQ(e.OnCompletion(5, 0, 10, false, 1).code(), StatusCode::kInternal);      // unknown
  EXPECT_EQ(e.OnCompletion(1, 10, 10, false, 1).code(), StatusCode::kInternal);     // misaligned
  EXPECT_EQ(e.OnCompletion(1, 4032, 100, false, 1).code(), StatusCode::kInternal);  // overflows
  EXPECT_EQ(e.OnCompletion(1, 0, 0, false, 1).code(), StatusCode::kInternal);  // empty, not done
  ASSERT_TRUE(e.OnCompletion(1, 0, 10, false, 1).ok());
  EXPECT_EQ(e.OnCompletion(1, 0, 10, false, 1).code(), StatusCode::kInternal);  // duplicate
  ASSERT_EQ(Drain(e).size(), 1u);
}

// Many buffers, random message sizes, completions delivered in a seeded random order: the
// executor must yield exactly the placement order.
TEST(OrderedExecutor, RandomCompletionOrder_YieldsPlacementOrder) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const uint32_t kBuf = 4096, kStride = 64;
    OrderedExecutor e(kStride);
    struct C {
      uint64_t buf;
      uint32_t off, len;
      bool done;
    };
    std::vector<C> placed, comps;
    for (uint64_t b = 0; b < 8; b++) {
      e.AddBuffer(b, kBuf);
      uint32_t off = 0;
      while (true) {
        uint32_t len = 40 + static_cast<uint32_t>(rng() % 600);
        uint32_t end = (off + len + kStride - 1) / kStride * kStride;
        if (off + len > kBuf) {
          comps.push_back({b, off, 0, true});  // roll-over marker
          break;
        }
        bool full = end + kStride > kBuf;
        placed.push_back({b, off, len, full});
        comps.push_back(placed.back());
        off = end;
        if (full) break;
      }
    }
    std::shuffle(comps.begin(), comps.end(), rng);
    std::vector<Event> got;
    for (const auto& c : comps) {
      ASSERT_TRUE(e.OnCompletion(c.buf, c.off, c.len, c.done, c.buf).ok());
      for (auto& ev : Drain(e)) got.push_back(ev);
    }
    std::vector<C> msgs;
    uint64_t retired = 0;
    for (auto& ev : got) {
      if (ev.kind == Event::kMessage) {
        msgs.push_back({ev.buffer_id, ev.offset, ev.length, false});
      } else {
        EXPECT_EQ(ev.buffer_id, retired++);
      }
    }
    EXPECT_EQ(retired, 8u);
    ASSERT_EQ(msgs.size(), placed.size());
    for (size_t i = 0; i < msgs.size(); i++) {
      EXPECT_EQ(msgs[i].buf, placed[i].buf);
      EXPECT_EQ(msgs[i].off, placed[i].off);
      EXPECT_EQ(msgs[i].len, placed[i].len);
    }
    EXPECT_GT(e.out_of_order(), 0u);
  }
}

}  // namespace
}  // namespace asymnvm::oq
