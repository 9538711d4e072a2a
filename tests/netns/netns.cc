#include "tests/netns/netns.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "coord/testing/zk_server.h"

namespace asymnvm::netns {
namespace {

constexpr const char* kBlackHoleMac = "02:00:5e:00:de:ad";  // owned by no interface
constexpr const char* kZkJar = "/usr/share/java/zookeeper.jar";
constexpr const char* kSlf4jSimple = "/usr/share/java/slf4j-simple.jar";

std::string IpBinary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find(':', i);
    if (j == std::string::npos) j = p.size();
    const std::string candidate = p.substr(i, j - i) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    i = j + 1;
  }
  return "";
}

// Runs a command, output (stdout + stderr) to a temporary file; returns the wait status.
Result<std::string> RunCapture(const std::vector<std::string>& argv, int* status) {
  char tmpl[] = "/tmp/asymnvm-netns-out-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return Status::IoError("mkstemp", errno);
  SpawnSpec s;
  s.path = argv[0];
  s.argv = argv;
  s.out = SpawnSpec::Out::kFd;
  s.out_fd = fd;
  s.stderr_too = true;
  std::string error;
  const pid_t pid = SpawnProcess(s, &error);
  ::close(fd);
  if (pid < 0) {
    ::unlink(tmpl);
    return Status::IoError(error);
  }
  while (::waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(tmpl);
  std::stringstream ss;
  ss << in.rdbuf();
  ::unlink(tmpl);
  return ss.str();
}

std::atomic<int> g_networks{0};

std::pair<std::string, std::string> PairKey(const std::string& a, const std::string& b) {
  return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
}

bool PidAlive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Deletes namespaces asymnvm-<pid>-... whose pid is dead (a crashed or killed run), killing the
// processes that run in them first (they were that run's daemons).
void DeleteStale() {
  DIR* d = ::opendir("/run/netns");
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("asymnvm-", 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + 8));
    if (pid > 0 && pid != ::getpid() && !PidAlive(pid)) stale.push_back(name);
  }
  ::closedir(d);
  const std::string ip = IpBinary();
  for (const auto& name : stale) {
    int st = 0;
    auto pids = RunCapture({ip, "netns", "pids", name}, &st);
    if (pids.ok()) {
      std::istringstream in(*pids);
      pid_t p;
      while (in >> p) ::kill(p, SIGKILL);
    }
    (void)RunCapture({ip, "netns", "del", name}, &st);
  }
}

}  // namespace

Status RunIp(const std::vector<std::string>& args) {
  const std::string ip = IpBinary();
  if (ip.empty()) return Status::NotSupported("iproute2's `ip` is not installed");
  std::vector<std::string> argv{ip};
  argv.insert(argv.end(), args.begin(), args.end());
  int st = 0;
  auto out = RunCapture(argv, &st);
  if (!out.ok()) return out.status();
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return Status::Ok();
  std::string cmd = "ip";
  for (const auto& a : args) cmd += " " + a;
  return Status::IoError(cmd + " failed: " + *out);
}

Status UseClusterSecret(const std::string& path) {
  std::random_device rd;
  std::string secret;
  for (int i = 0; i < 32; i++) secret.push_back("0123456789abcdef"[rd() % 16]);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError("create " + path, errno);
  const bool ok = ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  ::close(fd);
  if (!ok) return Status::IoError("write " + path, errno);
  if (::setenv("ASYMNVM_SECRET_FILE", path.c_str(), 1) != 0)
    return Status::IoError("setenv", errno);
  return Status::Ok();
}

std::string UnavailableReason() {
  if (::geteuid() != 0)
    return "network namespaces need root (euid is " + std::to_string(::geteuid()) + ")";
  if (IpBinary().empty()) return "iproute2's `ip` is not installed";
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] {
    const std::string a = "asymnvm-" + std::to_string(::getpid()) + "-probe-a";
    const std::string b = "asymnvm-" + std::to_string(::getpid()) + "-probe-b";
    Status st = RunIp({"netns", "add", a});
    if (st.ok()) st = RunIp({"netns", "add", b});
    if (st.ok()) {
      st = RunIp({"-n", a, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", b});
    }
    if (st.ok()) st = RunIp({"-n", a, "link", "add", "br0", "type", "bridge"});
    (void)RunIp({"netns", "del", a});
    (void)RunIp({"netns", "del", b});
    if (!st.ok()) reason = "cannot create network namespaces here: " + st.ToString();
  });
  return reason;
}

Result<std::unique_ptr<Network>> Network::Create(const std::vector<std::string>& hosts,
                                                 const std::string& subnet) {
  const std::string why = UnavailableReason();
  if (!why.empty()) return Status::NotSupported(why);
  if (hosts.empty() || hosts.size() > 200) return Status::InvalidArgument("1..200 hosts");
  for (const auto& h : hosts) {
    if (h.empty() || h.size() > 8 || h == "hub" ||
        h.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") != std::string::npos) {
      return Status::InvalidArgument("host name '" + h + "': 1-8 of [a-z0-9], not 'hub'");
    }
  }
  DeleteStale();
  std::unique_ptr<Network> net(new Network());
  Status st = net->Setup(hosts, subnet);
  if (!st.ok()) return st;  // the destructor deletes what was created
  return net;
}

Status Network::Setup(const std::vector<std::string>& hosts, const std::string& subnet) {
  prefix_ = "asymnvm-" + std::to_string(::getpid()) + "-" + std::to_string(g_networks++) + "-";
  subnet_ = subnet;
  home_fd_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home_fd_ < 0) return Status::IoError("open /proc/thread-self/ns/net", errno);
  const std::string hub = prefix_ + "hub";
  ASYMNVM_RETURN_IF_ERROR(RunIp({"netns", "add", hub}));
  created_.push_back(hub);
  ASYMNVM_RETURN_IF_ERROR(RunIp({"-n", hub, "link", "add", "br0", "type", "bridge"}));
  ASYMNVM_RETURN_IF_ERROR(RunIp({"-n", hub, "link", "set", "br0", "up"}));
  for (size_t k = 0; k < hosts.size(); k++) {
    if (index_.count(hosts[k]) != 0) return Status::InvalidArgument("duplicate host " + hosts[k]);
    index_[hosts[k]] = static_cast<int>(k + 1);
    hosts_.push_back(hosts[k]);
    const std::string n = ns(hosts[k]), port = "v" + std::to_string(k + 1);
    ASYMNVM_RETURN_IF_ERROR(RunIp({"netns", "add", n}));
    created_.push_back(n);
    ASYMNVM_RETURN_IF_ERROR(RunIp(
        {"-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n}));
    ASYMNVM_RETURN_IF_ERROR(RunIp({"-n", hub, "link", "set", port, "master", "br0", "up"}));
    ASYMNVM_RETURN_IF_ERROR(RunIp({"-n", n, "link", "set", "lo", "up"}));
    ASYMNVM_RETURN_IF_ERROR(RunIp({"-n", n, "addr", "add", ip(hosts[k]) + "/24", "dev", "eth0"}));
    ASYMNVM_RETURN_IF_ERROR(RunIp({"-n", n, "link", "set", "eth0", "up"}));
    // The black hole a cut routes to: a next hop on the subnet whose MAC nobody has.
    ASYMNVM_RETURN_IF_ERROR(RunIp({"-n", n, "neigh", "add", subnet_ + ".254", "lladdr",
                                   kBlackHoleMac, "dev", "eth0", "nud", "permanent"}));
  }
  return Status::Ok();
}

Network::~Network() {
  if (home_fd_ >= 0) {
    (void)Restore();
  }
  // Whatever still runs in the hosts (a test that failed before stopping its daemons).
  for (const auto& h : hosts_) {
    for (pid_t p : Pids(h)) ::kill(p, SIGKILL);
  }
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) (void)RunIp({"netns", "del", *it});
  if (home_fd_ >= 0) ::close(home_fd_);
}

std::string Network::ns(const std::string& host) const { return prefix_ + host; }

std::string Network::ip(const std::string& host) const {
  auto it = index_.find(host);
  return it == index_.end() ? "" : subnet_ + "." + std::to_string(it->second);
}

int64_t Network::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              t0_)
      .count();
}

Status Network::Route(const std::string& from, const std::string& to, bool cut) {
  if (cut) {
    return RunIp({"-n", ns(from), "route", "replace", ip(to) + "/32", "via", subnet_ + ".254",
                  "dev", "eth0"});
  }
  Status st = RunIp({"-n", ns(from), "route", "del", ip(to) + "/32"});
  return st.ok() || st.message().find("No such process") != std::string::npos ? Status::Ok() : st;
}

Status Network::Cut(const std::string& a, const std::string& b) {
  if (index_.count(a) == 0 || index_.count(b) == 0 || a == b) {
    return Status::InvalidArgument("cut " + a + " " + b + ": unknown host or same host");
  }
  std::lock_guard<std::mutex> l(mu_);
  ASYMNVM_RETURN_IF_ERROR(Route(a, b, true));
  ASYMNVM_RETURN_IF_ERROR(Route(b, a, true));
  cut_[PairKey(a, b)] = true;
  events_.push_back({now_ns(), a, b, true});
  return Status::Ok();
}

Status Network::Heal(const std::string& a, const std::string& b) {
  if (index_.count(a) == 0 || index_.count(b) == 0 || a == b) {
    return Status::InvalidArgument("heal " + a + " " + b + ": unknown host or same host");
  }
  std::lock_guard<std::mutex> l(mu_);
  ASYMNVM_RETURN_IF_ERROR(Route(a, b, false));
  ASYMNVM_RETURN_IF_ERROR(Route(b, a, false));
  cut_.erase(PairKey(a, b));
  events_.push_back({now_ns(), a, b, false});
  return Status::Ok();
}

Status Network::Isolate(const std::string& host, const std::vector<std::string>& others) {
  for (const auto& o : others) ASYMNVM_RETURN_IF_ERROR(Cut(host, o));
  return Status::Ok();
}

Status Network::HealAll() {
  std::vector<std::pair<std::string, std::string>> pairs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [p, on] : cut_) pairs.push_back(p);
  }
  for (const auto& [a, b] : pairs) ASYMNVM_RETURN_IF_ERROR(Heal(a, b));
  return Status::Ok();
}

bool Network::IsCut(const std::string& a, const std::string& b) const {
  std::lock_guard<std::mutex> l(mu_);
  return cut_.count(PairKey(a, b)) != 0;
}

std::vector<CutEvent> Network::events() const {
  std::lock_guard<std::mutex> l(mu_);
  return events_;
}

Status Network::Enter(const std::string& host) {
  if (index_.count(host) == 0) return Status::InvalidArgument("unknown host " + host);
  const std::string path = "/run/netns/" + ns(host);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("open " + path, errno);
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int e = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError("setns " + path, e);
  return Status::Ok();
}

Status Network::Restore() {
  if (::setns(home_fd_, CLONE_NEWNET) != 0) return Status::IoError("setns (home)", errno);
  return Status::Ok();
}

SpawnSpec Network::Wrap(const std::string& host, SpawnSpec spec) const {
  std::vector<std::string> argv{IpBinary(), "netns", "exec", ns(host), spec.path};
  for (size_t i = 1; i < spec.argv.size(); i++) argv.push_back(spec.argv[i]);
  spec.path = argv[0];
  spec.argv = std::move(argv);
  return spec;
}

std::vector<pid_t> Network::Pids(const std::string& host) const {
  int st = 0;
  auto out = RunCapture({IpBinary(), "netns", "pids", ns(host)}, &st);
  std::vector<pid_t> pids;
  if (!out.ok()) return pids;
  std::istringstream in(*out);
  pid_t p;
  while (in >> p) pids.push_back(p);
  return pids;
}

std::string ZkConnectString(const Network& net, const std::vector<std::string>& members) {
  std::string out;
  for (const auto& m : members) out += (out.empty() ? "" : ",") + net.ip(m) + ":2181";
  return out;
}

std::string FourLetterWord(const std::string& ip, int port, const std::string& word) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  // Non-blocking connect with a 1 s bound: a cut link must not hang the caller.
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 || errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
        err == 0 &&
        ::send(fd, word.data(), word.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(word.size())) {
      char buf[4096];
      for (;;) {
        pollfd r{fd, POLLIN, 0};
        if (::poll(&r, 1, 1000) != 1) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return out;
}

Result<std::unique_ptr<ZooKeeper>> ZooKeeper::Start(const Network& net,
                                                    const std::vector<std::string>& members,
                                                    const std::string& me, const std::string& dir) {
  const std::string why = coord::testing::ZooKeeperUnavailableReason();
  if (!why.empty()) return Status::NotSupported(why);
  const std::string java = FindInPath("java");
  std::unique_ptr<ZooKeeper> zk(new ZooKeeper());
  zk->ip_ = net.ip(me);
  zk->dir_ = dir;
  std::error_code ec;
  std::filesystem::create_directories(dir + "/data", ec);
  if (ec) return Status::IoError("create " + dir + ": " + ec.message());
  {
    std::ofstream cfg(dir + "/zoo.cfg");
    cfg << "tickTime=200\ninitLimit=20\nsyncLimit=10\n"
        << "dataDir=" << dir << "/data\n"
        << "clientPort=2181\nclientPortAddress=" << zk->ip_ << "\n"
        << "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr,stat\n"
        << "minSessionTimeout=400\nmaxSessionTimeout=60000\n";
    if (members.size() > 1) {
      for (size_t k = 0; k < members.size(); k++) {
        cfg << "server." << (k + 1) << "=" << net.ip(members[k]) << ":2888:3888\n";
        if (members[k] == me) std::ofstream(dir + "/data/myid") << (k + 1) << "\n";
      }
    }
  }
  SpawnSpec s;
  s.path = java;
  s.argv = {java,
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xss512k",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            std::string(kZkJar) + ":" + kSlf4jSimple,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            dir + "/zoo.cfg"};
  s.out = SpawnSpec::Out::kFile;
  s.out_file = dir + "/server.log";
  s.stderr_too = true;
  std::string error;
  zk->pid_ = SpawnProcess(net.Wrap(me, s), &error);
  if (zk->pid_ < 0) return Status::IoError(error);
  return zk;
}

ZooKeeper::~ZooKeeper() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (!dir_.empty() && std::getenv("ASYMNVM_KEEP_ZK") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Status ZooKeeper::WaitServing(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto delay = std::chrono::milliseconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (FourLetterWord(ip_, 2181, "ruok") == "imok") return Status::Ok();
    int st;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      const_cast<ZooKeeper*>(this)->pid_ = -1;
      return Status::Unavailable("ZooKeeper at " + ip_ + " exited (see " + dir_ + "/server.log)");
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(200));
  }
  return Status::TimedOut("ZooKeeper at " + ip_ + " not serving (see " + dir_ + "/server.log)");
}

}  // namespace asymnvm::netns
