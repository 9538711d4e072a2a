// Front-end identity from the coordinator (frontend/identity.h): a second live holder of an id is
// refused, ids are allocated when none is given, the epoch grows per incarnation, and
// Session::Open refuses a held id before it contacts any back-end.
#include "frontend/identity.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>

namespace asymnvm::frontend {
namespace {

using namespace std::chrono_literals;

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-identity-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    uri_ = "dir:" + dir_;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_, uri_;
};

TEST_F(IdentityTest, SecondLiveHolderIsRefusedUntilTheFirstLetsGo) {
  auto a = FrontendIdentity::Claim(uri_, 7, 5s);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->id(), 7u);
  const uint64_t first_epoch = (*a)->epoch();
  EXPECT_GE(first_epoch, 1u);
  auto b = FrontendIdentity::Claim(uri_, 7, 5s);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(b.status().message().find("front-end id 7 is held by another live process"),
            std::string::npos)
      << b.status().message();
  a = Status::Aborted("released");  // destroys the first identity: lease deleted
  auto c = FrontendIdentity::Claim(uri_, 7, 5s);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->epoch(), first_epoch + 1);  // a new incarnation
  EXPECT_EQ(FrontendIdentity::Claim(uri_, 70000, 5s).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(IdentityTest, IdZeroIsAllocatedAndSkipsIdsHeldByHand) {
  auto by_hand = FrontendIdentity::Claim(uri_, 1, 5s);  // the counter's first id, taken by hand
  ASSERT_TRUE(by_hand.ok());
  std::vector<std::unique_ptr<FrontendIdentity>> held;
  std::set<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto x = FrontendIdentity::Claim(uri_, 0, 5s);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    ids.insert((*x)->id());
    held.push_back(std::move(x).value());
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.count(1), 0u);
}

TEST_F(IdentityTest, TwoProcessesRacingForOneIdOneWins) {
  // Each child claims id 5, reports, then holds until the parent has read both reports.
  int report[2], go[2];
  ASSERT_EQ(::pipe(report), 0);
  ASSERT_EQ(::pipe(go), 0);
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = ::fork();
    ASSERT_GE(k, 0);
    if (k == 0) {
      ::close(go[1]);
      auto id = FrontendIdentity::Claim(uri_, 5, 30s);
      const char c = id.ok() ? 'W' : (id.status().code() == StatusCode::kAlreadyExists ? 'R' : 'E');
      if (::write(report[1], &c, 1) != 1) ::_exit(3);
      char x;
      while (::read(go[0], &x, 1) > 0) {
      }
      ::_exit(0);
    }
  }
  ::close(go[0]);
  ::close(report[1]);
  std::string results;
  char c;
  while (results.size() < 2 && ::read(report[0], &c, 1) == 1) results += c;
  ::close(go[1]);
  for (pid_t k : kids) {
    int st;
    ::waitpid(k, &st, 0);
  }
  ::close(report[0]);
  std::sort(results.begin(), results.end());
  EXPECT_EQ(results, "RW") << "W = won, R = refused (kAlreadyExists), E = other error";
  // Both children have exited: the id is free again.
  EXPECT_TRUE(FrontendIdentity::Claim(uri_, 5, 5s).ok());
}

TEST_F(IdentityTest, SessionOpenRefusesAHeldIdBeforeContactingTheBackend) {
  auto holder = FrontendIdentity::Claim(uri_, 9, 5s);
  ASSERT_TRUE(holder.ok());
  SessionOptions o;
  o.backends = {"tcp://127.0.0.1:1"};  // nothing listens; never reached with a held id
  o.frontend_id = 9;
  o.coordinator = uri_;
  auto s = Session::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kAlreadyExists) << s.status().ToString();
  // A free id gets past the claim (and then fails to reach the back-end), releasing it again.
  o.frontend_id = 0;
  auto t = Session::Open(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().code(), StatusCode::kAlreadyExists);
  auto c = coord::Coordinator::Open(uri_);
  ASSERT_TRUE(c.ok());
  auto kids = (*c)->Children("/asymnvm/frontends");
  ASSERT_TRUE(kids.ok());
  for (const auto& k : *kids) {
    if (k == "9") continue;
    EXPECT_FALSE((*c)->Exists(FrontendIdentity::LeasePath(std::stoull(k))).value())
        << "lease of id " << k << " outlived the failed Open";
  }
}

}  // namespace
}  // namespace asymnvm::frontend
