// BST: model-checked random operations at every level (with session reopen and back-end restart),
// shapes and edge cases, replay, the §8 level threshold, and a reader under concurrent updates;
// byte-string keys: the node layout (and the integer one unchanged), successor copies between keys
// of different lengths, vectors, replay and a reader racing the writer.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "structures/base.h"
#include "structures/kinds.h"
#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::StructuresTest;
using testing::TestValue;

Result<std::unique_ptr<Map>> OpenT(frontend::Session& s, const std::string& name, Options o = {}) {
  return internal::OpenBst(s, name, o);
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

// A byte key that sorts like i: a fixed-width decimal under a shared prefix, then 0..6 bytes of
// 0xFF (lengths vary; a longer key sorts after the shorter ones of the same i only).
Key ByteKey(uint64_t i) {
  char d[24];
  std::snprintf(d, sizeof d, "%08llu", static_cast<unsigned long long>(i));
  return Key(std::string("k/") + d + std::string(i % 7, '\xff'));
}
uint64_t IntOf(const Key& k) {
  return k.is_int() ? k.u64() : std::stoull(std::string(k.bytes().substr(2, 8)));
}

// The anchor (the structure's root word points at it) and `n` bytes at `addr`, read remotely.
uint64_t AnchorOf(frontend::Session& s, Map& m) {
  uint8_t w[8];
  EXPECT_TRUE(s.ReadRemote(m.structure().root_addr, w).ok());
  return internal::GetU64(w);
}
std::vector<uint8_t> Raw(frontend::Session& s, uint64_t addr, size_t n) {
  std::vector<uint8_t> b(n);
  Status st = s.ReadRemote(addr, b);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return b;
}

class BstTest : public StructuresTest {};

TEST_F(BstTest, EmptySingleAndDeleteRoot) {
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
  for (uint64_t k :
       {50, 55, 60, 25, 75, 90, 10, 30}) {  // 50: root, successor 55 is a leaf two levels down
    ASSERT_TRUE(t.Delete(k).ok()) << k;
    model.erase(k);
    ASSERT_TRUE(t.Verify().ok()) << "after deleting " << k << ": " << t.Verify().ToString();
    ExpectMatchesModel(t, model, 100);
  }
}

TEST_F(BstTest, AscendingDescendingAndRandomOrders) {
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

TEST_F(BstTest, LargeValues) {
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

TEST_F(BstTest, BadInput) {
  auto s = OpenSession(14, Level::kRc);
  Options o;
  o.value_size = 16;
  auto m = OpenT(*s, "t", o);
  ASSERT_TRUE(m.ok());
  Status big = (*m)->Put(1, TestValue(1, 1, 17));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("value_size"), std::string::npos);
  Status missing = (*m)->Delete(3);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  const uint64_t logs = s->counters().op_logs;
  EXPECT_EQ((*m)->Delete(3).code(), StatusCode::kNotFound);
  EXPECT_EQ((*m)->Put(1, TestValue(1, 1, 17)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->counters().op_logs, logs);
  EXPECT_EQ(internal::OpenBPlusTree(*s, "t", Options{}).status().code(),
            StatusCode::kFailedPrecondition);
  Options ro;
  ro.access = Access::kReader;
  EXPECT_EQ(OpenT(*s, "missing", ro).status().code(), StatusCode::kNotFound);
}

class FakeFetcher : public frontend::OpLogFetcher {
 public:
  Result<std::vector<frontend::RecoveredOp>> Fetch(uint64_t, uint64_t) override { return ops; }
  std::vector<frontend::RecoveredOp> ops;
};

TEST_F(BstTest, ReplayReexecutesPutsAndDeletes) {
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

// An integer-key tree keeps the layout from before byte keys, byte for byte: anchor magic | root |
// count; node key u64 @0 | left @8 | right @16 | value slot @24 (u32 length | bytes).
TEST_F(BstTest, IntegerKeyLayoutIsUnchanged) {
  auto s = OpenSession(15, Level::kRcb);
  auto m = OpenT(*s, "layout");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (uint64_t k : {20, 10, 30}) ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 5)).ok());
  ASSERT_TRUE((*m)->Sync().ok());
  const auto a = Raw(*s, AnchorOf(*s, **m), 24);
  EXPECT_EQ(internal::GetU64(a.data()), 0x5453424d564e5941ull);  // "AYNVMBST"
  EXPECT_EQ(internal::GetU64(a.data() + 16), 3u);
  const auto root = Raw(*s, internal::GetU64(a.data() + 8), 24 + 8);
  EXPECT_EQ(internal::GetU64(root.data()), 20u);
  EXPECT_EQ(internal::GetU32(root.data() + 24), 5u);
  const Value v20 = TestValue(20, 0, 5);
  EXPECT_EQ(Value(root.begin() + 28, root.begin() + 32), Value(v20.begin(), v20.begin() + 4));
  const auto left = Raw(*s, internal::GetU64(root.data() + 8), 24);
  const auto right = Raw(*s, internal::GetU64(root.data() + 16), 24);
  EXPECT_EQ(internal::GetU64(left.data()), 10u);
  EXPECT_EQ(internal::GetU64(right.data()), 30u);
  EXPECT_EQ(internal::GetU64(left.data() + 8) | internal::GetU64(left.data() + 16), 0u);
}

// Byte keys: node = key slot (u16 length | bytes, zero-padded to 8: 32 B for key_size 24) | left |
// right | value slot. A successor copy between keys of different lengths rewrites the whole slot
// (no bytes of the longer key left behind).
TEST_F(BstTest, ByteKeyLayoutAndSuccessorCopy) {
  auto s = OpenSession(16, Level::kRc);
  Options o;
  o.key_size = 24;
  o.value_size = 16;
  auto m = OpenT(*s, "bytes", o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Map& t = **m;
  EXPECT_EQ(t.key_size(), 24u);
  const std::string k50 = "m-the-middle-key-of-24-b", k25 = "c", k75 = "x",
                    k60 = std::string("n\0", 2), k55 = "n", k90 = "\xff\xff";
  ASSERT_EQ(k50.size(), 24u);
  std::map<Key, Value> model;
  for (const std::string& k : {k50, k25, k75, k60, k55, k90}) {
    ASSERT_TRUE(t.Put(k, TestValue(k.size(), 1, 16)).ok()) << Key(k);
    model[k] = TestValue(k.size(), 1, 16);
  }
  ASSERT_TRUE(t.Sync().ok());
  const uint64_t anchor = AnchorOf(*s, t);
  const uint64_t root = internal::GetU64(Raw(*s, anchor + 8, 8).data());
  auto node = Raw(*s, root, 32 + 16 + 8);
  EXPECT_EQ(node[0] | node[1] << 8, 24);
  EXPECT_EQ(std::string(node.begin() + 2, node.begin() + 26), k50);
  EXPECT_EQ(std::vector<uint8_t>(node.begin() + 26, node.begin() + 32), std::vector<uint8_t>(6, 0));
  const uint64_t right = internal::GetU64(node.data() + 40);
  EXPECT_NE(internal::GetU64(node.data() + 32), 0u);
  EXPECT_EQ(internal::GetU32(node.data() + 48), 16u);  // the value slot's length
  EXPECT_EQ(Raw(*s, right, 3), (std::vector<uint8_t>{1, 0, 'x'}));
  // The root (24-byte key) takes its successor's 1-byte key "n".
  ASSERT_TRUE(t.Delete(k50).ok());
  model.erase(k50);
  ASSERT_TRUE(t.Sync().ok());
  node = Raw(*s, root, 32);
  EXPECT_EQ(node[0] | node[1] << 8, 1);
  EXPECT_EQ(node[2], 'n');
  EXPECT_EQ(std::vector<uint8_t>(node.begin() + 3, node.end()), std::vector<uint8_t>(29, 0));
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  std::vector<KeyValue> all;
  ASSERT_TRUE(t.Scan(std::string(), 100, &all).ok());
  EXPECT_EQ(all, std::vector<KeyValue>(model.begin(), model.end()));
  // Scan starts between keys, at a prefix of a key and past the longest key.
  ASSERT_TRUE(t.Scan(std::string("n\0\0", 3), 100, &all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, Key("x"));
  ASSERT_TRUE(t.Scan(std::string(300, 'a'), 1, &all).ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, Key("c"));
  for (const std::string& k : {k60, k25, k75, k55, k90}) {
    ASSERT_TRUE(t.Delete(k).ok()) << Key(k);
    ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  }
  EXPECT_EQ(CountOf(t), 0u);
  // Integer keys on a byte-key map, byte keys too long or empty: kInvalidArgument.
  EXPECT_EQ(t.Put(7, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Put(std::string(25, 'a'), {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Put(std::string(), {}).code(), StatusCode::kInvalidArgument);
}

// Byte-key vectors (into the empty tree: a balanced subtree; then split across existing nodes),
// single ops and a replayed vector, checked against a model here and by a reader.
TEST_F(BstTest, ByteKeyVectorsAndReplay) {
  Options o;
  o.key_size = 40;
  o.value_size = 24;
  std::map<Key, Value> model;
  {
    auto s = OpenSession(17, Level::kRcb);
    auto m = OpenT(*s, "bv", o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::vector<KeyValue> batch;
    for (uint64_t i = 0; i < 600; i += 2) batch.emplace_back(ByteKey(i), TestValue(i, 0, 24));
    ASSERT_TRUE((*m)->PutBatch(batch).ok());
    for (const auto& kv : batch) model[kv.first] = kv.second;
    batch.clear();
    for (uint64_t i = 301; i < 900; i += 3) batch.emplace_back(ByteKey(i), TestValue(i, 1, 11));
    ASSERT_TRUE((*m)->PutBatch(batch).ok());
    for (const auto& kv : batch) model[kv.first] = kv.second;
    for (uint64_t i = 0; i < 100; i += 4) {
      ASSERT_TRUE((*m)->Delete(ByteKey(i)).ok()) << i;
      model.erase(ByteKey(i));
    }
    ASSERT_TRUE((*m)->Verify().ok()) << (*m)->Verify().ToString();
  }
  auto s = OpenSession(17, Level::kRcb);
  RegisterReplays(*s);
  auto m = OpenT(*s, "bv", o);
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
  const std::vector<KeyValue> vec = {{ByteKey(1), TestValue(1, 5, 3)},
                                     {ByteKey(2), TestValue(2, 5, 24)},
                                     {std::string(40, '\xff'), TestValue(40, 5, 1)}};
  f.ops = {op(1, 1, internal::EncodeKeyValue(ByteKey(5), TestValue(5, 4, 7))),
           op(2, 2, internal::EncodeKeyValue(ByteKey(2), {})),
           op(3, internal::kOpPutVector, internal::EncodeVector(vec)),
           op(4, 2, internal::EncodeKeyValue(ByteKey(7777), {})) /* missing: nothing to redo */};
  ASSERT_TRUE(s->Replay(&f).ok());
  model[ByteKey(5)] = TestValue(5, 4, 7);
  model.erase(ByteKey(2));
  for (const auto& kv : vec) model[kv.first] = kv.second;
  ASSERT_TRUE((*m)->Sync().ok());
  Options ro = o;
  ro.access = Access::kReader;
  auto rs = OpenSession(18, Level::kRc);
  auto r = OpenT(*rs, "bv", ro);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (Map* h : {m->get(), r->get()}) {
    std::vector<KeyValue> all;
    ASSERT_TRUE(h->Scan(std::string(), 1 << 20, &all).ok());
    EXPECT_EQ(all, std::vector<KeyValue>(model.begin(), model.end()));
    EXPECT_EQ(CountOf(*h), model.size());
    Value v;
    ASSERT_TRUE(h->Get(ByteKey(301), &v).ok());
    EXPECT_EQ(v, TestValue(301, 1, 11));
    EXPECT_EQ(h->Get(ByteKey(12), &v).code(), StatusCode::kNotFound);
    ASSERT_TRUE(h->Verify().ok()) << h->Verify().ToString();
  }
}

TEST_F(BstTest, LevelThresholdReadsDeepNodesAroundTheCache) {
  auto s = OpenSession(30, Level::kRc);
  {
    auto m = OpenT(*s, "deep");
    ASSERT_TRUE(m.ok());
    for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE((*m)->Put(k, TestValue(k, 0, 8)).ok());
  }
  uint64_t accesses[2];
  for (int opt = 0; opt < 2; opt++) {
    Options o;
    o.optimize = opt == 1;
    auto m = OpenT(*s, "deep", o);
    ASSERT_TRUE(m.ok());
    const auto before = s->counters();
    Value v;
    ASSERT_TRUE((*m)->Get(99, &v).ok());  // depth 99
    const auto after = s->counters();
    accesses[opt] =
        (after.cache_hits + after.cache_misses) - (before.cache_hits + before.cache_misses);
  }
  EXPECT_GE(accesses[0], 100u);  // plain: every node through the cache
  EXPECT_LE(accesses[1], 20u);   // threshold 16: the deeper 84 nodes bypass it
}

// The reader of stable keys never sees them missing while the writer inserts and deletes keys
// around them (rotations are not done, but successor copies and unlinks next to them are).
// key_size != 0: the same with byte keys (ByteKey: ordered like the integers).
void RunConcurrent(StructuresTest* t,
                   const std::function<std::unique_ptr<frontend::Session>(uint64_t)>& open,
                   const std::string& name, uint32_t key_size = 0) {
  Options wo;
  wo.key_size = key_size;
  auto key = [key_size](uint64_t i) { return key_size == 0 ? Key(i) : ByteKey(i); };
  auto ws = open(40);
  auto w = OpenT(*ws, name, wo);
  ASSERT_TRUE(w.ok());
  std::vector<uint64_t> stable;
  for (uint64_t i = 0; i < 100; i++) stable.push_back(i * 10);
  std::mt19937_64 shuffle_rng(5);
  std::vector<uint64_t> order = stable;
  std::shuffle(order.begin(), order.end(), shuffle_rng);
  for (uint64_t k : order) ASSERT_TRUE((*w)->Put(key(k), TestValue(k, 0, 16)).ok());
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
      Status st = (*r)->Get(key(k), &v);
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
        Status ss = (*r)->Scan(key(from), 30, &got);
        if (ss.code() == StatusCode::kTimedOut) {
          timeouts++;
        } else if (!ss.ok()) {
          failure = "scan: " + ss.ToString();
        } else if (got.empty() || got[0].first != key(from)) {
          failure = "scan from " + std::to_string(from) + " misses it";
        } else {
          size_t found = 0;
          for (size_t i = 0; i < got.size(); i++) {
            if (i > 0 && got[i - 1].first >= got[i].first) failure = "scan out of order";
            const uint64_t g = IntOf(got[i].first);
            if (g % 10 == 0 && g < 1000) found++;
          }
          const uint64_t last = std::min<uint64_t>(IntOf(got.back().first), 990);
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
      ASSERT_TRUE((*w)->Delete(key(k)).ok());
      present.erase(k);
    } else {
      ASSERT_TRUE((*w)->Put(key(k), TestValue(k, i, 16)).ok());
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

TEST_F(BstTest, ReaderNeverMissesStableKeysUnderConcurrentUpdates) {
  RunConcurrent(
      this, [&](uint64_t fe) { return OpenSession(fe, Level::kRcb); }, "conc");
}

TEST_F(BstTest, ReaderNeverMissesStableKeysUnderConcurrentUpdatesAtR) {
  RunConcurrent(
      this, [&](uint64_t fe) { return OpenSession(fe, Level::kR); }, "conc_r");
}

TEST_F(BstTest, ReaderNeverMissesStableByteKeysUnderConcurrentUpdates) {
  RunConcurrent(
      this, [&](uint64_t fe) { return OpenSession(fe, Level::kRcb); }, "conc_bytes", 24);
}

}  // namespace
}  // namespace asymnvm::structures
