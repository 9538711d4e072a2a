// Crash campaign: a real asymnvm-backend process is SIGKILLed at seeded moments while a front-end
// streams memory-log transactions; after a restart on the same pool every acknowledged transaction
// is applied (LPN >= last acknowledged), nothing beyond what was sent is, and no transaction is
// partially visible (each writes two distant ranges with the same fill byte).
//
// Rounds: ASYMNVM_CRASH_ROUNDS (default 3; the ctest entry `backend_crash_long`, label "long",
// runs 50).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "backend/log_format.h"
#include "backend/rpc.h"
#include "common/spawn.h"
#include "fabric/oq/oq.h"

namespace asymnvm::backend {
namespace {

const std::string kDaemon = ASYMNVM_BACKEND_BIN;

struct Daemon {
  pid_t pid = -1;
  std::string address;

  // crash_at: ASYMNVM_CRASH_AT for the daemon (a named crash point, common/crash_point.h);
  // extra: more daemon options.
  static Daemon Spawn(const std::string& pool, const std::string& crash_at = "",
                      const std::vector<std::string>& extra = {}) {
    Daemon d;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return d;
    SpawnSpec spec;
    spec.path = kDaemon;
    spec.argv = {kDaemon, "--pool",      pool,    "--size",          "16M", "--log-segment",
                 "256K",  "--log-level", "error", "--checkpoint-ms", "10"};
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    if (!crash_at.empty()) spec.env = {{"ASYMNVM_CRASH_AT", crash_at}};
    spec.out = SpawnSpec::Out::kFd;
    spec.out_fd = p[1];
    d.pid = SpawnProcess(spec);
    close(p[1]);
    FILE* f = fdopen(p[0], "r");
    char line[256] = {0};
    if (fgets(line, sizeof(line), f) != nullptr) {
      std::string s(line);
      if (s.rfind("listening ", 0) == 0) d.address = s.substr(10, s.size() - 11);
    }
    fclose(f);
    return d;
  }
  int Kill(int sig) {
    kill(pid, sig);
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
  }
};

struct Session {
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<oq::Client> client;

  Status Connect(const std::string& address) {
    ASYMNVM_ASSIGN_OR_RETURN(fabric, fabric::Fabric::Open(fabric::FabricOptions{}));
    ASYMNVM_ASSIGN_OR_RETURN(pd, fabric->AllocPd());
    oq::ClientOptions co;
    co.fabric = fabric.get();
    co.pd = pd.get();
    co.server_address = address;
    co.timeout = std::chrono::milliseconds(3000);
    ASYMNVM_ASSIGN_OR_RETURN(client, oq::Client::Connect(co));
    return Status::Ok();
  }
  Result<std::vector<uint8_t>> Call(uint16_t type, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> r;
    ASYMNVM_RETURN_IF_ERROR(client->Call(0, type, payload, &r));
    return r;
  }
};

uint8_t Fill(uint64_t seq) { return static_cast<uint8_t>(seq * 37 + 11); }

TEST(BackendCrash, SigkillMidStreamLosesNoAcknowledgedTransaction) {
  int rounds = 3;
  if (const char* r = std::getenv("ASYMNVM_CRASH_ROUNDS")) rounds = std::max(1, std::atoi(r));
  const std::string pool = (std::filesystem::temp_directory_path() /
                            ("asymnvm-crash-" + std::to_string(getpid()) + ".pool"))
                               .string();
  std::remove(pool.c_str());
  std::mt19937_64 rng(20261122);
  constexpr uint64_t kFe = 42;
  uint64_t slab = 0, seq_addr = 0, last_acked = 0, last_sent = 0;
  for (int round = 0; round < rounds; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    Daemon d = Daemon::Spawn(pool);
    ASSERT_FALSE(d.address.empty()) << "daemon did not start";
    Session s;
    ASSERT_TRUE(s.Connect(d.address).ok());
    PayloadWriter reg;
    reg.U64(kFe);
    auto r = s.Call(kRegister, reg.bytes());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto reply = DecodeRegisterReply(*r);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    const uint64_t lpn = reply->lpn;
    // Every acknowledged transaction survived; nothing beyond what was sent was applied.
    std::printf("round %d: restarted with LPN %llu (last acknowledged %llu, last sent %llu)\n",
                round, static_cast<unsigned long long>(lpn),
                static_cast<unsigned long long>(last_acked),
                static_cast<unsigned long long>(last_sent));
    EXPECT_GE(lpn, last_acked);
    EXPECT_LE(lpn, last_sent);
    if (round == 0) {
      auto e = s.Call(kNamingCreate, EncodeNamingCreate("crash", 9, {}));
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      auto entry = DecodeNamingEntry(*e);
      ASSERT_TRUE(entry.ok()) << entry.status().ToString();
      seq_addr = entry->seq_addr;
      auto a = s.Call(kAllocSlab, {});
      ASSERT_TRUE(a.ok());
      slab = PayloadReader(*a, "addr").U64();
    }
    // Stream transactions from LPN + 1 until the kill cuts the connection.
    std::atomic<uint64_t> acked{lpn}, sent{lpn};
    std::atomic<bool> writer_done{false};
    std::thread writer([&] {
      struct Done {
        std::atomic<bool>& d;
        ~Done() { d = true; }
      } done{writer_done};
      for (uint64_t seq = lpn + 1;; seq++) {
        TxnBuilder b;
        std::vector<uint8_t> data(64, Fill(seq));
        b.Write(slab, data);
        b.Write(slab + 2048, data);
        sent = seq;
        if (!s.client->Submit(0, kTxn, b.Finish(kFe, seq, seq, seq_addr)).ok()) return;
        acked = seq;
      }
    });
    // Kill after a seeded number of acknowledged transactions (progress, not elapsed time: a slow
    // or sanitized build only takes longer), at a seeded moment after that.
    const uint64_t want = lpn + 1 + rng() % 40;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (acked.load() < want && !writer_done.load() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 5000));
    d.Kill(SIGKILL);
    writer.join();
    last_acked = acked;
    last_sent = sent;
    s.client.reset();
  }
  // Final restart: check the data itself against the LPN.
  Daemon d = Daemon::Spawn(pool);
  ASSERT_FALSE(d.address.empty());
  Session s;
  ASSERT_TRUE(s.Connect(d.address).ok());
  PayloadWriter reg;
  reg.U64(kFe);
  auto r = s.Call(kRegister, reg.bytes());
  ASSERT_TRUE(r.ok());
  auto reply = DecodeRegisterReply(*r);
  ASSERT_TRUE(reply.ok());
  const uint64_t lpn = reply->lpn;
  EXPECT_GE(lpn, last_acked);
  EXPECT_GT(last_acked, 0u) << "no transaction was ever acknowledged: the test proved nothing";
  s.client.reset();
  EXPECT_EQ(WEXITSTATUS(d.Kill(SIGTERM)), 0);
  FILE* f = std::fopen(pool.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  uint8_t a[64], b[64];
  std::fseek(f, static_cast<long>(slab), SEEK_SET);
  ASSERT_EQ(std::fread(a, 1, 64, f), 64u);
  std::fseek(f, static_cast<long>(slab + 2048), SEEK_SET);
  ASSERT_EQ(std::fread(b, 1, 64, f), 64u);
  std::fclose(f);
  for (int i = 0; i < 64; i++) {
    ASSERT_EQ(a[i], Fill(lpn)) << "first range, byte " << i;
    ASSERT_EQ(b[i], Fill(lpn)) << "second range, byte " << i;
  }
  std::remove(pool.c_str());
}

// The daemon on a disk file runs the redo-log mode (doc/backend.md §Disk-durable mode): it kills
// itself (SIGKILL) inside a checkpoint — before the data sync, between the data sync and the
// record, right after the record — while a front-end streams transactions; the restart replays
// from the previous (or the new) checkpoint and loses nothing acknowledged.
TEST(BackendCrash, SigkillDuringCheckpointLosesNoAcknowledgedTransaction) {
  const std::string pool = (std::filesystem::temp_directory_path() /
                            ("asymnvm-ckpt-crash-" + std::to_string(getpid()) + ".pool"))
                               .string();
  std::remove(pool.c_str());
  constexpr uint64_t kFe = 43;
  uint64_t slab = 0, seq_addr = 0, last_acked = 0, last_sent = 0;
  const char* points[] = {"backend.checkpoint.before_data_sync:6",
                          "backend.checkpoint.after_data_sync:6",
                          "backend.checkpoint.after_record:6", ""};
  for (int round = 0; round < 4; round++) {
    SCOPED_TRACE(std::string("round ") + std::to_string(round) + " " + points[round]);
    Daemon d = Daemon::Spawn(pool, points[round]);
    ASSERT_FALSE(d.address.empty()) << "daemon did not start";
    Session s;
    ASSERT_TRUE(s.Connect(d.address).ok());
    PayloadWriter reg;
    reg.U64(kFe);
    auto r = s.Call(kRegister, reg.bytes());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto reply = DecodeRegisterReply(*r);
    ASSERT_TRUE(reply.ok());
    EXPECT_GE(reply->lpn, last_acked);
    EXPECT_LE(reply->lpn, last_sent);
    const uint64_t lpn = reply->lpn;
    if (round == 0) {
      auto e = s.Call(kNamingCreate, EncodeNamingCreate("ckpt", 9, {}));
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      seq_addr = DecodeNamingEntry(*e)->seq_addr;
      auto a = s.Call(kAllocSlab, {});
      ASSERT_TRUE(a.ok());
      slab = PayloadReader(*a, "addr").U64();
    }
    if (round == 3) {  // the last start: check the data, then stop cleanly
      s.client.reset();
      EXPECT_EQ(WEXITSTATUS(d.Kill(SIGTERM)), 0);
      FILE* f = std::fopen(pool.c_str(), "rb");
      ASSERT_NE(f, nullptr);
      uint8_t a[64], b[64];
      std::fseek(f, static_cast<long>(slab), SEEK_SET);
      ASSERT_EQ(std::fread(a, 1, 64, f), 64u);
      std::fseek(f, static_cast<long>(slab + 2048), SEEK_SET);
      ASSERT_EQ(std::fread(b, 1, 64, f), 64u);
      std::fclose(f);
      for (int i = 0; i < 64; i++) {
        ASSERT_EQ(a[i], Fill(lpn)) << "first range, byte " << i;
        ASSERT_EQ(b[i], Fill(lpn)) << "second range, byte " << i;
      }
      break;
    }
    // Stream until the daemon kills itself at the armed point (generous deadline).
    uint64_t acked = lpn, sent = lpn;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (uint64_t seq = lpn + 1; std::chrono::steady_clock::now() < deadline; seq++) {
      TxnBuilder b;
      std::vector<uint8_t> data(64, Fill(seq));
      b.Write(slab, data);
      b.Write(slab + 2048, data);
      sent = seq;
      if (!s.client->Submit(0, kTxn, b.Finish(kFe, seq, seq, seq_addr)).ok()) break;
      acked = seq;
    }
    s.client.reset();
    int st = 0;
    ASSERT_EQ(waitpid(d.pid, &st, 0), d.pid);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
        << "the daemon did not reach " << points[round];
    EXPECT_GT(acked, lpn) << "nothing acknowledged before the crash point";
    last_acked = acked;
    last_sent = sent;
  }
  std::remove(pool.c_str());
}

// Deferred frees are persistent (request 23; doc/backend.md §Deferred frees). Round 1: the daemon
// is SIGKILLed after acknowledging deferred frees whose delay (10 min) has not passed; the restart
// re-arms them and frees each block exactly once. Round 2: the daemon kills itself between a
// deferred free's bitmap free and the clearing of its slot (crash point); the restart clears that
// slot without freeing the block again and re-arms the others. Afterwards every one of those
// blocks is free (a second free is refused as a double free) and the others are still allocated.
TEST(BackendCrash, DeferredFreesSurviveSigkillAndAreFreedOnce) {
  const std::string pool = (std::filesystem::temp_directory_path() /
                            ("asymnvm-dfree-crash-" + std::to_string(getpid()) + ".pool"))
                               .string();
  std::remove(pool.c_str());
  auto status_of = [](Session& s) {
    auto r = s.Call(kStatus, {});
    EXPECT_TRUE(r.ok());
    return r.ok() ? nlohmann::json::parse(std::string(r->begin(), r->end())) : nlohmann::json{};
  };
  auto addr_payload = [](uint64_t a) {
    PayloadWriter w;
    w.U64(a);
    return w.bytes();
  };
  // Waits (bounded) until the daemon reports `done` deferred frees done; returns its status.
  auto wait_done = [&](Session& s, uint64_t done) {
    nlohmann::json j;
    for (int i = 0; i < 3000; i++) {
      j = status_of(s);
      if (j.value("deferred_frees_done", 0ull) >= done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return j;
  };
  std::vector<uint64_t> freed, kept;
  for (int round = 1; round <= 2; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    // The frees are submitted to a daemon whose delay no test outlives and which is SIGKILLed
    // with all of them pending (round 1 then restarts it; round 2 restarts it with a 1 ms delay
    // and the crash point at the 3rd free, so the crash lands after every free was acknowledged
    // whatever the machine's speed).
    Daemon d = Daemon::Spawn(pool, "", {"--reclaim-us", "600000000"});
    ASSERT_FALSE(d.address.empty()) << "daemon did not start";
    Session s;
    ASSERT_TRUE(s.Connect(d.address).ok());
    std::vector<uint64_t> mine;
    for (int i = 0; i < 8; i++) {
      auto a = s.Call(kAllocSlab, {});
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      mine.push_back(PayloadReader(*a, "addr").U64());
    }
    for (int i = 0; i < 5; i++) {
      ASSERT_TRUE(s.Call(kFreeDeferred, addr_payload(mine[i])).ok());
      freed.push_back(mine[i]);
    }
    kept.insert(kept.end(), mine.begin() + 5, mine.end());
    // A second deferred free of a pending block and an immediate free of it are refused.
    EXPECT_EQ(s.Call(kFreeDeferred, addr_payload(mine[0])).status().code(),
              StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.Call(kFree, addr_payload(mine[0])).status().code(),
              StatusCode::kFailedPrecondition);
    EXPECT_EQ(status_of(s).value("deferred_frees_pending", 0ull), 5u);
    s.client.reset();
    d.Kill(SIGKILL);
    if (round == 2) {
      Daemon c =
          Daemon::Spawn(pool, "backend.deferred_free.after_free:3", {"--reclaim-us", "1000"});
      ASSERT_GT(c.pid, 0);
      int st = 0;
      ASSERT_EQ(waitpid(c.pid, &st, 0), c.pid);
      c.pid = -1;
      ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the crash point was not reached";
    }
    // Restart: the pending ones are re-armed and freed once.
    Daemon r = Daemon::Spawn(pool, "", {"--reclaim-us", "1000"});
    ASSERT_FALSE(r.address.empty());
    Session rs;
    ASSERT_TRUE(rs.Connect(r.address).ok());
    // Round 1: all 5 survived the kill. Round 2: 2 were freed and cleared before the crash, the
    // 3rd was freed but not cleared (cleared at start, not re-armed), 2 are re-armed.
    const uint64_t rearmed = round == 1 ? 5 : 2;
    nlohmann::json j = wait_done(rs, rearmed);
    EXPECT_EQ(j.value("deferred_frees_rearmed", 0ull), rearmed);
    EXPECT_EQ(j.value("deferred_frees_done", 0ull), rearmed);
    EXPECT_EQ(j.value("deferred_frees_failed", 1ull), 0u);
    EXPECT_EQ(j.value("deferred_frees_pending", 1ull), 0u);
    rs.client.reset();
    EXPECT_EQ(WEXITSTATUS(r.Kill(SIGTERM)), 0);
  }
  // Nothing is re-armed any more; every deferred-freed block is free, the others are not.
  Daemon d = Daemon::Spawn(pool);
  ASSERT_FALSE(d.address.empty());
  Session s;
  ASSERT_TRUE(s.Connect(d.address).ok());
  EXPECT_EQ(status_of(s).value("deferred_frees_rearmed", 1ull), 0u);
  for (uint64_t a : freed) {
    EXPECT_EQ(s.Call(kFree, addr_payload(a)).status().code(), StatusCode::kFailedPrecondition)
        << "block " << a << " was not freed by its deferred free";
  }
  for (uint64_t a : kept) EXPECT_TRUE(s.Call(kFree, addr_payload(a)).ok()) << a;
  s.client.reset();
  EXPECT_EQ(WEXITSTATUS(d.Kill(SIGTERM)), 0);
  std::remove(pool.c_str());
}

}  // namespace
}  // namespace asymnvm::backend
