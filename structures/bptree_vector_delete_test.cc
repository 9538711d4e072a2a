// The B+tree's vector delete (Map::DeleteBatch, op type 4; doc/structures.md "Vector
// operations"): one op log, one gather and one transaction per run, the leaf and internal-node
// rebalancing planned in DRAM, a logged run replayed (keys already gone skipped), byte keys, and
// the real-process crash test — a child killed between a delete run's durable op log and its
// memory logs (crash point structures.vector.mid_writes) or at a seeded moment, after which
// Session::Replay leaves the tree of the acknowledged operations with or without the in-flight
// one.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "structures/base.h"
#include "structures/kinds.h"
#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::TestValue;

Result<std::unique_ptr<Map>> OpenT(frontend::Session& s, const std::string& name,
                                   uint64_t fanout = 8, uint32_t key_size = 0) {
  Options o;
  o.param = fanout;
  o.value_size = 16;
  o.key_size = key_size;
  return internal::OpenBPlusTree(s, name, o);
}

std::map<Key, Value> Contents(Map& m) {
  std::vector<KeyValue> all;
  Status st = m.Scan(m.key_size() == 0 ? Key(uint64_t{0}) : Key(std::string()), 1u << 20, &all);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return std::map<Key, Value>(all.begin(), all.end());
}

void ExpectModel(Map& m, const std::map<Key, Value>& model) {
  Status vs = m.Verify();
  ASSERT_TRUE(vs.ok()) << vs.ToString();
  EXPECT_EQ(Contents(m), model);
  for (const auto& [k, v] : model) {
    Value got;
    ASSERT_TRUE(m.Get(k, &got).ok()) << k;
    EXPECT_EQ(got, v) << k;
  }
  auto n = m.Count();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, model.size());
}

class FakeFetcher : public frontend::OpLogFetcher {
 public:
  Result<std::vector<frontend::RecoveredOp>> Fetch(uint64_t, uint64_t) override { return ops; }
  std::vector<frontend::RecoveredOp> ops;
};

class BPlusTreeDeleteVectorTest : public testing::StructuresTest {};

// 64 keys (runs of neighbours, scattered ones, absent ones, duplicates), 52 of them present: one
// op log and one transaction instead of 52, and fewer remote reads than 52 Deletes; then the
// whole tree in one call (height 0 after it), and the keys again.
TEST_F(BPlusTreeDeleteVectorTest, OneOpLogPerRunFewerReadsAndTheWholeTree) {
  auto s = OpenSession(70, Level::kR);
  auto a = OpenT(*s, "dels");
  auto b = OpenT(*s, "dels-one-by-one");
  ASSERT_TRUE(a.ok() && b.ok());
  std::map<Key, Value> model;
  std::vector<KeyValue> base;
  for (uint64_t k = 1; k <= 3000; k++) base.emplace_back(k, TestValue(k, 0, 16));
  ASSERT_TRUE((*a)->PutBatch(base).ok());
  ASSERT_TRUE((*b)->PutBatch(base).ok());
  model.insert(base.begin(), base.end());
  std::vector<Key> keys;
  for (uint64_t k = 100; k < 132; k++) keys.push_back(k);
  for (uint64_t k = 1000; k < 3000; k += 100) keys.push_back(k);
  for (uint64_t k = 5000; k < 5010; k++) keys.push_back(k);  // absent
  keys.push_back(100);
  keys.push_back(2900);
  ASSERT_TRUE(s->Fence().ok());
  auto c0 = s->counters();
  uint64_t deleted = 0;
  ASSERT_TRUE((*a)->DeleteBatch(keys, &deleted).ok());
  ASSERT_TRUE(s->Fence().ok());
  auto c1 = s->counters();
  uint64_t one_by_one = 0;
  for (const Key& k : keys) one_by_one += (*b)->Delete(k).ok() ? 1 : 0;
  ASSERT_TRUE(s->Fence().ok());
  auto c2 = s->counters();
  EXPECT_EQ(deleted, 52u);
  EXPECT_EQ(one_by_one, 52u);
  EXPECT_EQ(c1.op_logs - c0.op_logs, 1u);
  EXPECT_EQ(c2.op_logs - c1.op_logs, 52u);
  EXPECT_LT(c1.remote_reads - c0.remote_reads, c2.remote_reads - c1.remote_reads);
  EXPECT_LT(c1.txns - c0.txns, c2.txns - c1.txns);
  std::printf(
      "DeleteBatch of 64 keys (52 present) at r, fan-out 8, 3000 keys: %llu op log(s), %llu "
      "remote reads (%llu B), %llu txns (%llu B); 64 Deletes: %llu op logs, %llu remote reads "
      "(%llu B), %llu txns (%llu B)\n",
      static_cast<unsigned long long>(c1.op_logs - c0.op_logs),
      static_cast<unsigned long long>(c1.remote_reads - c0.remote_reads),
      static_cast<unsigned long long>(c1.remote_read_bytes - c0.remote_read_bytes),
      static_cast<unsigned long long>(c1.txns - c0.txns),
      static_cast<unsigned long long>(c1.txn_bytes - c0.txn_bytes),
      static_cast<unsigned long long>(c2.op_logs - c1.op_logs),
      static_cast<unsigned long long>(c2.remote_reads - c1.remote_reads),
      static_cast<unsigned long long>(c2.remote_read_bytes - c1.remote_read_bytes),
      static_cast<unsigned long long>(c2.txns - c1.txns),
      static_cast<unsigned long long>(c2.txn_bytes - c1.txn_bytes));
  for (const Key& k : keys) model.erase(k);
  ExpectModel(**a, model);
  ExpectModel(**b, model);
  // Everything in one call: the tree ends empty.
  std::vector<Key> all;
  for (uint64_t k = 0; k <= 3001; k++) all.push_back(k);
  auto c3 = s->counters();
  ASSERT_TRUE((*b)->DeleteBatch(all, &deleted).ok());
  auto c4 = s->counters();
  std::printf(
      "DeleteBatch of the whole tree (%llu keys): %llu op log(s), %llu remote reads, %llu "
      "txns (%llu B)\n",
      static_cast<unsigned long long>(deleted),
      static_cast<unsigned long long>(c4.op_logs - c3.op_logs),
      static_cast<unsigned long long>(c4.remote_reads - c3.remote_reads),
      static_cast<unsigned long long>(c4.txns - c3.txns),
      static_cast<unsigned long long>(c4.txn_bytes - c3.txn_bytes));
  EXPECT_EQ(deleted, model.size());
  EXPECT_LE(c4.op_logs - c3.op_logs, 8u);
  EXPECT_EQ((*b)->Count().value(), 0u);
  auto h = internal::BPlusTreeHeight(b->get());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, 0u);
  ASSERT_TRUE((*b)->DeleteBatch(all, &deleted).ok());  // an empty tree: nothing to do
  EXPECT_EQ(deleted, 0u);
  ASSERT_TRUE((*b)->PutBatch(base).ok());
  std::map<Key, Value> again(base.begin(), base.end());
  ExpectModel(**b, again);
  // Bad input: nothing deleted.
  std::vector<Key> bad{Key(uint64_t{5}), Key(std::string("x"))};
  EXPECT_EQ((*b)->DeleteBatch(bad, &deleted).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->Count().value(), base.size());
}

// Random batches of mixed sizes against a model at every level and fan-outs 4 and 8: every
// batch leaves a filled tree (Verify rejects under-full nodes), and the counts match.
TEST_F(BPlusTreeDeleteVectorTest, RandomBatchesAtEveryLevelKeepTheTreeFilled) {
  for (Level level : testing::kAllLevels) {
    for (uint64_t f : {4, 8}) {
      SCOPED_TRACE(std::string(frontend::LevelName(level)) + ", fan-out " + std::to_string(f));
      auto s = OpenSession(71 + static_cast<uint64_t>(level), level);
      auto m = OpenT(*s, std::string("rnd-") + frontend::LevelName(level) + std::to_string(f), f);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      std::map<Key, Value> model;
      std::mt19937_64 rng(f * 31 + static_cast<uint64_t>(level));
      for (int round = 0; round < 12; round++) {
        std::vector<KeyValue> put;
        for (int i = 0; i < 150; i++) {
          const uint64_t k = rng() % 1500;
          put.emplace_back(k, TestValue(k, round, 16));
        }
        ASSERT_TRUE((*m)->PutBatch(put).ok());
        for (const auto& [k, v] : internal::SortedUnique(put)) model[k] = v;
        ASSERT_EQ((*m)->Count().value(), model.size()) << "round " << round;
        ASSERT_EQ(Contents(**m), model) << "round " << round;
        std::vector<Key> del;
        const int n = round % 4 == 3 ? 1000 : 1 + static_cast<int>(rng() % 200);
        for (int i = 0; i < n; i++) del.push_back(rng() % 1500);
        uint64_t deleted = 0, want = 0;
        for (const Key& k : std::set<Key>(del.begin(), del.end())) want += model.erase(k);
        ASSERT_TRUE((*m)->DeleteBatch(del, &deleted).ok());
        EXPECT_EQ(deleted, want);
        Status vs = (*m)->Verify();
        ASSERT_TRUE(vs.ok()) << "round " << round << ": " << vs.ToString();
      }
      ExpectModel(**m, model);
    }
  }
}

// 256-byte keys at fan-out 4: batches that empty whole subtrees.
TEST_F(BPlusTreeDeleteVectorTest, ByteKeys) {
  auto s = OpenSession(76, Level::kRcb);
  auto m = OpenT(*s, "bytes", 4, 256);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto key = [](uint64_t i) {
    std::string d = std::to_string(i);
    return Key(std::string(240, i % 2 ? '\xff' : 'k') + std::string(8 - d.size(), '0') + d);
  };
  std::map<Key, Value> model;
  std::vector<KeyValue> put;
  for (uint64_t i = 0; i < 400; i++) put.emplace_back(key(i), TestValue(i, 0, 16));
  ASSERT_TRUE((*m)->PutBatch(put).ok());
  model.insert(put.begin(), put.end());
  std::mt19937_64 rng(5);
  for (int round = 0; round < 6; round++) {
    std::vector<Key> del;
    const uint64_t from = rng() % 400;
    for (uint64_t i = from; i < std::min<uint64_t>(400, from + 60); i++) del.push_back(key(i));
    for (int i = 0; i < 20; i++) del.push_back(key(rng() % 500));
    uint64_t deleted = 0, want = 0;
    for (const Key& k : std::set<Key>(del.begin(), del.end())) want += model.erase(k);
    ASSERT_TRUE((*m)->DeleteBatch(del, &deleted).ok());
    EXPECT_EQ(deleted, want);
    Status vs = (*m)->Verify();
    ASSERT_TRUE(vs.ok()) << vs.ToString();
  }
  ExpectModel(**m, model);
  std::vector<Key> rest;
  for (const auto& [k, v] : model) rest.push_back(k);
  uint64_t deleted = 0;
  ASSERT_TRUE((*m)->DeleteBatch(rest, &deleted).ok());
  EXPECT_EQ(deleted, rest.size());
  ExpectModel(**m, {});
}

// A crashed session had logged a delete vector it never applied: the next one replays it (the
// keys it no longer finds skipped), at both key kinds.
TEST_F(BPlusTreeDeleteVectorTest, LoggedDeleteVectorIsReplayed) {
  for (uint32_t key_size : {0u, 64u}) {
    SCOPED_TRACE("key_size " + std::to_string(key_size));
    const uint64_t fe = 77 + key_size;
    auto key = [&](uint64_t i) -> Key {
      if (key_size == 0) return Key(i);
      std::string d = std::to_string(i);
      return Key(std::string(56, 'r') + std::string(8 - d.size(), '0') + d);
    };
    std::map<Key, Value> model;
    uint32_t id = 0;
    {
      auto s = OpenSession(fe, Level::kRcb);
      auto m = OpenT(*s, "replay" + std::to_string(key_size), 4, key_size);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      std::vector<KeyValue> put;
      for (uint64_t i = 0; i < 800; i++) put.emplace_back(key(i), TestValue(i, 0, 16));
      Status st = (*m)->PutBatch(put);
      ASSERT_TRUE(st.ok()) << st.ToString();
      model.insert(put.begin(), put.end());
      id = (*m)->structure().id;
    }
    auto s = OpenSession(fe, Level::kRcb);
    RegisterReplays(*s);
    auto m = OpenT(*s, "replay" + std::to_string(key_size), 4, key_size);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ((*m)->structure().id, id);
    std::vector<KeyValue> run;
    for (uint64_t i = 100; i < 700; i++)
      if (i % 7 != 0) run.emplace_back(key(i), Value{});
    run.emplace_back(key(9999), Value{});  // absent: skipped
    FakeFetcher f;
    frontend::RecoveredOp op;
    op.op_seq = s->recovered_opn() + 1;
    op.structure_id = id;
    op.op_type = internal::kOpDeleteVector;
    op.payload = internal::EncodeVector(run);
    f.ops.push_back(op);
    // The same run again: everything already gone.
    op.op_seq++;
    f.ops.push_back(op);
    ASSERT_TRUE(s->Replay(&f).ok());
    for (const auto& [k, v] : run) model.erase(k);
    ExpectModel(**m, model);
  }
}

// ---- the crash test ----

constexpr uint64_t kKeys = 3000;
constexpr int kFillOps = 30;  // PutBatch of 50 keys each (one run each)
constexpr int kOps = 150;

// Operation i: the fill, then a delete batch of 10..60 keys (absent ones among them) three times
// in four, else a put batch of 20 keys.
struct Op {
  bool del = false;
  std::vector<KeyValue> kvs;  // keys (delete) or pairs
};

Op MakeOp(std::mt19937_64& rng, int i) {
  Op op;
  if (i < kFillOps) {
    for (uint64_t k = 0; k < 50; k++) {
      const uint64_t key = (static_cast<uint64_t>(i) * 50 + k) * 2;
      op.kvs.emplace_back(key, TestValue(key, 0, 16));
    }
    return op;
  }
  op.del = rng() % 4 != 0;
  const int n = op.del ? 10 + static_cast<int>(rng() % 51) : 20;
  for (int k = 0; k < n; k++) {
    const uint64_t key = rng() % kKeys;
    op.kvs.emplace_back(key, op.del ? Value{} : TestValue(key, static_cast<uint64_t>(i), 16));
  }
  return op;
}

void Apply(const Op& op, std::map<Key, Value>* model) {
  for (const auto& [k, v] : op.kvs) {
    if (op.del) {
      model->erase(k);
    } else {
      (*model)[k] = v;
    }
  }
}

std::string Name(uint64_t fe) { return "bpdel-crash-" + std::to_string(fe); }

// spec: address|fe|seed|ackfile
[[noreturn]] void RunChild(const char* spec) {
  const std::vector<std::string> f = testing::SplitSpec(spec);
  if (f.size() != 4) _exit(90);
  frontend::SessionOptions o;
  o.backends = {f[0]};
  o.frontend_id = std::stoull(f[1]);
  o.level = Level::kRcb;
  o.batch_ops = 16;
  o.batch_timeout = std::chrono::hours(1);
  auto session = frontend::Session::Open(o);
  if (!session.ok()) _exit(92);
  auto m = OpenT(**session, Name(o.frontend_id), 4);
  if (!m.ok()) {
    std::fprintf(stderr, "child open: %s\n", m.status().ToString().c_str());
    _exit(93);
  }
  const int fd = open(f[3].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) _exit(94);
  std::mt19937_64 rng(std::stoull(f[2]));
  for (int i = 0; i < kOps; i++) {
    const Op op = MakeOp(rng, i);
    Status st;
    if (op.del) {
      std::vector<Key> keys;
      for (const auto& [k, v] : op.kvs) keys.push_back(k);
      st = (*m)->DeleteBatch(keys);
    } else {
      st = (*m)->PutBatch(op.kvs);
    }
    if (!st.ok()) {
      std::fprintf(stderr, "child op %d: %s\n", i, st.ToString().c_str());
      _exit(95);
    }
    const int32_t rec = i;  // acknowledged: one 4-byte record per operation
    if (write(fd, &rec, 4) != 4) _exit(96);
  }
  _exit(0);
}

int64_t AckedOps(const std::string& path) { return testing::AckedRecords(path, 4); }

class BPlusTreeDeleteVectorCrashTest : public testing::StructuresTest {};

// Rounds 0..3: the child kills itself at the Nth vector run (N past the fill, so a delete or a
// put batch) between its durable op log and its memory logs: replay completes that run. Round 4:
// SIGKILL once a seeded number of operations were acknowledged: with or without the in-flight
// one.
TEST_F(BPlusTreeDeleteVectorCrashTest, KilledBetweenOpLogAndMemoryLogsReplaysTheRun) {
  std::mt19937_64 seeds(777);
  int completed_deletes = 0;
  for (int round = 0; round < 5; round++) {
    const uint64_t fe = 500 + static_cast<uint64_t>(round);
    const uint64_t seed = seeds();
    const bool at_point = round < 4;
    const int64_t nth = kFillOps + 1 + static_cast<int64_t>(seeds() % 100);
    const std::string acks = path_ + ".acks";
    std::remove(acks.c_str());
    const std::string spec =
        be_->address() + "|" + std::to_string(fe) + "|" + std::to_string(seed) + "|" + acks;
    std::vector<std::pair<std::string, std::string>> env{{"ASYMNVM_BPDEL_CHILD", spec}};
    if (at_point) {
      env.emplace_back("ASYMNVM_CRASH_AT", "structures.vector.mid_writes:" + std::to_string(nth));
    }
    const testing::ChildEnd end = testing::RunSelfAsChild(
        env, "bpdel-child", [&] { return !at_point && AckedOps(acks) >= nth; });
    const int status = end.status;
    const bool exited = end.exited;
    if (at_point) {
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << "round " << round << ": the child did not stop at the crash point (status " << status
          << ")";
    } else {
      ASSERT_TRUE(!exited || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
          << "child failed: status " << status;
    }
    const int64_t acked = AckedOps(acks);
    std::map<Key, Value> before, after;
    std::mt19937_64 rng(seed);
    bool inflight_del = false;
    for (int64_t i = 0; i <= acked && i < kOps; i++) {
      const Op op = MakeOp(rng, static_cast<int>(i));
      if (i < acked) Apply(op, &before);
      if (i == acked) inflight_del = op.del;
      Apply(op, &after);
    }
    auto s = OpenSession(fe, Level::kRcb);
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    auto m = OpenT(*s, Name(fe), 4);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Status rep = s->Replay();
    ASSERT_TRUE(rep.ok()) << rep.ToString();
    Status vs = (*m)->Verify();
    ASSERT_TRUE(vs.ok()) << "round " << round << ": " << vs.ToString();
    const auto got = Contents(**m);
    EXPECT_TRUE(got == before || got == after)
        << "round " << round << ": " << got.size() << " keys, model " << before.size() << " (or "
        << after.size() << " with the in-flight operation)";
    if (at_point) {
      EXPECT_EQ(got, after) << "round " << round << ": the logged run was not replayed";
      if (inflight_del && got != before) completed_deletes++;
    }
    EXPECT_EQ((*m)->Count().value(), got.size());
    std::printf("round %d: %s after %lld acknowledged ops, in-flight %s %s, replayed %llu\n", round,
                at_point ? "crash point" : "SIGKILL", static_cast<long long>(acked),
                inflight_del ? "delete batch" : "put batch",
                got == after && got != before ? "applied" : "absent",
                static_cast<unsigned long long>(s->counters().replayed_ops));
    if (HasFailure()) return;
  }
  // The seeds put at least one crash point inside a delete batch that removed keys.
  EXPECT_GE(completed_deletes, 1);
}

}  // namespace
}  // namespace asymnvm::structures

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("ASYMNVM_BPDEL_CHILD")) asymnvm::structures::RunChild(spec);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
