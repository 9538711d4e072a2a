// One conformance suite over both coordinators (include/asymnvm/coord.h): "embedded" (a
// directory) and "zookeeper" (a real ZooKeeper 3.8 started by PID for each test process; each test
// gets its own chroot). ZooKeeper cases skip with a message only when java or the jar is missing.
//
// Nothing here asserts on elapsed time: every wait is for an observable state with a generous
// deadline.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "asymnvm/coord.h"
#include "coord/testing/zk_server.h"

namespace asymnvm::coord {
namespace {

using namespace std::chrono_literals;
using testing::After;
using testing::Subprocess;
using testing::ZkEnsemble;

constexpr auto kLong = 60s;  // generous: a deadline, never an expectation

// One ZooKeeper server per test process (ctest runs each test in its own process).
ZkEnsemble* SharedZk(std::string* why) {
  static std::unique_ptr<ZkEnsemble> zk;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    reason = testing::ZooKeeperUnavailableReason();
    if (reason.empty()) {
      auto e = ZkEnsemble::Start(1, After(kLong));
      if (e.ok()) {
        zk = std::move(e).value();
      } else {
        reason = "could not start ZooKeeper: " + e.status().ToString();
      }
    }
  }
  *why = reason;
  return zk.get();
}

std::string RandomName(const char* prefix) {
  std::random_device rd;
  return std::string(prefix) + std::to_string(rd()) + std::to_string(rd() % 100000);
}

// Records watch events; waits for one matching a predicate.
class EventLog {
 public:
  WatchCallback Callback() {
    return [this](const WatchEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(e.type);
      cv_.notify_all();
    };
  }
  // Waits for an event of `type` (consuming everything up to it).
  bool WaitFor(EventType type, testing::Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      while (!events_.empty()) {
        const EventType t = events_.front();
        events_.pop_front();
        if (t == type) return true;
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && events_.empty()) {
        return false;
      }
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EventType> events_;
};

class CoordConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "zookeeper") {
      std::string why;
      zk_ = SharedZk(&why);
      if (zk_ == nullptr) GTEST_SKIP() << "ZooKeeper unavailable: " << why;
      uri_ = "zk:" + zk_->connect_string() + "/" + RandomName("t");
    } else {
      char tmpl[] = "/tmp/asymnvm-coord-XXXXXX";
      ASSERT_NE(::mkdtemp(tmpl), nullptr);
      dir_ = tmpl;
      uri_ = std::string("dir:") + dir_;
    }
    coord_ = OpenOrDie();
  }
  void TearDown() override {
    coord_.reset();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  bool is_zk() const { return GetParam() == "zookeeper"; }

  std::unique_ptr<Coordinator> OpenOrDie(Options o = {}) {
    o.poll_interval = 20ms;
    auto c = Coordinator::Open(uri_, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  std::unique_ptr<Subprocess> Helper(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {ASYMNVM_COORD_TEST_HELPER};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = Subprocess::Start(argv);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  ZkEnsemble* zk_ = nullptr;
  std::string dir_;
  std::string uri_;
  std::unique_ptr<Coordinator> coord_;
};

TEST_P(CoordConformance, CrudFollowsTheContract) {
  Coordinator& c = *coord_;
  EXPECT_EQ(c.Create("/a/b", "x").status().code(), StatusCode::kNotFound);  // no parent
  ASSERT_TRUE(c.Create("/a", "A").ok());
  EXPECT_EQ(c.Create("/a", "A").status().code(), StatusCode::kAlreadyExists);
  auto n = c.Get("/a");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->data, "A");
  EXPECT_EQ(n->version, 0);
  EXPECT_FALSE(n->ephemeral);

  auto v1 = c.Set("/a", "B", 0);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(*v1, 1);
  EXPECT_EQ(c.Set("/a", "C", 0).status().code(), StatusCode::kAborted);  // stale version
  EXPECT_EQ(c.Get("/a")->data, "B");
  EXPECT_EQ(c.Set("/a", "", kAnyVersion).value(), 2);
  EXPECT_EQ(c.Get("/a")->data, "");

  ASSERT_TRUE(c.Create("/a/z", "").ok());
  ASSERT_TRUE(c.Create("/a/m", "").ok());
  auto kids = c.Children("/a");
  ASSERT_TRUE(kids.ok());
  EXPECT_EQ(*kids, (std::vector<std::string>{"m", "z"}));
  EXPECT_EQ(c.Delete("/a").code(), StatusCode::kFailedPrecondition);  // has children
  EXPECT_EQ(c.Delete("/a/z", 5).code(), StatusCode::kAborted);
  EXPECT_TRUE(c.Delete("/a/z", 0).ok());
  EXPECT_TRUE(c.Delete("/a/m").ok());
  EXPECT_EQ(c.Delete("/a/m").code(), StatusCode::kNotFound);
  EXPECT_FALSE(c.Exists("/a/m").value());
  EXPECT_TRUE(c.Exists("/a").value());
  EXPECT_EQ(c.Get("/nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.Children("/nope").status().code(), StatusCode::kNotFound);

  // Sequential names increase under one parent.
  auto s1 = c.Create("/a/q-", "", kSequential);
  auto s2 = c.Create("/a/q-", "", kSequential);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->size(), std::string("/a/q-").size() + 10);
  EXPECT_LT(*s1, *s2);

  // Ephemeral nodes have no children.
  ASSERT_TRUE(c.Create("/a/e", "", kEphemeral).ok());
  EXPECT_TRUE(c.Get("/a/e")->ephemeral);
  EXPECT_EQ(c.Get("/a/e")->owner_session, c.session_id());
  EXPECT_EQ(c.Create("/a/e/x", "").status().code(), StatusCode::kFailedPrecondition);

  // Bad input is refused, not crashed on.
  for (const char* bad : {"", "a", "/a/", "//a", "/a/../b", "/a b", "/.hidden"}) {
    EXPECT_EQ(c.Get(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(c.Create(bad, "").status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(c.Create("/f", "", 0x80).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.EnsurePath("/deep/er/path").ok());
  EXPECT_TRUE(c.EnsurePath("/deep/er/path").ok());
  EXPECT_TRUE(c.Exists("/deep/er/path").value());
}

TEST_P(CoordConformance, EphemeralNodeEndsWithItsCoordinator) {
  auto holder = OpenOrDie();
  ASSERT_TRUE(holder->Create("/e", "mine", kEphemeral).ok());
  EXPECT_EQ(coord_->Get("/e")->data, "mine");  // another session sees it
  const int64_t version = coord_->Get("/e")->version;
  holder->Close();
  auto gone = coord_->WaitForChange("/e", version, After(kLong));
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_FALSE(gone->has_value());
  EXPECT_EQ(holder->Get("/e").status().code(), StatusCode::kFailedPrecondition);  // closed
}

TEST_P(CoordConformance, EphemeralRegistrationVanishesWhenHolderIsKilled) {
  ASSERT_TRUE(coord_->Create("/reg", "").ok());
  auto holder = Helper({"register", uri_, "/reg/h1"});
  ASSERT_NE(holder, nullptr);
  auto ready = holder->WaitForLine("ready", After(kLong));
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  auto node = coord_->Get("/reg/h1");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_TRUE(node->ephemeral);
  EXPECT_EQ(node->data, std::to_string(holder->pid()));
  // A second registration of the same id by another live process is refused.
  auto rival = Helper({"register", uri_, "/reg/h1"});
  auto refused = rival->WaitForLine("error", After(kLong));
  ASSERT_TRUE(refused.ok());
  EXPECT_NE(refused->find("AlreadyExists"), std::string::npos) << *refused;

  holder->Signal(SIGKILL);
  ASSERT_TRUE(holder->Wait(After(kLong)).ok());
  auto gone = coord_->WaitForChange("/reg/h1", node->version, After(kLong));
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_FALSE(gone->has_value());
  EXPECT_TRUE(coord_->Children("/reg")->empty());
  // The id is free again.
  EXPECT_TRUE(coord_->Create("/reg/h1", "", kEphemeral).ok());
}

// ZooKeeper: a stopped holder's session expires (800 ms) and its registration goes. Embedded:
// sessions do not expire by time — a stopped process still holds its flock — so a paused holder
// stays registered and its id cannot be taken (no false expiry) until it dies.
TEST_P(CoordConformance, SessionExpiresWhileHolderIsStopped) {
  ASSERT_TRUE(coord_->Create("/reg", "").ok());
  auto holder = Helper({"register", uri_, "/reg/h1", "--session-ms", "800"});
  ASSERT_NE(holder, nullptr);
  ASSERT_TRUE(holder->WaitForLine("ready", After(kLong)).ok());
  const int64_t version = coord_->Get("/reg/h1")->version;
  holder->Signal(SIGSTOP);
  if (!is_zk()) {
    // Three session lengths pass with the holder stopped: nothing changes.
    auto changed = coord_->WaitForChange("/reg/h1", version, After(2400ms));
    EXPECT_EQ(changed.status().code(), StatusCode::kTimedOut);
    EXPECT_TRUE(coord_->Exists("/reg/h1").value());
    EXPECT_EQ(OpenOrDie()->Create("/reg/h1", "", kEphemeral).status().code(),
              StatusCode::kAlreadyExists);
    holder->Signal(SIGCONT);
    holder->Signal(SIGKILL);
    auto gone = coord_->WaitForChange("/reg/h1", version, After(kLong));
    ASSERT_TRUE(gone.ok()) << gone.status().ToString();
    EXPECT_FALSE(gone->has_value());
    return;
  }
  auto gone = coord_->WaitForChange("/reg/h1", version, After(kLong));
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_FALSE(gone->has_value());
  holder->Signal(SIGCONT);
  // The holder learns that its session expired (and must re-register itself).
  auto expired = holder->WaitForLine("state expired", After(kLong));
  EXPECT_TRUE(expired.ok()) << expired.status().ToString();
  EXPECT_FALSE(
      coord_->Exists("/reg/h1").value());  // nothing re-created it behind the caller's back
}

TEST_P(CoordConformance, CompareAndSetFromTwoProcessesLosesNoIncrement) {
  ASSERT_TRUE(coord_->Create("/counter", "0").ok());
  // In-process: a stale writer is refused.
  auto other = OpenOrDie();
  const int64_t v = coord_->Get("/counter")->version;
  ASSERT_TRUE(coord_->Set("/counter", "0", v).ok());
  EXPECT_EQ(other->Set("/counter", "x", v).status().code(), StatusCode::kAborted);
  EXPECT_EQ(coord_->Get("/counter")->data, "0");

  constexpr int kPerProcess = 100;
  auto a = Helper({"incr", uri_, "/counter", std::to_string(kPerProcess)});
  auto b = Helper({"incr", uri_, "/counter", std::to_string(kPerProcess)});
  ASSERT_TRUE(a && b);
  auto ra = a->WaitForLine("conflicts", After(kLong));
  auto rb = b->WaitForLine("conflicts", After(kLong));
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_EQ(coord_->Get("/counter")->data, std::to_string(2 * kPerProcess));
  std::printf("CAS conflicts: %s / %s\n", ra->c_str(), rb->c_str());
}

TEST_P(CoordConformance, WatchesFireOnChangeDeleteAndChildren) {
  EventLog node_events, child_events;
  auto nw = coord_->Watch("/w", WatchKind::kNode, node_events.Callback());
  auto cw = coord_->Watch("/w", WatchKind::kChildren, child_events.Callback());
  ASSERT_TRUE(nw.ok() && cw.ok());
  auto writer = OpenOrDie();  // changes come from another session
  ASSERT_TRUE(writer->Create("/w", "1").ok());
  EXPECT_TRUE(node_events.WaitFor(EventType::kCreated, After(kLong)));
  ASSERT_TRUE(writer->Set("/w", "2", 0).ok());
  EXPECT_TRUE(node_events.WaitFor(EventType::kChanged, After(kLong)));
  ASSERT_TRUE(writer->Create("/w/c1", "").ok());
  EXPECT_TRUE(child_events.WaitFor(EventType::kChildrenChanged, After(kLong)));
  // A child held by a process that dies: the children watch fires when it vanishes.
  auto holder = Helper({"register", uri_, "/w/c2"});
  ASSERT_TRUE(holder->WaitForLine("ready", After(kLong)).ok());
  EXPECT_TRUE(child_events.WaitFor(EventType::kChildrenChanged, After(kLong)));
  holder->Signal(SIGKILL);
  EXPECT_TRUE(child_events.WaitFor(EventType::kChildrenChanged, After(kLong)));
  EXPECT_EQ(coord_->Children("/w").value(), std::vector<std::string>{"c1"});
  ASSERT_TRUE(writer->Delete("/w/c1").ok());
  ASSERT_TRUE(writer->Delete("/w").ok());
  EXPECT_TRUE(node_events.WaitFor(EventType::kDeleted, After(kLong)));
  // After Unwatch the callback never runs again.
  ASSERT_TRUE(coord_->Unwatch(*nw).ok());
  EXPECT_EQ(coord_->Unwatch(*nw).code(), StatusCode::kNotFound);
  ASSERT_TRUE(coord_->Unwatch(*cw).ok());

  // WaitForChildrenChange: returns once the children differ from what the caller knew.
  ASSERT_TRUE(coord_->Create("/w", "").ok());
  std::thread t([&] { (void)writer->Create("/w/late", ""); });
  auto now = coord_->WaitForChildrenChange("/w", {}, After(kLong));
  t.join();
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(*now, std::vector<std::string>{"late"});
}

TEST_P(CoordConformance, AllocateIdIsUniqueAcrossProcessesAndThreads) {
  constexpr int kProcesses = 4, kPerProcess = 40, kThreads = 3, kPerThread = 30;
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int i = 0; i < kProcesses; ++i) {
    procs.push_back(Helper({"alloc", uri_, "/ids/fe", std::to_string(kPerProcess)}));
    ASSERT_NE(procs.back(), nullptr);
  }
  std::mutex mu;
  std::vector<uint64_t> ids;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        auto id = coord_->AllocateId("/ids/fe");
        ASSERT_TRUE(id.ok()) << id.status().ToString();
        std::lock_guard<std::mutex> lock(mu);
        ids.push_back(*id);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& p : procs) {
    for (int i = 0; i < kPerProcess; ++i) {
      auto line = p->ReadLine(After(kLong));
      ASSERT_TRUE(line.ok()) << line.status().ToString();
      ASSERT_EQ(line->rfind("error", 0), std::string::npos) << *line;
      ids.push_back(std::strtoull(line->c_str(), nullptr, 10));
    }
  }
  std::set<uint64_t> unique(ids.begin(), ids.end());
  EXPECT_EQ(unique.size(), ids.size()) << "duplicate ids allocated";
  EXPECT_EQ(ids.size(), size_t{kProcesses * kPerProcess + kThreads * kPerThread});
  EXPECT_GE(*unique.begin(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Coordinators, CoordConformance,
                         ::testing::Values(std::string("embedded"), std::string("zookeeper")),
                         [](const auto& info) { return info.param; });

// ---- ZooKeeper only: a 3-node ensemble on loopback loses its leader --------------------------

TEST(CoordZooKeeperEnsemble, LeaderLossLosesOrDuplicatesNoRegistration) {
  const std::string why = testing::ZooKeeperUnavailableReason();
  if (!why.empty()) GTEST_SKIP() << "ZooKeeper unavailable: " << why;
  auto started = ZkEnsemble::Start(3, After(120s));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ZkEnsemble& zk = **started;
  const std::string uri = "zk:" + zk.connect_string() + "/ensemble";
  Options o;
  o.session_timeout = 20s;  // far longer than an election: sessions must survive it
  auto observer = Coordinator::Open(uri, o);
  ASSERT_TRUE(observer.ok()) << observer.status().ToString();
  ASSERT_TRUE((*observer)->EnsurePath("/reg").ok());

  auto helper = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {ASYMNVM_COORD_TEST_HELPER, "register", uri};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--session-ms", "20000"});
    auto p = Subprocess::Start(argv);
    EXPECT_TRUE(p.ok());
    return std::move(p).value();
  };
  // Registered before the leader dies (sequential names: a duplicate would be visible).
  std::vector<std::unique_ptr<Subprocess>> holders;
  std::map<std::string, std::string> session_of;  // created path → the holder's session
  for (int i = 0; i < 3; ++i) {
    holders.push_back(helper({"/reg/before" + std::to_string(i) + "-", "--sequential"}));
    auto ready = holders.back()->WaitForLine("ready", After(kLong));
    ASSERT_TRUE(ready.ok()) << ready.status().ToString();
    char path[256];
    unsigned long long session = 0;
    ASSERT_EQ(std::sscanf(ready->c_str(), "ready %255s %llu", path, &session), 2);
    session_of[path] = std::to_string(session);
  }
  const int leader = zk.Leader();
  ASSERT_GE(leader, 0);
  zk.Kill(leader);
  // Registered while the ensemble elects a new leader.
  for (int i = 0; i < 2; ++i) holders.push_back(helper({"/reg/during" + std::to_string(i)}));
  for (size_t i = 3; i < holders.size(); ++i) {
    auto ready = holders[i]->WaitForLine("ready", After(kLong));
    ASSERT_TRUE(ready.ok()) << ready.status().ToString();
    char path[256];
    unsigned long long session = 0;
    ASSERT_EQ(std::sscanf(ready->c_str(), "ready %255s %llu", path, &session), 2);
    session_of[path] = std::to_string(session);
  }
  ASSERT_TRUE(zk.WaitServing(After(kLong)).ok());
  EXPECT_GE(zk.Leader(), 0);
  EXPECT_NE(zk.Leader(), leader);

  // Exactly one node per holder, held by that holder's (surviving) session.
  auto kids = (*observer)->Children("/reg");
  ASSERT_TRUE(kids.ok()) << kids.status().ToString();
  std::vector<std::string> expected;
  for (const auto& [path, session] : session_of) expected.push_back(path.substr(5));
  EXPECT_EQ(*kids, expected);
  for (const auto& [path, session] : session_of) {
    auto n = (*observer)->Get(path);
    ASSERT_TRUE(n.ok()) << path << ": " << n.status().ToString();
    EXPECT_EQ(std::to_string(n->owner_session), session) << path;
  }
  // No holder saw its session expire.
  for (auto& h : holders) {
    h->Signal(SIGKILL);
    ASSERT_TRUE(h->Wait(After(kLong)).ok());
  }
  (*observer)->Close();
}

}  // namespace
}  // namespace asymnvm::coord
