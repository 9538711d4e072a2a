// B+tree: model-checked random operations at every level (with session reopen and back-end
// restart), shapes and edge cases, replay, the §8 level threshold, and a reader under concurrent
// updates.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "backend/backend.h"
#include "structures/base.h"
#include "structures/kinds.h"
#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::StructuresTest;
using testing::TestValue;

// Fan-out 4 unless the test says otherwise: splits and leaf removals happen all the time.
Result<std::unique_ptr<Map>> OpenT(frontend::Session& s, const std::string& name, Options o = {}) {
  if (o.param == 0) o.param = 4;
  return internal::OpenBPlusTree(s, name, o);
}

uint64_t CountOf(Map& m) {
  auto n = m.Count();
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  return n.ok() ? *n : ~0ull;
}

void ExpectMatchesModel(Map& m, const std::map<uint64_t, Value>& model, uint64_t key_range) {
  for (uint64_t k = 0; k < key_range; k++) {
    Value v;
    Status st = m.Get(k, &v);
    auto it = model.find(k);
    if (it == model.end()) {
      EXPECT_EQ(st.code(), StatusCode::kNotFound) << "key " << k << ": " << st.ToString();
    } else {
      ASSERT_TRUE(st.ok()) << "key " << k << ": " << st.ToString();
      EXPECT_EQ(v, it->second) << "key " << k;
    }
  }
  std::vector<KeyValue> all;
  ASSERT_TRUE(m.Scan(0, model.size() + 10, &all).ok());
  ASSERT_EQ(all.size(), model.size());
  size_t i = 0;
  for (const auto& [k, v] : model) {
    EXPECT_EQ(all[i].first, k);
    EXPECT_EQ(all[i].second, v);
    i++;
  }
  auto n = m.Count();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, model.size());
  Status vs = m.Verify();
  EXPECT_TRUE(vs.ok()) << vs.ToString();
}

class BPlusTreeTest : public StructuresTest {};

TEST_F(BPlusTreeTest, EmptySingleAndDeleteRoot) {
  auto s = OpenSession(10, Level::kRcb);
  auto m = OpenT(*s, "t");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Map& t = **m;
  Value v;
  EXPECT_EQ(t.Get(1, &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(t.Delete(1).code(), StatusCode::kNotFound);
  std::vector<KeyValue> out{{1, {}}};
  ASSERT_TRUE(t.Scan(0, 10, &out).ok());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(CountOf(t), 0u);
  EXPECT_TRUE(t.Verify().ok());
  // Single element, then empty again.
  ASSERT_TRUE(t.Put(5, TestValue(5, 0, 10)).ok());
  ASSERT_TRUE(t.Get(5, &v).ok());
  EXPECT_EQ(v, TestValue(5, 0, 10));
  ASSERT_TRUE(t.Put(5, {}).ok());  // empty value
  ASSERT_TRUE(t.Get(5, &v).ok());
  EXPECT_TRUE(v.empty());
  ASSERT_TRUE(t.Delete(5).ok());
  EXPECT_EQ(t.Get(5, &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(CountOf(t), 0u);
  EXPECT_TRUE(t.Verify().ok());
  // Delete the root with two children (successor copy), with one child, as a leaf.
  std::map<uint64_t, Value> model;
  for (uint64_t k : {50, 25, 75, 60, 90, 55, 10, 30}) {
    ASSERT_TRUE(t.Put(k, TestValue(k, 1, 20)).ok());
    model[k] = TestValue(k, 1, 20);
  }
  for (uint64_t k : {50, 55, 60, 25, 75, 90, 10, 30}) {
    ASSERT_TRUE(t.Delete(k).ok()) << k;
    model.erase(k);
    ASSERT_TRUE(t.Verify().ok()) << "after deleting " << k << ": " << t.Verify().ToString();
    ExpectMatchesModel(t, model, 100);
  }
}

TEST_F(BPlusTreeTest, AscendingDescendingAndRandomOrders) {
  auto s = OpenSession(11, Level::kRc);
  Options o;
  o.value_size = 16;
  auto m = OpenT(*s, "t", o);
  ASSERT_TRUE(m.ok());
  Map& t = **m;
  std::map<uint64_t, Value> model;
  for (uint64_t k = 0; k < 200; k++) {  // ascending: a 200-deep right spine
    ASSERT_TRUE(t.Put(k, TestValue(k, 0, 16)).ok());
    model[k] = TestValue(k, 0, 16);
  }
  ExpectMatchesModel(t, model, 210);
  for (uint64_t k = 0; k < 200; k++) {
    ASSERT_TRUE(t.Delete(k).ok());
    model.erase(k);
  }
  ExpectMatchesModel(t, model, 210);
  for (uint64_t k = 200; k-- > 0;) {  // descending: a left spine
    ASSERT_TRUE(t.Put(k, TestValue(k, 1, 8)).ok());
    model[k] = TestValue(k, 1, 8);
  }
  ExpectMatchesModel(t, model, 210);
  std::vector<uint64_t> keys;
  for (const auto& kv : model) keys.push_back(kv.first);
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(3));
  for (size_t i = 0; i < keys.size(); i++) {
    ASSERT_TRUE(t.Delete(keys[i]).ok());
    model.erase(keys[i]);
    if (i % 100 == 0) ExpectMatchesModel(t, model, 210);
  }
  ExpectMatchesModel(t, model, 210);
}

// Underfull leaves borrow from or merge with a sibling (deletes once never merged, so a tree
// thinned by deletes kept its leaves). Fan-out 8 (rebalanced below 2 keys) and 16 (below 4), with
// inline and out-of-line values; 90 % of 600 keys deleted in random order against a model, Verify
// every 40 deletes, then every remaining key read back and a full scan compared. A tree that
// never merges keeps about one leaf per 1-2 remaining keys here; with merging every leaf but one
// per parent holds at least F/4 keys.
TEST_F(BPlusTreeTest, UnderfullLeavesBorrowAndMerge) {
  auto s = OpenSession(9, Level::kRcb);
  ASSERT_TRUE(s);
  for (const auto& [fanout, vsize] : {std::pair<uint64_t, uint32_t>{8, 24}, {16, 24}, {8, 300}}) {
    SCOPED_TRACE("fan-out " + std::to_string(fanout) + ", value " + std::to_string(vsize));
    Options o;
    o.param = fanout;
    o.value_size = vsize;
    auto m = OpenT(*s, "thin" + std::to_string(fanout) + "-" + std::to_string(vsize), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Map& t = **m;
    std::map<uint64_t, Value> model;
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 600; k++) {
      Value v = TestValue(k, fanout, 1 + k % vsize);
      ASSERT_TRUE(t.Put(k * 3, v).ok()) << k;
      model[k * 3] = v;
      keys.push_back(k * 3);
    }
    ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
    auto full = internal::BPlusTreeLeafCount(&t);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    std::mt19937_64 rng(fanout * 1000 + vsize);
    std::shuffle(keys.begin(), keys.end(), rng);
    for (size_t i = 0; i < 540; i++) {
      ASSERT_TRUE(t.Delete(keys[i]).ok()) << keys[i];
      model.erase(keys[i]);
      if (i % 40 == 39) {
        ASSERT_TRUE(t.Verify().ok()) << "after " << i + 1 << " deletes: " << t.Verify().ToString();
      }
    }
    ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
    EXPECT_EQ(t.Count().value(), model.size());
    for (const auto& [k, v] : model) {
      Value got;
      ASSERT_TRUE(t.Get(k, &got).ok()) << k;
      EXPECT_EQ(got, v) << k;
    }
    std::vector<KeyValue> out;
    ASSERT_TRUE(t.Scan(0, 10000, &out).ok());
    ASSERT_EQ(out.size(), model.size());
    auto it = model.begin();
    for (const auto& kv : out) {
      EXPECT_EQ(kv.first, it->first);
      EXPECT_EQ(kv.second, it->second);
      ++it;
    }
    auto thin = internal::BPlusTreeLeafCount(&t);
    ASSERT_TRUE(thin.ok()) << thin.status().ToString();
    // 60 keys left. A rebalance leaves at least 2 keys per leaf (1 + the sibling's >= 1): at most
    // 30 leaves. Measured: 28, 10, 27 leaves (from 149, 74, 149); with the rebalance disabled
    // 56, 44, 48 — the test fails.
    EXPECT_LE(*thin, model.size() / 2)
        << *thin << " leaves for " << model.size() << " keys (" << *full << " before the deletes)";
    // And the thinned tree still takes inserts (splits after merges).
    for (uint64_t k = 0; k < 200; k++) ASSERT_TRUE(t.Put(k * 3 + 1, TestValue(k, 9, 8)).ok()) << k;
    ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
    EXPECT_EQ(t.Count().value(), model.size() + 200);
  }
}

TEST_F(BPlusTreeTest, LargeValues) {
  auto s = OpenSession(12, Level::kRcb);
  Options o;
  o.value_size = 8192;
  auto m = OpenT(*s, "big", o);
  ASSERT_TRUE(m.ok());
  Map& t = **m;
  std::map<uint64_t, Value> model;
  for (uint64_t k : {4, 2, 6, 1, 3, 5, 7}) {
    model[k] = TestValue(k, 0, 8192 - k * 100);
    ASSERT_TRUE(t.Put(k, model[k]).ok());
  }
  model[4] = TestValue(4, 1, 8192);
  ASSERT_TRUE(t.Put(4, model[4]).ok());
  ASSERT_TRUE(t.Delete(4).ok());  // two children: copies the successor's 7.7 KB value
  model.erase(4);
  ExpectMatchesModel(t, model, 10);
  EXPECT_EQ(t.Put(9, TestValue(9, 0, 8193)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(t.Sync().ok());
  auto s2 = OpenSession(13, Level::kRcb);
  Options ro;
  ro.access = Access::kReader;
  auto r = OpenT(*s2, "big", ro);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->value_size(), 8192u);
  ExpectMatchesModel(**r, model, 10);
}

TEST_F(BPlusTreeTest, BadInput) {
  auto s = OpenSession(14, Level::kRc);
  Options o;
  o.value_size = 16;
  auto m = OpenT(*s, "t", o);
  ASSERT_TRUE(m.ok());
  const uint64_t logs = s->counters().op_logs;
  Status big = (*m)->Put(1, TestValue(1, 1, 17));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("value_size"), std::string::npos);
  EXPECT_EQ((*m)->Delete(3).code(), StatusCode::kNotFound);
  EXPECT_EQ(s->counters().op_logs, logs);  // failed validation writes no op log
  std::vector<KeyValue> out;
  EXPECT_TRUE((*m)->Scan(0, 0, &out).ok());
  EXPECT_EQ(internal::OpenBst(*s, "t", Options{}).status().code(), StatusCode::kFailedPrecondition);
  Options ro;
  ro.access = Access::kReader;
  EXPECT_EQ(OpenT(*s, "missing", ro).status().code(), StatusCode::kNotFound);
  for (uint64_t f : {1, 3, 257, 1000}) {
    Options bad;
    bad.param = f;
    EXPECT_EQ(internal::OpenBPlusTree(*s, "f" + std::to_string(f), bad).status().code(),
              StatusCode::kInvalidArgument)
        << f;
  }
  // The stored fan-out wins over a different requested one.
  m->reset();
  Options other;
  other.param = 64;
  auto again = OpenT(*s, "t", other);
  ASSERT_TRUE(again.ok());
  for (uint64_t k = 0; k < 40; k++) ASSERT_TRUE((*again)->Put(k, TestValue(k, 0, 8)).ok());
  EXPECT_TRUE((*again)->Verify().ok());
}

TEST_F(BPlusTreeTest, DefaultFanOutAndOutOfLineValuesForWideLeaves) {
  auto s = OpenSession(15, Level::kRcb);
  for (uint64_t f : {0, 256}) {  // 0: default 32, inline slots; 256 x 72 B > 16 KiB: out of line
    Options o;
    o.param = f;
    auto m = internal::OpenBPlusTree(*s, "w" + std::to_string(f), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::map<uint64_t, Value> model;
    std::mt19937_64 rng(f);
    for (int i = 0; i < 3000; i++) {
      const uint64_t k = rng() % 2000;
      if (rng() % 4 == 0) {
        Status st = (*m)->Delete(k);
        ASSERT_EQ(st.ok(), model.erase(k) == 1) << st.ToString();
      } else {
        model[k] = TestValue(k, i, rng() % 65);
        ASSERT_TRUE((*m)->Put(k, model[k]).ok());
      }
    }
    ExpectMatchesModel(**m, model, 2010);
  }
}

class FakeFetcher : public frontend::OpLogFetcher {
 public:
  Result<std::vector<frontend::RecoveredOp>> Fetch(uint64_t, uint64_t) override { return ops; }
  std::vector<frontend::RecoveredOp> ops;
};

TEST_F(BPlusTreeTest, ReplayReexecutesPutsAndDeletes) {
  {
    auto s = OpenSession(20, Level::kRcb);
    auto m = OpenT(*s, "t");
    ASSERT_TRUE(m.ok());
    for (uint64_t k = 1; k <= 5; k++) ASSERT_TRUE((*m)->Put(k * 10, TestValue(k, 0, 8)).ok());
  }
  auto s = OpenSession(20, Level::kRcb);
  RegisterReplays(*s);
  auto m = OpenT(*s, "t");
  ASSERT_TRUE(m.ok());
  const uint64_t opn = s->recovered_opn();
  const uint32_t id = (*m)->structure().id;
  FakeFetcher f;
  auto op = [&](uint64_t seq, uint16_t type, uint64_t key, const Value& v) {
    frontend::RecoveredOp o;
    o.op_seq = opn + seq;
    o.structure_id = id;
    o.op_type = type;
    o.payload = internal::EncodeKeyValue(key, v);
    return o;
  };
  f.ops = {op(1, 1, 15, TestValue(15, 1, 30)), op(2, 2, 20, {}), op(3, 1, 30, TestValue(30, 2, 5)),
           op(4, 2, 999, {}) /* missing: nothing to redo */, op(5, 2, 10, {})};
  ASSERT_TRUE(s->Replay(&f).ok());
  std::map<uint64_t, Value> model{{15, TestValue(15, 1, 30)},
                                  {30, TestValue(30, 2, 5)},
                                  {40, TestValue(4, 0, 8)},
                                  {50, TestValue(5, 0, 8)}};
  ExpectMatchesModel(**m, model, 60);
}

TEST_F(BPlusTreeTest, LevelThresholdReadsDeepNodesAroundTheCache) {
  auto s = OpenSession(30, Level::kRc);
  {
    auto m = OpenT(*s, "deep");
    ASSERT_TRUE(m.ok());
    for (uint64_t k = 0; k < 1000; k++) ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 8)).ok());
  }
  uint64_t accesses[2];
  for (int opt = 0; opt < 2; opt++) {
    Options o;
    o.optimize = opt == 1;
    auto m = OpenT(*s, "deep", o);
    ASSERT_TRUE(m.ok());
    const auto before = s->counters();
    Value v;
    ASSERT_TRUE((*m)->Get(500, &v).ok());
    const auto after = s->counters();
    accesses[opt] =
        (after.cache_hits + after.cache_misses) - (before.cache_hits + before.cache_misses);
  }
  // Fan-out 4, 1000 ascending keys (half-full leaves): height >= 6. Plain: every level and the
  // value through the cache; threshold 3: only the three top levels.
  EXPECT_GE(accesses[0], 7u);
  EXPECT_LE(accesses[1], 3u);
}

// The reader of stable keys never sees them missing while the writer inserts and deletes keys
// around them (leaf and internal splits next to them, empty leaves unlinked next to them).
// key_size != 0: the keys are byte strings that order as their numbers (key_size - 8 NUL bytes,
// then the number in 8 decimal digits), so the same checks apply.
void RunConcurrent(StructuresTest* t,
                   const std::function<std::unique_ptr<frontend::Session>(uint64_t)>& open,
                   const std::string& name, uint32_t key_size = 0) {
  auto K = [&](uint64_t n) -> Key {
    if (key_size == 0) return Key(n);
    std::string d = std::to_string(n);
    return Key(std::string(key_size - 8, '\0') + std::string(8 - d.size(), '0') + d);
  };
  auto N = [&](const Key& k) -> uint64_t {
    if (key_size == 0) return k.u64();
    return std::stoull(std::string(k.bytes().substr(k.bytes().size() - 8)));
  };
  auto ws = open(40);
  Options wo;
  wo.key_size = key_size;
  auto w = OpenT(*ws, name, wo);
  ASSERT_TRUE(w.ok());
  std::vector<uint64_t> stable;
  for (uint64_t i = 0; i < 100; i++) stable.push_back(i * 10);
  std::mt19937_64 shuffle_rng(5);
  std::vector<uint64_t> order = stable;
  std::shuffle(order.begin(), order.end(), shuffle_rng);
  for (uint64_t k : order) ASSERT_TRUE((*w)->Put(K(k), TestValue(k, 0, 16)).ok());
  ASSERT_TRUE((*w)->Sync().ok());
  auto rs = open(41);
  Options ro;
  ro.access = Access::kReader;
  ro.key_size = key_size;
  auto r = OpenT(*rs, name, ro);
  ASSERT_TRUE(r.ok());

  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0};
  std::string failure;  // written by the reader before `failed`
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> timeouts{0};
  std::thread reader([&] {
    std::mt19937_64 rng(9);
    while (!done.load() && !failed.load()) {
      const uint64_t k = stable[rng() % stable.size()];
      Value v;
      Status st = (*r)->Get(K(k), &v);
      if (st.code() == StatusCode::kTimedOut) {
        timeouts++;  // seqlock liveness under a fast writer on a loaded machine, not a wrong answer
      } else if (!st.ok()) {
        failure = "get " + std::to_string(k) + ": " + st.ToString();
      } else if (v != TestValue(k, 0, 16)) {
        failure = "get " + std::to_string(k) + ": wrong value";
      }
      if (reads.fetch_add(1) % 8 == 0) {
        // A short scan from a stable key: every stable key up to its last key is in it.
        const uint64_t from = stable[rng() % stable.size()];
        std::vector<KeyValue> got;
        Status ss = (*r)->Scan(K(from), 30, &got);
        if (ss.code() == StatusCode::kTimedOut) {
          timeouts++;
        } else if (!ss.ok()) {
          failure = "scan: " + ss.ToString();
        } else if (got.empty() || got[0].first != K(from)) {
          failure = "scan from " + std::to_string(from) + " misses it";
        } else {
          size_t found = 0;
          for (size_t i = 0; i < got.size(); i++) {
            if (i > 0 && got[i - 1].first >= got[i].first) failure = "scan out of order";
            if (N(got[i].first) % 10 == 0 && N(got[i].first) < 1000) found++;
          }
          const uint64_t last = std::min<uint64_t>(N(got.back().first), 990);
          if (found != (last - from) / 10 + 1)
            failure = "scan from " + std::to_string(from) + " missed stable keys";
        }
      }
      if (!failure.empty()) failed = true;
    }
  });
  std::mt19937_64 rng(7);
  std::set<uint64_t> present;
  for (int i = 0; i < 2000 && !failed.load(); i++) {
    uint64_t k = rng() % 2 ? 1000 + rng() % 1000 : rng() % 1000;
    if (k < 1000 && k % 10 == 0) k++;
    if (present.count(k) && rng() % 3 != 0) {
      ASSERT_TRUE((*w)->Delete(K(k)).ok());
      present.erase(k);
    } else {
      ASSERT_TRUE((*w)->Put(K(k), TestValue(k, i, 16)).ok());
      present.insert(k);
    }
    if (i % 64 == 0) {
      ASSERT_TRUE((*w)->Sync().ok());
    }
  }
  ASSERT_TRUE((*w)->Sync().ok());
  // Let the reader observe the final state a few times too.
  const uint64_t until = reads.load() + 50;
  while (reads.load() < until && !failed.load()) std::this_thread::yield();
  done = true;
  reader.join();
  EXPECT_TRUE(failure.empty()) << failure;
  EXPECT_GT(reads.load(), 0u);
  ASSERT_TRUE((*w)->Verify().ok());
  auto n = (*r)->Count();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, present.size() + stable.size());
  (void)t;
}

TEST_F(BPlusTreeTest, ReaderNeverMissesStableKeysUnderConcurrentUpdates) {
  RunConcurrent(
      this, [&](uint64_t fe) { return OpenSession(fe, Level::kRcb); }, "conc");
}

TEST_F(BPlusTreeTest, ReaderNeverMissesStableKeysUnderConcurrentUpdatesAtR) {
  RunConcurrent(
      this, [&](uint64_t fe) { return OpenSession(fe, Level::kR); }, "conc_r");
}

// 64-byte keys: a reader may read a key slot while it is rewritten (a torn length or bytes) and
// must retry, never answer from it.
TEST_F(BPlusTreeTest, ReaderNeverMissesStableByteKeysUnderConcurrentUpdates) {
  RunConcurrent(
      this, [&](uint64_t fe) { return OpenSession(fe, Level::kRcb); }, "conc_bytes", 64);
}

// ---- byte-string keys (the conformance suite runs the random model; these are B+tree shapes) ----

// The i-th byte key of at most `max` bytes (max >= 16; injective): long shared prefixes, so
// neighbours and separators differ only in their last bytes, NUL and 0xFF runs, and short keys.
Key ByteKey(uint64_t i, uint32_t max) {
  std::string prefix;
  switch (i % 4) {
    case 0:
      prefix.assign(max - 12, 'p');
      break;
    case 1:
      prefix.assign(max / 2, '\0');
      break;
    case 2:
      prefix.assign(max - 12, '\xff');
      break;
    default:
      break;  // 1..7 bytes
  }
  return Key(prefix + std::to_string(i));
}

void ExpectMatchesByteModel(Map& m, const std::map<Key, Value>& model) {
  for (const auto& [k, v] : model) {
    Value got;
    Status st = m.Get(k, &got);
    ASSERT_TRUE(st.ok()) << k << ": " << st.ToString();
    EXPECT_EQ(got, v) << k;
  }
  Value none;
  EXPECT_EQ(m.Get(Key(std::string(3, '\x01')), &none).code(), StatusCode::kNotFound);
  std::vector<KeyValue> all;
  ASSERT_TRUE(m.Scan(Key(std::string()), model.size() + 10, &all).ok());
  EXPECT_EQ(all, std::vector<KeyValue>(model.begin(), model.end()));
  if (!model.empty()) {
    // From the middle key, and from a string between keys (it plus a NUL byte).
    auto mid = std::next(model.begin(), static_cast<ptrdiff_t>(model.size() / 2));
    std::vector<KeyValue> tail;
    ASSERT_TRUE(m.Scan(mid->first, 5, &tail).ok());
    EXPECT_EQ(tail,
              std::vector<KeyValue>(
                  mid, std::next(mid, std::min<ptrdiff_t>(5, std::distance(mid, model.end())))));
    const Key after(std::string(mid->first.bytes()) + std::string(1, '\0'));
    ASSERT_TRUE(m.Scan(after, 1, &tail).ok());
    auto want = model.upper_bound(mid->first);
    EXPECT_EQ(tail.size(), want == model.end() ? 0u : 1u);
    if (!tail.empty()) {
      EXPECT_EQ(tail[0].first, want->first);
    }
  }
  EXPECT_EQ(CountOf(m), model.size());
  Status vs = m.Verify();
  EXPECT_TRUE(vs.ok()) << vs.ToString();
}

// Keys of 256 bytes at fan-out 4 and 8: every few inserts split a leaf and internal nodes
// (separators are long keys differing in their last bytes); deletes then empty and remove leaves
// (F = 4: a quarter of a leaf is one key) or borrow and merge (F = 8), and the thinned tree is
// read back by a reader of another session and takes inserts again.
TEST_F(BPlusTreeTest, ByteKeysSplitAndMergeAtSmallFanOuts) {
  auto s = OpenSession(40, Level::kRcb);
  auto s2 = OpenSession(41, Level::kRc);
  for (uint64_t f : {4, 8}) {
    SCOPED_TRACE("fan-out " + std::to_string(f));
    const std::string name = "bytes" + std::to_string(f);
    Options o;
    o.key_size = kMaxKeySize;
    o.value_size = 24;
    o.param = f;
    auto m = OpenT(*s, name, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Map& t = **m;
    EXPECT_EQ(t.key_size(), kMaxKeySize);
    std::map<Key, Value> model;
    std::vector<uint64_t> ids(400);
    for (uint64_t i = 0; i < ids.size(); i++) ids[i] = i;
    std::mt19937_64 rng(40 + f);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (uint64_t i : ids) {
      model[ByteKey(i, kMaxKeySize)] = TestValue(i, 0, 1 + i % 24);
      ASSERT_TRUE(t.Put(ByteKey(i, kMaxKeySize), model[ByteKey(i, kMaxKeySize)]).ok()) << i;
    }
    ExpectMatchesByteModel(t, model);
    auto full = internal::BPlusTreeLeafCount(&t);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    EXPECT_GE(*full, model.size() / f);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (size_t i = 0; i < 360; i++) {
      ASSERT_TRUE(t.Delete(ByteKey(ids[i], kMaxKeySize)).ok()) << ids[i];
      model.erase(ByteKey(ids[i], kMaxKeySize));
      if (i % 60 == 59) {
        ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
      }
    }
    ExpectMatchesByteModel(t, model);
    auto thin = internal::BPlusTreeLeafCount(&t);
    ASSERT_TRUE(thin.ok());
    // 40 keys left; with merging (F = 8) at least 2 per leaf.
    EXPECT_LE(*thin, f == 8 ? model.size() / 2 : model.size())
        << *thin << " leaves (from " << *full << ")";
    EXPECT_EQ(t.Delete(ByteKey(ids[0], kMaxKeySize)).code(), StatusCode::kNotFound);
    for (uint64_t i = 1000; i < 1100; i++) {
      model[ByteKey(i, kMaxKeySize)] = TestValue(i, 1, 8);
      ASSERT_TRUE(t.Put(ByteKey(i, kMaxKeySize), model[ByteKey(i, kMaxKeySize)]).ok()) << i;
    }
    ExpectMatchesByteModel(t, model);
    ASSERT_TRUE(t.Sync().ok());
    Options ro;
    ro.access = Access::kReader;
    auto r = OpenT(*s2, name, ro);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->key_size(), kMaxKeySize);
    ExpectMatchesByteModel(**r, model);
  }
}

// 256-byte keys at the default fan-out (32: 8.4 KiB of keys per node) and at fan-out 4, through
// PutBatch (vector runs cut to the write budget, leaves cut into new leaves, new levels) mixed
// with Puts and Deletes; then the back-end restarts and the tree is reopened.
TEST_F(BPlusTreeTest, ByteKeysPutBatchAtDefaultFanOutAndFanOut4) {
  for (uint64_t f : {0, 4}) {
    SCOPED_TRACE("fan-out " + std::to_string(f));
    const std::string name = "batch" + std::to_string(f);
    std::map<Key, Value> model;
    {
      auto s = OpenSession(42, Level::kRcb);
      Options o;
      o.key_size = kMaxKeySize;
      o.param = f;
      auto m = internal::OpenBPlusTree(*s, name, o);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      EXPECT_EQ((*m)->structure().params[1], f == 0 ? 32u : f);
      std::mt19937_64 rng(f + 42);
      for (int round = 0; round < 4; round++) {
        std::vector<KeyValue> kvs;
        for (int i = 0; i < 500; i++) {
          const uint64_t id = rng() % 3000;
          kvs.emplace_back(ByteKey(id, kMaxKeySize), TestValue(id, round, 1 + rng() % 64));
        }
        Status st = (*m)->PutBatch(kvs);
        ASSERT_TRUE(st.ok()) << st.ToString();
        for (const auto& kv : kvs) model[kv.first] = kv.second;
        for (int i = 0; i < 50; i++) {
          const uint64_t id = rng() % 3000;
          const Key k = ByteKey(id, kMaxKeySize);
          if (i % 2 == 0) {
            Status ds = (*m)->Delete(k);
            ASSERT_EQ(ds.ok(), model.erase(k) == 1) << ds.ToString();
          } else {
            model[k] = TestValue(id, 9, 16);
            ASSERT_TRUE((*m)->Put(k, model[k]).ok());
          }
        }
        ASSERT_TRUE((*m)->Verify().ok()) << (*m)->Verify().ToString();
      }
      ExpectMatchesByteModel(**m, model);
    }
    RestartBackend();
    auto s = OpenSession(42, Level::kRc);
    Options o;
    o.key_size = kMaxKeySize;
    auto m = internal::OpenBPlusTree(*s, name, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ExpectMatchesByteModel(**m, model);
  }
}

// The fan-out is the user's, within 16 KiB of keys per node: at key_size 256 (264-byte slots) at
// most 62; integer keys keep the whole range.
TEST_F(BPlusTreeTest, ByteKeyFanOutLimit) {
  auto s = OpenSession(43, Level::kRc);
  Options o;
  o.key_size = kMaxKeySize;
  o.param = 63;
  Status big = internal::OpenBPlusTree(*s, "f63", o).status();
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("at most 62"), std::string::npos) << big.ToString();
  o.param = 62;
  auto ok = internal::OpenBPlusTree(*s, "f62", o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  for (uint64_t i = 0; i < 200; i++)
    ASSERT_TRUE((*ok)->Put(ByteKey(i, 256), TestValue(i, 0, 8)).ok());
  EXPECT_TRUE((*ok)->Verify().ok());
  o.key_size = 0;
  o.param = 256;
  EXPECT_TRUE(internal::OpenBPlusTree(*s, "i256", o).ok());
  // Keys of the wrong kind or length are refused before any op log.
  const uint64_t logs = s->counters().op_logs;
  EXPECT_EQ((*ok)->Put(7, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*ok)->Put(Key(std::string(257, 'x')), {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*ok)->Put(Key(std::string()), {}).code(), StatusCode::kInvalidArgument);
  const std::vector<KeyValue> bad{{Key("a"), {}}, {Key(std::string()), {}}};
  EXPECT_EQ((*ok)->PutBatch(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->counters().op_logs, logs);
}

TEST_F(BPlusTreeTest, ReplayReexecutesByteKeyPutsDeletesAndVectors) {
  Options o;
  o.key_size = 40;
  std::map<Key, Value> model;
  {
    auto s = OpenSession(44, Level::kRcb);
    auto m = OpenT(*s, "rb", o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (uint64_t i = 0; i < 20; i++) {
      model[ByteKey(i, 40)] = TestValue(i, 0, 8);
      ASSERT_TRUE((*m)->Put(ByteKey(i, 40), model[ByteKey(i, 40)]).ok());
    }
  }
  auto s = OpenSession(44, Level::kRcb);
  RegisterReplays(*s);
  auto m = OpenT(*s, "rb", o);
  ASSERT_TRUE(m.ok());
  const uint64_t opn = s->recovered_opn();
  const uint32_t id = (*m)->structure().id;
  FakeFetcher f;
  auto op = [&](uint64_t seq, uint16_t type, std::vector<uint8_t> payload) {
    frontend::RecoveredOp r;
    r.op_seq = opn + seq;
    r.structure_id = id;
    r.op_type = type;
    r.payload = std::move(payload);
    return r;
  };
  std::vector<KeyValue> vec;
  for (uint64_t i = 100; i < 130; i++) vec.emplace_back(ByteKey(i, 40), TestValue(i, 2, 12));
  vec.emplace_back(ByteKey(3, 40), TestValue(3, 3, 5));  // an update inside the vector
  vec = internal::SortedUnique(vec);
  f.ops = {op(1, 1, internal::EncodeKeyValue(ByteKey(50, 40), TestValue(50, 1, 30))),
           op(2, 2, internal::EncodeKeyValue(ByteKey(4, 40), {})),
           op(3, 2, internal::EncodeKeyValue(Key("absent"), {})),  // nothing to redo
           op(4, internal::kOpPutVector, internal::EncodeVector(vec)),
           op(5, 2, internal::EncodeKeyValue(ByteKey(5, 40), {}))};
  ASSERT_TRUE(s->Replay(&f).ok());
  model[ByteKey(50, 40)] = TestValue(50, 1, 30);
  model.erase(ByteKey(4, 40));
  for (const auto& kv : vec) model[kv.first] = kv.second;
  model.erase(ByteKey(5, 40));
  ExpectMatchesByteModel(**m, model);
  // An integer key in a byte-key op log is corruption, not a silent mismatch.
  f.ops = {op(6, 1, internal::EncodeKeyValue(Key(7), TestValue(7, 0, 4)))};
  EXPECT_FALSE(s->Replay(&f).ok());
}

// The integer-key layout is the one before byte keys existed, byte for byte: F = 4, 8-byte keys
// at +16, values at +16 + 8F; a byte-key leaf puts its slots (u16 length | bytes, padded to 8)
// there instead and its values after F of them. And the shape is unchanged: 100 ascending keys
// at F = 4 make 49 leaves (a full leaf splits into 2 + 3 and ascending inserts go right).
TEST_F(BPlusTreeTest, NodeLayoutOfIntegerAndByteKeys) {
  auto s = OpenSession(45, Level::kRc);
  Options o;
  o.value_size = 8;
  for (uint32_t ks : {0u, 10u}) {
    SCOPED_TRACE("key_size " + std::to_string(ks));
    o.key_size = ks;
    auto m = OpenT(*s, "layout" + std::to_string(ks), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const Key k1 = ks == 0 ? Key(7) : Key("seven"), k2 = ks == 0 ? Key(9) : Key("x");
    ASSERT_TRUE((*m)->Put(k2, Value{1, 2, 3}).ok());
    ASSERT_TRUE((*m)->Put(k1, Value{4}).ok());
    ASSERT_TRUE((*m)->Sync().ok());
    uint8_t anchor[48];
    ASSERT_TRUE(s->Read(s->ReadWord((*m)->structure().root_addr).value(), anchor).ok());
    const uint64_t root = internal::GetU64(anchor + 8);
    EXPECT_EQ(internal::GetU64(anchor + 16), 1u);  // height: a root leaf
    const uint32_t kslot = internal::KeySlotBytes(ks), f = 4, slot = internal::SlotBytes(8);
    std::vector<uint8_t> leaf(16 + kslot * f + slot * f);
    ASSERT_TRUE(s->Read(root, leaf).ok());
    EXPECT_EQ(internal::GetU32(leaf.data()), 0x464c5042u);  // "BPLF"
    EXPECT_EQ(internal::GetU32(leaf.data() + 4), 2u);
    EXPECT_EQ(internal::GetU64(leaf.data() + 8), 0u);
    if (ks == 0) {
      EXPECT_EQ(kslot, 8u);
      EXPECT_EQ(internal::GetU64(leaf.data() + 16), 7u);
      EXPECT_EQ(internal::GetU64(leaf.data() + 24), 9u);
    } else {
      EXPECT_EQ(kslot, 16u);
      const std::vector<uint8_t> want{5, 0, 's', 'e', 'v', 'e', 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                      1, 0, 'x', 0,   0,   0,   0,   0, 0, 0, 0, 0, 0, 0, 0, 0};
      EXPECT_EQ(std::vector<uint8_t>(leaf.begin() + 16, leaf.begin() + 48), want);
    }
    const uint8_t* v0 = leaf.data() + 16 + kslot * f;
    EXPECT_EQ(internal::GetU32(v0), 1u);
    EXPECT_EQ(v0[4], 4);
    EXPECT_EQ(internal::GetU32(v0 + slot), 3u);
  }
  o.key_size = 0;
  auto m = OpenT(*s, "shape", o);
  ASSERT_TRUE(m.ok());
  for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 8)).ok());
  auto leaves = internal::BPlusTreeLeafCount(m->get());
  ASSERT_TRUE(leaves.ok());
  EXPECT_EQ(*leaves, 49u);
}

// A back-end with 16 KiB OQ buffers holds transactions of under 16 KiB, and 256-byte keys at the
// default fan-out make a leaf of 8.75 KiB: an insertion that splits it may need more than one
// transaction holds and is refused before its op log (nothing written, the tree unchanged and
// usable); what fits — inserts into a leaf with room, deletes, a one-pair PutBatch, which writes
// only the bytes that change — goes through.
TEST_F(BPlusTreeTest, ByteKeyUpdatesBeyondOneTransactionAreRefusedBeforeTheirOpLog) {
  be_->Stop();
  be_.reset();
  std::remove(path_.c_str());
  auto bo = testing::TestBackendOptions(path_);
  bo.oq_buffer_size = 16 * 1024;
  auto be = backend::Backend::Start(bo);
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  be_ = std::move(*be);
  auto s = OpenSession(46, Level::kRcb);
  ASSERT_TRUE(s);
  ASSERT_LT(s->max_transaction_bytes(), 16u * 1024);
  Options o;
  o.key_size = kMaxKeySize;
  o.value_size = 8;
  auto m = internal::OpenBPlusTree(*s, "small-txn", o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::map<Key, Value> model;
  for (uint64_t i = 0; i < 32; i++) {  // one full root leaf
    model[ByteKey(i, kMaxKeySize)] = TestValue(i, 0, 8);
    Status st = (*m)->Put(ByteKey(i, kMaxKeySize), model[ByteKey(i, kMaxKeySize)]);
    ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
  }
  const uint64_t logs = s->counters().op_logs;
  Status split = (*m)->Put(ByteKey(32, kMaxKeySize), TestValue(32, 0, 8));
  EXPECT_EQ(split.code(), StatusCode::kResourceExhausted) << split.ToString();
  EXPECT_EQ(s->counters().op_logs, logs);
  ExpectMatchesByteModel(**m, model);
  ASSERT_TRUE((*m)->Delete(ByteKey(5, kMaxKeySize)).ok());
  model.erase(ByteKey(5, kMaxKeySize));
  ASSERT_TRUE((*m)->Put(ByteKey(5, kMaxKeySize), TestValue(5, 1, 3)).ok());
  model[ByteKey(5, kMaxKeySize)] = TestValue(5, 1, 3);
  const std::vector<KeyValue> one{{ByteKey(32, kMaxKeySize), TestValue(32, 0, 8)}};
  Status st = (*m)->PutBatch(one);
  ASSERT_TRUE(st.ok()) << st.ToString();
  model[one[0].first] = one[0].second;
  ExpectMatchesByteModel(**m, model);
}

// ---- internal-node rebalancing (doc/structures.md "B+tree": deletes) ----

// The most levels a tree of n keys may have when every non-root node holds at least
// max(1, F/4) keys (leaves: entries) and a root internal node at least one: the root has >= 2
// children, each internal node below it >= F/4 + 1, each leaf >= F/4 entries.
uint64_t MaxFilledHeight(uint64_t n, uint64_t f) {
  if (n == 0) return 0;
  const uint64_t m = std::max<uint64_t>(1, f / 4);
  uint64_t h = 1, least = 2 * m;  // least keys of a tree of height h + 1
  while (least <= n) {
    h++;
    least *= m + 1;
  }
  return h;
}

uint64_t HeightOf(Map& m) {
  auto h = internal::BPlusTreeHeight(&m);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return h.ok() ? *h : ~0ull;
}

// 10^4 keys deleted one by one in ascending, descending and random order at fan-out 4 and 8,
// down to the empty tree and back: Verify (which rejects under-full nodes in trees created by
// this version) every 500 deletes, the height never grows and stays within what filled nodes
// allow (it shrinks level by level), the last delete leaves height 0, and the emptied tree takes
// the keys again. With internal nodes not rebalanced Verify reports an under-full node.
void DeleteAllInThreeOrders(std::unique_ptr<frontend::Session> s, uint64_t f) {
  ASSERT_TRUE(s);
  constexpr uint64_t kN = 10000;
  {
    for (int order = 0; order < 3; order++) {
      SCOPED_TRACE("fan-out " + std::to_string(f) + ", order " + std::to_string(order));
      Options o;
      o.param = f;
      o.value_size = 16;
      auto m = OpenT(*s, "shrink" + std::to_string(f) + "-" + std::to_string(order), o);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      Map& t = **m;
      std::vector<KeyValue> kvs;
      for (uint64_t k = 0; k < kN; k++) kvs.emplace_back(k * 2, TestValue(k, f, 16));
      ASSERT_TRUE(t.PutBatch(kvs).ok());
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < kN; k++) keys.push_back(k * 2);
      if (order == 1) std::reverse(keys.begin(), keys.end());
      if (order == 2) std::shuffle(keys.begin(), keys.end(), std::mt19937_64(f * 10 + order));
      uint64_t height = HeightOf(t);
      const uint64_t full_height = height;
      EXPECT_LE(height, MaxFilledHeight(kN, f));
      for (uint64_t i = 0; i < kN; i++) {
        ASSERT_TRUE(t.Delete(keys[i]).ok()) << keys[i];
        if (i % 500 == 499 || kN - i < 20) {
          const uint64_t h = HeightOf(t);
          ASSERT_FALSE(::testing::Test::HasFailure()) << "after " << i + 1 << " deletes";
          EXPECT_LE(h, height) << "after " << i + 1 << " deletes";
          EXPECT_LE(h, MaxFilledHeight(kN - i - 1, f)) << "after " << i + 1 << " deletes";
          height = h;
        }
      }
      EXPECT_EQ(CountOf(t), 0u);
      EXPECT_EQ(HeightOf(t), 0u);
      EXPECT_GE(full_height, f == 4 ? 7u : 4u);
      // And back: the emptied tree takes the keys again (single Puts for the first 500 in the
      // same order, vectors for the rest).
      std::map<uint64_t, Value> model;
      std::vector<KeyValue> back;
      for (uint64_t i = 0; i < kN; i++) {
        const uint64_t k = keys[i];
        model[k] = TestValue(k, 1, 16);
        if (i < 500) {
          ASSERT_TRUE(t.Put(k, model[k]).ok()) << k;
        } else {
          back.emplace_back(k, model[k]);
        }
      }
      ASSERT_TRUE(t.PutBatch(back).ok());
      ExpectMatchesModel(t, model, 300);
    }
  }
}

TEST_F(BPlusTreeTest, InternalNodesMergeUntilTheTreeIsEmptyAtFanOut4) {
  DeleteAllInThreeOrders(OpenSession(60, Level::kRcb), 4);
}

TEST_F(BPlusTreeTest, InternalNodesMergeUntilTheTreeIsEmptyAtFanOut8) {
  DeleteAllInThreeOrders(OpenSession(61, Level::kRcb), 8);
}

// Trees created before internal nodes were rebalanced carry no "filled" flag (anchor flags bit 1)
// and may hold under-full nodes: Verify accepts them there (asymnvm-ctl check/gc walk such pools)
// and rejects the same node in a flagged tree; a delete that reads the node rebalances it. The
// under-full leaf is made by hand: the leftmost leaf cut to one entry, the count adjusted.
TEST_F(BPlusTreeTest, UnderFullNodesOfUnflaggedTreesVerifyAndHeal) {
  auto s = OpenSession(64, Level::kR);
  Options o;
  o.param = 8;
  o.value_size = 8;
  std::map<uint64_t, Value> model;
  uint64_t anchor = 0;
  {
    auto m = OpenT(*s, "legacy", o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (uint64_t k = 0; k < 200; k++) {
      ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 8)).ok());
      model[k] = TestValue(k, 0, 8);
    }
    ASSERT_TRUE((*m)->Sync().ok());
    anchor = s->ReadWord((*m)->structure().root_addr).value();
  }
  uint8_t a[48];
  ASSERT_TRUE(s->Read(anchor, a).ok());
  const uint64_t flags = internal::GetU64(a + 40);
  EXPECT_EQ(flags, 2u);  // created by this version: filled, values inline
  uint64_t at = internal::GetU64(a + 8);
  const uint64_t height = internal::GetU64(a + 16);
  ASSERT_GE(height, 3u);
  for (uint64_t d = 0; d + 1 < height; d++) {  // the leftmost leaf
    uint8_t c0[8];
    ASSERT_TRUE(s->Read(at + 16 + 8 * 8, c0).ok());  // children[0] @ 16 + K·F
    at = internal::GetU64(c0);
  }
  uint8_t w0[8];
  ASSERT_TRUE(s->Read(at, w0).ok());
  const uint32_t n = internal::GetU32(w0 + 4);
  ASSERT_GE(n, 2u);
  internal::PutU32(w0 + 4, 1);
  ASSERT_TRUE(s->Write(at, w0).ok());
  uint8_t count[8];
  internal::PutU64(count, 200 - (n - 1));
  ASSERT_TRUE(s->Write(anchor + 24, count).ok());
  for (uint64_t k = 1; k < n; k++) model.erase(k);
  {
    auto m = OpenT(*s, "legacy", o);
    ASSERT_TRUE(m.ok());
    Status vs = (*m)->Verify();
    EXPECT_EQ(vs.code(), StatusCode::kCorruption) << vs.ToString();
    EXPECT_NE(vs.message().find("under-full"), std::string::npos) << vs.ToString();
  }
  uint8_t legacy[8];
  internal::PutU64(legacy, 0);
  ASSERT_TRUE(s->Write(anchor + 40, legacy).ok());
  auto m = OpenT(*s, "legacy", o);
  ASSERT_TRUE(m.ok());
  ExpectMatchesModel(**m, model, 250);
  // Deletes next to the under-full leaf, then of its last key (which rebalances it): the tree
  // still verifies and matches, and takes inserts.
  ASSERT_TRUE((*m)->Delete(n).ok());
  model.erase(n);
  ExpectMatchesModel(**m, model, 250);
  ASSERT_TRUE((*m)->Delete(0).ok());
  model.erase(0);
  ExpectMatchesModel(**m, model, 250);
  ASSERT_TRUE((*m)->Put(1, TestValue(1, 1, 8)).ok());
  model[1] = TestValue(1, 1, 8);
  ExpectMatchesModel(**m, model, 250);
}

// A small tree at every level: Verify after every delete (and the height bound), re-inserts in
// between so merges, borrows and splits interleave, down to empty.
TEST_F(BPlusTreeTest, EveryDeleteLeavesAFilledTreeAtEveryLevel) {
  for (Level level : testing::kAllLevels) {
    SCOPED_TRACE(frontend::LevelName(level));
    auto s = OpenSession(61 + static_cast<uint64_t>(level), level);
    ASSERT_TRUE(s);
    Options o;
    o.param = 4;
    o.value_size = 300;  // values out of line: their blocks are freed with their entries
    auto m = OpenT(*s, "every", o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Map& t = **m;
    std::mt19937_64 rng(77);
    std::map<uint64_t, Value> model;
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 200; k++) keys.push_back(k * 3);
    std::shuffle(keys.begin(), keys.end(), rng);
    for (uint64_t k : keys) {
      ASSERT_TRUE(t.Put(k, TestValue(k, 0, 1 + k % 300)).ok());
      model[k] = TestValue(k, 0, 1 + k % 300);
    }
    std::shuffle(keys.begin(), keys.end(), rng);
    for (size_t i = 0; i < keys.size(); i++) {
      ASSERT_TRUE(t.Delete(keys[i]).ok()) << keys[i];
      model.erase(keys[i]);
      if (i % 7 == 3 && i + 40 < keys.size()) {  // a re-insert between the deletes
        const uint64_t k = keys[i] + 1;
        ASSERT_TRUE(t.Put(k, TestValue(k, 2, 9)).ok());
        model[k] = TestValue(k, 2, 9);
        ASSERT_TRUE(t.Delete(k).ok());
        model.erase(k);
      }
      Status vs = t.Verify();
      ASSERT_TRUE(vs.ok()) << "after deleting " << keys[i] << ": " << vs.ToString();
      ASSERT_LE(HeightOf(t), MaxFilledHeight(model.size(), 4)) << model.size() << " keys";
    }
    ExpectMatchesModel(t, model, 1000);
    EXPECT_EQ(HeightOf(t), 0u);
  }
}

// 256-byte keys at fan-out 4 (internal nodes of 1 KiB of keys, separators differing in their
// last bytes): random deletes down to empty with Verify every 10, then the keys again.
TEST_F(BPlusTreeTest, ByteKeyInternalNodesMergeAtFanOut4) {
  auto s = OpenSession(66, Level::kRcb);
  Options o;
  o.param = 4;
  o.key_size = 256;
  o.value_size = 24;
  auto m = OpenT(*s, "bytes-shrink", o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Map& t = **m;
  std::map<Key, Value> model;
  std::vector<Key> keys;
  for (uint64_t i = 0; i < 500; i++) keys.push_back(ByteKey(i, 256));
  std::mt19937_64 rng(3);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (const Key& k : keys) {
    ASSERT_TRUE(t.Put(k, TestValue(k.bytes().size(), 0, 24)).ok());
    model[k] = TestValue(k.bytes().size(), 0, 24);
  }
  const uint64_t full = HeightOf(t);
  EXPECT_GE(full, 5u);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (size_t i = 0; i < keys.size(); i++) {
    ASSERT_TRUE(t.Delete(keys[i]).ok()) << i;
    model.erase(keys[i]);
    if (i % 10 == 9) {
      ASSERT_LE(HeightOf(t), MaxFilledHeight(model.size(), 4)) << model.size() << " keys";
      ASSERT_FALSE(HasFailure()) << "after " << i + 1 << " deletes";
    }
    if (i == 250) ExpectMatchesByteModel(t, model);
  }
  EXPECT_EQ(HeightOf(t), 0u);
  for (const Key& k : keys) {
    ASSERT_TRUE(t.Put(k, TestValue(7, 1, 24)).ok());
    model[k] = TestValue(7, 1, 24);
  }
  ExpectMatchesByteModel(t, model);
}

// Deletes replayed from op logs merge internal nodes as the original ones did (the tree the
// replay starts from is the one the originals saw); keys already gone are skipped.
TEST_F(BPlusTreeTest, ReplayedDeletesMergeInternalNodes) {
  std::map<uint64_t, Value> model;
  {
    auto s = OpenSession(67, Level::kRcb);
    auto m = OpenT(*s, "replay-merge");
    ASSERT_TRUE(m.ok());
    for (uint64_t k = 0; k < 400; k++) {
      ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 8)).ok());
      model[k] = TestValue(k, 0, 8);
    }
  }
  auto s = OpenSession(67, Level::kRcb);
  RegisterReplays(*s);
  auto m = OpenT(*s, "replay-merge");
  ASSERT_TRUE(m.ok());
  const uint64_t before = HeightOf(**m);
  FakeFetcher f;
  uint64_t seq = s->recovered_opn();
  auto op = [&](uint16_t type, std::vector<uint8_t> payload) {
    frontend::RecoveredOp o;
    o.op_seq = ++seq;
    o.structure_id = (*m)->structure().id;
    o.op_type = type;
    o.payload = std::move(payload);
    return o;
  };
  for (uint64_t k = 0; k < 380; k++) f.ops.push_back(op(2, internal::EncodeKeyValue(k + 7, {})));
  f.ops.push_back(op(2, internal::EncodeKeyValue(5000, {})));  // absent: nothing to redo
  ASSERT_TRUE(s->Replay(&f).ok());
  for (uint64_t k = 0; k < 380; k++) model.erase(k + 7);
  ExpectMatchesModel(**m, model, 500);
  EXPECT_LT(HeightOf(**m), before);
  EXPECT_LE(HeightOf(**m), MaxFilledHeight(model.size(), 4));
}

// A reader of stable keys races a writer that deletes every other key (single Deletes and
// DeleteBatch runs) at fan-out 4, so internal nodes next to the stable keys merge, borrow and
// the root collapses under it; then the deleted keys come back (splits) and go again.
TEST_F(BPlusTreeTest, ReaderNeverMissesStableKeysWhileDeletesShrinkTheTree) {
  auto ws = OpenSession(68, Level::kRcb);
  auto w = OpenT(*ws, "race-shrink");
  ASSERT_TRUE(w.ok());
  std::vector<KeyValue> all;
  std::set<uint64_t> stable;
  for (uint64_t k = 0; k < 3000; k++) {
    all.emplace_back(k, TestValue(k, 0, 16));
    if (k % 100 == 0) stable.insert(k);
  }
  std::vector<uint64_t> others;
  for (uint64_t k = 0; k < 3000; k++)
    if (!stable.count(k)) others.push_back(k);
  ASSERT_TRUE((*w)->PutBatch(all).ok());
  ASSERT_TRUE((*w)->Sync().ok());
  auto rs = OpenSession(69, Level::kRcb);
  Options ro;
  ro.access = Access::kReader;
  auto r = OpenT(*rs, "race-shrink", ro);
  ASSERT_TRUE(r.ok());
  const std::vector<uint64_t> sv(stable.begin(), stable.end());
  std::atomic<bool> done{false}, failed{false};
  std::atomic<uint64_t> reads{0};
  std::string failure;
  std::thread reader([&] {
    std::mt19937_64 rng(11);
    while (!done.load() && !failed.load()) {
      const uint64_t k = sv[rng() % sv.size()];
      Value v;
      Status st = (*r)->Get(k, &v);
      if (st.code() == StatusCode::kTimedOut) {
        // seqlock liveness under a fast writer on a loaded machine, not a wrong answer
      } else if (!st.ok()) {
        failure = "get " + std::to_string(k) + ": " + st.ToString();
      } else if (v != TestValue(k, 0, 16)) {
        failure = "get " + std::to_string(k) + ": wrong value";
      }
      if (reads.fetch_add(1) % 4 == 0) {
        std::vector<KeyValue> got;
        Status ss = (*r)->Scan(k, 400, &got);
        if (ss.code() == StatusCode::kTimedOut) {
        } else if (!ss.ok()) {
          failure = "scan: " + ss.ToString();
        } else {
          size_t found = 0;
          for (size_t i = 0; i < got.size(); i++) {
            if (i > 0 && got[i - 1].first >= got[i].first) failure = "scan out of order";
            found += stable.count(got[i].first.u64());
          }
          const uint64_t last = got.empty() ? k : got.back().first.u64();
          if (got.empty() || got[0].first != k || found != (last - k) / 100 + 1)
            failure = "scan from " + std::to_string(k) + " missed stable keys";
        }
      }
      if (!failure.empty()) failed = true;
    }
  });
  std::mt19937_64 rng(12);
  for (int round = 0; round < 2 && !failed.load(); round++) {
    std::shuffle(others.begin(), others.end(), rng);
    for (size_t i = 0; i < others.size() && !failed.load();) {
      if ((i / 64) % 2 == 0) {
        ASSERT_TRUE((*w)->Delete(others[i]).ok()) << others[i];
        i++;
      } else {
        std::vector<Key> batch;
        for (size_t j = i; j < std::min(others.size(), i + 16); j++) batch.push_back(others[j]);
        uint64_t deleted = 0;
        ASSERT_TRUE((*w)->DeleteBatch(batch, &deleted).ok());
        ASSERT_EQ(deleted, batch.size());
        i += batch.size();
      }
      if (i % 128 == 0) {
        ASSERT_TRUE((*w)->Sync().ok());
      }
    }
    ASSERT_TRUE((*w)->Sync().ok());
    ASSERT_TRUE((*w)->Verify().ok()) << (*w)->Verify().ToString();
    EXPECT_EQ(CountOf(**w), stable.size());
    if (round == 0) {
      std::vector<KeyValue> back;
      for (uint64_t k : others) back.emplace_back(k, TestValue(k, 1, 16));
      for (size_t i = 0; i < back.size(); i += 50) {
        ASSERT_TRUE((*w)->PutBatch(std::span<const KeyValue>(back).subspan(
                                       i, std::min<size_t>(50, back.size() - i)))
                        .ok());
      }
      ASSERT_TRUE((*w)->Sync().ok());
    }
  }
  const uint64_t until = reads.load() + 50;
  while (reads.load() < until && !failed.load()) std::this_thread::yield();
  done = true;
  reader.join();
  EXPECT_TRUE(failure.empty()) << failure;
  EXPECT_LE(HeightOf(**w), MaxFilledHeight(stable.size(), 4));
}

}  // namespace
}  // namespace asymnvm::structures
