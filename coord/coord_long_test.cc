// Long ZooKeeper campaign (label `long`): a 3-node ensemble loses its leader round after round
// (the killed server restarts between rounds) while holders register; after every round each
// holder has exactly one node, owned by its original session. The short variant is
// CoordZooKeeperEnsemble.LeaderLoss... in coord_conformance_test.cc.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <map>

#include "asymnvm/coord.h"
#include "coord/testing/zk_server.h"

namespace asymnvm::coord {
namespace {

using namespace std::chrono_literals;
using testing::After;
using testing::Subprocess;
using testing::ZkEnsemble;

TEST(CoordZooKeeperEnsembleLong, RepeatedLeaderLossLosesOrDuplicatesNoRegistration) {
  const std::string why = testing::ZooKeeperUnavailableReason();
  if (!why.empty()) GTEST_SKIP() << "ZooKeeper unavailable: " << why;
  constexpr int kRounds = 4;
  auto started = ZkEnsemble::Start(3, After(120s));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ZkEnsemble& zk = **started;
  const std::string uri = "zk:" + zk.connect_string() + "/ensemble";
  Options o;
  o.session_timeout = 20s;
  auto observer = Coordinator::Open(uri, o);
  ASSERT_TRUE(observer.ok()) << observer.status().ToString();
  ASSERT_TRUE((*observer)->EnsurePath("/reg").ok());

  std::vector<std::unique_ptr<Subprocess>> holders;
  std::map<std::string, std::string> session_of;
  auto start = [&](const std::string& name) {
    auto p = Subprocess::Start(
        {ASYMNVM_COORD_TEST_HELPER, "register", uri, "/reg/" + name, "--session-ms", "20000"});
    ASSERT_TRUE(p.ok());
    holders.push_back(std::move(p).value());
  };
  auto await_ready = [&](Subprocess* h) {
    auto ready = h->WaitForLine("ready", After(120s));
    ASSERT_TRUE(ready.ok()) << ready.status().ToString();
    char path[256];
    unsigned long long session = 0;
    ASSERT_EQ(std::sscanf(ready->c_str(), "ready %255s %llu", path, &session), 2) << *ready;
    session_of[path] = std::to_string(session);
  };
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    start("r" + std::to_string(round) + "-before");
    await_ready(holders.back().get());
    const int leader = zk.Leader();
    ASSERT_GE(leader, 0);
    zk.Kill(leader);
    start("r" + std::to_string(round) + "-during");
    await_ready(holders.back().get());
    ASSERT_TRUE(zk.WaitServing(After(120s)).ok());
    ASSERT_TRUE(zk.Restart(leader).ok());
    ASSERT_TRUE(zk.WaitServing(After(120s)).ok());

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
  }
  for (auto& h : holders) h->Signal(SIGKILL);
}

}  // namespace
}  // namespace asymnvm::coord
