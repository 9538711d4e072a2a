#include "tests/common/linearizability.h"

#include <gtest/gtest.h>

#include <random>

namespace asymnvm::testing {
namespace {

RegisterOp W(int c, uint64_t k, uint64_t v, int64_t a, int64_t b) { return {c, k, true, v, a, b}; }
RegisterOp R(int c, uint64_t k, uint64_t v, int64_t a, int64_t b) { return {c, k, false, v, a, b}; }

TEST(Linearizability, EmptyAndSequentialHistoriesPass) {
  EXPECT_TRUE(CheckRegisterHistory({}).ok());
  EXPECT_TRUE(CheckRegisterHistory({R(0, 1, 0, 0, 1), W(0, 1, 5, 2, 3), R(0, 1, 5, 4, 5)}).ok());
}

TEST(Linearizability, StaleReadAfterCompletedWriteFails) {
  // The write completed at 3; a read invoked at 4 must see it.
  Status s = CheckRegisterHistory({W(0, 1, 5, 0, 3), R(1, 1, 0, 4, 6)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("key 1"), std::string::npos) << s.ToString();
}

TEST(Linearizability, OverlappingReadMaySeeEitherValue) {
  EXPECT_TRUE(CheckRegisterHistory({W(0, 1, 5, 0, 10), R(1, 1, 0, 2, 4)}).ok());
  EXPECT_TRUE(CheckRegisterHistory({W(0, 1, 5, 0, 10), R(1, 1, 5, 2, 4)}).ok());
}

TEST(Linearizability, ReadsMustNotGoBackInTime) {
  // Two reads during one write: seeing the new value, then the old one, is not linearizable.
  Status s = CheckRegisterHistory({W(0, 1, 5, 0, 100), R(1, 1, 5, 10, 20), R(1, 1, 0, 30, 40)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
}

TEST(Linearizability, ValueNeverWrittenFails) {
  EXPECT_FALSE(CheckRegisterHistory({W(0, 1, 5, 0, 1), R(1, 1, 7, 2, 3)}).ok());
}

TEST(Linearizability, PendingWriteMayOrMayNotTakeEffect) {
  EXPECT_TRUE(CheckRegisterHistory({W(0, 1, 5, 0, kNoResponse), R(1, 1, 5, 10, 11)}).ok());
  EXPECT_TRUE(CheckRegisterHistory({W(0, 1, 5, 0, kNoResponse), R(1, 1, 0, 10, 11)}).ok());
  // ...but once observed it cannot be undone.
  EXPECT_FALSE(
      CheckRegisterHistory({W(0, 1, 5, 0, kNoResponse), R(1, 1, 5, 10, 11), R(1, 1, 0, 12, 13)})
          .ok());
}

TEST(Linearizability, KeysAreIndependent) {
  EXPECT_TRUE(
      CheckRegisterHistory({W(0, 1, 5, 0, 1), W(0, 2, 6, 2, 3), R(1, 1, 5, 4, 5), R(1, 2, 6, 4, 5)})
          .ok());
  EXPECT_FALSE(
      CheckRegisterHistory({W(0, 1, 5, 0, 1), W(0, 2, 6, 2, 3), R(1, 1, 5, 4, 5), R(1, 2, 5, 4, 5)})
          .ok());
}

TEST(Linearizability, InitialValueAndMalformedInput) {
  EXPECT_TRUE(CheckRegisterHistory({R(0, 1, 9, 0, 1)}, 9).ok());
  EXPECT_EQ(CheckRegisterHistory({R(0, 1, 0, 5, 1)}).code(), StatusCode::kInvalidArgument);
}

// Histories produced by a real (atomic) register with random overlapping intervals around each
// linearization point always pass; corrupting one read's value makes them fail.
TEST(Linearizability, RandomAtomicHistoriesPassAndMutationsAreCaught) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 40; round++) {
    std::vector<RegisterOp> ops;
    uint64_t reg[3] = {0, 0, 0};
    int64_t t = 0;
    uint64_t next_value = 1;
    for (int i = 0; i < 300; i++) {
      t += 10;
      const uint64_t key = rng() % 3;
      const bool write = rng() % 2;
      RegisterOp op;
      op.client = static_cast<int>(rng() % 8);
      op.key = key;
      op.is_write = write;
      if (write) reg[key] = next_value++;
      op.value = reg[key];
      op.invoke_ns = t - static_cast<int64_t>(rng() % 40);  // overlaps up to 4 neighbours
      op.response_ns = t + static_cast<int64_t>(rng() % 40);
      ops.push_back(op);
    }
    Status st = CheckRegisterHistory(ops);
    ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.ToString();
    // Mutate one read to return a value that was overwritten long before.
    for (auto& op : ops) {
      if (!op.is_write && op.invoke_ns > 2000 && op.value > 0) {
        op.value = 1;
        break;
      }
    }
    EXPECT_EQ(CheckRegisterHistory(ops).code(), StatusCode::kFailedPrecondition) << round;
  }
}

TEST(Linearizability, BudgetExhaustionIsInconclusiveNotAPass) {
  // Many fully concurrent writes and an impossible read: the search explores many states.
  std::vector<RegisterOp> ops;
  for (int i = 0; i < 20; i++) ops.push_back(W(i, 1, 100 + i, 0, 1000));
  ops.push_back(R(99, 1, 7, 2000, 2001));
  CheckOptions o;
  o.max_states_per_key = 1000;
  EXPECT_EQ(CheckRegisterHistory(ops, o).code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace asymnvm::testing
