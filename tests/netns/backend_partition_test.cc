// Network partitions of an asymnvm-backend primary with one asymnvm-mirror (sync mode) and an SDK
// Session writing through it (doc/partitions.md, issue 29 item 4; doc/mirror.md §Terms).
//
// Hosts (tests/netns/netns.h): ZooKeeper "zk", the primary "be", the mirror "mir", and the test's
// Session "cli" (the test thread enters it). The Session puts words into an array (op log +
// memory log + transaction, as mirror_test does) and reads them back; every put and read is
// recorded and the history is checked per word by the linearizability checker.
//
//  * PrimaryMirrorCut: the primary's link to its mirror is cut. Puts stall at most the mirror
//    timeout, the primary drops the mirror from the in-sync set and goes on; healed, the mirror is
//    copied again and back in sync. Then the primary is SIGKILLed: the mirror is promoted and
//    must hold every acknowledged put (read through the Session, which reconnects by itself).
//  * PrimaryCoordinatorCut: the primary loses ZooKeeper but keeps its mirror and its Session. It
//    must exit 5 (fenced: its lease lapsed) before the mirror is promoted; the Session reconnects
//    to the promoted mirror and nothing acknowledged is lost.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/frontend.h"
#include "mirror/group.h"
#include "tests/common/linearizability.h"
#include "tests/kv/kv_test_util.h"
#include "tests/netns/netns.h"
#include "tools/ctl.h"

namespace asymnvm {
namespace {

using namespace std::chrono_literals;
using frontend::Session;
using frontend::SessionOptions;
using kv::testutil::Proc;
using kv::testutil::WaitFor;

constexpr uint32_t kType = 0x52;
constexpr uint16_t kPutOp = 1;  // payload: addr u64, value u64
constexpr uint64_t kWords = 32;

Status ReplayPut(Session& s, const frontend::Structure& st, const frontend::RecoveredOp& op) {
  if (op.op_type != kPutOp || op.payload.size() != 16) return Status::Corruption("bad op");
  uint64_t addr, value;
  std::memcpy(&addr, op.payload.data(), 8);
  std::memcpy(&value, op.payload.data() + 8, 8);
  (void)s.OpLog(st, kPutOp, op.payload);
  ASYMNVM_RETURN_IF_ERROR(s.MemLog(addr, {reinterpret_cast<const uint8_t*>(&value), 8}));
  return s.TxWrite(st);
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

class BackendRig {
 public:
  explicit BackendRig(const std::string& name) {
    dir_ = std::filesystem::temp_directory_path() /
           ("netns-be-" + std::to_string(getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~BackendRig() {
    session_.reset();
    primary_.Reap();
    mirror_.Reap();
    zk_.reset();
    net_.reset();
    if (std::getenv("ASYMNVM_KEEP_NETNS_DIR") == nullptr) std::filesystem::remove_all(dir_);
  }
  std::string Up() {
    const std::string why = netns::UnavailableReason();
    if (!why.empty()) return why;
    Status secret = netns::UseClusterSecret((dir_ / "secret").string());
    EXPECT_TRUE(secret.ok()) << secret.ToString();
    auto net = netns::Network::Create({"zk", "be", "mir", "cli"});
    EXPECT_TRUE(net.ok()) << net.status().ToString();
    if (!net.ok()) return "";
    net_ = std::move(net).value();
    auto zk = netns::ZooKeeper::Start(*net_, {"zk"}, "zk", (dir_ / "zk").string());
    if (!zk.ok() && zk.status().code() == StatusCode::kNotSupported) return zk.status().message();
    EXPECT_TRUE(zk.ok()) << zk.status().ToString();
    if (!zk.ok()) return "";
    zk_ = std::move(zk).value();
    Status st = net_->Enter("cli");
    EXPECT_TRUE(st.ok()) << st.ToString();
    st = zk_->WaitServing(60s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    coord_ = "zk:" + netns::ZkConnectString(*net_, {"zk"});
    return "";
  }
  bool ok() const { return net_ != nullptr && zk_ != nullptr; }
  netns::Network& net() { return *net_; }
  int64_t now_ns() const { return net_->now_ns(); }

  // Starts `bin args` in `host`; waits for its first stdout line ("listening ADDR").
  Proc Launch(const std::string& host, const char* bin, std::vector<std::string> args,
              const std::string& log) {
    int out[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    SpawnSpec s;
    s.path = bin;
    s.argv = {bin};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.out = SpawnSpec::Out::kFd;
    s.out_fd = out[1];
    s.err_file = (dir_ / log).string();
    std::string error;
    Proc p;
    p.pid = SpawnProcess(net_->Wrap(host, s), &error);
    close(out[1]);
    EXPECT_GT(p.pid, 0) << error;
    char c;
    while (p.pid > 0 && read(out[0], &c, 1) == 1 && c != '\n') p.first_line.push_back(c);
    close(out[0]);
    return p;
  }
  void StartMirror() {
    const std::string ip = net_->ip("mir");
    mirror_ = Launch("mir", ASYMNVM_MIRROR_BIN,
                     {"--pool",
                      (dir_ / "mirror.pool").string(),
                      "--listen",
                      "tcp://" + ip + ":7100",
                      "--data-listen",
                      "tcp://" + ip + ":7101",
                      "--serve-listen",
                      "tcp://" + ip + ":7000",
                      "--serve-log-listen",
                      "tcp://" + ip + ":7001",
                      "--coord",
                      coord_,
                      "--promotion-timeout-ms",
                      "300",
                      "--name",
                      "mirror",
                      "--pm-mode",
                      "flush",
                      "--log-level",
                      "warn"},
                     "mirror.log");
    ASSERT_FALSE(mirror_.address().empty()) << "mirror: '" << mirror_.first_line << "'";
  }
  void StartPrimary() {
    const std::string ip = net_->ip("be");
    primary_ = Launch("be", ASYMNVM_BACKEND_BIN,
                      {"--pool",
                       (dir_ / "primary.pool").string(),
                       "--size",
                       "64M",
                       "--listen",
                       "tcp://" + ip + ":7000",
                       "--log-listen",
                       "tcp://" + ip + ":7001",
                       "--coord",
                       coord_,
                       "--mirror",
                       mirror_.address(),
                       "--mirror-timeout-ms",
                       "2000",
                       "--name",
                       "primary",
                       "--pm-mode",
                       "flush",
                       "--log-level",
                       "warn"},
                      "primary.log");
    ASSERT_FALSE(primary_.address().empty()) << "primary: '" << primary_.first_line << "'";
  }
  void OpenSession() {
    SessionOptions o;
    o.backends = {primary_.address()};
    o.coordinator = coord_;
    o.level = frontend::Level::kRcb;
    o.reconnect_deadline = 120s;  // generous: the promotion is waited for
    auto s = Session::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session_ = std::move(s).value();
    session_->RegisterReplay(kType, ReplayPut);
    auto st = session_->CreateRoot("partitioned", kType);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    structure_ = *st;
    auto base = session_->Malloc(kWords * 8);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    base_ = *base;
  }
  // One put, recorded (response only when acknowledged).
  Status Put(uint64_t word, uint64_t value) {
    testing::RegisterOp op;
    op.key = word;
    op.is_write = true;
    op.value = value;
    op.invoke_ns = now_ns();
    const uint64_t addr = base_ + 8 * word;
    uint8_t p[16];
    std::memcpy(p, &addr, 8);
    std::memcpy(p + 8, &value, 8);
    Status s = [&] {
      auto seq = session_->OpLog(structure_, kPutOp, p);
      if (!seq.ok()) return seq.status();
      ASYMNVM_RETURN_IF_ERROR(
          session_->MemLog(addr, {reinterpret_cast<const uint8_t*>(&value), 8}));
      return session_->TxWrite(structure_);
    }();
    if (s.ok()) op.response_ns = now_ns();
    history_.push_back(op);
    if (s.ok()) {
      acked_++;
      longest_put_ns_ = std::max(longest_put_ns_, op.response_ns - op.invoke_ns);
    }
    return s;
  }
  Status Read(uint64_t word) {
    testing::RegisterOp op;
    op.key = word;
    op.invoke_ns = now_ns();
    auto v = session_->ReadWord(base_ + 8 * word);
    if (!v.ok()) return v.status();
    op.response_ns = now_ns();
    op.value = *v;
    history_.push_back(op);
    acked_++;
    return Status::Ok();
  }
  // n operations (2/3 puts), each word first written before it is read. Failures are recorded
  // (unknown outcome) and counted; returns how many failed.
  int Run(int n) {
    int failed = 0;
    for (int i = 0; i < n; i++) {
      const uint64_t word = rng_() % kWords;
      Status s = (!written_[word] || rng_() % 3 != 0) ? Put(word, ++counter_) : Read(word);
      if (s.ok()) {
        written_[word] = true;
      } else {
        failed++;
        last_error_ = s.ToString();
      }
    }
    return failed;
  }
  // Reads every written word and checks the whole history.
  Status Check() {
    for (uint64_t w = 0; w < kWords; w++) {
      if (!written_[w]) continue;
      Status s = Read(w);
      if (!s.ok()) return s;
    }
    return testing::CheckRegisterHistory(history_, 0);
  }
  uint64_t MirrorsInSync() {
    auto text = tools::FetchStatus(primary_.address(), 5000ms, "");
    if (!text.ok()) return 999;
    return nlohmann::json::parse(*text).value("mirrors_in_sync", uint64_t{999});
  }
  // Runs operations until the primary reports `n` mirrors in sync (120 s at most).
  bool RunUntilInSync(uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (MirrorsInSync() == n) return true;
      Run(10);
    }
    return false;
  }
  // The group state's term, read from ZooKeeper (0 when absent).
  uint64_t Term() {
    if (!zc_) {
      auto c = coord::Coordinator::Open(coord_);
      if (!c.ok()) return 0;
      zc_ = std::move(c).value();
    }
    auto n = zc_->Get(mirror::GroupPath(session_->pool_uuid()) + "/state");
    if (!n.ok()) return 0;
    return std::strtoull(n->data.c_str() + (n->data.rfind("term ", 0) == 0 ? 5 : 0), nullptr, 10);
  }
  Proc& primary() { return primary_; }
  Proc& mirror() { return mirror_; }
  size_t ops() const { return history_.size(); }
  uint64_t acked() const { return acked_; }
  int64_t longest_put_ns() const { return longest_put_ns_; }
  void ResetLongestPut() { longest_put_ns_ = 0; }
  const std::string& last_error() const { return last_error_; }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<netns::Network> net_;
  std::unique_ptr<netns::ZooKeeper> zk_;
  std::unique_ptr<coord::Coordinator> zc_;
  std::string coord_;
  Proc primary_, mirror_;
  std::unique_ptr<Session> session_;
  frontend::Structure structure_{};
  uint64_t base_ = 0;
  std::vector<testing::RegisterOp> history_;
  bool written_[kWords] = {};
  uint64_t counter_ = 0;
  uint64_t acked_ = 0;
  int64_t longest_put_ns_ = 0;
  std::string last_error_;
  std::mt19937_64 rng_{std::random_device{}()};
};

#define BACKEND_RIG_UP(rig)                                           \
  do {                                                                \
    const std::string why = (rig).Up();                               \
    if (!why.empty()) GTEST_SKIP() << "partition tests need " << why; \
    ASSERT_TRUE((rig).ok());                                          \
  } while (0)

void Report(const char* scenario, size_t ops, uint64_t acked, size_t cuts, bool violation,
            const std::string& timings) {
  std::printf("netns-report scenario=%s ops=%zu acked=%llu cuts=%zu violations=%d %s\n", scenario,
              ops, static_cast<unsigned long long>(acked), cuts, violation ? 1 : 0,
              timings.c_str());
  std::fflush(stdout);
}

TEST(BackendPartition, PrimaryMirrorCut) {
  BackendRig rig("mirror-cut");
  BACKEND_RIG_UP(rig);
  ASSERT_NO_FATAL_FAILURE(rig.StartMirror());
  ASSERT_NO_FATAL_FAILURE(rig.StartPrimary());
  ASSERT_NO_FATAL_FAILURE(rig.OpenSession());
  ASSERT_TRUE(rig.RunUntilInSync(1)) << "the mirror never got in sync";
  ASSERT_EQ(rig.Run(200), 0) << rig.last_error();
  rig.ResetLongestPut();
  const int64_t cut = rig.now_ns();
  ASSERT_TRUE(rig.net().Cut("be", "mir").ok());
  // Puts go on: the primary drops the unreachable mirror from the in-sync set (a CAS on the
  // coordinator, which it still reaches) after its mirror timeout.
  EXPECT_EQ(rig.Run(300), 0) << rig.last_error();
  const int64_t stall = rig.longest_put_ns();
  EXPECT_TRUE(WaitFor([&] { return rig.MirrorsInSync() == 0; }, 60s))
      << "the cut mirror is still reported in sync";
  const int64_t heal = rig.now_ns();
  ASSERT_TRUE(rig.net().Heal("be", "mir").ok());
  ASSERT_TRUE(rig.RunUntilInSync(1)) << "the mirror never got back in sync after the heal";
  const int64_t resynced = rig.now_ns();
  ASSERT_EQ(rig.Run(100), 0) << rig.last_error();
  // The mirror, caught up again, must hold everything: kill the primary, it is promoted, the
  // Session reconnects to it.
  const uint64_t term = rig.Term();
  rig.primary().Reap();
  EXPECT_TRUE(WaitFor([&] { return rig.Term() > term; }, 120s)) << "the mirror was not promoted";
  EXPECT_EQ(rig.Run(100), 0) << rig.last_error();
  Status lin = rig.Check();
  EXPECT_TRUE(lin.ok()) << lin.ToString() << " (" << rig.ops() << " ops)";
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "longest_put_during_cut_ms=%.0f partition_ms=%.0f "
                "heal_to_in_sync_ms=%.0f",
                Ms(stall), Ms(heal - cut), Ms(resynced - heal));
  Report("backend-primary-mirror-cut", rig.ops(), rig.acked(), 1, !lin.ok(), buf);
}

TEST(BackendPartition, PrimaryCoordinatorCut) {
  BackendRig rig("coord-cut");
  BACKEND_RIG_UP(rig);
  ASSERT_NO_FATAL_FAILURE(rig.StartMirror());
  ASSERT_NO_FATAL_FAILURE(rig.StartPrimary());
  ASSERT_NO_FATAL_FAILURE(rig.OpenSession());
  ASSERT_TRUE(rig.RunUntilInSync(1)) << "the mirror never got in sync";
  ASSERT_EQ(rig.Run(200), 0) << rig.last_error();
  const uint64_t term = rig.Term();
  ASSERT_GE(term, 1u);
  const int64_t cut = rig.now_ns();
  ASSERT_TRUE(rig.net().Cut("be", "zk").ok());
  // Keep writing while the primary loses its lease and the mirror takes over. A watcher thread
  // records when the old primary exits and when the new term appears (a Session call may block
  // across both while it waits to reconnect).
  std::atomic<int64_t> exited{-1}, promoted{-1};
  int status = -1;
  const pid_t old_pid = rig.primary().pid;
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (!stop && (exited < 0 || promoted < 0) && std::chrono::steady_clock::now() < deadline) {
      if (exited < 0 && waitpid(old_pid, &status, WNOHANG) == old_pid) exited = rig.now_ns();
      if (promoted < 0 && rig.Term() > term) promoted = rig.now_ns();
      std::this_thread::sleep_for(5ms);
    }
  });
  int failed = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while ((exited < 0 || promoted < 0) && std::chrono::steady_clock::now() < deadline) {
    failed += rig.Run(5);
  }
  stop = true;
  watcher.join();
  if (exited >= 0) rig.primary().pid = -1;
  ASSERT_GE(exited.load(), 0) << "the primary cut from ZooKeeper never stopped";
  ASSERT_GE(promoted.load(), 0) << "the mirror was never promoted";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << "status " << status;
  EXPECT_LT(exited.load(), promoted.load())
      << "the mirror was promoted while the old primary still ran";
  ASSERT_TRUE(rig.net().Heal("be", "zk").ok());
  EXPECT_EQ(rig.Run(200), 0) << "the Session did not move to the promoted mirror: "
                             << rig.last_error();
  Status lin = rig.Check();
  EXPECT_TRUE(lin.ok()) << lin.ToString() << " (" << rig.ops() << " ops)";
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "cut_to_old_exit_ms=%.0f cut_to_promotion_ms=%.0f exit_before_promotion_ms=%.0f "
                "failed_calls=%d",
                Ms(exited.load() - cut), Ms(promoted.load() - cut),
                Ms(promoted.load() - exited.load()), failed);
  Report("backend-primary-coordinator-cut", rig.ops(), rig.acked(), 1, !lin.ok(), buf);
}

}  // namespace
}  // namespace asymnvm
