// Servers that must not serve or be promoted (doc/kv.md §Fencing, §Replication):
//  * KvFence: a primary SIGSTOPped past its ZooKeeper session timeout loses its shard to its
//    backup; when it wakes, requests that reached it while it was stopped must not be served from
//    its stale role — a GET must not return the value the new primary has overwritten, and a PUT
//    must not be acknowledged unless the new primary holds it. The woken server then exits with
//    status 5 (its session expired) instead of serving.
//  * KvDigest: a backup that cannot apply what its primary replicated (its pool is full) marks
//    itself unsynced, so when the primary is SIGKILLed it is not promoted (the shard waits for its
//    primary) and no acknowledged PUT is lost.
//  * KvRejoin: a backup its primary removed while it stayed alive (SIGSTOPped past the backup
//    bound, --backup-timeout-ms) is held out of the shard by the manager (--rejoin-backoff-ms)
//    instead of being re-added at once, so a backup that cannot keep up does not stall the shard's
//    writes over and over; with the hold-off off it rejoins and catches up.
//  * KvBatchFence: in batch replication, a primary that can neither replicate a batch to a backup
//    nor remove that backup from the map drops the batch's replies and fences itself (asymnvm-kv
//    exits with status 5).
//  * KvCatchUp: a restarted backup is being caught up when a write misses it (SIGSTOPped past the
//    bound: removed) and it is added back at once; that catch-up, finished before the write, must
//    not mark it synced (else, promoted, it lacks the acknowledged write); with the check off
//    (ASYMNVM_TEST_DISABLE_CATCHUP_VOID, the negative control) the write is lost.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <thread>

#include "asymnvm/coord.h"
#include "coord/testing/zk_server.h"
#include "kv/shard_map.h"
#include "tests/kv/kv_test_util.h"

namespace asymnvm::kv {
namespace {

using namespace std::chrono_literals;
using testutil::Proc;
using testutil::StartKv;
using testutil::TempDir;

std::vector<std::string> Args(TempDir& d, int i, const std::string& coord) {
  return {"--pool",
          d.File("kv" + std::to_string(i) + ".pool"),
          "--size",
          "64M",
          "--listen",
          "unix://" + d.File("kv" + std::to_string(i) + ".sock"),
          "--pm-mode",
          "flush",
          "--coord",
          coord,
          "--workers",
          "1",
          "--shards",
          "1",
          "--rf",
          "2",
          "--initial-servers",
          "2"};
}

// The shard map, read at most every 20 ms (WaitFor polls every millisecond).
Result<ShardMap> ReadMap(coord::Coordinator& c) {
  std::this_thread::sleep_for(20ms);
  auto n = c.Get("/asymnvm/kv/default/map");
  if (!n.ok()) return n.status();
  return ShardMap::Decode(n->data);
}

std::string Address(const Proc& p) {  // "listening <address>"
  return p.first_line.substr(p.first_line.find(' ') + 1);
}

TEST(KvFence, SigstoppedPrimaryOnZooKeeperServesNothingStaleWhenItWakes) {
  const std::string why = coord::testing::ZooKeeperUnavailableReason();
  if (!why.empty()) GTEST_SKIP() << "ZooKeeper tests need " << why << " (scripts/setup.sh)";
  auto zk = coord::testing::ZkEnsemble::Start(1, coord::testing::After(60s));
  ASSERT_TRUE(zk.ok()) << zk.status().ToString();
  const std::string coord = "zk:" + (*zk)->connect_string();
  auto zc = coord::Coordinator::Open(coord);
  ASSERT_TRUE(zc.ok()) << zc.status().ToString();
  TempDir d;
  std::vector<Proc> procs(2);
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < 2; i++) ts.emplace_back([&, i] { procs[i] = StartKv(Args(d, i, coord)); });
    for (auto& t : ts) t.join();
  }
  ASSERT_GT(procs[0].pid, 0);
  ASSERT_GT(procs[1].pid, 0);
  // The shard's primary and its synced backup. Not the first map's: the primary, on taking up
  // its role, re-marks the backup joining (epoch 2) and catches it up (synced from epoch 3); a
  // primary stopped in between leaves a backup that may never be promoted (seen under load).
  std::string primary_uuid;
  int primary = -1;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto m = ReadMap(**zc);
        if (!m.ok() || m->epoch < 3 || m->assignment.size() != 1 ||
            m->assignment[0].backups.size() != 1 || !m->assignment[0].backups[0].synced) {
          return false;
        }
        primary_uuid = m->assignment[0].primary;
        const std::string oq = m->servers[primary_uuid].oq;
        for (int i = 0; i < 2; i++) {
          if (Address(procs[i]) == oq) primary = i;
        }
        return primary >= 0;
      },
      60s))
      << "no synced map";
  ClientOptions co;
  co.coordinator = coord;
  co.retry_deadline = 60s;
  auto c = Client::Open(co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Put("k", "v1").ok());

  // Clients bound to the old primary alone (explicit address: no map to learn from), opened while
  // it still serves; their requests are sent while it is stopped and wait for it.
  auto direct = [&]() {
    ClientOptions o;
    o.servers = {Address(procs[primary])};
    o.timeout = 60s;
    o.retry_deadline = 2s;
    auto r = Client::Open(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  };
  auto getter = direct(), putter = direct();
  ASSERT_TRUE(getter && putter);

  ASSERT_EQ(::kill(procs[primary].pid, SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{procs[primary].pid};
  // The session times out (4 s), the backup becomes primary.
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto m = ReadMap(**zc);
        return m.ok() && m->assignment.size() == 1 && m->assignment[0].primary != primary_uuid;
      },
      120s))
      << "the backup was not promoted past the stopped primary";
  // A client that reads the new map (the first one's map still names the stopped server: its
  // requests there would only time out, outcome unknown).
  c = Client::Open(co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  {
    Status st = (*c)->Put("k", "v2");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  auto stale_get = std::async(std::launch::async, [&] { return getter->Get("k"); });
  auto stale_put = std::async(std::launch::async, [&] { return putter->Put("k", "v3"); });
  std::this_thread::sleep_for(300ms);  // both requests sit in the stopped server's queues
  ASSERT_EQ(::kill(procs[primary].pid, SIGCONT), 0);

  auto g = stale_get.get();
  if (g.ok()) {
    EXPECT_NE(g->value, "v1") << "the woken old primary served its overwritten value";
  }
  const Status p = stale_put.get();
  auto now = (*c)->Get("k");
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  if (p.ok()) {
    EXPECT_EQ(now->value, "v3") << "a PUT acknowledged by the woken old primary is lost";
  } else {
    EXPECT_EQ(now->value, "v2");
  }
  // The woken server exits 5: its session expired.
  int status = -1;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        int st = 0;
        if (::waitpid(procs[primary].pid, &st, WNOHANG) != procs[primary].pid) return false;
        status = st;
        return true;
      },
      60s))
      << "the woken old primary went on running";
  procs[primary].pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << "wait status " << status;
  // The new primary still serves; the restarted server rejoins as its backup.
  procs[primary] = StartKv(Args(d, primary, coord));
  ASSERT_GT(procs[primary].pid, 0);
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto m = ReadMap(**zc);
        return m.ok() && m->assignment.size() == 1 && m->assignment[0].backups.size() == 1 &&
               m->assignment[0].backups[0].synced;
      },
      60s))
      << "the restarted server did not rejoin as a synced backup";
  auto after = (*c)->Get("k");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->value, now->value);
}

// Two servers (rf 2, one shard) on a directory coordinator, and what the tests read of the map.
class TwoServers : public ::testing::Test {
 protected:
  using ArgsFn = std::function<std::vector<std::string>(int)>;

  void SetUp() override {
    auto zc = coord::Coordinator::Open(coord_);
    ASSERT_TRUE(zc.ok()) << zc.status().ToString();
    zc_ = std::move(*zc);
  }
  // Both at once: the first map waits for two servers.
  void StartBoth(const ArgsFn& args, const std::vector<std::pair<std::string, std::string>>& env) {
    procs_.resize(2);
    {
      std::thread t([&] { procs_[1] = StartKv(args(1), env); });
      procs_[0] = StartKv(args(0), env);
      t.join();
    }
    ASSERT_GT(procs_[0].pid, 0);
    ASSERT_GT(procs_[1].pid, 0);
  }
  // 1: the shard's one backup is synced; 0: it is joining; -1: the shard has no backup.
  int BackupState(uint64_t* epoch = nullptr) {
    auto m = ReadMap(*zc_);
    if (!m.ok() || m->assignment.size() != 1 || m->assignment[0].backups.size() != 1) return -1;
    if (epoch != nullptr) *epoch = m->epoch;
    return m->assignment[0].backups[0].synced ? 1 : 0;
  }
  bool WaitBackupState(int state) {
    return testutil::WaitFor([&] { return BackupState() == state; }, 60s);
  }
  bool PrimaryIs(const Proc& p) {
    auto m = ReadMap(*zc_);
    return m.ok() && m->assignment.size() == 1 &&
           m->servers[m->assignment[0].primary].oq == Address(p);
  }
  // The index in procs_ of the shard's backup (-1: none).
  int BackupIndex() {
    auto m = ReadMap(*zc_);
    if (!m.ok() || m->assignment.size() != 1 || m->assignment[0].backups.size() != 1) return -1;
    const std::string& oq = m->servers[m->assignment[0].backups[0].uuid].oq;
    for (size_t i = 0; i < procs_.size(); i++) {
      if (Address(procs_[i]) == oq) return static_cast<int>(i);
    }
    return -1;
  }
  std::unique_ptr<Client> OpenClient() {
    ClientOptions co;
    co.coordinator = coord_;
    co.retry_deadline = 30s;
    co.timeout = 30s;
    auto c = Client::Open(co);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  TempDir d_;
  const std::string coord_ = "dir:" + d_.File("coord");
  std::unique_ptr<coord::Coordinator> zc_;
  std::vector<Proc> procs_;
};

using KvDigest = TwoServers;

TEST_F(KvDigest, ABackupThatCannotApplyIsMarkedUnsyncedAndNeverPromoted) {
  auto args = [&](int i, const std::string& size) -> std::vector<std::string> {
    return {"--pool", d_.File("kv" + std::to_string(i) + ".pool"), "--size", size, "--segment-size",
            "2060K", "--listen", "unix://" + d_.File("kv" + std::to_string(i) + ".sock"),
            "--pm-mode", "flush", "--resp-port", "-1", "--coord", coord_, "--workers", "1",
            "--shards", "1", "--rf", "2", "--initial-servers", "2",
            // A backup the primary removes (its FLUSHes time out while its digest waits) rejoins
            // at once, as before the hold-off: this test is about what a rejoined backup that
            // cannot apply may become (never promoted), so it needs it back in the shard.
            "--rejoin-backoff-ms", "0",
            // The backup must stay in the shard until the primary is killed below (it is the
            // only one that can take over): a FLUSH slowed past the default 250 ms bound on a
            // loaded machine would remove it first and leave the shard waiting for its primary.
            "--backup-timeout-ms", "5000"};
  };
  // Server 0 (room for ~250 MiB) must be the primary and server 1 (room for ~24 MiB) its backup.
  // The first map picks the primary by uuid; when it picks server 1, server 1 is SIGKILLed (server
  // 0 takes over) and restarted (it rejoins as the backup).
  ASSERT_NO_FATAL_FAILURE(StartBoth([&](int i) { return args(i, i == 0 ? "256M" : "48M"); }, {}));
  Proc& big = procs_[0];
  Proc& small = procs_[1];
  ASSERT_TRUE(WaitBackupState(1));
  if (PrimaryIs(small)) {
    testutil::Kill9(small);
    ASSERT_TRUE(testutil::WaitFor([&] { return PrimaryIs(big); }, 60s));
    small = StartKv(args(1, "48M"));
    ASSERT_GT(small.pid, 0);
    ASSERT_TRUE(WaitBackupState(1));
  }
  ASSERT_TRUE(PrimaryIs(big));
  std::string primary_uuid;
  {
    auto m = ReadMap(*zc_);
    ASSERT_TRUE(m.ok());
    primary_uuid = m->assignment[0].primary;
  }
  auto c = OpenClient();
  ASSERT_NE(c, nullptr);
  // Distinct keys of 64 KiB until the backup has marked itself unsynced (its store full), then
  // a little more. Every acknowledged PUT is in the oracle.
  std::map<std::string, std::string> acked;
  bool marked = false;
  for (int i = 0; i < 1200 && !marked; i++) {
    const std::string key = "key" + std::to_string(i);
    const std::string value(64 * 1024, static_cast<char>('a' + i % 26));
    Status st = c->Put(key, value);
    ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
    acked[key] = value;
    if (i % 20 == 19) marked = BackupState() == 0;
  }
  ASSERT_TRUE(marked) << "the backup never marked itself unsynced (its pool should be full)";
  for (int i = 0; i < 20; i++) {
    const std::string key = "late" + std::to_string(i);
    ASSERT_TRUE(c->Put(key, "v").ok());
    acked[key] = "v";
  }
  EXPECT_NE(BackupState(), 1);
  // The primary dies: the unsynced backup must not take the shard.
  testutil::Kill9(big);
  std::this_thread::sleep_for(1s);
  {
    auto m = ReadMap(*zc_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->assignment[0].primary, primary_uuid) << "the backup missing entries was promoted";
  }
  // Back: every acknowledged PUT is there.
  big = StartKv(args(0, "256M"));
  ASSERT_GT(big.pid, 0);
  auto c2 = OpenClient();
  ASSERT_NE(c2, nullptr);
  for (const auto& [k, v] : acked) {
    auto g = c2->Get(k);
    ASSERT_TRUE(g.ok()) << k << ": " << g.status().ToString();
    ASSERT_TRUE(g->found) << k << " acknowledged and lost";
    ASSERT_EQ(g->value, v) << k;
  }
}

// RemoveAliveBackup SIGSTOPs the backup, has a PUT's replication time out (the primary removes
// the backup) and SIGCONTs it.
class KvRejoin : public TwoServers {
 protected:
  void RemoveAliveBackup(const std::string& backoff_ms) {
    ASSERT_NO_FATAL_FAILURE(StartBoth(
        [&](int i) {
          auto a = Args(d_, i, coord_);
          a.insert(a.end(), {"--resp-port", "-1", "--rejoin-backoff-ms", backoff_ms});
          return a;
        },
        {}));
    ASSERT_TRUE(WaitBackupState(1));
    c_ = OpenClient();
    ASSERT_NE(c_, nullptr);
    ASSERT_TRUE(c_->Put("before", "1").ok());
    // The map settles: the first catch-up may re-mark the backup; wait until it is synced again
    // (a slow machine takes longer than the pause).
    std::this_thread::sleep_for(1s);
    ASSERT_TRUE(WaitBackupState(1)) << "the backup did not settle as synced";
    ASSERT_EQ(BackupState(&epoch_before_), 1);
    const int backup = BackupIndex();
    ASSERT_GE(backup, 0);
    ASSERT_TRUE(testutil::StopAndWait(procs_[backup].pid));
    Status st = c_->Put("during", "2");  // replication times out: the primary removes the backup
    kill(procs_[backup].pid, SIGCONT);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  std::unique_ptr<Client> c_;
  uint64_t epoch_before_ = 0;  // the map epoch before the removal
};

TEST_F(KvRejoin, ABackupRemovedWhileAliveIsHeldOut) {
  RemoveAliveBackup("3600000");
  if (HasFatalFailure()) return;
  // Twenty manager periods and more writes: the removed server stays out (held for an hour);
  // the shard keeps serving without it.
  for (int i = 0; i < 20; i++) {
    std::this_thread::sleep_for(200ms);
    ASSERT_TRUE(c_->Put("after" + std::to_string(i), "3").ok());
  }
  auto m = ReadMap(*zc_);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->assignment[0].backups.empty()) << "the removed backup was re-added at once";
  auto g = c_->Get("during");
  ASSERT_TRUE(g.ok() && g->found && g->value == "2");
}

// Negative control of the above: with the hold-off off the removed backup rejoins and catches up.
TEST_F(KvRejoin, WithoutHoldOffARemovedBackupRejoinsAtOnce) {
  RemoveAliveBackup("0");
  if (HasFatalFailure()) return;
  // Removed (one map), joining again (another), synced (a third).
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        auto m = ReadMap(*zc_);
        return m.ok() && m->epoch >= epoch_before_ + 3 && m->assignment[0].backups.size() == 1 &&
               m->assignment[0].backups[0].synced;
      },
      60s))
      << "the removed backup did not rejoin";
}

class KvCatchUp : public TwoServers {
 protected:
  // Lines of held_ that start with `word`: "held" (a catch-up's stream finished, its hold began)
  // or "released" (that catch-up is over).
  size_t Lines(const std::string& word) {
    std::ifstream in(held_);
    size_t n = 0;
    for (std::string line; std::getline(in, line);) n += line.rfind(word + " ", 0) == 0 ? 1 : 0;
    return n;
  }
  size_t StreamsHeld() { return Lines("held"); }
  // Returns what the promoted backup reads for the write that missed its catch-up.
  void RunCatchUpMissedAWrite(bool check, std::string* during, std::string* before) {
    // Every catch-up holds its finished stream 6 s before marking its backup synced (and says so
    // in held_): the window in which the write below misses the backup and the manager adds it
    // back.
    std::vector<std::pair<std::string, std::string>> env{{"ASYMNVM_TEST_CATCHUP_HOLD_MS", "6000"},
                                                         {"ASYMNVM_TEST_CATCHUP_HELD_FILE", held_}};
    if (!check) env.push_back({"ASYMNVM_TEST_DISABLE_CATCHUP_VOID", "1"});
    auto args = [&](int i) {
      auto a = Args(d_, i, coord_);
      a.insert(a.end(), {"--resp-port", "-1", "--rejoin-backoff-ms", "0"});
      return a;
    };
    ASSERT_NO_FATAL_FAILURE(StartBoth(args, env));
    ASSERT_TRUE(WaitBackupState(1));
    auto c = OpenClient();
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Put("before", "1").ok());
    const int b = BackupIndex();
    ASSERT_GE(b, 0);
    const std::string backup_oq = Address(procs_[b]);
    const int a = 1 - b;
    // No catch-up from the start is still holding (one would keep the restarted backup from
    // getting a catch-up of its own until it ends: the same backup, the same shard).
    ASSERT_TRUE(testutil::WaitFor([&] { return Lines("held") == Lines("released"); }, 60s));
    // The backup restarts: the manager adds it back as joining, and the primary's catch-up
    // streams the shard to it (a few entries) and holds.
    testutil::Kill9(procs_[b]);
    ASSERT_TRUE(WaitBackupState(-1));
    const size_t held_before = StreamsHeld();
    procs_[b] = StartKv(args(b), env);
    ASSERT_GT(procs_[b].pid, 0);
    ASSERT_TRUE(testutil::WaitFor([&] { return StreamsHeld() > held_before; }, 60s))
        << "no catch-up of the restarted backup finished its stream";
    ASSERT_EQ(BackupState(), 0) << "the backup is not joining while its catch-up holds";
    // A write misses it: stopped past the backup bound, it is removed before the PUT is
    // acknowledged; woken, it is added back at once (no rejoin hold-off) while that catch-up
    // holds.
    ASSERT_TRUE(testutil::StopAndWait(procs_[b].pid));
    Status st = c->Put("during", "2");
    kill(procs_[b].pid, SIGCONT);
    ASSERT_TRUE(st.ok()) << st.ToString();
    // Synced (by that catch-up without the check; by a fresh one, which holds 6 s too, with it).
    ASSERT_TRUE(WaitBackupState(1)) << "the backup never became synced again";
    // The primary dies: the backup takes the shard over and serves what it holds.
    testutil::Kill9(procs_[a]);
    ASSERT_TRUE(testutil::WaitFor(
        [&] {
          auto mm = ReadMap(*zc_);
          return mm.ok() && mm->servers[mm->assignment[0].primary].oq == backup_oq;
        },
        60s))
        << "the synced backup was not promoted";
    auto g = c->Get("during");
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    *during = g->found ? g->value : "(absent)";
    auto g0 = c->Get("before");
    ASSERT_TRUE(g0.ok()) << g0.status().ToString();
    *before = g0->found ? g0->value : "(absent)";
  }

  const std::string held_ = d_.File("catchups-held");
};

TEST_F(KvCatchUp, ACatchUpThatAWriteMissedDoesNotMarkItsBackupSynced) {
  std::string during, before;
  ASSERT_NO_FATAL_FAILURE(RunCatchUpMissedAWrite(/*check=*/true, &during, &before));
  EXPECT_EQ(before, "1");
  EXPECT_EQ(during, "2") << "an acknowledged write was lost at the promotion";
}

// The negative control: without the check the backup is marked synced by the catch-up the write
// missed, and the promoted backup lacks the acknowledged write.
TEST_F(KvCatchUp, WithoutTheCheckTheWriteIsLost) {
  std::string during, before;
  ASSERT_NO_FATAL_FAILURE(RunCatchUpMissedAWrite(/*check=*/false, &during, &before));
  EXPECT_EQ(before, "1");
  EXPECT_EQ(during, "(absent)") << "the negative control did not lose the write";
}

// Batch replication (a Rowan baseline): a backup misses a batch's FLUSH and the primary cannot
// write the map that removes it. The batch's replies must not leave (the write is on fewer
// replicas than the map says) and the primary fences itself; asymnvm-kv then exits with status 5
// (its on_fenced hook) — before, the library aborted the process.
using KvBatchFence = TwoServers;

TEST_F(KvBatchFence, AFailedBackupThatCannotBeRemovedFencesThePrimaryAndDropsTheReply) {
  auto args = [&](int i) {
    auto a = Args(d_, i, coord_);
    a.insert(a.end(), {"--resp-port", "-1", "--replication", "batch"});
    return a;
  };
  ASSERT_NO_FATAL_FAILURE(StartBoth(args, {{"ASYMNVM_TEST_FAIL_REMOVE_BACKUP", "1"}}));
  ASSERT_TRUE(WaitBackupState(1));
  ClientOptions co;
  co.coordinator = coord_;
  co.retry_deadline = 3s;
  co.timeout = 3s;
  auto c = Client::Open(co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Put("before", "1").ok());
  const int b = BackupIndex();
  ASSERT_GE(b, 0);
  const int a = 1 - b;
  ASSERT_TRUE(testutil::StopAndWait(procs_[b].pid));
  Status st = (*c)->Put("during", "2");  // its FLUSH times out; the map cannot say so
  EXPECT_FALSE(st.ok()) << "a write on fewer replicas than the map says was acknowledged";
  int status = 0;
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return waitpid(procs_[a].pid, &status, WNOHANG) == procs_[a].pid; }, 60s))
      << "the primary kept running after it could not account for a batch";
  procs_[a].pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5)
      << "not the daemon's fenced exit (status 5): " << status;
  kill(procs_[b].pid, SIGCONT);
}

}  // namespace
}  // namespace asymnvm::kv
