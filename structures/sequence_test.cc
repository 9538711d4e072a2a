// Stack and queue: model-checked random sequences at every level (with session reopen and
// back-end restart), annulment, readers, bad input.
#include <algorithm>
#include <deque>
#include <random>

#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::StructuresTest;
using testing::TestValue;

struct Param {
  Kind kind;
  Level level;
  bool optimize;
};

class SequenceModelTest : public StructuresTest, public ::testing::WithParamInterface<Param> {};

TEST_P(SequenceModelTest, RandomOpsMatchModelAcrossReopenAndRestart) {
  const Param p = GetParam();
  const bool lifo = p.kind == Kind::kStack;
  std::deque<Value> model;
  std::mt19937_64 rng(7 + static_cast<int>(p.level));
  uint64_t version = 0;
  Options o;
  o.optimize = p.optimize;
  o.value_size = 48;
  for (int phase = 0; phase < 3; phase++) {
    auto s = OpenSession(5, p.level);
    ASSERT_TRUE(s);
    auto q = OpenSequence(*s, p.kind, "seq", o);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    for (int i = 0; i < 300; i++) {
      const int r = static_cast<int>(rng() % 10);
      if (r < 6) {
        auto v = TestValue(rng() % 1000, ++version, rng() % 49);
        ASSERT_TRUE((*q)->Push(v).ok());
        model.push_back(v);
      } else if (r < 9) {
        Value got;
        Status st = (*q)->Pop(&got);
        if (model.empty()) {
          ASSERT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
        } else {
          ASSERT_TRUE(st.ok()) << st.ToString();
          Value want = lifo ? model.back() : model.front();
          if (lifo) {
            model.pop_back();
          } else {
            model.pop_front();
          }
          ASSERT_EQ(got, want) << "op " << i;
        }
      } else {
        Value got;
        Status st = (*q)->Peek(&got);
        if (model.empty()) {
          ASSERT_EQ(st.code(), StatusCode::kNotFound);
        } else {
          ASSERT_TRUE(st.ok()) << st.ToString();
          ASSERT_EQ(got, lifo ? model.back() : model.front());
        }
      }
    }
    // List (pending pushes included) gives every element in pop order, removing nothing.
    auto in_pop_order = [&] {
      std::vector<Value> v(model.begin(), model.end());
      if (lifo) std::reverse(v.begin(), v.end());
      return v;
    };
    std::vector<Value> listed;
    ASSERT_TRUE((*q)->List(SIZE_MAX, &listed).ok());
    EXPECT_EQ(listed, in_pop_order());
    ASSERT_TRUE((*q)->List(3, &listed).ok());
    EXPECT_EQ(listed.size(), std::min<size_t>(3, model.size()));
    auto n = (*q)->Count();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, model.size());
    ASSERT_TRUE((*q)->Verify().ok()) << (*q)->Verify().ToString();
    q->reset();
    s.reset();
    if (phase == 1) RestartBackend();
  }
  // A reader in another session sees exactly the model.
  auto s = OpenSession(6, p.level);
  Options ro;
  ro.access = Access::kReader;
  auto r = OpenSequence(*s, p.kind, "seq", ro);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto n = (*r)->Count();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, model.size());
  EXPECT_TRUE((*r)->Verify().ok());
  std::vector<Value> listed;
  ASSERT_TRUE((*r)->List(SIZE_MAX, &listed).ok());
  std::vector<Value> want(model.begin(), model.end());
  if (lifo) std::reverse(want.begin(), want.end());
  EXPECT_EQ(listed, want);
  EXPECT_EQ((*r)->Push(TestValue(1, 1, 4)).code(), StatusCode::kFailedPrecondition);
}

std::vector<Param> AllParams() {
  std::vector<Param> v;
  for (Kind k : {Kind::kStack, Kind::kQueue}) {
    for (Level l : testing::kAllLevels) v.push_back({k, l, true});
    v.push_back({k, Level::kRcb, false});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, SequenceModelTest, ::testing::ValuesIn(AllParams()),
                         [](const auto& info) {
                           return std::string(KindName(info.param.kind)) + "_" +
                                  frontend::LevelName(info.param.level) +
                                  (info.param.optimize ? "" : "_plain");
                         });

class SequenceTest : public StructuresTest {};

TEST_F(SequenceTest, AnnulledPushPopPairsSendNoMemoryLogs) {
  for (Kind kind : {Kind::kStack, Kind::kQueue}) {
    uint64_t mem_logs[2];
    for (int opt = 0; opt < 2; opt++) {
      auto s = OpenSession(10 + opt + (kind == Kind::kQueue ? 2 : 0), Level::kRcb);
      Options o;
      o.optimize = opt == 1;
      auto q = OpenSequence(*s, kind, std::string(KindName(kind)) + std::to_string(opt), o);
      ASSERT_TRUE(q.ok()) << q.status().ToString();
      const uint64_t before = s->counters().mem_logs;
      for (int i = 0; i < 100; i++) {
        ASSERT_TRUE((*q)->Push(TestValue(i, 0, 64)).ok());
        Value v;
        ASSERT_TRUE((*q)->Pop(&v).ok());
        ASSERT_EQ(v, TestValue(i, 0, 64));
      }
      ASSERT_TRUE((*q)->Sync().ok());
      mem_logs[opt] = s->counters().mem_logs - before;
      auto n = (*q)->Count();
      ASSERT_TRUE(n.ok());
      EXPECT_EQ(*n, 0u);
    }
    EXPECT_EQ(mem_logs[1], 0u) << KindName(kind);
    EXPECT_GE(mem_logs[0], 200u) << KindName(kind);
  }
}

TEST_F(SequenceTest, QueueKeepsFifoWithPendingEnqueuesBehindPersistentOnes) {
  auto s = OpenSession(20, Level::kRcb);
  auto q = OpenSequence(*s, Kind::kQueue, "q");
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE((*q)->Push(TestValue(1, 0, 8)).ok());
  ASSERT_TRUE((*q)->Sync().ok());                    // 1 is persistent
  ASSERT_TRUE((*q)->Push(TestValue(2, 0, 8)).ok());  // 2 is pending
  Value v;
  ASSERT_TRUE((*q)->Peek(&v).ok());
  EXPECT_EQ(v, TestValue(1, 0, 8));
  ASSERT_TRUE((*q)->Pop(&v).ok());
  EXPECT_EQ(v, TestValue(1, 0, 8));
  ASSERT_TRUE((*q)->Pop(&v).ok());
  EXPECT_EQ(v, TestValue(2, 0, 8));
  EXPECT_EQ((*q)->Pop(&v).code(), StatusCode::kNotFound);
}

TEST_F(SequenceTest, BadInput) {
  auto s = OpenSession(30, Level::kRc);
  Options o;
  o.value_size = 16;
  auto st = OpenSequence(*s, Kind::kStack, "st", o);
  ASSERT_TRUE(st.ok());
  Status big = (*st)->Push(TestValue(1, 1, 17));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("value_size"), std::string::npos) << big.ToString();
  Value v;
  Status empty = (*st)->Pop(&v);
  EXPECT_EQ(empty.code(), StatusCode::kNotFound);
  EXPECT_NE(empty.message().find("empty"), std::string::npos);
  // Same name, other kind.
  auto mismatch = OpenSequence(*s, Kind::kQueue, "st");
  EXPECT_EQ(mismatch.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatch.status().message().find("type mismatch"), std::string::npos);
  // A reader of a missing structure.
  Options ro;
  ro.access = Access::kReader;
  EXPECT_EQ(OpenSequence(*s, Kind::kQueue, "missing", ro).status().code(), StatusCode::kNotFound);
  // Bad options; maps through the sequence opener.
  Options bad;
  bad.value_size = 0;
  EXPECT_EQ(OpenSequence(*s, Kind::kStack, "x", bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenSequence(*s, Kind::kBst, "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenMap(*s, Kind::kStack, "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKind("heap").status().code(), StatusCode::kInvalidArgument);
  // The stored value size wins over a different requested one.
  st->reset();
  Options other;
  other.value_size = 1000;
  auto again = OpenSequence(*s, Kind::kStack, "st", other);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->value_size(), 16u);
}

TEST_F(SequenceTest, SecondWriterTimesOutWhileFirstHoldsTheLock) {
  auto a = OpenSession(40, Level::kRcb);
  auto b_opts = SessionOpts(41, Level::kRcb);
  b_opts.lock_timeout = std::chrono::milliseconds(100);
  auto b = frontend::Session::Open(b_opts);
  ASSERT_TRUE(b.ok());
  auto w = OpenSequence(*a, Kind::kStack, "locked");
  ASSERT_TRUE(w.ok());
  auto w2 = OpenSequence(**b, Kind::kStack, "locked");
  EXPECT_EQ(w2.status().code(), StatusCode::kTimedOut) << w2.status().ToString();
  w->reset();  // releases the lock
  auto w3 = OpenSequence(**b, Kind::kStack, "locked");
  EXPECT_TRUE(w3.ok()) << w3.status().ToString();
}

}  // namespace
}  // namespace asymnvm::structures
