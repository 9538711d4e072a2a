// Partitioned maps over a frontend::Cluster of two back-ends: a model test for every map kind,
// reopening with the back-ends listed in another order, readers, bad input, and one back-end
// (a real asymnvm-backend process) SIGKILLed and restarted at another address mid-run.
#include "asymnvm/structures/partitioned.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "asymnvm/cluster.h"
#include "backend/backend.h"
#include "structures/testing.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::structures {
namespace {

using frontend::Cluster;
using frontend::Level;
using testing::TestBackendOptions;
using testing::TestValue;

const Kind kMapKinds[] = {Kind::kHashTable, Kind::kSkipList, Kind::kBst,
                          Kind::kBPlusTree, Kind::kMvBst,    Kind::kMvBPlusTree};

std::string TempPool(const std::string& tag) {
  return test_support::TempPath("part", test_support::CurrentTestName() + "-" + tag + ".pool");
}

frontend::SessionOptions ClusterOpts(std::vector<std::string> addrs, uint64_t fe, Level level) {
  return test_support::TestSessionOptions(std::move(addrs), fe, level);
}

class PartitionedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; i++) {
      paths_[i] = TempPool(std::to_string(i));
      std::remove(paths_[i].c_str());
      Start(i);
    }
  }
  void TearDown() override {
    for (int i = 0; i < 2; i++) {
      if (be_[i]) be_[i]->Stop();
      be_[i].reset();
      std::remove(paths_[i].c_str());
    }
  }
  void Start(int i) {
    auto be = backend::Backend::Start(TestBackendOptions(paths_[i]));
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    be_[i] = std::move(*be);
  }
  std::unique_ptr<Cluster> OpenCluster(uint64_t fe, Level level, bool reversed = false) {
    std::vector<std::string> a = {be_[0]->address(), be_[1]->address()};
    if (reversed) std::swap(a[0], a[1]);
    auto c = Cluster::Open(ClusterOpts(a, fe, level));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::string paths_[2];
  std::unique_ptr<backend::Backend> be_[2];
};

// Compares the whole content (Get of every model key and of absent keys; Scan when ordered).
void ExpectContent(Map& m, const std::map<uint64_t, Value>& model, uint64_t key_space) {
  for (uint64_t k = 0; k < key_space; k++) {
    Value v;
    Status s = m.Get(k, &v);
    auto it = model.find(k);
    if (it == model.end()) {
      ASSERT_EQ(s.code(), StatusCode::kNotFound) << "key " << k << ": " << s.ToString();
    } else {
      ASSERT_TRUE(s.ok()) << "key " << k << ": " << s.ToString();
      ASSERT_EQ(v, it->second) << "key " << k;
    }
  }
  auto n = m.Count();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, model.size());
  if (IsOrdered(m.kind())) {
    std::vector<KeyValue> kvs;
    ASSERT_TRUE(m.Scan(0, model.size() + 10, &kvs).ok());
    ASSERT_EQ(kvs.size(), model.size());
    size_t i = 0;
    for (const auto& [k, v] : model) {
      ASSERT_EQ(kvs[i].first, k);
      ASSERT_EQ(kvs[i].second, v);
      i++;
    }
    // A scan from the middle with a small limit merges the partitions correctly.
    if (model.size() > 20) {
      auto mid = std::next(model.begin(), model.size() / 2);
      ASSERT_TRUE(m.Scan(mid->first, 7, &kvs).ok());
      ASSERT_EQ(kvs.size(), 7u);
      for (auto& kv : kvs) {
        ASSERT_EQ(kv.first, mid->first);
        mid++;
      }
    }
  }
  ASSERT_TRUE(m.Verify().ok()) << m.Verify().ToString();
}

TEST(PartitionOf, SpreadsKeysAndIsStable) {
  EXPECT_EQ(PartitionOf(12345, 1), 0u);
  std::vector<int> hits(4, 0);
  for (uint64_t k = 0; k < 4000; k++) hits[PartitionOf(k, 4)]++;
  for (int h : hits) EXPECT_GT(h, 800);  // 1000 expected per partition
  // The placement is part of the on-PM format: a fixed key always maps to the same partition.
  const uint32_t p = PartitionOf(42, 7);
  for (int i = 0; i < 3; i++) EXPECT_EQ(PartitionOf(42, 7), p);
}

TEST_F(PartitionedTest, EveryMapKindAgainstAModelAcrossReopenAndReaders) {
  for (Kind kind : kMapKinds) {
    SCOPED_TRACE(KindName(kind));
    const std::string name = std::string("p-") + KindName(kind);
    std::map<uint64_t, Value> model;
    std::mt19937_64 rng(static_cast<uint64_t>(kind) * 77);
    constexpr uint64_t kKeys = 300;
    {
      auto c = OpenCluster(10, Level::kRcb);
      ASSERT_TRUE(c);
      Options o;
      o.value_size = 32;
      auto m = OpenPartitioned(*c, kind, name, o);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      for (int i = 0; i < 1500; i++) {
        const uint64_t k = rng() % kKeys;
        if (rng() % 4 == 0) {
          Status s = (*m)->Delete(k);
          if (model.erase(k)) {
            ASSERT_TRUE(s.ok()) << s.ToString();
          } else {
            ASSERT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
          }
        } else {
          Value v = TestValue(k, i, 1 + rng() % 32);
          ASSERT_TRUE((*m)->Put(k, v).ok());
          model[k] = v;
        }
      }
      ExpectContent(**m, model, kKeys);
      // Both back-ends hold a share: each holds its own partition structure.
      for (size_t j = 0; j < c->size(); j++) {
        auto part = OpenMap(c->session(j), kind, name + "#" + std::to_string(j),
                            Options{.access = Access::kReader});
        ASSERT_TRUE(part.ok()) << part.status().ToString();
        auto n = (*part)->Count();
        ASSERT_TRUE(n.ok());
        EXPECT_GT(*n, model.size() / 4) << "partition " << j;
      }
    }
    // Reopen with the back-ends in the other order (the map names pools, not positions), after
    // restarting both back-ends.
    for (int i = 0; i < 2; i++) {
      be_[i]->Stop();
      be_[i].reset();
      Start(i);
    }
    auto c = OpenCluster(10, Level::kRc, /*reversed=*/true);
    ASSERT_TRUE(c);
    auto m = OpenPartitioned(*c, kind, name);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)->value_size(), 32u);
    ExpectContent(**m, model, kKeys);
    ASSERT_TRUE((*m)->Put(kKeys + 1, TestValue(1, 1, 8)).ok());
    model[kKeys + 1] = TestValue(1, 1, 8);
    ASSERT_TRUE((*m)->Sync().ok());
    // A reader from another front-end sees everything synced.
    auto rc = Cluster::Open(ClusterOpts({be_[0]->address(), be_[1]->address()}, 11, Level::kRc));
    ASSERT_TRUE(rc.ok()) << rc.status().ToString();
    auto r = OpenPartitioned(**rc, kind, name, Options{.access = Access::kReader});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectContent(**r, model, kKeys + 2);
    EXPECT_EQ((*r)->Put(1, TestValue(1, 1, 8)).code(), StatusCode::kFailedPrecondition);
  }
}

// Byte-string keys: the partition of a key hashes its bytes, scans merge in bytewise order across
// the partitions, Verify's scan continues with Successor, and the key size survives a restart of
// both back-ends (it is in the partition map).
TEST_F(PartitionedTest, ByteKeysAcrossPartitionsAndRestart) {
  const Kind kByteKeyKinds[] = {Kind::kHashTable, Kind::kSkipList, Kind::kBst,
                                Kind::kBPlusTree, Kind::kMvBst,    Kind::kMvBPlusTree};
  for (Kind kind : kByteKeyKinds) {
    SCOPED_TRACE(KindName(kind));
    const std::string name = std::string("pb-") + KindName(kind);
    auto key = [](uint64_t i) {
      std::string k = (i % 2 ? "user:" : "u") + std::to_string(i * 7919 % 1000);
      if (i % 5 == 0) k.push_back('\0');
      return Key(k);
    };
    std::map<Key, Value> model;
    {
      auto c = OpenCluster(20, Level::kRcb);
      ASSERT_TRUE(c);
      Options o;
      o.value_size = 16;
      o.key_size = 12;
      auto m = OpenPartitioned(*c, kind, name, o);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      EXPECT_EQ((*m)->key_size(), 12u);
      for (uint64_t i = 0; i < 400; i++) {
        Value v = TestValue(i, 1, 1 + i % 16);
        ASSERT_TRUE((*m)->Put(key(i), v).ok()) << key(i);
        model[key(i)] = v;
      }
      for (uint64_t i = 0; i < 400; i += 3) {
        ASSERT_TRUE((*m)->Delete(key(i)).ok());
        model.erase(key(i));
      }
      EXPECT_EQ((*m)->Put(5, Value(1, 1)).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ((*m)->Put(std::string(13, 'k'), Value(1, 1)).code(), StatusCode::kInvalidArgument);
      ASSERT_TRUE((*m)->Sync().ok());
    }
    for (int i = 0; i < 2; i++) {
      be_[i]->Stop();
      be_[i].reset();
      Start(i);
    }
    auto c = OpenCluster(20, Level::kRc, /*reversed=*/true);
    ASSERT_TRUE(c);
    auto m = OpenPartitioned(*c, kind, name);  // key_size 0 asked: the map keeps its 12
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)->key_size(), 12u);
    for (uint64_t i = 0; i < 400; i++) {
      Value v;
      Status st = (*m)->Get(key(i), &v);
      auto it = model.find(key(i));
      if (it == model.end()) {
        ASSERT_EQ(st.code(), StatusCode::kNotFound) << key(i);
      } else {
        ASSERT_TRUE(st.ok()) << key(i) << ": " << st.ToString();
        ASSERT_EQ(v, it->second);
      }
    }
    auto n = (*m)->Count();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, model.size());
    ASSERT_TRUE((*m)->Verify().ok()) << (*m)->Verify().ToString();
    if (IsOrdered(kind)) {
      // Page through everything 50 at a time with Successor: bytewise order, nothing missed.
      std::vector<Key> seen;
      Key from = Key(std::string_view());
      for (;;) {
        std::vector<KeyValue> kvs;
        ASSERT_TRUE((*m)->Scan(from, 50, &kvs).ok());
        for (auto& kv : kvs) seen.push_back(kv.first);
        if (kvs.size() < 50) break;
        from = Successor(kvs.back().first);
      }
      std::vector<Key> want;
      for (const auto& [k, v] : model) want.push_back(k);
      EXPECT_EQ(seen, want);
    }
  }
}

TEST_F(PartitionedTest, BadInputGetsClearErrors) {
  auto c = OpenCluster(12, Level::kRcb);
  ASSERT_TRUE(c);
  // Sequences cannot be partitioned.
  EXPECT_EQ(OpenPartitioned(*c, Kind::kStack, "s").status().code(), StatusCode::kInvalidArgument);
  // Too many partitions, a name too long for its suffixes.
  EXPECT_EQ(OpenPartitioned(*c, Kind::kBPlusTree, "t", {}, {.partitions = kMaxPartitions + 1})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenPartitioned(*c, Kind::kBPlusTree, std::string(62, 'n')).status().code(),
            StatusCode::kInvalidArgument);
  // A reader of a missing map.
  EXPECT_EQ(OpenPartitioned(*c, Kind::kBPlusTree, "missing", Options{.access = Access::kReader})
                .status()
                .code(),
            StatusCode::kNotFound);
  // Type mismatches in every direction.
  {
    auto plain = OpenMap(c->session(1), Kind::kBst, "plain");
    ASSERT_TRUE(plain.ok());
  }
  auto r = OpenPartitioned(*c, Kind::kBst, "plain");
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  {
    auto p = OpenPartitioned(*c, Kind::kSkipList, "parted", {}, {.partitions = 3});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
  }
  r = OpenPartitioned(*c, Kind::kHashTable, "parted");
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("partitioned skiplist"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(OpenMap(c->session(0), Kind::kSkipList, "parted").status().code(),
            StatusCode::kFailedPrecondition);
  // The same back-end twice is not a cluster of two.
  auto twice = Cluster::Open(ClusterOpts({be_[0]->address(), be_[0]->address()}, 13, Level::kRcb));
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument) << twice.status().ToString();
  // A cluster without one of the map's pools: the missing pool is named.
  auto one = Cluster::Open(ClusterOpts({be_[0]->address()}, 14, Level::kRcb));
  ASSERT_TRUE(one.ok());
  r = OpenPartitioned(**one, Kind::kSkipList, "parted");
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find(frontend::UuidString(c->pool_uuid(1))), std::string::npos)
      << r.status().ToString();
  one->reset();
  // A corrupt map copy is detected, not trusted.
  auto e = c->session(0).OpenRoot("parted");
  ASSERT_TRUE(e.ok());
  auto block = c->session(0).ReadWord(e->root_addr);
  ASSERT_TRUE(block.ok() && *block != 0);
  const uint8_t junk[4] = {0xde, 0xad, 0xbe, 0xef};
  ASSERT_TRUE(c->session(0).Write(*block + 64, junk).ok());
  r = OpenPartitioned(*c, Kind::kSkipList, "parted");
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
}

#ifdef ASYMNVM_BACKEND_BIN
// Two asymnvm-backend processes; a writer runs a mixed workload over a partitioned B+tree and a
// partitioned hash table; back-end 1 is SIGKILLed mid-run and restarted at a new address; the
// front-end reconnects it (replaying its op logs) and goes on. Every acknowledged operation must
// be there; an operation that failed while the back-end was down may or may not have happened.
TEST(PartitionedRestart, OneOfTwoBackendsKilledAndRestartedMidRun) {
  const std::string pools[2] = {TempPool("d0"), TempPool("d1")};
  for (const auto& p : pools) std::remove(p.c_str());
  auto start = [&](int i) -> std::unique_ptr<driver::BackendProcess> {
    auto be = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, pools[i], "64M",
                                            {"--pm-mode", "flush", "--log-segment", "256K"});
    EXPECT_TRUE(be.ok()) << be.status().ToString();
    return be.ok() ? std::move(*be) : nullptr;
  };
  std::unique_ptr<driver::BackendProcess> d[2] = {start(0), start(1)};
  ASSERT_TRUE(d[0] && d[1]);
  auto c = Cluster::Open(ClusterOpts({d[0]->address(), d[1]->address()}, 20, Level::kRcb));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Cluster& cl = **c;
  const Kind kinds[2] = {Kind::kBPlusTree, Kind::kHashTable};
  std::unique_ptr<Map> maps[2];
  for (int t = 0; t < 2; t++) {
    auto m = OpenPartitioned(cl, kinds[t], std::string("r-") + KindName(kinds[t]));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    maps[t] = std::move(*m);
  }
  std::map<uint64_t, Value> model[2];
  // Keys whose last operation failed: the value before it and the one attempted (nullopt =
  // absent).
  std::map<uint64_t, std::pair<std::optional<Value>, std::optional<Value>>> doubt[2];
  std::mt19937_64 rng(2024);
  constexpr uint64_t kKeys = 400;
  int failed = 0, after_kill_ok = 0;
  auto step = [&](int i, bool killed) {
    const int t = static_cast<int>(rng() % 2);
    const uint64_t k = rng() % kKeys;
    std::optional<Value> before;
    if (auto it = model[t].find(k); it != model[t].end()) before = it->second;
    std::optional<Value> after;
    Status s;
    if (rng() % 5 == 0) {
      s = maps[t]->Delete(k);
      if (s.code() == StatusCode::kNotFound && !before && !doubt[t].count(k)) s = Status::Ok();
    } else {
      after = TestValue(k, i, 1 + rng() % 64);
      s = maps[t]->Put(k, *after);
    }
    if (s.ok()) {
      doubt[t].erase(k);
      if (after) {
        model[t][k] = *after;
      } else {
        model[t].erase(k);
      }
      if (killed) after_kill_ok++;
    } else if (s.code() == StatusCode::kNotFound) {
      // A delete of a key in doubt that turned out absent: it is absent now.
      doubt[t].erase(k);
      model[t].erase(k);
    } else {
      ASSERT_TRUE(killed) << s.ToString();
      ASSERT_EQ(PartitionOf(k, 2) == 0 ? 0 : 1, 1)
          << "a partition on the live back-end failed: " << s.ToString();
      failed++;
      if (!doubt[t].count(k)) {
        doubt[t][k] = {before, after};
      } else {
        doubt[t][k].second = after;
      }
    }
  };
  for (int i = 0; i < 1500; i++) {
    step(i, false);
    if (HasFatalFailure()) return;
  }
  d[1]->Kill();
  for (int i = 1500; i < 1700; i++) {
    step(i, true);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(after_kill_ok, 0);  // the partitions on back-end 0 kept working
  d[1] = start(1);              // same pool, new address
  ASSERT_TRUE(d[1]);
  Status rs = cl.Reconnect(1, d[1]->address());
  ASSERT_TRUE(rs.ok()) << rs.ToString();
  size_t in_doubt = doubt[0].size() + doubt[1].size();
  std::printf(
      "partitioned restart: %d ops failed while back-end 1 was down, %d succeeded on "
      "back-end 0, %zu keys in doubt, %llu ops replayed at reconnect\n",
      failed, after_kill_ok, in_doubt, (unsigned long long)cl.session(1).counters().replayed_ops);
  // Resolve the keys in doubt by what is there (either outcome is correct; anything else is not).
  for (int t = 0; t < 2; t++) {
    for (const auto& [k, ba] : doubt[t]) {
      Value v;
      Status s = maps[t]->Get(k, &v);
      std::optional<Value> now;
      if (s.ok())
        now = v;
      else
        ASSERT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
      ASSERT_TRUE(now == ba.first || now == ba.second) << KindName(kinds[t]) << " key " << k;
      if (now)
        model[t][k] = *now;
      else
        model[t].erase(k);
    }
    doubt[t].clear();
  }
  for (int i = 1700; i < 2200; i++) {
    step(i, false);
    if (HasFatalFailure()) return;
  }
  for (int t = 0; t < 2; t++) ExpectContent(*maps[t], model[t], kKeys);
  // Clean stop of everything, restart both, reopen and check again.
  for (auto& m : maps) m.reset();
  c->reset();
  for (int i = 0; i < 2; i++) {
    ASSERT_TRUE(d[i]->Stop().ok());
    d[i] = start(i);
    ASSERT_TRUE(d[i]);
  }
  auto c2 = Cluster::Open(ClusterOpts({d[1]->address(), d[0]->address()}, 20, Level::kRc));
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  for (int t = 0; t < 2; t++) {
    auto m = OpenPartitioned(**c2, kinds[t], std::string("r-") + KindName(kinds[t]));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ExpectContent(**m, model[t], kKeys);
  }
  c2->reset();
  for (auto& x : d) (void)x->Stop();
  for (const auto& p : pools) {
    std::remove(p.c_str());
    std::remove((p + ".backend.log").c_str());
  }
}
#endif

}  // namespace
}  // namespace asymnvm::structures
