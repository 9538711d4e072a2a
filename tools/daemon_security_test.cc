// Connection set-up of the daemons under hostile peers, and the cluster secret end to end
// (doc/fabric.md §Handshake, §Cluster secret): a back-end whose listeners hold hundreds of silent
// and garbage connections still answers `asymnvm-ctl status`; the daemons refuse a non-loopback
// listen address with the built-in secret; --secret-file on both sides connects, a mismatch is a
// clear error.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "asymnvm/fabric.h"
#include "backend/backend.h"
#include "common/spawn.h"
#include "fabric/soft/test_peers.h"
#include "tools/ctl.h"

namespace asymnvm::tools {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

std::string Temp(const std::string& name) {
  return (fs::temp_directory_path() / ("asymnvm-sec-" + std::to_string(getpid()) + "-" + name))
      .string();
}

struct CtlRun {
  int rc;
  std::string out, err;
};
CtlRun Ctl(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int rc = RunCtl(args, out, err);
  return {rc, out.str(), err.str()};
}

backend::BackendOptions Small(const std::string& path) {
  backend::BackendOptions o;
  o.pool_path = path;
  o.pool_size = 16ull << 20;
  o.log_segment = 256 * 1024;
  o.oq_buffers = 4;
  o.oq_buffer_size = 64 * 1024;
  return o;
}

struct EnvClean {
  EnvClean() {
    ::unsetenv("ASYMNVM_SECRET");
    ::unsetenv("ASYMNVM_SECRET_FILE");
  }
  ~EnvClean() {
    ::unsetenv("ASYMNVM_SECRET");
    ::unsetenv("ASYMNVM_SECRET_FILE");
  }
};

TEST(DaemonSecurity, StatusAnswersWithSilentConnectionsOpen) {
  EnvClean env;
  const std::string pool = Temp("silent.pool");
  fs::remove(pool);
  auto be = backend::Backend::Start(Small(pool));
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  fabric::testing::PeerFlood oq_silent, log_silent;
  ASSERT_TRUE(oq_silent.Open((*be)->address(), 100, false).ok());
  ASSERT_TRUE(log_silent.Open((*be)->log_address(), 100, false).ok());
  CtlRun r = Ctl({"status", (*be)->address(), "--timeout-ms", "5000"});
  EXPECT_EQ(r.rc, kCtlOk) << r.err;
  EXPECT_NE(r.out.find("front-ends:"), std::string::npos) << r.out;
  (*be)->Stop();
  be->reset();
  fs::remove(pool);
}

TEST(DaemonSecurity, FloodAtBackendListener_StatusWithinOneHandshakeDeadline) {
  EnvClean env;
  const std::string pool = Temp("flood.pool");
  fs::remove(pool);
  auto opts = Small(pool);
  auto be = backend::Backend::Start(opts);
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  fabric::testing::PeerFlood silent, garbage;
  ASSERT_TRUE(silent.Open((*be)->address(), 500, false).ok());
  ASSERT_TRUE(garbage.Open((*be)->address(), 500, true).ok());
  // The legitimate client's whole budget (connect + handshake + call) is one handshake deadline.
  const auto deadline = opts.fabric.handshake_timeout;
  auto text = FetchStatus((*be)->address(), deadline);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("frontends"), std::string::npos);
  (*be)->Stop();
  be->reset();
  fs::remove(pool);
}

// A child daemon with stdout and stderr on pipes.
struct Child {
  pid_t pid = -1;
  int out = -1, err = -1;
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out >= 0) ::close(out);
    if (err >= 0) ::close(err);
  }
  bool Spawn(std::vector<std::string> argv) {
    int po[2], pe[2];
    if (::pipe2(po, O_CLOEXEC) != 0 || ::pipe2(pe, O_CLOEXEC) != 0) return false;
    SpawnSpec spec;
    spec.path = argv.at(0);
    spec.argv = argv;
    spec.out = SpawnSpec::Out::kFd;
    spec.out_fd = po[1];
    spec.err_fd = pe[1];
    pid = SpawnProcess(spec);
    ::close(po[1]);
    ::close(pe[1]);
    out = po[0];
    err = pe[0];
    return pid > 0;
  }
  // The first stdout line, or "" if the child closes stdout / 30 s pass.
  std::string Line() {
    std::string s;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    char c;
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      if (::read(out, &c, 1) != 1) return "";
      if (c == '\n') return s;
      s += c;
    }
    return "";
  }
  // Exit code and all of stderr, once the child exits (it must, within 30 s).
  int Wait(std::string* stderr_text) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(err, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    *stderr_text = s;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

std::string SecretFile(const std::string& tag, const std::string& secret) {
  std::string p = Temp(tag + ".secret");
  std::ofstream(p, std::ios::trunc) << secret << "\n";
  ::chmod(p.c_str(), 0600);
  return p;
}

TEST(DaemonSecurity, NonLoopbackListenWithDefaultSecret_DaemonsRefuseToStart) {
  EnvClean env;
  const std::string pool = Temp("refuse.pool");
  fs::remove(pool);
  {
    Child be;
    ASSERT_TRUE(be.Spawn(
        {ASYMNVM_BACKEND_BIN, "--pool", pool, "--size", "16M", "--listen", "tcp://0.0.0.0:0"}));
    std::string err;
    EXPECT_EQ(be.Wait(&err), 1) << err;
    EXPECT_NE(err.find("built-in default"), std::string::npos) << err;
    EXPECT_NE(err.find("--secret-file"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(pool)) << "refused before touching the pool";
  }
  {
    Child oq;
    ASSERT_TRUE(oq.Spawn({ASYMNVM_OQ_SERVER_BIN, "--listen", "tcp://0.0.0.0:0"}));
    std::string err;
    EXPECT_EQ(oq.Wait(&err), 1) << err;
    EXPECT_NE(err.find("built-in default"), std::string::npos) << err;
  }
  {
    Child be;
    ASSERT_TRUE(
        be.Spawn({ASYMNVM_BACKEND_BIN, "--pool", pool, "--secret-file", "/nonexistent/secret"}));
    std::string err;
    EXPECT_EQ(be.Wait(&err), 1) << err;
    EXPECT_NE(err.find("/nonexistent/secret"), std::string::npos) << err;
  }
}

TEST(DaemonSecurity, SecretFileOnBothSides_ConnectsAndMismatchIsClear) {
  EnvClean env;
  const std::string pool = Temp("secret.pool");
  fs::remove(pool);
  const std::string right = SecretFile("right", "correct horse battery staple");
  const std::string wrong = SecretFile("wrong", "something else");
  Child be;
  ASSERT_TRUE(be.Spawn({ASYMNVM_BACKEND_BIN, "--pool", pool, "--size", "16M", "--secret-file",
                        right, "--listen", "tcp://0.0.0.0:0", "--log-listen", "tcp://0.0.0.0:0"}));
  std::string line = be.Line();
  ASSERT_EQ(line.rfind("listening tcp://", 0), 0u) << line;
  std::string port = line.substr(line.rfind(':') + 1);
  std::string addr = "tcp://127.0.0.1:" + port;

  CtlRun ok = Ctl({"status", addr, "--secret-file", right, "--timeout-ms", "5000"});
  EXPECT_EQ(ok.rc, kCtlOk) << ok.err;

  ::setenv("ASYMNVM_SECRET_FILE", right.c_str(), 1);
  CtlRun via_env = Ctl({"status", addr, "--timeout-ms", "5000"});
  EXPECT_EQ(via_env.rc, kCtlOk) << via_env.err;
  ::unsetenv("ASYMNVM_SECRET_FILE");

  CtlRun bad = Ctl({"status", addr, "--secret-file", wrong, "--timeout-ms", "5000"});
  EXPECT_EQ(bad.rc, kCtlFailed);
  EXPECT_NE(bad.err.find("cluster secret mismatch"), std::string::npos) << bad.err;
  CtlRun dflt = Ctl({"status", addr, "--timeout-ms", "5000"});
  EXPECT_EQ(dflt.rc, kCtlFailed);
  EXPECT_NE(dflt.err.find("cluster secret mismatch"), std::string::npos) << dflt.err;

  ::kill(be.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(be.Wait(&err), 0) << err;
  // The daemon's side of the mismatch is logged, naming the cause.
  EXPECT_NE(err.find("cluster secret mismatch"), std::string::npos) << err;
  fs::remove(pool);
  fs::remove(right);
  fs::remove(wrong);
}

}  // namespace
}  // namespace asymnvm::tools
