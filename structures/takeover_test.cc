// Dead writers (doc/frontend.md §Dead writers), with real processes: a writer
// process holding a hash table and a stack is SIGKILLed mid-stream and never restarted; another
// front-end opening the hash table finds the lock held by an id whose lease is gone, takes the id
// over, replays the dead writer's acknowledged op logs, releases its locks and proceeds. Every
// acknowledged operation is visible, and the b-log keeps recycling under 10× its capacity of
// further traffic (the dead writer's op logs no longer pin it). Before that, three take-overs are
// themselves SIGKILLed at seeded moments (during their start-up, claim, replay or unlock): the next
// one recovers from whatever they left. Without the take-over the final Open times out on the lock.
//
// The writer is this binary re-executed with ASYMNVM_TAKEOVER_CHILD=address|coordinator|acks file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/coord.h"
#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "coord/testing/zk_server.h"
#include "frontend/identity.h"
#include "structures/testing.h"
#include "tools/ctl.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::structures {
namespace {

constexpr uint32_t kValueSize = 16384;  // kMaxValueSize: log volume in few ops

Value ValueOf(uint64_t key) {
  Value v(kValueSize, static_cast<uint8_t>(key * 7 + 1));
  std::memcpy(v.data(), &key, 8);
  return v;
}

frontend::SessionOptions Options(const std::string& address, const std::string& coord) {
  frontend::SessionOptions o;
  o.backends = {address};
  o.coordinator = coord;
  o.frontend_id = 0;  // allocated by the coordinator
  o.level = frontend::Level::kRcb;
  o.timeout = std::chrono::milliseconds(30000);
  o.lock_timeout = std::chrono::milliseconds(30000);
  return o;
}

// The writer: puts key i into the hash table and pushes i on the stack, recording i in the acks
// file after both returned (acknowledged: their op logs are durable). Runs until killed.
[[noreturn]] void RunWriter(const char* spec) {
  std::string s(spec);
  const size_t a = s.find('|'), b = s.find('|', a + 1);
  const std::string address = s.substr(0, a), coord = s.substr(a + 1, b - a - 1),
                    acks = s.substr(b + 1);
  auto session = frontend::Session::Open(Options(address, coord));
  if (!session.ok()) {
    std::fprintf(stderr, "writer: %s\n", session.status().ToString().c_str());
    _exit(2);
  }
  RegisterReplays(**session);
  structures::Options mo;
  mo.value_size = kValueSize;
  auto map = OpenMap(**session, Kind::kHashTable, "takeover-map", mo);
  auto stack = OpenSequence(**session, Kind::kStack, "takeover-stack");
  if (!map.ok() || !stack.ok()) {
    std::fprintf(stderr, "writer: open: %s %s\n", map.status().ToString().c_str(),
                 stack.status().ToString().c_str());
    _exit(3);
  }
  {
    std::ofstream id(acks + ".id");
    id << (*session)->frontend_id() << "\n";
  }
  const int fd = ::open(acks.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) _exit(4);
  for (uint64_t i = 1;; i++) {
    Status st = (*map)->Put(i, ValueOf(i));
    uint8_t k[8];
    std::memcpy(k, &i, 8);
    if (st.ok()) st = (*stack)->Push(k);
    if (!st.ok()) {
      std::fprintf(stderr, "writer: op %llu: %s\n", static_cast<unsigned long long>(i),
                   st.ToString().c_str());
      const bool fenced = st.code() == StatusCode::kFailedPrecondition &&
                          st.ToString().find("fenced") != std::string::npos;
      _exit(fenced ? 7 : 5);
    }
    if (::write(fd, &i, 8) != 8) _exit(6);
  }
}

// An adopter: opens the map (taking over whoever holds its lock, replaying) and exits 0. The test
// SIGKILLs it at a seeded moment, so take-overs are themselves interrupted (start-up, claim,
// replay, unlock).
[[noreturn]] void RunAdopter(const char* spec) {
  std::string s(spec);
  const size_t a = s.find('|');
  auto session = frontend::Session::Open(Options(s.substr(0, a), s.substr(a + 1)));
  if (!session.ok()) _exit(2);
  RegisterReplays(**session);
  auto map = OpenMap(**session, Kind::kHashTable, "takeover-map");
  _exit(map.ok() ? 0 : 3);
}

uint64_t Acked(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n / 8;
}

class TakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-takeover-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    backend_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
  std::unique_ptr<driver::BackendProcess> backend_;
};

TEST_F(TakeoverTest, SigkilledWriterIsTakenOverAndTheLogKeepsRecycling) {
  // 16 MiB pool: a 2 MiB b-log (an eighth) of 64 KiB segments.
  auto be = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, dir_ + "/pool", "16M",
                                          {"--log-segment", "64K"});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend_ = std::move(be).value();
  const std::string coord = "dir:" + dir_ + "/coord";
  const std::string acks = dir_ + "/acks";
  const std::string spec = backend_->address() + "|" + coord + "|" + acks;
  // Kill it mid-stream, once it has acknowledged a few hundred operations.
  const testing::ChildEnd writer = testing::RunSelfAsChild(
      {{"ASYMNVM_TAKEOVER_CHILD", spec}}, "takeover-writer", [&] { return Acked(acks) >= 300; });
  ASSERT_FALSE(writer.exited) << "the writer exited with status " << writer.status;
  const uint64_t acked = Acked(acks);
  ASSERT_GE(acked, 300u);

  // Take-overs killed mid-way (seeded moments, 0–400 ms after start): each leaves the dead
  // writer's id (or, once it took the lock, its own) to the next one.
  std::mt19937_64 rng(20261123);
  int completed = 0;
  for (int round = 0; round < 3; round++) {
    const testing::ChildEnd adopter =
        testing::RunSelfAsChild({{"ASYMNVM_TAKEOVER_ADOPTER", backend_->address() + "|" + coord}},
                                "takeover-adopter", {}, std::chrono::milliseconds(rng() % 400));
    if (adopter.exited) {
      ASSERT_TRUE(WIFEXITED(adopter.status) && WEXITSTATUS(adopter.status) == 0)
          << "adopter round " << round << " failed";
      completed++;
    }
  }
  std::printf("takeover: %d of 3 interrupted take-overs completed before their kill\n", completed);
  const auto t_killed = std::chrono::steady_clock::now();
  // Another front-end: its Open takes the writer lock, finds the dead writer's id, takes over.
  auto s = frontend::Session::Open(Options(backend_->address(), coord));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RegisterReplays(**s);
  auto map = OpenMap(**s, Kind::kHashTable, "takeover-map");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  // One take-over: of the writer, or of the last adopter that died holding the lock. None when the
  // last adopter finished and released it.
  EXPECT_LE((*s)->counters().takeovers, 1u);
  for (uint64_t i = 1; i <= acked; i++) {
    Value v;
    Status st = (*map)->Get(i, &v);
    ASSERT_TRUE(st.ok()) << "acknowledged key " << i << " of " << acked << ": " << st.ToString();
    ASSERT_EQ(v, ValueOf(i)) << "key " << i;
  }
  // The stack was replayed and released with the writer's take-over: no further one.
  const uint64_t takeovers = (*s)->counters().takeovers;
  auto stack = OpenSequence(**s, Kind::kStack, "takeover-stack");
  ASSERT_TRUE(stack.ok()) << stack.status().ToString();
  EXPECT_EQ((*s)->counters().takeovers, takeovers);
  std::vector<Value> pushed;
  ASSERT_TRUE((*stack)->List(SIZE_MAX, &pushed).ok());
  // Newest first: acked or acked + 1 elements (one push may have been in flight), 1.. in order.
  ASSERT_GE(pushed.size(), acked);
  ASSERT_LE(pushed.size(), acked + 1);
  for (size_t j = 0; j < pushed.size(); j++) {
    uint64_t got = 0;
    ASSERT_EQ(pushed[j].size() >= 8, true);
    std::memcpy(&got, pushed[j].data(), 8);
    ASSERT_EQ(got, pushed.size() - j) << "stack element " << j;
  }
  ASSERT_TRUE((*map)->Verify().ok());

  const auto t_verified = std::chrono::steady_clock::now();
  // 10× the b-log's capacity of further traffic: the dead writer's op logs no longer pin it.
  const uint64_t log_bytes = 2ull << 20;
  const uint64_t ops = 10 * log_bytes / kValueSize + 1;
  for (uint64_t i = 0; i < ops; i++) {
    const uint64_t key = acked + 2 + i % 64;
    Status st = (*map)->Put(key, ValueOf(key));
    ASSERT_TRUE(st.ok()) << "op " << i << " of " << ops << ": " << st.ToString();
  }
  ASSERT_TRUE((*map)->Sync().ok());
  auto ms = [](auto d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  std::printf(
      "takeover: %llu ops acknowledged before the kill; take-over + verification %lld ms, "
      "%llu further ops %lld ms\n",
      static_cast<unsigned long long>(acked), ms(t_verified - t_killed),
      static_cast<unsigned long long>(ops), ms(std::chrono::steady_clock::now() - t_verified));
}

// Online reclamation on the take-over path (doc/alloc.md §Leaks across crashes): the writer
// (16 KiB values: large extents) kills itself right after journaling an extent it never uses
// (crash point frontend.slab.journaled), with operations in flight (the replay re-executes
// unapplied ones with fresh extents, so the dead writer's are reached by nothing); it is never
// restarted; the recovery session of the take-over frees what the dead
// writer journaled and no structure reaches. Afterwards `asymnvm-ctl check` (no gc) finds used
// blocks = reachable blocks. Negative control: with reclamation off the same run leaks.
class TakeoverReclaimTest : public TakeoverTest, public ::testing::WithParamInterface<bool> {};

TEST_P(TakeoverReclaimTest, DeadWritersBlocksAreReclaimedByTheTakeover) {
  const bool reclaim = GetParam();
  const std::string pool = dir_ + "/pool";
  auto be = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, pool, "64M", {});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend_ = std::move(be).value();
  const std::string coord = "dir:" + dir_ + "/coord";
  const std::string acks = dir_ + "/acks";
  const std::string spec = backend_->address() + "|" + coord + "|" + acks;
  // Killed right after journaling its 150th slab / large extent, before using it: at least
  // that extent is reached by nothing (and none is allocated but not journaled).
  const testing::ChildEnd writer = testing::RunSelfAsChild(
      {{"ASYMNVM_TAKEOVER_CHILD", spec}, {"ASYMNVM_CRASH_AT", "frontend.slab.journaled:150"}},
      "takeover-writer");
  ASSERT_TRUE(writer.exited) << "the writer did not reach its crash point";
  ASSERT_TRUE(writer.KilledItself()) << "writer status " << writer.status;
  const uint64_t acked = Acked(acks);
  ASSERT_GE(acked, 50u);
  {
    auto o = Options(backend_->address(), coord);
    o.reclaim_on_recovery = reclaim;
    auto s = frontend::Session::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    RegisterReplays(**s);
    auto map = OpenMap(**s, Kind::kHashTable, "takeover-map");
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    EXPECT_EQ((*s)->counters().takeovers, 1u);
    for (uint64_t i = 1; i <= acked; i++) {
      Value v;
      ASSERT_TRUE((*map)->Get(i, &v).ok()) << "acknowledged key " << i;
    }
  }
  ASSERT_TRUE(backend_->Stop().ok());
  backend_.reset();
  std::ostringstream out, err;
  const int rc = tools::RunCtl({"check", pool, "--json"}, out, err);
  ASSERT_TRUE(rc == tools::kCtlOk || rc == tools::kCtlLeaks) << rc << out.str() << err.str();
  const auto leaks = nlohmann::json::parse(out.str())["leaks"];
  std::printf(
      "take-over, reclaim %s: %llu acknowledged ops; %llu blocks used, %llu reachable, "
      "%llu leaked\n",
      reclaim ? "on" : "off", static_cast<unsigned long long>(acked),
      static_cast<unsigned long long>(leaks["blocks_used"].get<uint64_t>()),
      static_cast<unsigned long long>(leaks["blocks_reachable"].get<uint64_t>()),
      static_cast<unsigned long long>(leaks["leaked_blocks"].get<uint64_t>()));
  if (reclaim) {
    EXPECT_EQ(rc, tools::kCtlOk) << out.str();
    EXPECT_EQ(leaks["leaked_blocks"].get<uint64_t>(), 0u) << leaks.dump();
  } else {
    EXPECT_GT(leaks["leaked_blocks"].get<uint64_t>(), 0u) << leaks.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(OnOff, TakeoverReclaimTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Reclaim" : "NoReclaim"; });

// Fencing (doc/frontend.md §Fencing), with ZooKeeper, whose leases lapse when a
// holder stops answering (the embedded coordinator's live as long as the process): the writer is
// SIGSTOPped until its ZooKeeper session expires and its lease node is gone; another front-end
// takes its structures over (replaying its acknowledged op logs) and writes; then the writer is
// resumed. Its next write must fail ("fenced", exit 7) — not be acknowledged and lost, not corrupt
// the map — and every operation it acknowledged before the stop is there.
TEST_F(TakeoverTest, SigstoppedWriterWhoseLeaseLapsedIsFencedWhenItWakes) {
  const std::string why = coord::testing::ZooKeeperUnavailableReason();
  if (!why.empty())
    GTEST_SKIP() << "ZooKeeper tests need " << why << " (scripts/setup.sh installs it)";
  auto zk = coord::testing::ZkEnsemble::Start(1, coord::testing::After(std::chrono::seconds(60)));
  ASSERT_TRUE(zk.ok()) << zk.status().ToString();
  auto be = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, dir_ + "/pool", "16M",
                                          {"--log-segment", "64K"});
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  backend_ = std::move(be).value();
  const std::string coord = "zk:" + (*zk)->connect_string();
  const std::string acks = dir_ + "/acks";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("ASYMNVM_TAKEOVER_CHILD", (backend_->address() + "|" + coord + "|" + acks).c_str(), 1);
    execl("/proc/self/exe", "takeover-writer", static_cast<char*>(nullptr));
    _exit(97);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reap{pid};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (Acked(acks) < 100 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_NE(waitpid(pid, nullptr, WNOHANG), pid) << "the writer exited early";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(Acked(acks), 100u);
  kill(pid, SIGSTOP);
  const uint64_t acked = Acked(acks);
  uint64_t id = 0;
  {
    std::ifstream in(acks + ".id");
    in >> id;
  }
  ASSERT_NE(id, 0u);
  // Wait (observably) for the lease to lapse: ZooKeeper expires the stopped writer's session.
  auto watcher = coord::Coordinator::Open(coord);
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  const std::string lease = frontend::FrontendIdentity::LeasePath(id);
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < deadline) {
    auto e = (*watcher)->Exists(lease);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    gone = !*e;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(gone) << "the stopped writer's lease never lapsed";

  // Another front-end takes over and writes.
  auto s = frontend::Session::Open(Options(backend_->address(), coord));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RegisterReplays(**s);
  auto map = OpenMap(**s, Kind::kHashTable, "takeover-map");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ((*s)->counters().takeovers, 1u);
  const uint64_t mine = 1u << 20;
  for (uint64_t k = mine; k < mine + 50; k++) ASSERT_TRUE((*map)->Put(k, ValueOf(k)).ok());
  ASSERT_TRUE((*map)->Sync().ok());

  // The writer wakes: its next operation is refused.
  kill(pid, SIGCONT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  reap.pid = -1;
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 7) << "the woken writer did not fail with 'fenced'";
  const uint64_t acked_after = Acked(acks);
  EXPECT_EQ(acked_after, acked) << "the writer acknowledged operations after its lease lapsed";

  // Nothing acknowledged is lost, nothing of the newcomer overwritten, the map is sound.
  for (uint64_t k = mine; k < mine + 50; k++) {
    Value v;
    ASSERT_TRUE((*map)->Get(k, &v).ok()) << k;
    ASSERT_EQ(v, ValueOf(k)) << k;
  }
  for (uint64_t i = 1; i <= acked_after; i++) {
    Value v;
    Status st = (*map)->Get(i, &v);
    ASSERT_TRUE(st.ok()) << "acknowledged key " << i << " of " << acked_after << ": "
                         << st.ToString();
    ASSERT_EQ(v, ValueOf(i)) << "key " << i;
  }
  ASSERT_TRUE((*map)->Verify().ok());
  for (uint64_t k = mine + 50; k < mine + 100; k++) ASSERT_TRUE((*map)->Put(k, ValueOf(k)).ok());
  ASSERT_TRUE((*map)->Sync().ok());
}

}  // namespace
}  // namespace asymnvm::structures

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("ASYMNVM_TAKEOVER_CHILD")) {
    asymnvm::structures::RunWriter(spec);
  }
  if (const char* spec = std::getenv("ASYMNVM_TAKEOVER_ADOPTER")) {
    asymnvm::structures::RunAdopter(spec);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
