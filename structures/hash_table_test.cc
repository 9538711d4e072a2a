// Hash table: model-checked random operations at every level (with session reopen and back-end
// restart), chains, edge cases, item-granularity caching, replay, and a reader running beside the
// writer.
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

Result<std::unique_ptr<Map>> OpenHash(frontend::Session& s, const std::string& name,
                                      Options o = {}) {
  return internal::OpenHashTable(s, name, o);
}

Options ReaderOptions() {
  Options o;
  o.access = Access::kReader;
  return o;
}

// Every key of the model (and a few absent ones) reads back exactly.
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
  auto n = m.Count();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, model.size());
  Status v = m.Verify();
  EXPECT_TRUE(v.ok()) << v.ToString();
}

class HashTableTest : public StructuresTest {};

TEST_F(HashTableTest, EmptySingleAndDeleteAll) {
  auto s = OpenSession(10, Level::kRcb);
  Options o;
  o.param = 1;  // one chain: every key shares it
  auto m = OpenHash(*s, "one", o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::map<uint64_t, Value> model;
  ExpectMatches(**m, model, 10);
  EXPECT_EQ((*m)->Delete(3).code(), StatusCode::kNotFound);
  ASSERT_TRUE((*m)->Put(3, TestValue(3, 0, 10)).ok());
  model[3] = TestValue(3, 0, 10);
  ExpectMatches(**m, model, 10);
  ASSERT_TRUE((*m)->Delete(3).ok());
  model.clear();
  ExpectMatches(**m, model, 10);
  // Ascending then descending inserts into one chain; delete head, middle and tail positions.
  for (uint64_t k = 0; k < 20; k++) {
    ASSERT_TRUE((*m)->Put(k, TestValue(k, 1, k)).ok());
    model[k] = TestValue(k, 1, k);
  }
  for (uint64_t k = 40; k > 20; k--) {
    ASSERT_TRUE((*m)->Put(k, TestValue(k, 2, 3)).ok());
    model[k] = TestValue(k, 2, 3);
  }
  ExpectMatches(**m, model, 45);
  for (uint64_t k : {21ull, 0ull, 10ull, 40ull, 19ull}) {  // head (last pushed), tail, middle...
    ASSERT_TRUE((*m)->Delete(k).ok()) << k;
    model.erase(k);
    ExpectMatches(**m, model, 45);
  }
  while (!model.empty()) {
    ASSERT_TRUE((*m)->Delete(model.begin()->first).ok());
    model.erase(model.begin());
  }
  ExpectMatches(**m, model, 45);
  // Empty value and update to a shorter value.
  ASSERT_TRUE((*m)->Put(7, {}).ok());
  ASSERT_TRUE((*m)->Put(8, TestValue(8, 0, 64)).ok());
  ASSERT_TRUE((*m)->Put(8, TestValue(8, 1, 2)).ok());
  model[7] = {};
  model[8] = TestValue(8, 1, 2);
  ExpectMatches(**m, model, 10);
}

TEST_F(HashTableTest, LargeValues) {
  auto s = OpenSession(11, Level::kRc);
  Options o;
  o.value_size = 8192;
  o.param = 16;
  auto m = OpenHash(*s, "big", o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::map<uint64_t, Value> model;
  for (uint64_t k = 0; k < 6; k++) {
    model[k] = TestValue(k, 0, 8192 - k * 1000);
    ASSERT_TRUE((*m)->Put(k, model[k]).ok());
  }
  ASSERT_TRUE((*m)->Put(2, TestValue(2, 9, 8192)).ok());
  model[2] = TestValue(2, 9, 8192);
  ASSERT_TRUE((*m)->Delete(4).ok());
  model.erase(4);
  ExpectMatches(**m, model, 8);
  EXPECT_EQ((*m)->Put(1, TestValue(1, 1, 8193)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*m)->Sync().ok());
  auto s2 = OpenSession(12, Level::kRc);
  auto r = OpenHash(*s2, "big", ReaderOptions());
  ASSERT_TRUE(r.ok());
  ExpectMatches(**r, model, 8);
}

TEST_F(HashTableTest, BadInput) {
  auto s = OpenSession(13, Level::kRcb);
  Options o;
  o.value_size = 16;
  o.param = 8;
  auto m = OpenHash(*s, "h", o);
  ASSERT_TRUE(m.ok());
  Status big = (*m)->Put(1, TestValue(1, 1, 17));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("value_size"), std::string::npos) << big.ToString();
  EXPECT_EQ((*m)->Delete(5).code(), StatusCode::kNotFound);
  Value v;
  EXPECT_EQ((*m)->Get(5, &v).code(), StatusCode::kNotFound);
  std::vector<KeyValue> out;
  EXPECT_EQ((*m)->Scan(0, 1, &out).code(), StatusCode::kNotSupported);
  Options bad;
  bad.param = 100;  // not a power of two
  EXPECT_EQ(OpenHash(*s, "h2", bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenHash(*s, "missing", ReaderOptions()).status().code(), StatusCode::kNotFound);
  // The stored shape wins over a different requested one.
  m->reset();
  Options other;
  other.value_size = 1000;
  other.param = 1024;
  auto again = OpenHash(*s, "h", other);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->value_size(), 16u);
  EXPECT_TRUE((*again)->Verify().ok());
}

// §8.2: with optimize, cold Gets fetch the bucket word's and the item's small pages, not 4 KiB
// pages; hot items then hit the cache.
TEST_F(HashTableTest, ItemGranularityCachingFetchesLessThanPages) {
  uint64_t fetched[2];
  for (int opt = 0; opt < 2; opt++) {
    const std::string name = std::string("g") + std::to_string(opt);
    Options o;
    o.optimize = opt == 1;
    o.param = 4096;
    {
      auto s = OpenSession(20 + opt, Level::kRcb);
      auto m = OpenHash(*s, name, o);
      ASSERT_TRUE(m.ok());
      for (uint64_t k = 0; k < 1000; k++) ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 64)).ok());
    }
    auto s = OpenSession(20 + opt, Level::kRc);
    auto m = OpenHash(*s, name, o);  // a fresh writer: the cache is empty
    ASSERT_TRUE(m.ok());
    const auto before = s->counters();
    for (uint64_t k = 0; k < 1000; k += 37) {
      Value v;
      ASSERT_TRUE((*m)->Get(k, &v).ok());
      ASSERT_EQ(v, TestValue(k, 0, 64));
    }
    fetched[opt] = s->counters().remote_read_bytes - before.remote_read_bytes;
    // Hot items: the second round is served by the cache.
    const auto mid = s->counters();
    for (uint64_t k = 0; k < 1000; k += 37) {
      Value v;
      ASSERT_TRUE((*m)->Get(k, &v).ok());
    }
    EXPECT_EQ(s->counters().cache_misses, mid.cache_misses) << "optimize " << opt;
  }
  EXPECT_LT(fetched[1] * 4, fetched[0]) << fetched[1] << " vs " << fetched[0];
}

class FakeFetcher : public frontend::OpLogFetcher {
 public:
  std::vector<frontend::RecoveredOp> ops;
  Result<std::vector<frontend::RecoveredOp>> Fetch(uint64_t, uint64_t) override { return ops; }
};

TEST_F(HashTableTest, ReplayReexecutesLoggedPutsAndDeletes) {
  FakeFetcher f;
  Options o;
  o.param = 64;
  {
    auto s = OpenSession(30, Level::kRcb);
    auto m = OpenHash(*s, "rep", o);
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
  auto m = OpenHash(*s, "rep", o);
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
  auto r = OpenHash(*s2, "rep", ReaderOptions());
  ASSERT_TRUE(r.ok());
  ExpectMatches(**r, model, 20);
}

// The classic peer-system bug: a reader must never miss a stable key while the writer changes
// other keys (of the same chains: few buckets).
TEST_F(HashTableTest, ReaderNeverMissesStableKeysWhileWriterRuns) {
  for (Level level : {Level::kRcb, Level::kR}) {
    const std::string name = std::string("c") + frontend::LevelName(level);
    Options o;
    o.param = 16;
    o.value_size = 32;
    auto ws = OpenSession(40, level);
    auto w = OpenHash(*ws, name, o);
    ASSERT_TRUE(w.ok());
    for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE((*w)->Put(k, TestValue(k, 0, 32)).ok());
    ASSERT_TRUE((*w)->Sync().ok());
    auto rs = OpenSession(41, level);
    auto r = OpenHash(*rs, name, ReaderOptions());
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
