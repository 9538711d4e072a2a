// Ledgers and the in-doubt resolution of the transaction checks (workloads/txn/ledger.h).
#include "workloads/txn/ledger.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace asymnvm::txnbench {
namespace {

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-ledger-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Append(const std::string& file, const std::string& text) {
    std::ofstream(dir_ + "/" + file, std::ios::app) << text;
  }
  std::string dir_;
};

std::string Name(uint32_t q) { return "q" + std::to_string(q); }

TEST_F(LedgerTest, FileRecordsCommittedAndInDoubtAndIgnoresATornLastLine) {
  {
    auto l = Ledger::Open(dir_ + "/fe-3.ledger", 4, 3);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ASSERT_TRUE((*l)->Pending({{0, 5}, {1, -5}}).ok());
    ASSERT_TRUE((*l)->Committed().ok());
    ASSERT_TRUE((*l)->Pending({}).ok());  // an empty effect (TATP's updates)
    ASSERT_TRUE((*l)->Committed().ok());
    ASSERT_TRUE((*l)->Pending({{2, 7}}).ok());  // the driver "dies" here
    EXPECT_EQ((*l)->committed(), 2u);
    EXPECT_EQ((*l)->totals(), (std::vector<int64_t>{5, -5, 0, 0}));
  }
  {
    auto l = Ledger::Open(dir_ + "/fe-3.ledger", 4, 3);  // the same id appends
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE((*l)->Pending({{3, 1}}).ok());
    ASSERT_TRUE((*l)->Committed().ok());
  }
  Append("fe-3.ledger", "P 0:99");  // torn: no newline
  auto set = ReadLedgers(dir_, 4);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->committed, (std::vector<int64_t>{5, -5, 0, 1}));
  EXPECT_EQ(set->committed_txns, 3u);
  ASSERT_EQ(set->in_doubt.size(), 1u);
  EXPECT_EQ(set->in_doubt[0], (Effect{{2, 7}}));
  EXPECT_EQ(set->frontend_ids, std::vector<uint64_t>{3});
}

TEST_F(LedgerTest, AnotherFrontEndsFileIsRefused) {
  ASSERT_TRUE(Ledger::Open(dir_ + "/fe-3.ledger", 4, 3).ok());
  auto other = Ledger::Open(dir_ + "/fe-3.ledger", 4, 4);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LedgerTest, MisuseIsAnErrorNotACount) {
  Ledger l(2);
  EXPECT_EQ(l.Committed().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(l.Pending({{2, 1}}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(l.Pending({{1, 1}}).ok());
  EXPECT_EQ(l.Pending({{1, 1}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(l.committed(), 0u);
}

TEST_F(LedgerTest, MalformedLedgersAreCorruptionNamingFileAndLine) {
  for (const std::string& bad :
       {std::string("id 1\nC\n"), std::string("id 1\nP 0:x\n"), std::string("id 1\nP 9:1\n"),
        std::string("id 1\nX\n"), std::string("P 0:1\n")}) {
    std::filesystem::remove(dir_ + "/fe-1.ledger");
    Append("fe-1.ledger", bad);
    auto set = ReadLedgers(dir_, 4);
    ASSERT_FALSE(set.ok()) << bad;
    EXPECT_EQ(set.status().code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(set.status().message().find("fe-1.ledger:"), std::string::npos)
        << set.status().ToString();
  }
}

TEST_F(LedgerTest, ResolutionsSettleInDoubtTransactionsForLaterReads) {
  Append("fe-1.ledger", "id 1\nP 0:5\nP 1:7\nP 2:9\nC\nP 3:1\n");
  auto set = ReadLedgers(dir_, 4);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->in_doubt.size(), 3u);
  EXPECT_EQ(set->in_doubt_ids,
            (std::vector<std::string>{"fe-1.ledger:2", "fe-1.ledger:3", "fe-1.ledger:6"}));
  // State: the first applied, the second not, the last ambiguous-free (applied).
  size_t applied = 0;
  std::vector<int> outcome;
  ASSERT_TRUE(
      Resolve({5, 0, 9, 1}, {0, 0, 0, 0}, set->committed, set->in_doubt, Name, &applied, &outcome)
          .ok());
  EXPECT_EQ(outcome, (std::vector<int>{1, 0, 1}));
  ASSERT_TRUE(WriteResolutions(dir_, set->in_doubt_ids, outcome).ok());
  auto again = ReadLedgers(dir_, 4);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->in_doubt.empty());
  EXPECT_EQ(again->resolved, 3u);
  EXPECT_EQ(again->committed, (std::vector<int64_t>{5, 0, 9, 1}));
  EXPECT_EQ(again->committed_txns, 3u);
  // A malformed resolution file is corruption, not a silent skip.
  Append("resolved", "fe-1.ledger:9 7\n");
  EXPECT_EQ(ReadLedgers(dir_, 4).status().code(), StatusCode::kCorruption);
}

TEST(ResolveTest, SeveralFittingCombinationsAreAmbiguousNotGuessed) {
  // Two in-doubt +1s on one quantity, measured +1: either could be the applied one.
  size_t applied = 0;
  std::vector<int> outcome;
  ASSERT_TRUE(Resolve({1}, {0}, {0}, {{{0, 1}}, {{0, 1}}}, Name, &applied, &outcome).ok());
  EXPECT_EQ(outcome, (std::vector<int>{-1, -1}));
}

TEST(ResolveTest, ExactStateIsAcceptedAnyDifferenceNamed) {
  const std::vector<int64_t> init{10, 10, 20}, committed{5, -5, 0};
  size_t applied = 9;
  EXPECT_TRUE(Resolve({15, 5, 20}, init, committed, {}, Name, &applied).ok());
  EXPECT_EQ(applied, 0u);
  Status st = Resolve({15, 6, 20}, init, committed, {}, Name, &applied);
  ASSERT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("q1 = 6, the ledgers say 5"), std::string::npos) << st.ToString();
}

TEST(ResolveTest, InDoubtTransactionsAreWhollyAppliedOrNotAtAll) {
  const std::vector<int64_t> init{0, 0, 0, 0}, none{0, 0, 0, 0};
  const std::vector<Effect> doubt{{{0, 3}, {1, -3}}, {{2, 1}}, {{3, 4}}};
  size_t applied = 0;
  // Only the first applied.
  EXPECT_TRUE(Resolve({3, -3, 0, 0}, init, none, doubt, Name, &applied).ok());
  EXPECT_EQ(applied, 1u);
  // None applied.
  EXPECT_TRUE(Resolve({0, 0, 0, 0}, init, none, doubt, Name, &applied).ok());
  EXPECT_EQ(applied, 0u);
  // All applied.
  EXPECT_TRUE(Resolve({3, -3, 1, 4}, init, none, doubt, Name, &applied).ok());
  EXPECT_EQ(applied, 3u);
  // Half of the first: not atomic.
  Status st = Resolve({3, 0, 0, 0}, init, none, doubt, Name, &applied);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  // Twice the second: applied more than once.
  EXPECT_EQ(Resolve({0, 0, 2, 0}, init, none, doubt, Name, &applied).code(),
            StatusCode::kCorruption);
}

TEST(ResolveTest, OverlappingInDoubtTransactionsAreDecidedTogether) {
  // Two transfers through the same account that cancel on it: either, both or none.
  const std::vector<int64_t> init{0, 0, 0}, none{0, 0, 0};
  const std::vector<Effect> doubt{{{0, -2}, {1, 2}}, {{1, -2}, {2, 2}}};
  size_t applied = 0;
  EXPECT_TRUE(Resolve({-2, 0, 2}, init, none, doubt, Name, &applied).ok());
  EXPECT_EQ(applied, 2u);
  EXPECT_TRUE(Resolve({0, -2, 2}, init, none, doubt, Name, &applied).ok());
  EXPECT_EQ(applied, 1u);
  EXPECT_EQ(Resolve({-2, 0, 0}, init, none, doubt, Name, &applied).code(), StatusCode::kCorruption);
}

TEST(ResolveTest, TooManyEntangledInDoubtTransactionsIsAnErrorNotAGuess) {
  std::vector<Effect> doubt;
  for (int i = 0; i < 21; i++) doubt.push_back({{0, 1}});
  size_t applied = 0;
  EXPECT_EQ(Resolve({1}, {0}, {0}, doubt, Name, &applied).code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace asymnvm::txnbench
