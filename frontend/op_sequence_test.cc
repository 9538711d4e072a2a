// OpSequence (frontend/op_sequence.h): the OPN never passes an open op nor an earlier session's
// op logs still to replay; replay re-executes each op once per connection.
#include "frontend/op_sequence.h"

#include <gtest/gtest.h>

namespace asymnvm::frontend {
namespace {

RecoveredOp Op(uint64_t seq, uint32_t structure, uint16_t type = 1) {
  RecoveredOp op;
  op.op_seq = seq;
  op.structure_id = structure;
  op.op_type = type;
  return op;
}

constexpr uint64_t kInc2 = uint64_t{2} << 32;

TEST(OpSequence, RegistrationStartsAboveEveryEarlierSession) {
  OpSequence s;
  s.Registered(57, kInc2, false);
  EXPECT_EQ(s.registered_opn(), 57u);
  EXPECT_EQ(s.opn(), 57u);
  EXPECT_EQ(s.next(), kInc2 + 1);
  EXPECT_EQ(s.first(), kInc2 + 1);
  EXPECT_FALSE(s.OpnUnsent());
  EXPECT_FALSE(s.replay_pending());
}

TEST(OpSequence, OpnStopsBeforeTheFirstOpenOpWhicheverStructure) {
  OpSequence s;
  s.Registered(0, 0, false);
  const uint64_t a = s.Take(), b = s.Take(), c = s.Take();
  s.Opened(a, 7);
  s.Opened(b, 8);
  s.Opened(c, 7);
  EXPECT_EQ(s.opn(), 0u);
  EXPECT_EQ(s.OpenOthers(7), std::vector<uint32_t>{8});
  EXPECT_TRUE(s.HasOpen(8));
  s.Close(7, c);  // a and c closed; b (structure 8) still open
  EXPECT_EQ(s.opn(), a);
  s.Close(8, b);
  EXPECT_EQ(s.opn(), c);
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.OpnUnsent());
  s.Sent(s.OpnToSend(s.opn()));
  EXPECT_FALSE(s.OpnUnsent());
  EXPECT_EQ(s.OpnToSend(1), c);  // never below what was sent
}

TEST(OpSequence, CloseUpToLeavesLaterOpsOfTheSameStructureOpen) {
  OpSequence s;
  s.Registered(10, 0, false);
  const uint64_t a = s.Take(), b = s.Take();
  s.Opened(a, 3);
  s.Opened(b, 3);
  s.Close(3, a);
  EXPECT_EQ(s.opn(), a);
  EXPECT_TRUE(s.HasOpen(3));
}

TEST(OpSequence, LockAheadOpIsCoveredAtOnce) {
  OpSequence s;
  s.Registered(4, 0, false);
  s.Covered(s.Take());
  EXPECT_EQ(s.opn(), 5u);
}

// The bug this class exists to prevent: with an earlier session's op logs past the registered
// OPN, a lock-ahead op logged before Replay must not move the OPN (it would cover them).
TEST(OpSequence, OpsToReplayHoldTheOpnUntilReplayedInOrder) {
  OpSequence s;
  s.Registered(kInc2 + 3, kInc2 + (uint64_t{1} << 32), true);  // incarnation 3 now
  EXPECT_TRUE(s.replay_pending());
  const uint64_t lock = s.Take();
  s.Covered(lock);
  EXPECT_EQ(s.opn(), kInc2 + 3) << "the OPN passed op logs nobody replayed";
  // Replay: ops 2:4 (lock-ahead), 2:5, 2:6 of the earlier session, one already covered (2:3),
  // one of this session (never replayed).
  std::vector<RecoveredOp> fetched = {Op(kInc2 + 3, 1), Op(kInc2 + 4, 1, kLockAheadOpType),
                                      Op(kInc2 + 5, 1), Op(kInc2 + 6, 2), Op(lock, 1)};
  auto todo = s.BeginReplay(fetched);
  ASSERT_EQ(todo.size(), 3u);
  EXPECT_EQ(todo[0]->op_seq, kInc2 + 4);
  EXPECT_EQ(s.opn(), kInc2 + 3);
  s.Replaying(kInc2 + 4);
  s.Replayed(kInc2 + 4);
  EXPECT_EQ(s.opn(), kInc2 + 4);
  s.Replaying(kInc2 + 5);
  s.Replayed(kInc2 + 5);
  EXPECT_EQ(s.opn(), kInc2 + 5);  // 2:6 still open
  EXPECT_TRUE(s.replay_pending());
  s.Replaying(kInc2 + 6);
  s.Replayed(kInc2 + 6);
  s.EndReplay();
  EXPECT_FALSE(s.replay_pending());
  EXPECT_EQ(s.opn(), lock);  // this session's lock-ahead op is covered now too
  // A second replay on this connection re-executes nothing.
  EXPECT_TRUE(s.BeginReplay(fetched).empty());
}

TEST(OpSequence, ReplayInterruptedKeepsTheRestOpen) {
  OpSequence s;
  s.Registered(100, uint64_t{1} << 32, true);
  std::vector<RecoveredOp> fetched = {Op(101, 1), Op(102, 1), Op(103, 1)};
  auto todo = s.BeginReplay(fetched);
  ASSERT_EQ(todo.size(), 3u);
  s.Replaying(101);
  s.Replayed(101);
  // 102 failed: the OPN stays before it, the replay is still pending (no lock may go).
  EXPECT_EQ(s.opn(), 101u);
  EXPECT_TRUE(s.replay_pending());
  s.Covered(s.Take());
  EXPECT_EQ(s.opn(), 101u);
}

}  // namespace
}  // namespace asymnvm::frontend
