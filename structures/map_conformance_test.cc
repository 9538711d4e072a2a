// One conformance suite over every map kind (hash table, skip list, BST, B+tree, MV-BST,
// MV-B+tree): the Map contract of asymnvm/structures/structure.h checked against a std::map
// model — random Put / Get / Delete / Scan / PutBatch, Count and Verify; the same state after the
// handle, the session and the back-end are closed and reopened (MapModel: every level naive / r /
// rc / rcb, rcb without the §8 optimizations, and small shapes that make every run split, chain
// and collapse: B+trees of fan-out 4, 64 hash buckets, plus the default 65 536 buckets and skip
// towers capped at 3); a reader in another session sees what the writer synced and the error
// contract (bad values, readers writing, missing keys, Scan on an unordered map) at naive and rcb
// (MapContract). The per-kind suites test what is particular to each kind.
#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::StructuresTest;

constexpr Kind kMapKinds[] = {Kind::kHashTable, Kind::kSkipList, Kind::kBst,
                              Kind::kBPlusTree, Kind::kMvBst,    Kind::kMvBPlusTree};
constexpr uint32_t kValueSize = 160;  // values of 0..160 B: above 64 B they travel as pointers

using Model = std::map<Key, Value>;

// (kind, level, optimize, shape: Options::param, 0 = the kind's default, key_size: 0 = integer
// keys).
using MapParam = std::tuple<Kind, Level, bool, uint64_t, uint32_t>;

// The kinds built with byte-string keys (all the maps).
constexpr Kind kByteKeyKinds[] = {Kind::kHashTable, Kind::kSkipList,  Kind::kBst,
                                  Kind::kMvBst,     Kind::kBPlusTree, Kind::kMvBPlusTree};

// The i-th key of a map with `key_size` (i >= 1; injective). Byte keys mix what bytewise order
// must get right: shared prefixes ("user:" and "user:00"), a key that is a prefix of others,
// NUL and 0xFF bytes, lengths from 1 byte to key_size, and an order unlike the integers' ("a10" <
// "a9").
Key KeyOf(uint64_t i, uint32_t key_size) {
  if (key_size == 0) return Key(i);
  static const std::string kPrefixes[] = {"",      "a",       std::string("a\0", 2),
                                          "user:", "user:00", std::string("\xff\x01", 2)};
  std::string k = kPrefixes[i % 6] + std::to_string(i);
  if (i % 7 == 0 && key_size > 64) k.append(key_size - k.size() - (i % 3), static_cast<char>(i));
  if (i % 11 == 0) k = k.substr(0, 1);  // short keys (a 1-byte key may repeat: a put updates it)
  return Key(k.substr(0, key_size));
}

// The small shape each kind is tested with (splits, chains and collapses on every run).
uint64_t SmallShape(Kind k) {
  switch (k) {
    case Kind::kBPlusTree:
    case Kind::kMvBPlusTree:
      return 4;  // fan-out
    case Kind::kHashTable:
      return 64;  // buckets
    default:
      return 0;
  }
}

class MapConformance : public StructuresTest, public ::testing::WithParamInterface<MapParam> {
 protected:
  Kind kind() const { return std::get<0>(GetParam()); }
  Level level() const { return std::get<1>(GetParam()); }
  uint32_t key_size() const { return std::get<4>(GetParam()); }
  Key K(uint64_t i) const { return KeyOf(i, key_size()); }
  std::unique_ptr<Map> Open(frontend::Session& s, Access access = Access::kWriter) {
    Options o;
    o.value_size = kValueSize;
    o.optimize = std::get<2>(GetParam());
    o.param = std::get<3>(GetParam());
    o.key_size = key_size();
    o.access = access;
    auto m = OpenMap(s, kind(), "conformance", o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : nullptr;
  }
  // A writer (front-end 1) and a reader (front-end 2) of the map, each in its own session.
  struct WriterAndReader {
    std::unique_ptr<frontend::Session> ws, rs;
    std::unique_ptr<Map> w, r;
  };
  WriterAndReader OpenWriterAndReader() {
    WriterAndReader p;
    p.ws = OpenSession(1, level());
    p.rs = OpenSession(2, level());
    if (p.ws && p.rs) {
      p.w = Open(*p.ws);
      p.r = Open(*p.rs, Access::kReader);
    }
    return p;
  }
  static Value RandomValue(std::mt19937_64& rng) {
    Value v(rng() % (kValueSize + 1));
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
  }
  // Every key of the model (and a few that are not) reads back as the model says; an ordered
  // map scans exactly the model, from anywhere.
  void ExpectEquals(Map& m, const Model& model, std::mt19937_64& rng) {
    for (uint64_t i = 1; i <= 520; i++) {
      const Key k = K(i);
      Value got;
      Status st = m.Get(k, &got);
      auto it = model.find(k);
      if (it == model.end()) {
        ASSERT_EQ(st.code(), StatusCode::kNotFound) << "key " << k << ": " << st.ToString();
      } else {
        ASSERT_TRUE(st.ok()) << "key " << k << ": " << st.ToString();
        ASSERT_EQ(got, it->second) << "key " << k;
      }
    }
    auto count = m.Count();
    ASSERT_TRUE(count.ok()) << count.status().ToString();
    EXPECT_EQ(*count, model.size());
    if (!IsOrdered(m.kind())) return;
    for (int i = 0; i < 5; i++) {
      const Key from = i == 0 && key_size() > 0 ? Key(std::string_view()) : K(rng() % 530);
      const size_t limit = 1 + rng() % 64;
      std::vector<KeyValue> out;
      ASSERT_TRUE(m.Scan(from, limit, &out).ok());
      auto it = model.lower_bound(from);
      for (const auto& [k, v] : out) {
        ASSERT_NE(it, model.end()) << "scan from " << from << " returned extra key " << k;
        ASSERT_EQ(k, it->first) << "scan from " << from;
        ASSERT_EQ(v, it->second) << "scan from " << from << ", key " << k;
        ++it;
      }
      EXPECT_EQ(out.size(), std::min<size_t>(limit, static_cast<size_t>(std::distance(
                                                        model.lower_bound(from), model.end()))));
    }
  }
  // `n` random operations on `m`, mirrored on `model`, each result checked.
  void RandomOps(Map& m, Model& model, std::mt19937_64& rng, int n) {
    for (int i = 0; i < n; i++) {
      const Key key = K(1 + rng() % 500);
      const int op = static_cast<int>(rng() % 100);
      if (op < 45) {
        Value v = RandomValue(rng);
        ASSERT_TRUE(m.Put(key, v).ok()) << "put " << key;
        model[key] = std::move(v);
      } else if (op < 65) {
        Value got;
        Status st = m.Get(key, &got);
        auto it = model.find(key);
        if (it == model.end()) {
          ASSERT_EQ(st.code(), StatusCode::kNotFound) << "get " << key;
        } else {
          ASSERT_TRUE(st.ok()) << "get " << key << ": " << st.ToString();
          ASSERT_EQ(got, it->second) << "get " << key;
        }
      } else if (op < 85) {
        Status st = m.Delete(key);
        if (model.erase(key) == 1) {
          ASSERT_TRUE(st.ok()) << "delete " << key << ": " << st.ToString();
        } else {
          ASSERT_EQ(st.code(), StatusCode::kNotFound) << "delete " << key;
        }
      } else if (op < 88) {
        // A vector delete of present and absent keys (duplicates too).
        std::vector<Key> keys;
        const size_t len = 1 + rng() % 12;
        for (size_t j = 0; j < len; j++) keys.push_back(K(1 + rng() % 500));
        uint64_t deleted = 99;
        Status st = m.DeleteBatch(keys, &deleted);
        ASSERT_TRUE(st.ok()) << "delete batch: " << st.ToString();
        uint64_t want = 0;
        for (const Key& k : keys) want += model.erase(k);
        ASSERT_EQ(deleted, want) << "delete batch count";
      } else if (op < 95) {
        std::vector<KeyValue> batch;
        const size_t len = 1 + rng() % 40;
        for (size_t j = 0; j < len; j++) batch.emplace_back(K(1 + rng() % 500), RandomValue(rng));
        ASSERT_TRUE(m.PutBatch(batch).ok());
        for (auto& [k, v] : batch) model[k] = v;  // the last of equal keys wins
      } else if (IsOrdered(m.kind())) {
        std::vector<KeyValue> out;
        ASSERT_TRUE(m.Scan(key, 8, &out).ok());
        auto it = model.lower_bound(key);
        for (const auto& [k, v] : out) {
          ASSERT_NE(it, model.end());
          ASSERT_EQ(k, it->first);
          ASSERT_EQ(v, it->second);
          ++it;
        }
      }
    }
  }
};

class MapModel : public MapConformance {};
class MapContract : public MapConformance {};

TEST_P(MapModel, RandomOperationsMatchAModelAndSurviveReopenAndRestart) {
  std::mt19937_64 rng(static_cast<uint64_t>(kind()) * 1000 + static_cast<uint64_t>(level()) * 10 +
                      std::get<3>(GetParam()) + key_size());
  Model model;
  {
    auto s = OpenSession(1, level());
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    auto m = Open(*s);
    ASSERT_TRUE(m);
    RandomOps(*m, model, rng, 1500);
    ExpectEquals(*m, model, rng);
    ASSERT_TRUE(m->Verify().ok());
    ASSERT_TRUE(m->Sync().ok());
    // Values of 48 B and more went as pointers into their op logs (Base::Update): single-version
    // kinds, wherever an op log exists.
    const bool pointers =
        level() != Level::kNaive && kind() != Kind::kMvBst && kind() != Kind::kMvBPlusTree;
    EXPECT_EQ(s->counters().pointer_mem_logs > 0, pointers);
  }
  RestartBackend();
  {
    auto s = OpenSession(1, level());
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    auto m = Open(*s);
    ASSERT_TRUE(m);
    ASSERT_TRUE(s->Replay().ok());
    ExpectEquals(*m, model, rng);
    ASSERT_TRUE(m->Verify().ok());
    RandomOps(*m, model, rng, 300);  // and it goes on
    ExpectEquals(*m, model, rng);
  }
}

TEST_P(MapContract, AReaderInAnotherSessionSeesWhatTheWriterSynced) {
  std::mt19937_64 rng(7);
  Model model;
  auto [ws, rs, w, r] = OpenWriterAndReader();
  ASSERT_TRUE(w && r);
  for (int round = 0; round < 3; round++) {
    RandomOps(*w, model, rng, 200);
    ASSERT_TRUE(w->Sync().ok());
    ExpectEquals(*r, model, rng);
    ASSERT_TRUE(r->Verify().ok());
  }
}

TEST_P(MapContract, ErrorsAreTheContractsNeverACrash) {
  auto [ws, rs, w, r] = OpenWriterAndReader();
  ASSERT_TRUE(w && r);
  Value v;
  EXPECT_EQ(w->key_size(), key_size());
  EXPECT_EQ(r->key_size(), key_size());
  EXPECT_EQ(w->Get(K(42), &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(w->Delete(K(42)).code(), StatusCode::kNotFound);
  EXPECT_EQ(w->Put(K(42), Value(kValueSize + 1, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Get(K(42), &v).code(), StatusCode::kNotFound) << "a refused put wrote something";
  // A batch with one value too long writes nothing at all.
  std::vector<KeyValue> batch = {
      {K(1), Value(4, 1)}, {K(2), Value(kValueSize + 1, 2)}, {K(3), Value(4, 3)}};
  EXPECT_EQ(w->PutBatch(batch).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Get(K(1), &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(r->Put(K(1), Value(4, 1)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r->Delete(K(1)).code(), StatusCode::kFailedPrecondition);
  const std::vector<Key> one = {K(1)};
  EXPECT_EQ(r->DeleteBatch(one).code(), StatusCode::kFailedPrecondition);
  // Keys of the other kind, empty and too long byte keys: refused by every call, nothing written.
  std::vector<Key> bad;
  if (key_size() == 0) {
    bad = {Key("k"), Key(std::string_view())};
  } else {
    bad = {Key(1), Key(std::string_view()), Key(std::string(key_size() + 1, 'k'))};
  }
  for (const Key& b : bad) {
    EXPECT_EQ(w->Put(b, Value(4, 1)).code(), StatusCode::kInvalidArgument) << b;
    EXPECT_EQ(w->Get(b, &v).code(), StatusCode::kInvalidArgument) << b;
    EXPECT_EQ(r->Get(b, &v).code(), StatusCode::kInvalidArgument) << b;
    EXPECT_EQ(w->Delete(b).code(), StatusCode::kInvalidArgument) << b;
    std::vector<Key> del_bad = {K(5), b};
    EXPECT_EQ(w->DeleteBatch(del_bad).code(), StatusCode::kInvalidArgument) << b;
    std::vector<KeyValue> with_bad = {{K(5), Value(4, 5)}, {b, Value(4, 1)}};
    EXPECT_EQ(w->PutBatch(with_bad).code(), StatusCode::kInvalidArgument) << b;
    EXPECT_EQ(w->Get(K(5), &v).code(), StatusCode::kNotFound) << "a refused batch wrote";
  }
  auto n = w->Count();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  std::vector<KeyValue> out;
  const Key first = key_size() == 0 ? Key(0) : Key(std::string_view());
  if (IsOrdered(kind())) {
    EXPECT_TRUE(w->Scan(first, 10, &out).ok());
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(w->Scan(key_size() == 0 ? Key("a") : Key(0), 10, &out).code(),
              StatusCode::kInvalidArgument);
  } else {
    EXPECT_EQ(w->Scan(first, 10, &out).code(), StatusCode::kNotSupported);
  }
  // The same name as another kind is refused.
  Options o;
  o.value_size = kValueSize;
  auto other = OpenSequence(*ws, Kind::kStack, "conformance", o);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  // Empty values are values.
  ASSERT_TRUE(w->Put(K(7), Value{}).ok());
  ASSERT_TRUE(w->Get(K(7), &v).ok());
  EXPECT_TRUE(v.empty());
  // Reopened with another key_size, the map keeps the one it was created with.
  Options o2;
  o2.value_size = kValueSize;
  o2.key_size = key_size() == 0 ? 16 : 0;
  o2.access = Access::kReader;
  auto again = OpenMap(*rs, kind(), "conformance", o2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->key_size(), key_size());
  ASSERT_TRUE(w->Sync().ok());
  ASSERT_TRUE((*again)->Get(K(7), &v).ok());
}

std::string ParamName(const ::testing::TestParamInfo<MapParam>& info) {
  const auto& [kind, level, optimize, shape, key_size] = info.param;
  std::string name = std::string(KindName(kind)) + "_" + frontend::LevelName(level);
  if (!optimize) name += "_plain";
  if (shape != SmallShape(kind)) name += "_p" + std::to_string(shape);
  if (key_size != 0) name += "_bytes" + std::to_string(key_size);
  return name;
}

std::vector<MapParam> ModelParams() {
  std::vector<MapParam> v;
  for (Kind k : kMapKinds) {
    for (Level l : testing::kAllLevels) v.emplace_back(k, l, true, SmallShape(k), 0);
    v.emplace_back(k, Level::kRcb, false, SmallShape(k), 0);
  }
  v.emplace_back(Kind::kHashTable, Level::kRcb, true, 0, 0);  // the default 65 536 buckets
  v.emplace_back(Kind::kSkipList, Level::kRc, true, 3, 0);    // towers capped at 3
  // Byte-string keys: short (24 B) at naive and rcb, the longest (256 B) at rcb.
  for (Kind k : kByteKeyKinds) {
    v.emplace_back(k, Level::kNaive, true, SmallShape(k), 24);
    v.emplace_back(k, Level::kRcb, true, SmallShape(k), 24);
    v.emplace_back(k, Level::kRcb, true, SmallShape(k), kMaxKeySize);
  }
  return v;
}

std::vector<MapParam> ContractParams() {
  std::vector<MapParam> v;
  for (Kind k : kMapKinds) {
    for (Level l : {Level::kNaive, Level::kRcb}) v.emplace_back(k, l, true, SmallShape(k), 0);
  }
  for (Kind k : kByteKeyKinds) v.emplace_back(k, Level::kRcb, true, SmallShape(k), 24);
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllMapKinds, MapModel, ::testing::ValuesIn(ModelParams()), ParamName);
INSTANTIATE_TEST_SUITE_P(AllMapKinds, MapContract, ::testing::ValuesIn(ContractParams()),
                         ParamName);

}  // namespace
}  // namespace asymnvm::structures
