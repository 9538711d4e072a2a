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

using Model = std::map<uint64_t, Value>;

// (kind, level, optimize, shape: Options::param, 0 = the kind's default).
using MapParam = std::tuple<Kind, Level, bool, uint64_t>;

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
  std::unique_ptr<Map> Open(frontend::Session& s, Access access = Access::kWriter) {
    Options o;
    o.value_size = kValueSize;
    o.optimize = std::get<2>(GetParam());
    o.param = std::get<3>(GetParam());
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
  static void ExpectEquals(Map& m, const Model& model, std::mt19937_64& rng) {
    for (uint64_t k = 1; k <= 520; k++) {
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
      const uint64_t from = rng() % 530;
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
  static void RandomOps(Map& m, Model& model, std::mt19937_64& rng, int n) {
    for (int i = 0; i < n; i++) {
      const uint64_t key = 1 + rng() % 500;
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
      } else if (op < 95) {
        std::vector<KeyValue> batch;
        const size_t len = 1 + rng() % 40;
        for (size_t j = 0; j < len; j++) batch.emplace_back(1 + rng() % 500, RandomValue(rng));
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
                      std::get<3>(GetParam()));
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
  EXPECT_EQ(w->Get(42, &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(w->Delete(42).code(), StatusCode::kNotFound);
  EXPECT_EQ(w->Put(42, Value(kValueSize + 1, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Get(42, &v).code(), StatusCode::kNotFound) << "a refused put wrote something";
  // A batch with one value too long writes nothing at all.
  std::vector<KeyValue> batch = {{1, Value(4, 1)}, {2, Value(kValueSize + 1, 2)}, {3, Value(4, 3)}};
  EXPECT_EQ(w->PutBatch(batch).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Get(1, &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(r->Put(1, Value(4, 1)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r->Delete(1).code(), StatusCode::kFailedPrecondition);
  std::vector<KeyValue> out;
  if (IsOrdered(kind())) {
    EXPECT_TRUE(w->Scan(0, 10, &out).ok());
    EXPECT_TRUE(out.empty());
  } else {
    EXPECT_EQ(w->Scan(0, 10, &out).code(), StatusCode::kNotSupported);
  }
  // The same name as another kind is refused.
  Options o;
  o.value_size = kValueSize;
  auto other = OpenSequence(*ws, Kind::kStack, "conformance", o);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  // Empty values are values.
  ASSERT_TRUE(w->Put(7, Value{}).ok());
  ASSERT_TRUE(w->Get(7, &v).ok());
  EXPECT_TRUE(v.empty());
}

std::string ParamName(const ::testing::TestParamInfo<MapParam>& info) {
  const auto& [kind, level, optimize, shape] = info.param;
  std::string name = std::string(KindName(kind)) + "_" + frontend::LevelName(level);
  if (!optimize) name += "_plain";
  if (shape != SmallShape(kind)) name += "_p" + std::to_string(shape);
  return name;
}

std::vector<MapParam> ModelParams() {
  std::vector<MapParam> v;
  for (Kind k : kMapKinds) {
    for (Level l : testing::kAllLevels) v.emplace_back(k, l, true, SmallShape(k));
    v.emplace_back(k, Level::kRcb, false, SmallShape(k));
  }
  v.emplace_back(Kind::kHashTable, Level::kRcb, true, 0);  // the default 65 536 buckets
  v.emplace_back(Kind::kSkipList, Level::kRc, true, 3);    // towers capped at 3
  return v;
}

std::vector<MapParam> ContractParams() {
  std::vector<MapParam> v;
  for (Kind k : kMapKinds) {
    for (Level l : {Level::kNaive, Level::kRcb}) v.emplace_back(k, l, true, SmallShape(k));
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllMapKinds, MapModel, ::testing::ValuesIn(ModelParams()), ParamName);
INSTANTIATE_TEST_SUITE_P(AllMapKinds, MapContract, ::testing::ValuesIn(ContractParams()),
                         ParamName);

}  // namespace
}  // namespace asymnvm::structures
