// Unit tests of the coordinator pieces that need no second process or server: path rules, URI
// parsing and refusals, the embedded node file format, corruption handling and the polling
// fallback of embedded watches.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "asymnvm/coord.h"
#include "coord/embedded_format.h"

namespace asymnvm::coord {
namespace {

using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/asymnvm-coord-unit-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(CoordPath, AcceptsTheRulesAndRefusesTheRest) {
  for (const char* ok : {"/", "/a", "/a/b-c_d.e:f", "/asymnvm/groups/0123abcd/primary"}) {
    EXPECT_TRUE(ValidatePath(ok).ok()) << ok;
  }
  for (const char* bad : {"", "a", "/a/", "//", "/a//b", "/.x", "/a/..", "/a b", "/a\nb", "/é"}) {
    EXPECT_EQ(ValidatePath(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ValidatePath("/" + std::string(201, 'a')).code(), StatusCode::kInvalidArgument);
}

TEST(CoordOpen, RefusesBadUrisWithClearErrors) {
  auto unknown = Coordinator::Open("etcd:127.0.0.1:2379");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  auto remote = Coordinator::Open("dir://otherhost/var/lib/asymnvm");
  EXPECT_EQ(remote.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(remote.status().message().find("one machine"), std::string::npos);
  EXPECT_EQ(Coordinator::Open("").status().code(), StatusCode::kInvalidArgument);
  for (const char* bad : {"zk:", "zk:host", "zk:host:0", "zk:host:99999", "zk:host:12x",
                          "zk:127.0.0.1:2181/bad//root", "zk::2181"}) {
    EXPECT_EQ(Coordinator::Open(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CoordOpen, UnreachableZooKeeperFailsWithinTheConnectTimeout) {
  Options o;
  o.connect_timeout = 300ms;
  // Port 1 on loopback: nothing listens there.
  auto c = Coordinator::Open("zk:127.0.0.1:1", o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kConnectionError);
  EXPECT_TRUE(c.status().retryable());
}

// A loopback listener that never answers (silent) or answers every connection with garbage.
class HostilePeer {
 public:
  explicit HostilePeer(bool garbage) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    if (garbage) {
      thread_ = std::thread([this] {
        for (;;) {
          const int c = ::accept(fd_, nullptr, nullptr);
          if (c < 0) return;  // listener shut down
          const char junk[] = "\xff\xff\xff\x7fHTTP/1.1 400 Bad Request\r\n\r\n";
          (void)::write(c, junk, sizeof(junk));
          ::close(c);
        }
      });
    }
  }
  ~HostilePeer() {
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(CoordOpen, HostileZooKeeperPeersGiveAClearErrorNotAHang) {
  Options o;
  o.connect_timeout = 500ms;
  for (bool garbage : {false, true}) {
    HostilePeer peer(garbage);
    auto c = Coordinator::Open("zk:127.0.0.1:" + std::to_string(peer.port()), o);
    ASSERT_FALSE(c.ok()) << (garbage ? "garbage" : "silent");
    EXPECT_EQ(c.status().code(), StatusCode::kConnectionError) << c.status().ToString();
  }
  auto unresolvable = Coordinator::Open("zk:no-such-host.invalid:2181", o);
  ASSERT_FALSE(unresolvable.ok());
  EXPECT_NE(unresolvable.status().message().find("no-such-host.invalid"), std::string::npos)
      << unresolvable.status().ToString();
}

TEST(CoordOpen, EmptyUriMeansEmbeddedInTheDataDirectory) {
  TempDir dir;
  Options o;
  o.data_dir = dir.path();
  auto c = Coordinator::Open("", o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->kind(), "embedded");
  ASSERT_TRUE((*c)->Create("/x", "1").ok());
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/coord/tree/x/.node"));
}

TEST(CoordEmbeddedFormat, RoundTripsAndDetectsEveryFlippedByte) {
  NodeFile n;
  n.ephemeral = true;
  n.version = 7;
  n.creation_id = 42;
  n.owner_session = 0xabcdef;
  n.data = "hello";
  const std::string bytes = EncodeNodeFile(n);
  auto back = DecodeNodeFile(bytes, "t");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data, "hello");
  EXPECT_EQ(back->version, 7);
  EXPECT_TRUE(back->ephemeral);
  EXPECT_EQ(back->owner_session, 0xabcdefu);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x10;
    EXPECT_EQ(DecodeNodeFile(bad, "t").status().code(), StatusCode::kCorruption) << i;
  }
  EXPECT_EQ(DecodeNodeFile(bytes.substr(0, 10), "t").status().code(), StatusCode::kCorruption);
}

TEST(CoordEmbedded, CorruptNodeFileIsReportedNotCrashedOn) {
  TempDir dir;
  auto c = Coordinator::Open("dir:" + dir.path());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Create("/n", "v").ok());
  std::ofstream(dir.path() + "/tree/n/.node", std::ios::trunc) << "garbage that is not a node";
  EXPECT_EQ((*c)->Get("/n").status().code(), StatusCode::kCorruption);
  EXPECT_EQ((*c)->Set("/n", "w", kAnyVersion).status().code(), StatusCode::kCorruption);
  EXPECT_EQ((*c)->Children("/").status().code(), StatusCode::kCorruption);
}

TEST(CoordEmbedded, WatchesWorkByPollingWithoutInotify) {
  ::setenv("ASYMNVM_COORD_NO_INOTIFY", "1", 1);
  TempDir dir;
  auto c = Coordinator::Open("dir:" + dir.path());
  ::unsetenv("ASYMNVM_COORD_NO_INOTIFY");
  ASSERT_TRUE(c.ok());
  auto writer = Coordinator::Open("dir:" + dir.path());
  ASSERT_TRUE(writer.ok());
  std::thread t([&] {
    (void)(*writer)->Create("/p", "1");
    (void)(*writer)->Set("/p", "2", 0);
  });
  auto n = (*c)->WaitForChange("/p", Coordinator::kNoNode, Clock::now() + 60s);  // appears
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_TRUE(n->has_value());
  if ((*n)->version == 0) n = (*c)->WaitForChange("/p", 0, Clock::now() + 60s);  // then changes
  t.join();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_TRUE(n->has_value());
  EXPECT_EQ((*n)->version, 1);
  EXPECT_EQ((*n)->data, "2");
}

TEST(CoordEmbedded, SameProcessSecondHolderIsRefusedAndThreadsAreSafe) {
  TempDir dir;
  auto a = Coordinator::Open("dir:" + dir.path());
  auto b = Coordinator::Open("dir:" + dir.path());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Create("/fe", "").ok());
  ASSERT_TRUE((*a)->Create("/fe/1", "", kEphemeral).ok());
  EXPECT_EQ((*b)->Create("/fe/1", "", kEphemeral).status().code(), StatusCode::kAlreadyExists);
  // Threads of one process incrementing through one Coordinator lose nothing.
  ASSERT_TRUE((*a)->Create("/n", "0").ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Coordinator& c = t % 2 == 0 ? **a : **b;
      for (int i = 0; i < 25;) {
        auto n = c.Get("/n");
        ASSERT_TRUE(n.ok());
        auto s = c.Set("/n", std::to_string(std::stoi(n->data) + 1), n->version);
        if (s.ok()) ++i;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ((*a)->Get("/n")->data, "100");
}

}  // namespace
}  // namespace asymnvm::coord
