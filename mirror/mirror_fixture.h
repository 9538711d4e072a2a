// The mirror tests' shared fixture (doc/mirror.md): real asymnvm-backend / asymnvm-mirror
// processes in a temporary directory with an embedded coordinator, a Session writing words into
// an array and recording each acknowledged put in an oracle, and helpers to wait for observable
// state (never for time) and to diff the two pools.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/frontend.h"
#include "mirror/group.h"
#include "tools/ctl.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::mirror::fixture {

using namespace std::chrono_literals;
using frontend::Session;
using frontend::SessionOptions;

constexpr uint32_t kType = 0x52;
constexpr uint16_t kPutOp = 1;  // payload: addr u64, value u64
constexpr uint64_t kWords = 512;

// One acknowledged put of `value` into word `word` of the array at `base` (op log, memory log,
// transaction), as MirrorTest::Put without the oracle.
inline Status PutWord(Session& s, const frontend::Structure& st, uint64_t base, uint64_t word,
                      uint64_t value) {
  const uint64_t addr = base + 8 * word;
  uint8_t p[16];
  std::memcpy(p, &addr, 8);
  std::memcpy(p + 8, &value, 8);
  auto seq = s.OpLog(st, kPutOp, p);
  if (!seq.ok()) return seq.status();
  ASYMNVM_RETURN_IF_ERROR(s.MemLog(addr, {reinterpret_cast<const uint8_t*>(&value), 8}));
  return s.TxWrite(st);
}

// The replay of kPutOp (the structure type's replay function).
inline Status ReplayPut(Session& s2, const frontend::Structure& st,
                        const frontend::RecoveredOp& op) {
  if (op.op_type != kPutOp || op.payload.size() != 16) return Status::Corruption("bad op");
  uint64_t addr, value;
  std::memcpy(&addr, op.payload.data(), 8);
  std::memcpy(&value, op.payload.data() + 8, 8);
  (void)s2.OpLog(st, kPutOp, op.payload);
  ASYMNVM_RETURN_IF_ERROR(s2.MemLog(addr, {reinterpret_cast<const uint8_t*>(&value), 8}));
  return s2.TxWrite(st);
}

class MirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-mirror-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    primary_pool_ = dir_ + "/primary.pool";
    mirror_pool_ = dir_ + "/mirror.pool";
    mirror_addr_ = "unix://" + dir_ + "/mirror.sock";  // fixed: the mirror restarts on it
    coord_ = "dir:" + dir_ + "/coord";
  }
  void TearDown() override {
    session_.reset();
    primary_.reset();
    mirror_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // A round of a seeded test starts from nothing: processes stopped, pools and oracle gone.
  void NewRound() {
    session_.reset();
    primary_.reset();
    mirror_.reset();
    oracle_.clear();
    for (const auto& f : std::filesystem::directory_iterator(dir_)) {
      std::filesystem::remove_all(f.path());
    }
  }
  void StartMirror(const std::vector<std::string>& extra = {},
                   const std::string& promotion_timeout_ms = "300") {
    std::vector<std::string> args = {"--listen", mirror_addr_, "--promotion-timeout-ms",
                                     promotion_timeout_ms};
    args.insert(args.end(), extra.begin(), extra.end());
    auto m = driver::BackendProcess::Start(ASYMNVM_MIRROR_BIN, mirror_pool_, "64M", args);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mirror_ = std::move(m).value();
  }
  void StartPrimary(const std::vector<std::string>& extra = {}, const std::string& size = "64M") {
    std::vector<std::string> args = {"--mirror", mirror_addr_, "--mirror-timeout-ms", "2000"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto b = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, primary_pool_, size, args);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    primary_ = std::move(b).value();
  }
  // A session on the primary with the word array's root; new_array: a fresh array at base_ (else
  // the one base_ already names, e.g. after a restart).
  void OpenSession(bool new_array = true, std::chrono::milliseconds reconnect = 60s) {
    SessionOptions o;
    o.backends = {primary_->address()};
    o.coordinator = coord_;
    o.level = frontend::Level::kRcb;
    o.reconnect_deadline = reconnect;         // generous: the promotion is waited for
    o.batch_timeout = std::chrono::hours(1);  // the last ops stay in the batch until a fence
    auto s = Session::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session_ = std::move(s).value();
    session_->RegisterReplay(kType, ReplayPut);
    auto st = session_->CreateRoot("mirrored", kType);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    structure_ = *st;
    if (!new_array) return;
    auto base = session_->Malloc(kWords * 8);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    base_ = *base;
  }
  // One put; recorded in the oracle once acknowledged.
  Status Put(uint64_t word, uint64_t value) {
    const uint64_t addr = base_ + 8 * word;
    uint8_t p[16];
    std::memcpy(p, &addr, 8);
    std::memcpy(p + 8, &value, 8);
    auto seq = session_->OpLog(structure_, kPutOp, p);
    if (!seq.ok()) return seq.status();
    if (Status m = session_->MemLog(addr, {reinterpret_cast<const uint8_t*>(&value), 8}); !m.ok()) {
      return m;
    }
    Status s = session_->TxWrite(structure_);
    if (s.ok()) oracle_[word] = value;
    return s;
  }
  void Puts(int n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < n; i++) {
      Status s = Put(rng() % kWords, rng());
      ASSERT_TRUE(s.ok()) << "put " << i << ": " << s.ToString();
    }
  }
  void VerifyOracle(Session& s) {
    for (const auto& [word, value] : oracle_) {
      auto v = s.ReadWord(base_ + 8 * word);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      ASSERT_EQ(*v, value) << "word " << word;
    }
  }
  nlohmann::json StatusOf(const std::string& address) {
    auto text = tools::FetchStatus(address, 5000ms, "");
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json::object();
  }
  // Waits (generous deadline) until the primary (or the daemon at `address`) reports `n` mirrors
  // in sync.
  bool WaitInSync(uint64_t n, const std::string& address = "") {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto j = StatusOf(address.empty() ? primary_->address() : address);
      if (j.value("mirrors_in_sync", uint64_t{999}) == n) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  // WaitInSync while a writer thread keeps putting (seeded, at most `max_puts`): a mirror
  // attached while the primary serves.
  bool WaitInSyncWhileWriting(uint64_t n, const std::string& address, uint64_t seed, int max_puts) {
    std::atomic<bool> stop{false};
    std::atomic<int> written{0};
    std::thread writer([&] {
      std::mt19937_64 rng(seed);
      while (!stop.load() && written.load() < max_puts) {
        if (!Put(rng() % kWords, rng()).ok()) return;
        written++;
      }
    });
    const bool insync = WaitInSync(n, address);
    stop = true;
    writer.join();
    return insync;
  }
  // After the old primary's slot rejoined as a mirror of the promoted one: the mirror at
  // `rejoined` is in sync, the group is at term 2 with that replica its only in-sync mirror, and
  // once quiesced (the promoted primary stops first, emptying the in-sync set) the pools are
  // identical.
  void ExpectRejoinedAndIdentical(driver::BackendProcess& rejoined) {
    auto ms = StatusOf(rejoined.address());
    EXPECT_EQ(ms.value("role", ""), "mirror");
    EXPECT_EQ(ms.value("state", ""), "in-sync");
    auto c = coord::Coordinator::Open(coord_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto node = (*c)->Get(GroupPath(session_->pool_uuid()) + "/state");
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    auto gs = DecodeGroupState(node->data);
    ASSERT_TRUE(gs.ok()) << gs.status().ToString();
    EXPECT_EQ(gs->term, 2u);
    EXPECT_EQ(gs->primary, DefaultReplicaName(mirror_pool_));
    ASSERT_EQ(gs->insync.size(), 1u) << node->data;
    EXPECT_EQ(gs->insync[0], DefaultReplicaName(primary_pool_)) << node->data;
    session_.reset();
    ASSERT_TRUE(mirror_->Stop().ok());
    ASSERT_TRUE(rejoined.Stop().ok());
    std::string text;
    EXPECT_EQ(Diff(&text), tools::kCtlOk) << text;
  }
  int Diff(std::string* text) {
    std::ostringstream out, err;
    const int rc = tools::RunDiff(primary_pool_, mirror_pool_, false, out, err);
    *text = out.str() + err.str();
    return rc;
  }
  // Quiesced stop of the session, the primary and the mirror; `asymnvm-ctl diff` finds the two
  // pools identical.
  void StopBothExpectIdenticalPools() {
    session_.reset();
    ASSERT_TRUE(primary_->Stop().ok());
    ASSERT_TRUE(mirror_->Stop().ok());
    std::string text;
    EXPECT_EQ(Diff(&text), tools::kCtlOk) << text;
  }

  std::string dir_, primary_pool_, mirror_pool_, mirror_addr_, coord_;
  std::unique_ptr<driver::BackendProcess> primary_, mirror_;
  std::unique_ptr<Session> session_;
  frontend::Structure structure_{};
  uint64_t base_ = 0;
  std::map<uint64_t, uint64_t> oracle_;
};

}  // namespace asymnvm::mirror::fixture
