// Skip list: model-checked random operations with scans at every level (with session reopen and
// back-end restart), tower invariants, edge cases, level caching, replay, and a reader running
// beside the writer.
#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "structures/base.h"
#include "structures/kinds.h"
#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::StructuresTest;
using testing::TestValue;

Result<std::unique_ptr<Map>> OpenSkip(frontend::Session& s, const std::string& name,
                                      Options o = {}) {
  return internal::OpenSkipList(s, name, o);
}

Options ReaderOptions() {
  Options o;
  o.access = Access::kReader;
  return o;
}

std::vector<KeyValue> ModelScan(const std::map<uint64_t, Value>& model, uint64_t from,
                                size_t limit) {
  std::vector<KeyValue> out;
  for (auto it = model.lower_bound(from); it != model.end() && out.size() < limit; ++it) {
    out.emplace_back(it->first, it->second);
  }
  return out;
}

// Every key of the model (and the absent ones of the range) reads back exactly; a full scan
// returns the model.
void ExpectMatches(Map& m, const std::map<uint64_t, Value>& model, uint64_t key_range) {
  for (uint64_t k = 0; k < key_range; k++) {
    Value got;
    Status st = m.Get(k, &got);
    auto it = model.find(k);
    if (it == model.end()) {
      EXPECT_EQ(st.code(), StatusCode::kNotFound) << "key " << k << ": " << st.ToString();
    } else {
      ASSERT_TRUE(st.ok()) << "key " << k << ": " << st.ToString();
      EXPECT_EQ(got, it->second) << "key " << k;
    }
  }
  std::vector<KeyValue> all;
  Status st = m.Scan(0, SIZE_MAX, &all);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(all, ModelScan(model, 0, SIZE_MAX));
  auto n = m.Count();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, model.size());
  Status v = m.Verify();
  EXPECT_TRUE(v.ok()) << v.ToString();
}

class SkipListTest : public StructuresTest {};

TEST_F(SkipListTest, EmptySingleOrdersAndDeleteAll) {
  auto s = OpenSession(10, Level::kRcb);
  auto m = OpenSkip(*s, "sl");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::map<uint64_t, Value> model;
  ExpectMatches(**m, model, 10);
  std::vector<KeyValue> out;
  ASSERT_TRUE((*m)->Scan(0, 10, &out).ok());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ((*m)->Delete(3).code(), StatusCode::kNotFound);
  ASSERT_TRUE((*m)->Put(3, TestValue(3, 0, 10)).ok());
  model[3] = TestValue(3, 0, 10);
  ExpectMatches(**m, model, 10);
  ASSERT_TRUE((*m)->Delete(3).ok());
  model.clear();
  ExpectMatches(**m, model, 10);
  // Ascending, then descending, then interleaved inserts; extreme keys.
  for (uint64_t k = 100; k < 200; k++) {
    ASSERT_TRUE((*m)->Put(k, TestValue(k, 1, k % 40)).ok());
    model[k] = TestValue(k, 1, k % 40);
  }
  for (uint64_t k = 99; k > 0; k--) {
    ASSERT_TRUE((*m)->Put(k, TestValue(k, 2, 3)).ok());
    model[k] = TestValue(k, 2, 3);
  }
  for (uint64_t k : {0ull, ~0ull, 1ull << 63}) {
    ASSERT_TRUE((*m)->Put(k, TestValue(k, 3, 5)).ok());
    model[k] = TestValue(k, 3, 5);
  }
  ExpectMatches(**m, model, 210);
  ASSERT_TRUE((*m)->Scan(~0ull, 10, &out).ok());
  EXPECT_EQ(out, ModelScan(model, ~0ull, 10));
  ASSERT_TRUE((*m)->Scan(150, 7, &out).ok());
  EXPECT_EQ(out, ModelScan(model, 150, 7));
  // Delete the first, the last, and every other one, then everything.
  for (uint64_t k : {0ull, ~0ull, 1ull << 63}) {
    ASSERT_TRUE((*m)->Delete(k).ok());
    model.erase(k);
  }
  for (uint64_t k = 1; k < 200; k += 2) {
    ASSERT_TRUE((*m)->Delete(k).ok());
    model.erase(k);
  }
  ExpectMatches(**m, model, 210);
  while (!model.empty()) {
    ASSERT_TRUE((*m)->Delete(model.rbegin()->first).ok());
    model.erase(std::prev(model.end()));
  }
  ExpectMatches(**m, model, 210);
  // Refill after empty; empty value; update to a shorter value.
  ASSERT_TRUE((*m)->Put(7, {}).ok());
  ASSERT_TRUE((*m)->Put(8, TestValue(8, 0, 64)).ok());
  ASSERT_TRUE((*m)->Put(8, TestValue(8, 1, 2)).ok());
  model[7] = {};
  model[8] = TestValue(8, 1, 2);
  ExpectMatches(**m, model, 10);
}

TEST_F(SkipListTest, LargeValues) {
  auto s = OpenSession(11, Level::kRc);
  Options o;
  o.value_size = 8192;
  auto m = OpenSkip(*s, "big", o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::map<uint64_t, Value> model;
  for (uint64_t k = 0; k < 6; k++) {
    model[k * 10] = TestValue(k, 0, 8192 - k * 1000);
    ASSERT_TRUE((*m)->Put(k * 10, model[k * 10]).ok());
  }
  ASSERT_TRUE((*m)->Put(20, TestValue(2, 9, 8192)).ok());
  model[20] = TestValue(2, 9, 8192);
  ASSERT_TRUE((*m)->Delete(40).ok());
  model.erase(40);
  ExpectMatches(**m, model, 60);
  EXPECT_EQ((*m)->Put(1, TestValue(1, 1, 8193)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*m)->Sync().ok());
  auto s2 = OpenSession(12, Level::kRc);
  auto r = OpenSkip(*s2, "big", ReaderOptions());
  ASSERT_TRUE(r.ok());
  ExpectMatches(**r, model, 60);
}

TEST_F(SkipListTest, BadInput) {
  auto s = OpenSession(13, Level::kRcb);
  Options o;
  o.value_size = 16;
  o.param = 8;
  auto m = OpenSkip(*s, "sl", o);
  ASSERT_TRUE(m.ok());
  Status big = (*m)->Put(1, TestValue(1, 1, 17));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("value_size"), std::string::npos) << big.ToString();
  EXPECT_EQ((*m)->Delete(5).code(), StatusCode::kNotFound);
  Value v;
  EXPECT_EQ((*m)->Get(5, &v).code(), StatusCode::kNotFound);
  Options bad;
  bad.param = 65;
  EXPECT_EQ(OpenSkip(*s, "s2", bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenSkip(*s, "missing", ReaderOptions()).status().code(), StatusCode::kNotFound);
  // Same name, other kind.
  EXPECT_EQ(internal::OpenHashTable(*s, "sl", {}).status().code(), StatusCode::kFailedPrecondition);
  // The stored shape wins over a different requested one.
  m->reset();
  Options other;
  other.value_size = 1000;
  other.param = 30;
  auto again = OpenSkip(*s, "sl", other);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->value_size(), 16u);
  EXPECT_TRUE((*again)->Verify().ok());
}

// §8.4: with optimize, height-1 nodes bypass the cache (a repeated search still reads them
// remotely) while the upper levels are cached, until the threshold adapts to a low miss ratio;
// off, a warm cache serves everything.
TEST_F(SkipListTest, UpperLevelsCachedLowestLevelRemote) {
  uint64_t second_round[2], first_round[2];
  for (int opt = 0; opt < 2; opt++) {
    const std::string name = std::string("c") + std::to_string(opt);
    Options o;
    o.optimize = opt == 1;
    {
      auto s = OpenSession(20 + opt, Level::kRcb);
      auto m = OpenSkip(*s, name, o);
      ASSERT_TRUE(m.ok());
      for (uint64_t k = 0; k < 500; k++) ASSERT_TRUE((*m)->Put(k * 3, TestValue(k, 0, 64)).ok());
    }
    auto s = OpenSession(20 + opt, Level::kRc);
    auto m = OpenSkip(*s, name, o);
    ASSERT_TRUE(m.ok());
    for (int round = 0; round < 2; round++) {
      const auto before = s->counters();
      for (uint64_t k = 0; k < 500; k += 5) {
        Value v;
        ASSERT_TRUE((*m)->Get(k * 3, &v).ok());
        ASSERT_EQ(v, TestValue(k, 0, 64));
      }
      (round == 0 ? first_round : second_round)[opt] =
          s->counters().remote_reads - before.remote_reads;
    }
    if (opt == 1) {
      // The structure fits the cache: the miss ratio of the cached levels stays low, so the
      // threshold drops to 1 and every node ends up cached.
      for (int i = 0; i < 3000; i++) {
        Value v;
        ASSERT_TRUE((*m)->Get((i * 7 % 500) * 3, &v).ok());
      }
      const auto before = s->counters();
      for (uint64_t k = 0; k < 500; k += 5) {
        Value v;
        ASSERT_TRUE((*m)->Get(k * 3, &v).ok());
      }
      EXPECT_EQ(s->counters().remote_reads - before.remote_reads, 0u);
    }
    EXPECT_TRUE((*m)->Verify().ok());
  }
  EXPECT_EQ(second_round[0], 0u);  // off: all cached
  EXPECT_GT(second_round[1], 0u);  // on: height-1 nodes are read remotely every time
  EXPECT_LT(second_round[1], first_round[1]);
}

class FakeFetcher : public frontend::OpLogFetcher {
 public:
  std::vector<frontend::RecoveredOp> ops;
  Result<std::vector<frontend::RecoveredOp>> Fetch(uint64_t, uint64_t) override { return ops; }
};

TEST_F(SkipListTest, ReplayReexecutesLoggedPutsAndDeletes) {
  FakeFetcher f;
  {
    auto s = OpenSession(30, Level::kRcb);
    auto m = OpenSkip(*s, "rep");
    ASSERT_TRUE(m.ok());
    for (uint64_t k = 1; k <= 5; k++) ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 20)).ok());
    ASSERT_TRUE((*m)->Sync().ok());
    // Op logs whose memory logs never left (a crash right after op_log).
    const frontend::Structure st = (*m)->structure();
    auto add = [&](uint16_t type, uint64_t key, Value v) {
      auto params = internal::EncodeKeyValue(key, v);
      auto seq = s->OpLog(st, type, params);
      ASSERT_TRUE(seq.ok());
      frontend::RecoveredOp op;
      op.op_seq = *seq;
      op.structure_id = st.id;
      op.op_type = type;
      op.payload = params;
      f.ops.push_back(op);
    };
    add(1, 10, TestValue(10, 0, 30));
    add(2, 1, {});
    add(1, 2, TestValue(2, 5, 7));
    add(2, 99, {});  // a delete of a missing key replays as a no-op
    add(1, 11, TestValue(11, 0, 1));
    add(2, 11, {});
  }
  auto s = OpenSession(30, Level::kRcb);
  RegisterReplays(*s);
  auto m = OpenSkip(*s, "rep");
  ASSERT_TRUE(m.ok());
  Status st = s->Replay(&f);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s->counters().replayed_ops, 6u);
  std::map<uint64_t, Value> model;
  for (uint64_t k = 2; k <= 5; k++) model[k] = TestValue(k, 0, 20);
  model[10] = TestValue(10, 0, 30);
  model[2] = TestValue(2, 5, 7);
  ExpectMatches(**m, model, 20);
  m->reset();
  auto s2 = OpenSession(31, Level::kRcb);
  auto r = OpenSkip(*s2, "rep", ReaderOptions());
  ASSERT_TRUE(r.ok());
  ExpectMatches(**r, model, 20);
}

// The classic peer-system bug: a reader must never miss a stable key while the writer inserts
// and deletes others (towers growing and shrinking change the head links every search uses).
TEST_F(SkipListTest, ReaderNeverMissesStableKeysWhileWriterRuns) {
  for (Level level : {Level::kRcb, Level::kR}) {
    const std::string name = std::string("c") + frontend::LevelName(level);
    Options o;
    o.value_size = 32;
    auto ws = OpenSession(40, level);
    auto w = OpenSkip(*ws, name, o);
    ASSERT_TRUE(w.ok());
    for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE((*w)->Put(k, TestValue(k, 0, 32)).ok());
    ASSERT_TRUE((*w)->Sync().ok());
    auto rs = OpenSession(41, level);
    auto r = OpenSkip(*rs, name, ReaderOptions());
    ASSERT_TRUE(r.ok());
    std::atomic<bool> done{false};
    std::atomic<uint64_t> gets{0}, bad{0};
    std::string first_bad;
    std::thread reader([&] {
      uint64_t k = 0;
      while (!done.load()) {
        Value v;
        Status st = (*r)->Get(k, &v);
        if (!st.ok() || v != TestValue(k, 0, 32)) {
          if (bad.fetch_add(1) == 0)
            first_bad = std::string("key ") + std::to_string(k) + ": " + st.ToString();
        }
        gets++;
        k = (k + 1) % 100;
      }
    });
    std::mt19937_64 rng(3);
    Status wst;
    for (int i = 0; i < 1500 && wst.ok(); i++) {
      const uint64_t k = 1000 + rng() % 1000;
      wst = rng() % 3 == 0 ? (*w)->Delete(k) : (*w)->Put(k, TestValue(k, i, rng() % 33));
      if (wst.code() == StatusCode::kNotFound) wst = Status::Ok();
      if (i % 500 == 0 && wst.ok()) wst = (*w)->Sync();
    }
    while (gets.load() < 200) std::this_thread::yield();
    done = true;
    reader.join();
    ASSERT_TRUE(wst.ok()) << wst.ToString();
    EXPECT_EQ(bad.load(), 0u) << first_bad;
    EXPECT_TRUE((*w)->Verify().ok());
  }
}

}  // namespace
}  // namespace asymnvm::structures
