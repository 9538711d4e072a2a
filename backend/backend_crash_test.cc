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
#include <random>
#include <thread>

#include "backend/log_format.h"
#include "backend/rpc.h"
#include "fabric/oq/oq.h"

namespace asymnvm::backend {
namespace {

const std::string kDaemon = ASYMNVM_BACKEND_BIN;

struct Daemon {
  pid_t pid = -1;
  std::string address;

  // crash_at: ASYMNVM_CRASH_AT for the daemon (a named crash point, common/crash_point.h).
  static Daemon Spawn(const std::string& pool, const std::string& crash_at = "") {
    Daemon d;
    int p[2];
    if (pipe(p) != 0) return d;
    d.pid = fork();
    if (d.pid == 0) {
      dup2(p[1], 1);
      close(p[0]);
      if (!crash_at.empty()) setenv("ASYMNVM_CRASH_AT", crash_at.c_str(), 1);
      execl(kDaemon.c_str(), kDaemon.c_str(), "--pool", pool.c_str(), "--size", "16M",
            "--log-segment", "256K", "--log-level", "error", "--checkpoint-ms", "10", nullptr);
      _exit(127);
    }
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

}  // namespace
}  // namespace asymnvm::backend
