// The MV-B+tree's vector delete (Map::DeleteBatch, op type 4; doc/structures.md "Vector
// deletes"); the counts against one Delete per key and the replay of a logged delete vector are
// in structures_vector_test (DeleteVectorTest, instantiated for the MV-B+tree). Here: 256-byte
// keys; a batch too large for one publish cut into runs; a lock-free reader of another session
// during delete batches; the cost per key against a loop of Delete at every level (printed); and
// the real-process crash test — a child SIGKILLed at the crash point between a vector's durable
// op log and its memory logs (or at a seeded moment), after which Session::Replay leaves the
// model of the acknowledged operations plus (at the crash point: exactly) the in-flight one.
//
// ASYMNVM_MV_DELETE_ROUNDS (default 4) sets the crash rounds.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "structures/base.h"
#include "structures/kinds.h"
#include "structures/mv_common.h"
#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::StructuresTest;
using testing::TestValue;

Result<std::unique_ptr<Map>> OpenTree(frontend::Session& s, const std::string& name,
                                      uint64_t fanout, uint32_t key_size = 0,
                                      Access access = Access::kWriter) {
  Options o;
  o.param = fanout;
  o.key_size = key_size;
  o.value_size = 32;
  o.access = access;
  return OpenMap(s, Kind::kMvBPlusTree, name, o);
}

// Every pair of the map, by a scan from the first key.
std::map<Key, Value> Contents(Map& m) {
  std::vector<KeyValue> all;
  const Key from = m.key_size() == 0 ? Key(uint64_t{0}) : Key(std::string());
  Status st = m.Scan(from, 1 << 20, &all);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return std::map<Key, Value>(all.begin(), all.end());
}

// The i-th 256-byte-or-shorter key: long shared prefixes, short ones (injective).
Key LongKey(uint64_t i) {
  if (i % 5 == 4) return Key("k" + std::to_string(i));
  std::string k(256, static_cast<char>('a' + i % 3));
  const std::string n = std::to_string(i);
  k.replace(k.size() - n.size(), n.size(), n);
  return Key(k);
}

class MvDeleteVectorTest : public StructuresTest {};

// 256-byte keys at the default fan-out (7) and at 4: delete batches of neighbours and of
// scattered keys, with duplicates and absent keys, are one op log and one publish per run and
// remove exactly the present keys; then everything in one batch (the tree ends empty), across a
// session reopen.
TEST_F(MvDeleteVectorTest, ByteKeysOfTwoHundredFiftySixBytes) {
  for (uint64_t fanout : {uint64_t{0}, uint64_t{4}}) {
    const std::string name = "bytes" + std::to_string(fanout);
    std::map<Key, Value> model;
    {
      auto s = OpenSession(60, Level::kRcb);
      auto m = OpenTree(*s, name, fanout, 256);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      std::vector<KeyValue> base;
      for (uint64_t i = 0; i < 400; i++) base.emplace_back(LongKey(i), TestValue(i, 0, 1 + i % 32));
      ASSERT_TRUE((*m)->PutBatch(base).ok());
      model.insert(base.begin(), base.end());
      // Neighbours (a duplicate, absent keys): one run. Scattered keys: each its own leaf and
      // most of its path copied (nodes of 1 928 B at fan-out 7, 1 112 B at 4), more than one
      // publish holds: cut into runs, one op log and one publish each.
      std::vector<Key> near, far;
      for (uint64_t i = 100; i < 140; i++) near.push_back(LongKey(i));
      for (uint64_t i = 1000; i < 1008; i++) near.push_back(LongKey(i));  // absent
      near.push_back(LongKey(120));                                       // a duplicate
      for (uint64_t i = 0; i < 400; i += 13) far.push_back(LongKey(i));
      far.push_back(LongKey(39));
      far.push_back(LongKey(2000));
      for (const std::vector<Key>* keys : {&near, &far}) {
        uint64_t present = 0;
        for (const Key& k : *keys) present += model.erase(k);
        const auto c0 = s->counters();
        const auto p0 = internal::mv::GetMvStats(m->get()).publishes;
        uint64_t deleted = 0;
        ASSERT_TRUE((*m)->DeleteBatch(*keys, &deleted).ok());
        const auto c1 = s->counters();
        const auto p1 = internal::mv::GetMvStats(m->get()).publishes;
        EXPECT_EQ(deleted, present) << name;
        if (keys == &near) {
          EXPECT_EQ(c1.op_logs - c0.op_logs, 1u) << name;
        } else {
          EXPECT_GE(c1.op_logs - c0.op_logs, 2u) << name;
          EXPECT_LE(c1.op_logs - c0.op_logs, 4u) << name;
        }
        EXPECT_EQ(p1 - p0, c1.op_logs - c0.op_logs) << name;
        EXPECT_EQ(Contents(**m), model) << name;
      }
      uint64_t deleted = 0;
      Status vs = (*m)->Verify();
      ASSERT_TRUE(vs.ok()) << vs.ToString();
      // A batch of absent keys only: nothing removed, nothing logged.
      const std::vector<Key> absent = {LongKey(100), LongKey(2000)};
      const auto c2 = s->counters();
      ASSERT_TRUE((*m)->DeleteBatch(absent, &deleted).ok());
      EXPECT_EQ(deleted, 0u);
      EXPECT_EQ(s->counters().op_logs - c2.op_logs, 0u);
    }
    auto s = OpenSession(60, Level::kRcb);
    auto m = OpenTree(*s, name, fanout, 256);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(Contents(**m), model) << name;
    std::vector<Key> all;
    for (uint64_t i = 0; i < 400; i++) all.push_back(LongKey(i));
    uint64_t deleted = 0;
    ASSERT_TRUE((*m)->DeleteBatch(all, &deleted).ok());
    EXPECT_EQ(deleted, model.size());
    EXPECT_EQ((*m)->Count().value(), 0u);
    EXPECT_TRUE(Contents(**m).empty());
    Status vs = (*m)->Verify();
    EXPECT_TRUE(vs.ok()) << vs.ToString();
    // An integer key for a byte-key tree: the whole call fails, nothing deleted.
    ASSERT_TRUE((*m)->Put(LongKey(1), TestValue(1, 1, 4)).ok());
    const std::vector<Key> bad = {LongKey(1), Key(uint64_t{5})};
    EXPECT_EQ((*m)->DeleteBatch(bad, &deleted).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ((*m)->Count().value(), 1u);
  }
}

// Scattered keys over a tree of 20 000 keys at the default fan-out: each key's leaf is copied
// (568 B), so one publish (48 KiB) holds about 80 of them — the batch goes out in several runs,
// each within the publish budget, each its own op log and publish, and the result is exact.
TEST_F(MvDeleteVectorTest, BatchBeyondOnePublishIsCutIntoRuns) {
  auto s = OpenSession(61, Level::kRcb);
  auto m = OpenTree(*s, "big", 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::map<Key, Value> model;
  std::vector<KeyValue> base;
  for (uint64_t k = 0; k < 20000; k++) base.emplace_back(k, TestValue(k, 0, 8));
  ASSERT_TRUE((*m)->PutBatch(base).ok());
  model.insert(base.begin(), base.end());
  std::vector<Key> keys;
  for (uint64_t k = 0; k < 20000; k += 41) keys.push_back(k);  // 488 keys in 488 leaves
  for (const Key& k : keys) model.erase(k);
  const auto before = internal::mv::GetMvStats(m->get());
  const auto c0 = s->counters();
  uint64_t deleted = 0;
  ASSERT_TRUE((*m)->DeleteBatch(keys, &deleted).ok());
  const auto c1 = s->counters();
  const auto after = internal::mv::GetMvStats(m->get());
  EXPECT_EQ(deleted, keys.size());
  const uint64_t runs = c1.op_logs - c0.op_logs;
  EXPECT_GE(runs, 5u);  // 488 leaves × 600 B > 5 publishes
  EXPECT_LE(runs, 12u);
  EXPECT_EQ(after.publishes - before.publishes, runs);
  EXPECT_LE(c1.txn_bytes - c0.txn_bytes, runs * 48 * 1024 + runs * 1024);
  EXPECT_EQ(Contents(**m), model);
  Status vs = (*m)->Verify();
  EXPECT_TRUE(vs.ok()) << vs.ToString();
}

// A lock-free reader (another session) during delete batches: every stable key (multiples of
// 10) is always found with its value, and every scan returns the stable keys of its range, while
// the writer deletes and re-inserts the keys around them — whole leaves emptied and removed,
// the tree shrinking and growing — with the grace period at its default.
TEST_F(MvDeleteVectorTest, LockFreeReaderNeverMissesStableKeys) {
  auto ws = OpenSession(62, Level::kRcb);
  auto w = OpenTree(*ws, "conc", 4);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::map<uint64_t, Value> stable;
  std::vector<KeyValue> base;
  for (uint64_t k = 0; k < 2000; k++) {
    base.emplace_back(k, TestValue(k, 0, 16));
    if (k % 10 == 0) stable[k] = base.back().second;
  }
  ASSERT_TRUE((*w)->PutBatch(base).ok());
  ASSERT_TRUE((*w)->Sync().ok());
  auto rs = OpenSession(63, Level::kRcb);
  auto r = OpenTree(*rs, "conc", 4, 0, Access::kReader);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::atomic<bool> done{false}, failed{false};
  std::atomic<uint64_t> reads{0};
  std::string failure;
  std::thread reader([&] {
    std::mt19937_64 rng(5);
    while (!done.load() && !failed.load()) {
      const uint64_t k = (rng() % 200) * 10;
      if (rng() % 4 != 0) {
        Value v;
        Status st = (*r)->Get(k, &v);
        if (!st.ok()) {
          failure = "get " + std::to_string(k) + ": " + st.ToString();
        } else if (v != stable.at(k)) {
          failure = "get " + std::to_string(k) + ": wrong value";
        }
      } else {
        std::vector<KeyValue> out;
        Status st = (*r)->Scan(k, 40, &out);
        if (!st.ok()) {
          failure = "scan " + std::to_string(k) + ": " + st.ToString();
        } else if (!out.empty()) {
          const uint64_t last = out.back().first.u64();
          size_t found = 0;
          for (const auto& [key, v] : out) found += key.u64() % 10 == 0 ? 1 : 0;
          if (out.front().first.u64() != k || found != (last - k) / 10 + 1)
            failure = "scan from " + std::to_string(k) + " to " + std::to_string(last) + ": " +
                      std::to_string(found) + " stable keys";
        } else {
          failure = "scan " + std::to_string(k) + ": empty";
        }
      }
      reads++;
      if (!failure.empty()) failed = true;
    }
  });
  std::mt19937_64 rng(3);
  std::string writer_error;
  uint64_t removed = 0;
  for (int i = 0; i < 80 && !failed.load(); i++) {
    // Delete a range of 30..330 keys (leaves emptied) and scattered keys, then put some back.
    const uint64_t lo = rng() % 1700, hi = lo + 30 + rng() % 300;
    std::vector<Key> dels;
    for (uint64_t k = lo; k < hi; k++) {
      if (k % 10 != 0) dels.push_back(k);
    }
    for (int j = 0; j < 20; j++) {
      const uint64_t k = rng() % 2000;
      if (k % 10 != 0) dels.push_back(k);
    }
    uint64_t deleted = 0;
    Status st = (*w)->DeleteBatch(dels, &deleted);
    removed += deleted;
    std::vector<KeyValue> puts;
    for (uint64_t k = lo; k < hi && st.ok(); k += 1 + rng() % 3) {
      if (k % 10 != 0) puts.emplace_back(k, TestValue(k, i, 16));
    }
    if (st.ok()) st = (*w)->PutBatch(puts);
    if (!st.ok()) {
      writer_error = st.ToString();
      break;
    }
  }
  const uint64_t until = reads.load() + 20;
  while (reads.load() < until && !failed.load()) std::this_thread::yield();
  done = true;
  reader.join();
  EXPECT_TRUE(failure.empty()) << failure;
  ASSERT_TRUE(writer_error.empty()) << writer_error;
  EXPECT_GT(removed, 1000u);
  EXPECT_GT(reads.load(), 0u);
  Status vs = (*w)->Verify();
  EXPECT_TRUE(vs.ok()) << vs.ToString();
}

// The cost per key of a delete batch against the same keys deleted one Delete each, at every
// level: 3 000 keys (fan-out 32), 64 keys asked (52 present: a run of 32 neighbours and 20
// scattered ones; absent keys and duplicates). Printed for doc/structures.md; the assertions are
// the orders the numbers must keep: 1 op log, no more transactions, and at r (no cache) fewer
// remote reads (at rc and rcb both read each node once through the cache: about equal).
TEST_F(MvDeleteVectorTest, CostPerKeyAgainstOneDeleteEach) {
  uint64_t fe = 70;
  for (Level level : {Level::kR, Level::kRc, Level::kRcb}) {
    auto s = OpenSession(fe++, level);
    auto a = OpenTree(*s, "cost-batch", 0);
    auto b = OpenTree(*s, "cost-loop", 0);
    ASSERT_TRUE(a.ok() && b.ok());
    std::vector<KeyValue> base;
    for (uint64_t k = 1; k <= 3000; k++) base.emplace_back(k, TestValue(k, 0, 8));
    ASSERT_TRUE((*a)->PutBatch(base).ok());
    ASSERT_TRUE((*b)->PutBatch(base).ok());
    std::vector<Key> keys;
    for (uint64_t k = 100; k < 132; k++) keys.push_back(k);
    for (uint64_t k = 1000; k < 3000; k += 100) keys.push_back(k);
    for (uint64_t k = 5000; k < 5010; k++) keys.push_back(k);
    keys.push_back(100);
    keys.push_back(2900);
    ASSERT_TRUE(s->Fence().ok());
    const auto c0 = s->counters();
    uint64_t deleted = 0;
    ASSERT_TRUE((*a)->DeleteBatch(keys, &deleted).ok());
    ASSERT_TRUE((*a)->Sync().ok());
    const auto c1 = s->counters();
    uint64_t one_by_one = 0;
    for (const Key& k : keys) one_by_one += (*b)->Delete(k).ok() ? 1 : 0;
    ASSERT_TRUE((*b)->Sync().ok());
    const auto c2 = s->counters();
    ASSERT_EQ(deleted, 52u);
    ASSERT_EQ(one_by_one, 52u);
    auto per = [&](uint64_t x) { return static_cast<double>(x) / 52.0; };
    const char* ln = level == Level::kR ? "r" : level == Level::kRc ? "rc" : "rcb";
    auto row = [&](const char* what, const frontend::Counters& x, const frontend::Counters& y) {
      std::printf(
          "level %-3s %-12s per key: %.3f op logs (%.0f B), %.2f remote reads (%.0f B), %.3f "
          "txns (%.0f B)\n",
          ln, what, per(y.op_logs - x.op_logs), per(y.op_log_bytes - x.op_log_bytes),
          per(y.remote_reads - x.remote_reads), per(y.remote_read_bytes - x.remote_read_bytes),
          per(y.txns - x.txns), per(y.txn_bytes - x.txn_bytes));
    };
    row("DeleteBatch", c0, c1);
    row("Delete loop", c1, c2);
    EXPECT_EQ(c1.op_logs - c0.op_logs, 1u);
    EXPECT_EQ(c2.op_logs - c1.op_logs, 52u);
    EXPECT_LE(c1.txns - c0.txns, c2.txns - c1.txns);
    if (level == Level::kR) {
      EXPECT_LT(c1.remote_reads - c0.remote_reads, c2.remote_reads - c1.remote_reads);
    }
    EXPECT_EQ(Contents(**a), Contents(**b));
  }
}

// ---- the crash test ----

constexpr uint64_t kCrashKeys = 400;
constexpr int kCrashOps = 400;

// Operation i of a seeded sequence: one in three a PutBatch of 5..40 pairs, else a DeleteBatch
// of 5..40 keys (random ones, a range of neighbours, duplicates, absent ones). Each is small
// enough to be one vector run (one op log, one publish), so it is atomic across a crash.
struct CrashOp {
  bool del = false;
  std::vector<KeyValue> puts;
  std::vector<Key> dels;
};

CrashOp MakeCrashOp(std::mt19937_64& rng, int i) {
  CrashOp op;
  const int n = 5 + static_cast<int>(rng() % 36);
  op.del = i > 0 && rng() % 3 != 0;
  if (op.del) {
    const uint64_t lo = rng() % kCrashKeys;
    for (int k = 0; k < n; k++)
      op.dels.push_back(k % 2 == 0 ? (lo + k) % (kCrashKeys + 20) : rng() % (kCrashKeys + 20));
  } else {
    for (int k = 0; k < (i == 0 ? 300 : n); k++) {
      const uint64_t key = i == 0 ? static_cast<uint64_t>(k) : rng() % kCrashKeys;
      op.puts.emplace_back(key, TestValue(key, static_cast<uint64_t>(i), 1 + rng() % 32));
    }
  }
  return op;
}

void ApplyCrashOp(const CrashOp& op, std::map<Key, Value>* model) {
  for (const auto& [k, v] : op.puts) (*model)[k] = v;
  for (const Key& k : op.dels) model->erase(k);
}

std::string CrashName(uint64_t fe) { return "mvdel-" + std::to_string(fe); }

// The child: spec address|fe|seed|ackfile. Appends one byte to the ack file per operation that
// returned OK.
[[noreturn]] void RunChild(const char* spec) {
  const std::vector<std::string> f = testing::SplitSpec(spec);
  if (f.size() != 4) _exit(90);
  const uint64_t fe = std::stoull(f[1]);
  auto session = frontend::Session::Open(test_support::TestSessionOptions({f[0]}, fe, Level::kRcb));
  if (!session.ok()) _exit(92);
  auto m = OpenTree(**session, CrashName(fe), 4);
  if (!m.ok()) _exit(93);
  const int fd = ::open(f[3].c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) _exit(94);
  std::mt19937_64 rng(std::stoull(f[2]));
  for (int i = 0; i < kCrashOps; i++) {
    const CrashOp op = MakeCrashOp(rng, i);
    Status st = op.del ? (*m)->DeleteBatch(op.dels) : (*m)->PutBatch(op.puts);
    if (!st.ok()) {
      std::fprintf(stderr, "child op %d: %s\n", i, st.ToString().c_str());
      _exit(95);
    }
    if (::write(fd, "x", 1) != 1) _exit(96);
  }
  ::close(fd);
  m->reset();
  session->reset();
  _exit(0);
}

int64_t Acked(const std::string& path) { return testing::AckedRecords(path, 1); }

int CrashRounds() {
  const char* env = std::getenv("ASYMNVM_MV_DELETE_ROUNDS");
  return env ? std::max(1, std::atoi(env)) : 4;
}

// Rounds r % 4 != 3: the child kills itself at the Nth vector publish between the run's
// durable op log and its memory logs (crash point structures.vector.mid_writes): replay must
// complete the in-flight batch. r % 4 == 3: SIGKILL once a seeded number of operations were
// acknowledged: the in-flight batch all or nothing.
TEST_F(MvDeleteVectorTest, CrashBetweenOpLogAndMemoryLogsReplaysTheBatch) {
  std::mt19937_64 seeds(1717);
  int delete_points = 0;
  for (int round = 0; round < CrashRounds(); round++) {
    const uint64_t fe = 300 + static_cast<uint64_t>(round);
    const uint64_t seed = seeds();
    const bool at_point = round % 4 != 3;
    const int64_t nth = 20 + static_cast<int64_t>(seeds() % 200);
    const std::string acks = path_ + ".acks";
    std::remove(acks.c_str());
    const std::string spec =
        be_->address() + "|" + std::to_string(fe) + "|" + std::to_string(seed) + "|" + acks;
    std::vector<std::pair<std::string, std::string>> env{{"ASYMNVM_MV_DELETE_CHILD", spec}};
    if (at_point) {
      env.emplace_back("ASYMNVM_CRASH_AT", "structures.vector.mid_writes:" + std::to_string(nth));
    }
    const testing::ChildEnd end = testing::RunSelfAsChild(
        env, "mv-delete-child", [&] { return !at_point && Acked(acks) >= nth; });
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
    const int64_t acked = Acked(acks);
    std::map<Key, Value> before, after;
    std::mt19937_64 rng(seed);
    bool inflight_del = false;
    for (int64_t i = 0; i <= acked && i < kCrashOps; i++) {
      const CrashOp op = MakeCrashOp(rng, static_cast<int>(i));
      if (i < acked) ApplyCrashOp(op, &before);
      if (i == acked) inflight_del = op.del;
      ApplyCrashOp(op, &after);
    }
    auto s = OpenSession(fe, Level::kRcb);
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    auto m = OpenTree(*s, CrashName(fe), 4);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    Status rep = s->Replay();
    ASSERT_TRUE(rep.ok()) << rep.ToString();
    Status vs = (*m)->Verify();
    ASSERT_TRUE(vs.ok()) << vs.ToString();
    const auto got = Contents(**m);
    EXPECT_TRUE(got == before || got == after)
        << "round " << round << ": " << got.size() << " keys, model " << before.size() << " (or "
        << after.size() << " with the in-flight batch) after " << acked << " acknowledged ops";
    if (at_point) {
      EXPECT_TRUE(got == after) << "round " << round << ": the logged batch was not replayed";
      EXPECT_NE(before, after) << "round " << round;  // the crashed batch changed something
      delete_points += inflight_del ? 1 : 0;
    }
    EXPECT_EQ((*m)->Count().value(), got.size());
    std::printf("round %d: %s after %lld acknowledged ops, in-flight %s %s, replayed %llu\n", round,
                at_point ? "crash point" : "SIGKILL", static_cast<long long>(acked),
                inflight_del ? "DeleteBatch" : "PutBatch",
                got == after && got != before ? "applied" : "absent",
                static_cast<unsigned long long>(s->counters().replayed_ops));
    std::remove(acks.c_str());
    if (HasFailure()) return;
  }
  if (CrashRounds() >= 3) {
    EXPECT_GE(delete_points, 1);  // a delete batch crashed and replayed
  }
}

}  // namespace
}  // namespace asymnvm::structures

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("ASYMNVM_MV_DELETE_CHILD"))
    asymnvm::structures::RunChild(spec);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
