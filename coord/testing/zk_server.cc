#include "coord/testing/zk_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

namespace asymnvm::coord::testing {
namespace {

constexpr const char* kZkJar = "/usr/share/java/zookeeper.jar";
constexpr const char* kSlf4jSimple = "/usr/share/java/slf4j-simple.jar";

int MsUntil(Deadline d) {
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(d - std::chrono::steady_clock::now())
          .count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

std::string FindJava() {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find(':', i);
    if (j == std::string::npos) j = p.size();
    const std::string candidate = p.substr(i, j - i) + "/java";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    i = j + 1;
  }
  return "";
}

}  // namespace

Result<std::unique_ptr<Subprocess>> Subprocess::Start(const std::vector<std::string>& argv,
                                                      const std::string& stdout_to) {
  int fds[2] = {-1, -1};
  if (stdout_to.empty() && ::pipe2(fds, O_CLOEXEC) != 0) {
    return Status::IoError("pipe", errno);
  }
  int out_file = -1;
  if (!stdout_to.empty()) {
    out_file = ::open(stdout_to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_file < 0) return Status::IoError("open " + stdout_to, errno);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IoError("fork", errno);
  if (pid == 0) {
    const int out = stdout_to.empty() ? fds[1] : out_file;
    ::dup2(out, STDOUT_FILENO);
    if (!stdout_to.empty()) ::dup2(out, STDERR_FILENO);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  auto p = std::make_unique<Subprocess>();
  p->pid_ = pid;
  if (stdout_to.empty()) {
    ::close(fds[1]);
    p->out_fd_ = fds[0];
  } else {
    ::close(out_file);
  }
  return p;
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
}

void Subprocess::Signal(int sig) {
  if (!reaped_ && pid_ > 0) ::kill(pid_, sig);
}

Result<int> Subprocess::Wait(Deadline deadline) {
  if (reaped_) return Status::FailedPrecondition("already reaped");
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return st;
    }
    if (r < 0) return Status::IoError("waitpid", errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::TimedOut("process " + std::to_string(pid_) + " did not exit");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

Result<std::string> Subprocess::ReadLine(Deadline deadline) {
  if (out_fd_ < 0) return Status::FailedPrecondition("stdout is not a pipe");
  for (;;) {
    const size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    pollfd p{out_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, MsUntil(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Status::TimedOut("no line from process " + std::to_string(pid_));
    char buf[4096];
    const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::NotFound("process " + std::to_string(pid_) + " closed its output");
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

Result<std::string> Subprocess::WaitForLine(const std::string& prefix, Deadline deadline) {
  for (;;) {
    auto line = ReadLine(deadline);
    if (!line.ok()) return line.status();
    if (line->rfind(prefix, 0) == 0) return line;
  }
}

std::string ZooKeeperUnavailableReason() {
  if (FindJava().empty()) return "java is not installed (scripts/setup.sh installs it)";
  if (::access(kZkJar, R_OK) != 0) {
    return std::string(kZkJar) + " is missing (package zookeeper; scripts/setup.sh installs it)";
  }
  return "";
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

std::string FourLetterWord(int port, const std::string& word) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::write(fd, word.data(), word.size()) == static_cast<ssize_t>(word.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<std::unique_ptr<ZkEnsemble>> ZkEnsemble::Start(int n, Deadline ready_by) {
  const std::string why = ZooKeeperUnavailableReason();
  if (!why.empty()) return Status::NotSupported(why);
  auto e = std::make_unique<ZkEnsemble>();
  char tmpl[] = "/tmp/asymnvm-zk-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Status::IoError("mkdtemp", errno);
  e->root_ = tmpl;
  e->servers_.resize(static_cast<size_t>(n));
  for (auto& s : e->servers_) {
    s.client_port = FreePort();
    s.quorum_port = FreePort();
    s.election_port = FreePort();
  }
  for (int i = 0; i < n; ++i) {
    auto& s = e->servers_[i];
    s.dir = e->root_ + "/s" + std::to_string(i + 1);
    std::filesystem::create_directories(s.dir + "/data");
    std::ofstream cfg(s.dir + "/zoo.cfg");
    cfg << "tickTime=200\ninitLimit=20\nsyncLimit=10\n"
        << "dataDir=" << s.dir << "/data\n"
        << "clientPort=" << s.client_port << "\nclientPortAddress=127.0.0.1\n"
        << "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr,stat\n"
        << "minSessionTimeout=400\nmaxSessionTimeout=60000\n";
    if (n > 1) {
      for (int k = 0; k < n; ++k) {
        cfg << "server." << (k + 1) << "=127.0.0.1:" << e->servers_[k].quorum_port << ":"
            << e->servers_[k].election_port << "\n";
      }
      std::ofstream(s.dir + "/data/myid") << (i + 1) << "\n";
    }
  }
  for (int i = 0; i < n; ++i) ASYMNVM_RETURN_IF_ERROR(e->Launch(i));
  ASYMNVM_RETURN_IF_ERROR(e->WaitServing(ready_by));
  return e;
}

Status ZkEnsemble::Launch(int i) {
  auto& s = servers_[i];
  auto p = Subprocess::Start(
      {FindJava(), "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k",
       "-Dzookeeper.admin.enableServer=false", "-cp", std::string(kZkJar) + ":" + kSlf4jSimple,
       "org.apache.zookeeper.server.quorum.QuorumPeerMain", s.dir + "/zoo.cfg"},
      s.dir + "/server.log");
  if (!p.ok()) return p.status();
  s.proc = std::move(p).value();
  return Status::Ok();
}

ZkEnsemble::~ZkEnsemble() {
  for (auto& s : servers_) s.proc.reset();  // SIGKILL + reap
  if (!root_.empty() && std::getenv("ASYMNVM_KEEP_ZK") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
}

std::string ZkEnsemble::connect_string() const {
  std::string out;
  for (const auto& s : servers_) {
    if (!out.empty()) out += ",";
    out += "127.0.0.1:" + std::to_string(s.client_port);
  }
  return out;
}

std::string ZkEnsemble::Mode(int i) const {
  if (!servers_[i].proc) return "";
  const std::string reply = FourLetterWord(servers_[i].client_port, "srvr");
  const size_t at = reply.find("Mode: ");
  if (at == std::string::npos) return "";
  const size_t end = reply.find('\n', at);
  return reply.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
}

int ZkEnsemble::Leader() const {
  for (int i = 0; i < size(); ++i) {
    const std::string m = Mode(i);
    if (m == "leader" || m == "standalone") return i;
  }
  return -1;
}

Status ZkEnsemble::WaitServing(Deadline deadline) const {
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    bool all = true, leader = false;
    for (int i = 0; i < size(); ++i) {
      if (!servers_[i].proc) continue;
      const std::string m = Mode(i);
      if (m.empty()) all = false;
      if (m == "leader" || m == "standalone") leader = true;
    }
    if (all && leader) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::TimedOut("ZooKeeper did not start serving (logs in " + root_ + ")");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

void ZkEnsemble::Kill(int i) { servers_[i].proc.reset(); }

Status ZkEnsemble::Restart(int i) {
  if (servers_[i].proc) return Status::FailedPrecondition("server is running");
  return Launch(i);
}

}  // namespace asymnvm::coord::testing
