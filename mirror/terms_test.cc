// Terms, fencing while serving, joining mirrors and the rejoin of a lost pool (doc/mirror.md
// §Terms, §Joining, §Rejoin): the PrimaryRole and a Session's GroupWatch over an embedded
// coordinator, then real processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/pm.h"
#include "backend/registration.h"
#include "coord/testing/zk_server.h"
#include "frontend/group_watch.h"
#include "mirror/group.h"
#include "mirror/mirror_fixture.h"
#include "mirror/primary_role.h"

namespace asymnvm::mirror {
namespace {

using namespace std::chrono_literals;
using fixture::kWords;
using fixture::MirrorTest;
using frontend::Session;
using frontend::SessionOptions;

class CoordDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-terms-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto c = coord::Coordinator::Open("dir:" + dir_ + "/coord");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coord_ = std::move(c).value();
    for (size_t i = 0; i < uuid_.size(); i++) uuid_[i] = static_cast<uint8_t>(i + 1);
  }
  void TearDown() override {
    coord_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void SetState(uint64_t term, const std::string& primary) {
    const std::string path = GroupPath(uuid_) + "/state";
    ASSERT_TRUE(coord_->EnsurePath(GroupPath(uuid_)).ok());
    GroupState s{term, primary, {}};
    auto node = coord_->Get(path);
    if (node.ok()) {
      ASSERT_TRUE(coord_->Set(path, EncodeGroupState(s), node->version).ok());
    } else {
      ASSERT_TRUE(coord_->Create(path, EncodeGroupState(s)).ok());
    }
  }
  std::string dir_;
  std::shared_ptr<coord::Coordinator> coord_;
  std::array<uint8_t, 16> uuid_{};
};

TEST_F(CoordDir, ClientTermsAboveTheStateAreRefusedOnlyTheStateFences) {
  std::atomic<int> fenced{0};
  PrimaryRole role(coord_, uuid_, "me", 0, "test");
  role.Start([&](const Status&) { fenced++; }, nullptr);
  EXPECT_TRUE(role.CheckClientTerm(0).ok());
  // No state yet: a front-end claiming term 1 is confused (or hostile); refused, nobody fenced.
  EXPECT_EQ(role.CheckClientTerm(1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fenced.load(), 0);
  // The first in-sync set creates term 1 naming us: the term is learned on demand.
  SetState(3, "me");
  EXPECT_TRUE(role.CheckClientTerm(3).ok());
  EXPECT_EQ(role.term(), 3u);
  EXPECT_EQ(role.CheckClientTerm(4).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fenced.load(), 0);
  // A promotion elsewhere: the state names another replica at term 4.
  SetState(4, "other");
  Status s = role.CheckClientTerm(4);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("fenced"), std::string::npos) << s.ToString();
  // The watch thread may be the one fencing (it saw the state change too): wait for the callback.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (fenced.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(fenced.load(), 1);  // once, whoever saw it first
  role.Stop(false);
}

TEST_F(CoordDir, TheWatchFencesAServingPrimaryWhenTheStateNamesAnother) {
  SetState(1, "me");
  std::atomic<int> fenced{0};
  Status why;
  Mutex mu;
  PrimaryRole role(coord_, uuid_, "me", 1, "test");
  role.Start(
      [&](const Status& s) {
        MutexLock lock(mu);
        why = s;
        fenced++;
      },
      nullptr);
  SetState(1, "me");  // a change that keeps us primary (the in-sync set) fences nobody
  SetState(2, "other");
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (fenced.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(fenced.load(), 1);
  MutexLock lock(mu);
  EXPECT_NE(why.message().find("term 2, served by other"), std::string::npos) << why.ToString();
}

TEST_F(CoordDir, AnnouncedMirrorsAreHandedOverOnceEach) {
  std::mutex mu;
  std::vector<std::string> added;
  PrimaryRole role(coord_, uuid_, "me", 0, "test");
  role.Start([](const Status&) {},
             [&](const std::string& a) {
               std::lock_guard<std::mutex> lock(mu);
               added.push_back(a);
               return Status::Ok();
             });
  ASSERT_TRUE(coord_->EnsurePath(JoiningPath(uuid_)).ok());
  ASSERT_TRUE(coord_
                  ->Create(JoiningPath(uuid_) + "/m1", "name m1\naddress unix:///x/m1.sock\n",
                           coord::kEphemeral)
                  .ok());
  ASSERT_TRUE(
      coord_->Create(JoiningPath(uuid_) + "/junk", "no address here\n", coord::kEphemeral).ok());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (role.joined() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  // Three more passes over the joining directory: still handed over once.
  const uint64_t seen = role.polls();
  while (role.polls() < seen + 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(role.polls(), seen + 3);
  role.Stop(false);
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0], "unix:///x/m1.sock");
}

TEST_F(CoordDir, ReplicaRecordsAndRegisteredTerms) {
  EXPECT_EQ(LookupReplica(*coord_, "host:/p").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(RecordReplica(*coord_, "host:/p", uuid_).ok());
  ASSERT_TRUE(RecordReplica(*coord_, "host:/p", uuid_).ok());  // idempotent
  auto u = LookupReplica(*coord_, "host:/p");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(*u, uuid_);
  EXPECT_EQ(backend::RegistrationTerm("address a\nterm 7\n"), 7u);
  EXPECT_EQ(backend::RegistrationTerm("address a\n"), 0u);
  EXPECT_EQ(backend::RegistrationTerm("term x7\n"), 0u);
  EXPECT_EQ(backend::RegistrationTerm("term 99999999999999999999999\n"), 0u);
}

TEST_F(CoordDir, AGroupWatchCountsADeletedOrReplacedRegistrationOnly) {
  const std::string path = GroupPath(uuid_) + "/primary";
  ASSERT_TRUE(coord_->EnsurePath(GroupPath(uuid_)).ok());
  EXPECT_EQ(frontend::GroupWatch::Start(*coord_, path), nullptr);  // nothing registered
  ASSERT_TRUE(coord_->Create(path, "address a\nterm 1\n", coord::kEphemeral).ok());
  auto w = frontend::GroupWatch::Start(*coord_, path);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->moves(), 0u);  // Start looked once more after arming the watch
  ASSERT_TRUE(coord_->Delete(path).ok());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (w->moves() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(w->moves(), 1u);
  // Connected through a registration that differs from the one there now: a move at once.
  ASSERT_TRUE(coord_->Create(path, "address b\nterm 2\n", coord::kEphemeral).ok());
  auto w2 = frontend::GroupWatch::Start(*coord_, path, "address a\nterm 1\n");
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->moves(), 1u);
}

// A primary whose group state is moved to a newer term naming another replica while it serves
// (what a promotion does behind a partitioned primary's back) exits 5 without acknowledging
// more; its Session's next call does not succeed on it.
TEST_F(MirrorTest, AServingPrimaryIsFencedWhenTheGroupMovesToANewerTerm) {
  StartMirror({"--no-promote"});
  StartPrimary();
  OpenSession(true, 500ms);
  Puts(50, 40);
  ASSERT_TRUE(session_->Fence().ok());
  ASSERT_TRUE(WaitInSync(1));
  auto c = coord::Coordinator::Open(coord_);
  ASSERT_TRUE(c.ok());
  const std::string path = GroupPath(session_->pool_uuid()) + "/state";
  auto node = (*c)->Get(path);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  auto gs = DecodeGroupState(node->data);
  ASSERT_TRUE(gs.ok());
  GroupState next{gs->term + 1, "somebody-else", {}};
  ASSERT_TRUE((*c)->Set(path, EncodeGroupState(next), node->version).ok());
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::string how;
  while (!primary_->Exited(&how) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(primary_->Exited(&how));
  EXPECT_EQ(how, "exited with status 5");
  // The session's registration is gone with the process: its next write fails (no primary comes
  // back within its reconnect deadline) rather than being acknowledged by a stale replica.
  Status s = Put(1, 1);
  EXPECT_FALSE(s.ok());
}

// §7.2 case 4 followed by the return of a machine that lost its pool: the old primary's daemon,
// started again with --rejoin on the same (now missing) pool path, finds its group by its replica
// name on the coordinator, waits for the promotion, and becomes a mirror that the promoted
// primary — which was given no mirror address — attaches while a writer keeps going. Nothing
// acknowledged is lost; the quiesced pools end identical.
TEST_F(MirrorTest, ALostPoolRejoinsByItsNameAndIsAttachedWithoutConfiguration) {
  StartMirror();  // no --mirror: the promoted primary learns its mirrors from the group
  StartPrimary();
  OpenSession();
  Puts(200, 50);
  ASSERT_TRUE(session_->Fence().ok());
  Puts(20, 51);
  ASSERT_TRUE(WaitInSync(1));
  primary_->Kill();
  ASSERT_TRUE(std::filesystem::remove(primary_pool_));
  // Started before the promotion: it waits for it (--rejoin-wait-ms), then execs the mirror.
  auto rejoined = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, primary_pool_, "64M",
                                                {"--rejoin", "--rejoin-wait-ms", "120000"});
  ASSERT_TRUE(rejoined.ok()) << rejoined.status().ToString();
  EXPECT_EQ((*rejoined)->address(), "unix://" + primary_pool_ + ".sock");
  VerifyOracle(*session_);  // reconnects to the promoted mirror
  const std::string promoted = session_->backend_address();
  ASSERT_NE(promoted, primary_->address());
  ASSERT_TRUE(WaitInSyncWhileWriting(1, promoted, 52, 3000));
  Puts(50, 53);
  ASSERT_TRUE(session_->Fence().ok());
  VerifyOracle(*session_);
  ExpectRejoinedAndIdentical(**rejoined);
}

// §Terms with leases that lapse (ZooKeeper): the primary is SIGSTOPped until its session expires,
// the mirror is promoted and the writer goes on there; a reader that had connected to the old
// primary reads the new value (never the stale one); when the old primary wakes it exits 5
// ("fenced") instead of serving.
TEST_F(MirrorTest, SigstoppedPrimaryOnZooKeeperIsPromotedPastAndFencedWhenItWakes) {
  const std::string why = coord::testing::ZooKeeperUnavailableReason();
  if (!why.empty()) GTEST_SKIP() << "ZooKeeper tests need " << why << " (scripts/setup.sh)";
  auto zk = coord::testing::ZkEnsemble::Start(1, coord::testing::After(60s));
  ASSERT_TRUE(zk.ok()) << zk.status().ToString();
  coord_ = "zk:" + (*zk)->connect_string();
  StartMirror({"--coord", coord_});
  StartPrimary({"--coord", coord_});
  OpenSession();
  Puts(100, 60);
  ASSERT_TRUE(Put(7, 1111).ok());
  ASSERT_TRUE(session_->Fence().ok());
  ASSERT_TRUE(WaitInSync(1));
  // A second front-end, connected to the old primary, reads word 7.
  SessionOptions ro;
  ro.backends = {primary_->address()};
  ro.coordinator = coord_;
  ro.level = frontend::Level::kRcb;
  ro.reconnect_deadline = 60s;
  auto reader = Session::Open(ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto w = (*reader)->ReadWord(base_ + 8 * 7);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, 1111u);

  ASSERT_EQ(::kill(primary_->pid(), SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{primary_->pid()};
  auto c = coord::Coordinator::Open(coord_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string state = GroupPath(session_->pool_uuid()) + "/state";
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  uint64_t term = 0;
  while (term < 2 && std::chrono::steady_clock::now() < deadline) {
    auto node = (*c)->Get(state);
    if (node.ok()) {
      auto gs = DecodeGroupState(node->data);
      if (gs.ok()) term = gs->term;
    }
    if (term < 2) std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(term, 2u) << "the mirror was not promoted past the stopped primary";
  // The writer goes on at the promoted mirror.
  ASSERT_TRUE(Put(7, 2222).ok());
  ASSERT_TRUE(session_->Fence().ok());
  // The old primary wakes: fenced, it exits 5 without serving.
  ASSERT_EQ(::kill(primary_->pid(), SIGCONT), 0);
  std::string how;
  while (!primary_->Exited(&how) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(primary_->Exited(&how)) << "the woken old primary went on serving";
  EXPECT_EQ(how, "exited with status 5");
  // The reader never sees the stale value: it reconnects to the promoted primary.
  auto w2 = (*reader)->ReadWord(base_ + 8 * 7);
  ASSERT_TRUE(w2.ok()) << w2.status().ToString();
  EXPECT_EQ(*w2, 2222u);
  VerifyOracle(*session_);
  reader->reset();
}

}  // namespace
}  // namespace asymnvm::mirror
