// The deployment of doc/deploy.md, run as written (issue 32 item 3): every "host" of the layout is
// a network namespace with its own address on one bridge (tests/netns/netns.h), subnet 10.0.0:
//
//   zk1 zk2 zk3   10.0.0.1-3  a three-node ZooKeeper ensemble (client 2181, quorum 2888, election
//   3888) be            10.0.0.4    asymnvm-backend@pool1 mir           10.0.0.5
//   asymnvm-mirror@pool1 kv1 kv2 kv3   10.0.0.6-8  asymnvm-kv@a, @b, @c (rf 3), each with its Redis
//   gateway cli           10.0.0.9    the client host: asymnvm-txn (SDK), redis-cli, asymnvm-ctl
//
// The binaries, units and default configurations come from the Debian packages: cpack in the build
// tree (or the .deb files in $ASYMNVM_DEB_DIR), unpacked with `dpkg -x` into a scratch root R. Each
// daemon runs with its unit file's ExecStart (read from the unit, /usr and /etc moved under R), and
// its configuration is the packaged default with exactly the lines doc/deploy.md §Configuration
// changes. One shared secret file, made as the document says. Then:
//   * `asymnvm-ctl cluster` from the client host: exit 0 once healthy (table printed);
//   * the listening TCP ports of every daemon host are exactly doc/deploy.md's port table;
//   * asymnvm-txn load / run / check (SmallBank, front-end ids claimed in ZooKeeper) against the
//     back-end; redis-cli SETs through one gateway, GETs through the other two;
//   * the mirror is SIGKILLed: `asymnvm-ctl cluster` exits 8 (the group's only mirror is not in
//     sync; table printed); the back-end goes on (asymnvm-txn run + check again).
// Every wait polls a state with growing sleeps under a generous deadline.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/spawn.h"
#include "tests/netns/netns.h"

namespace asymnvm {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kSubnet = "10.0.0";
constexpr int kAnyHealth = -100;  // WaitCluster: any exit code but 1 (coordinator unreadable)
const std::vector<std::string> kZk = {"zk1", "zk2", "zk3"};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// Sleeps 10 ms, 15 ms, ... up to 500 ms: the waits below poll a state, never spin.
class Backoff {
 public:
  void Wait() {
    std::this_thread::sleep_for(d_);
    d_ = std::min(d_ * 3 / 2, std::chrono::milliseconds(500));
  }

 private:
  std::chrono::milliseconds d_{10};
};

// Waits for `pid` (a child) to exit within `timeout`; its exit code, or -1 (signal / timeout:
// then it is killed).
int WaitExit(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Backoff b;
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (r < 0) return -1;
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    b.Wait();
  }
}

// The packaged default configuration with `set` applied: each key's line (active or commented
// out, "# key = ...") becomes `key = value`; a key the file does not name is an error (the
// document must not invent options).
Result<std::string> Configure(const std::string& packaged,
                              const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> lines;
  {
    std::istringstream in(packaged);
    std::string l;
    while (std::getline(in, l)) lines.push_back(l);
  }
  for (const auto& [key, value] : set) {
    const std::regex re("^#? ?" + key + " = ?.*$");
    bool done = false;
    for (auto& l : lines) {
      if (std::regex_match(l, re)) {
        l = key + " = " + value;
        done = true;
        break;
      }
    }
    if (!done) return Status::NotFound("option '" + key + "' is not in the packaged configuration");
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

class Deployment {
 public:
  Deployment() {
    dir_ = fs::temp_directory_path() / ("asymnvm-deploy-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "logs");
    root_ = dir_ / "root";
  }
  ~Deployment() {
    for (auto& [name, pid] : daemons_) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
      }
    }
    for (auto& [name, fd] : notify_) close(fd);
    zk_.clear();
    net_.reset();
    if (std::getenv("ASYMNVM_KEEP_DEPLOY_DIR") == nullptr) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  const fs::path& root() const { return root_; }
  const fs::path& dir() const { return dir_; }
  netns::Network& net() { return *net_; }
  std::string ip(const std::string& host) const { return net_->ip(host); }
  std::string zk_connect() const { return netns::ZkConnectString(*net_, kZk); }

  // Runs argv (on this host, not in a namespace) to completion; its exit code, output in `log`.
  int RunHere(const std::vector<std::string>& argv, const std::string& log,
              std::chrono::seconds timeout = 300s) {
    SpawnSpec s;
    s.path = argv[0];
    s.argv = argv;
    s.out = SpawnSpec::Out::kFile;
    s.out_file = (dir_ / "logs" / log).string();
    s.stderr_too = true;
    std::string error;
    const pid_t pid = SpawnProcess(s, &error);
    if (pid < 0) {
      ADD_FAILURE() << argv[0] << ": " << error;
      return -1;
    }
    return WaitExit(pid, timeout);
  }

  // The packages: cpack in the build tree (as tests/package/deb_test.sh), or $ASYMNVM_DEB_DIR's.
  void Install() {
    std::string debs;
    if (const char* d = std::getenv("ASYMNVM_DEB_DIR"); d != nullptr && *d != '\0') {
      debs = d;
    } else {
      const char* b = std::getenv("ASYMNVM_BUILD_DIR");
      const std::string build = b != nullptr && *b != '\0' ? b : ASYMNVM_BUILD_TREE;
      debs = (dir_ / "debs").string();
      const auto t0 = Clock::now();
      ASSERT_EQ(
          RunHere({"/bin/sh", "-c", "cd '" + build + "' && exec cpack -G DEB -B '" + debs + "'"},
                  "cpack.log"),
          0)
          << ReadFile(dir_ / "logs" / "cpack.log");
      std::printf("deploy: cpack %.1f s\n",
                  std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(debs)) {
      const std::string n = e.path().filename().string();
      if (e.path().extension() == ".deb" &&
          (n.rfind("asymnvm_", 0) == 0 || n.rfind("libasymnvm-dev_", 0) == 0)) {
        found.push_back(e.path().string());
      }
    }
    ASSERT_EQ(found.size(), 2u) << "want asymnvm_*.deb and libasymnvm-dev_*.deb in " << debs;
    for (const auto& deb : found) {
      ASSERT_EQ(RunHere({"/usr/bin/dpkg", "-x", deb, root_.string()}, "dpkg.log"), 0)
          << ReadFile(dir_ / "logs" / "dpkg.log");
    }
    // The package's shared libraries (dpkg -x does not run ldconfig).
    for (const auto& e : fs::recursive_directory_iterator(root_ / "usr/lib")) {
      if (e.path().filename() == "libasymnvm_common.so") libdir_ = e.path().parent_path().string();
    }
    ASSERT_FALSE(libdir_.empty()) << "libasymnvm_common.so is not in the package";
    // What the package's postinst and the unit's StateDirectory= make.
    fs::create_directories(root_ / "var/lib/asymnvm");
  }

  // The shared secret, made as doc/deploy.md §Secret says (mode 0600).
  void MakeSecret() {
    const std::string path = (root_ / "etc/asymnvm/secret").string();
    ASSERT_EQ(
        RunHere({"/bin/sh", "-c", "umask 077 && head -c 32 /dev/urandom | base64 > '" + path + "'"},
                "secret.log"),
        0);
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    ASSERT_EQ(st.st_mode & 0777, 0600u);
    secret_ = ReadFile(path);
    while (!secret_.empty() && secret_.back() == '\n') secret_.pop_back();
    ASSERT_GE(secret_.size(), 40u);
  }
  const std::string& secret() const { return secret_; }

  // Brings up the namespaces and the ZooKeeper ensemble. "" or why it cannot run here.
  std::string Network() {
    auto net = netns::Network::Create(
        {"zk1", "zk2", "zk3", "be", "mir", "kv1", "kv2", "kv3", "cli"}, kSubnet);
    if (!net.ok()) {
      if (net.status().code() == StatusCode::kNotSupported) return net.status().message();
      ADD_FAILURE() << net.status().ToString();
      return "";
    }
    net_ = std::move(net).value();
    for (const auto& z : kZk) {
      auto zk = netns::ZooKeeper::Start(*net_, kZk, z, (dir_ / z).string());
      if (!zk.ok() && zk.status().code() == StatusCode::kNotSupported) return zk.status().message();
      EXPECT_TRUE(zk.ok()) << zk.status().ToString();
      if (!zk.ok()) return "";
      zk_.push_back(std::move(zk).value());
    }
    Status st = net_->Enter("cli");  // the four-letter words below go from the client host
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (auto& zk : zk_) {
      st = zk->WaitServing(120s);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    return "";
  }
  bool up() const { return net_ != nullptr && zk_.size() == kZk.size(); }

  // Writes <daemon>-<instance>.conf into R/etc/asymnvm from the packaged default and `set`.
  void Configure(const std::string& daemon, const std::string& instance,
                 const std::vector<std::pair<std::string, std::string>>& set) {
    const fs::path etc = root_ / "etc/asymnvm";
    auto text = asymnvm::Configure(ReadFile(etc / (daemon + "-default.conf")), set);
    ASSERT_TRUE(text.ok()) << daemon << ": " << text.status().ToString();
    WriteFile(etc / (daemon + "-" + instance + ".conf"), *text);
  }

  // The unit's ExecStart for `instance`, with /usr/ and /etc/ moved into the scratch root.
  std::vector<std::string> ExecStart(const std::string& daemon, const std::string& instance) {
    const std::string unit =
        ReadFile(root_ / "lib/systemd/system" / ("asymnvm-" + daemon + "@.service"));
    std::smatch m;
    EXPECT_TRUE(std::regex_search(unit, m, std::regex("\nExecStart=([^\n]*)")))
        << "no ExecStart in asymnvm-" << daemon << "@.service";
    std::vector<std::string> argv;
    std::istringstream in(m[1].str());
    std::string w;
    while (in >> w) {
      for (size_t p; (p = w.find("%i")) != std::string::npos;) w.replace(p, 2, instance);
      if (w.rfind("/usr/", 0) == 0 || w.rfind("/etc/", 0) == 0) w = root_.string() + w;
      argv.push_back(w);
    }
    return argv;
  }

  // Starts `asymnvm-<daemon>@<instance>` in `host` (stdout and stderr into logs/).
  void Start(const std::string& host, const std::string& daemon, const std::string& instance) {
    const std::vector<std::string> argv = ExecStart(daemon, instance);
    ASSERT_GE(argv.size(), 3u);
    // Type=notify: the unit's readiness signal, as systemd receives it (sd_notify to the datagram
    // socket named by $NOTIFY_SOCKET; a path socket reaches across network namespaces).
    const std::string sock = (dir_ / ("notify-" + host)).string();
    if (notify_.count(host) != 0) close(notify_[host]);
    unlink(sock.c_str());
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    ASSERT_LT(sock.size(), sizeof a.sun_path);
    std::memcpy(a.sun_path, sock.c_str(), sock.size());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << sock;
    notify_[host] = fd;
    SpawnSpec s;
    s.path = argv[0];
    s.argv = argv;
    s.env = {{"LD_LIBRARY_PATH", libdir_}, {"NOTIFY_SOCKET", sock}};
    s.out = SpawnSpec::Out::kFile;
    s.out_file = (dir_ / "logs" / (host + ".out")).string();
    s.err_file = (dir_ / "logs" / (host + ".err")).string();
    std::string error;
    const pid_t pid = SpawnProcess(net_->Wrap(host, s), &error);
    ASSERT_GT(pid, 0) << error;
    daemons_[host] = pid;
    std::printf("deploy: %s (%s): %s", host.c_str(), ip(host).c_str(), argv[0].c_str());
    for (size_t i = 1; i < argv.size(); i++) std::printf(" %s", argv[i].c_str());
    std::printf("\n");
  }

  // The value of the first "KEY value" line of a daemon's stdout (it prints them once serving);
  // "" when it exited or 180 s passed.
  std::string WaitLine(const std::string& host, const std::string& key) {
    const auto deadline = Clock::now() + 180s;
    Backoff b;
    while (Clock::now() < deadline) {
      std::istringstream in(ReadFile(dir_ / "logs" / (host + ".out")));
      std::string k, v;
      while (in >> k >> v) {
        if (k == key) return v;
      }
      int st;
      if (waitpid(daemons_[host], &st, WNOHANG) == daemons_[host]) {
        daemons_[host] = -1;
        ADD_FAILURE() << host << " exited: " << ReadFile(dir_ / "logs" / (host + ".err"));
        return "";
      }
      b.Wait();
    }
    ADD_FAILURE() << host << " printed no '" << key << "' line";
    return "";
  }

  // SIGTERM (what `systemctl stop` sends); the exit code.
  int Stop(const std::string& host) {
    pid_t& pid = daemons_[host];
    EXPECT_GT(pid, 0);
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    const int rc = WaitExit(pid, 120s);
    pid = -1;
    return rc;
  }

  // Waits for the daemon's READY=1 (sd_notify), as systemd does for Type=notify (180 s).
  bool WaitReady(const std::string& host) {
    const auto deadline = Clock::now() + 180s;
    while (Clock::now() < deadline) {
      pollfd p{notify_[host], POLLIN, 0};
      if (poll(&p, 1, 200) == 1) {
        char buf[4096];
        const ssize_t n = recv(notify_[host], buf, sizeof buf, 0);
        if (n > 0 &&
            std::string(buf, static_cast<size_t>(n)).find("READY=1") != std::string::npos) {
          return true;
        }
        continue;
      }
      int st;
      if (waitpid(daemons_[host], &st, WNOHANG) == daemons_[host]) {
        daemons_[host] = -1;
        ADD_FAILURE() << host
                      << " exited before READY=1: " << ReadFile(dir_ / "logs" / (host + ".err"));
        return false;
      }
    }
    ADD_FAILURE() << host << " sent no READY=1";
    return false;
  }

  void Kill(const std::string& host) {
    pid_t& pid = daemons_[host];
    ASSERT_GT(pid, 0);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    pid = -1;
  }

  // Runs a packaged tool (R/usr/bin/NAME) or a system one (/usr/bin/NAME) in `host`; exit code
  // (-1: signal or timeout), output in `*out`.
  int Run(const std::string& host, const std::vector<std::string>& args, std::string* out,
          std::vector<std::pair<std::string, std::string>> env = {},
          std::chrono::seconds timeout = 300s) {
    std::string bin = args[0];
    if (bin.rfind("asymnvm-", 0) == 0) bin = (root_ / "usr/bin" / bin).string();
    SpawnSpec s;
    s.path = bin;
    s.argv = args;
    s.argv[0] = bin;
    env.emplace_back("LD_LIBRARY_PATH", libdir_);
    s.env = env;
    const fs::path log = dir_ / "logs" / ("run-" + std::to_string(runs_++) + ".out");
    s.out = SpawnSpec::Out::kFile;
    s.out_file = log.string();
    s.stderr_too = true;
    std::string error;
    const pid_t pid = SpawnProcess(net_->Wrap(host, s), &error);
    if (pid < 0) {
      ADD_FAILURE() << error;
      return -1;
    }
    const int rc = WaitExit(pid, timeout);
    *out = ReadFile(log);
    return rc;
  }

  // `asymnvm-ctl cluster` from the client host until it exits `want` (180 s); the last output.
  bool WaitCluster(int want, std::string* out, int* last, const std::string& contains = "") {
    const auto deadline = Clock::now() + 180s;
    Backoff b;
    while (Clock::now() < deadline) {
      *last = Run("cli",
                  {"asymnvm-ctl", "cluster", "--coord", "zk:" + zk_connect(), "--secret-file",
                   (root_ / "etc/asymnvm/secret").string(), "--timeout-ms", "2000"},
                  out);
      if ((*last == want || (want == kAnyHealth && *last >= 0 && *last != 1)) &&
          out->find(contains) != std::string::npos) {
        return true;
      }
      b.Wait();
    }
    return false;
  }

  // Established TCP connections in `host` (ss -tnH): (local address, peer address) pairs.
  std::vector<std::pair<std::string, std::string>> Connections(const std::string& host) {
    std::string out;
    EXPECT_EQ(Run(host, {"ss", "-tnH", "state", "established"}, &out), 0) << out;
    std::vector<std::pair<std::string, std::string>> conns;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string recvq, sendq, local, peer;
      if (f >> recvq >> sendq >> local >> peer) conns.emplace_back(local, peer);
    }
    return conns;
  }

  // TCP ports listened on in `host` (ss -ltnH in its namespace).
  std::set<int> ListeningPorts(const std::string& host) {
    std::string out;
    EXPECT_EQ(Run(host, {"ss", "-ltnH"}, &out), 0) << out;
    std::set<int> ports;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string state, recvq, sendq, local;
      if (!(f >> state >> recvq >> sendq >> local)) continue;
      ports.insert(std::atoi(local.substr(local.rfind(':') + 1).c_str()));
    }
    return ports;
  }

 private:
  fs::path dir_, root_;
  std::string libdir_, secret_;
  std::unique_ptr<netns::Network> net_;
  std::vector<std::unique_ptr<netns::ZooKeeper>> zk_;
  std::map<std::string, pid_t> daemons_;
  std::map<std::string, int> notify_;  // host -> its $NOTIFY_SOCKET
  int runs_ = 0;
};

std::string Format(const std::set<int>& s) {
  std::string out;
  for (int p : s) out += (out.empty() ? "" : " ") + std::to_string(p);
  return "{" + out + "}";
}

TEST(Deploy, PackagedThreeHostLayout) {
  const auto t0 = Clock::now();
  const std::string why = netns::UnavailableReason();
  if (!why.empty()) GTEST_SKIP() << "the deployment test needs network namespaces: " << why;
  Deployment d;
  ASSERT_NO_FATAL_FAILURE(d.Install());
  ASSERT_NO_FATAL_FAILURE(d.MakeSecret());
  {
    const std::string no = d.Network();
    if (!no.empty()) GTEST_SKIP() << "the deployment test needs " << no;
    ASSERT_TRUE(d.up());
  }
  const std::string R = d.root().string();
  const std::string coord = Quote("zk:" + d.zk_connect());
  const std::string secret_file = Quote(R + "/etc/asymnvm/secret");
  const std::string be = d.ip("be"), mir = d.ip("mir");

  // doc/deploy.md §Configuration: exactly these lines differ from the packaged defaults.
  ASSERT_NO_FATAL_FAILURE(d.Configure("mirror", "pool1",
                                      {{"pool", Quote(R + "/var/lib/asymnvm/mirror-pool1.pool")},
                                       {"name", Quote("mirror-pool1")},
                                       {"listen", Quote("tcp://" + mir + ":7110")},
                                       {"data-listen", Quote("tcp://" + mir + ":7111")},
                                       {"serve-listen", Quote("tcp://" + mir + ":7112")},
                                       {"serve-log-listen", Quote("tcp://" + mir + ":7113")},
                                       {"coord", coord},
                                       {"secret-file", secret_file},
                                       {"metrics-listen", Quote(mir + ":9472")}}));
  const std::vector<std::pair<std::string, std::string>> backend_conf = {
      {"pool", Quote(R + "/var/lib/asymnvm/backend-pool1.pool")},
      {"size", Quote("64M")},
      {"name", Quote("backend-pool1")},
      {"listen", Quote("tcp://" + be + ":7100")},
      {"log-listen", Quote("tcp://" + be + ":7101")},
      {"coord", coord},
      {"mirror", Quote("tcp://" + mir + ":7110")},
      {"secret-file", secret_file},
      {"metrics-listen", Quote(be + ":9471")}};
  ASSERT_NO_FATAL_FAILURE(d.Configure("backend", "pool1", backend_conf));
  const std::vector<std::pair<std::string, std::string>> kvs = {
      {"kv1", "a"}, {"kv2", "b"}, {"kv3", "c"}};
  for (const auto& [host, inst] : kvs) {
    const std::string ip = d.ip(host);
    ASSERT_NO_FATAL_FAILURE(
        d.Configure("kv", inst,
                    {{"pool", Quote(R + "/var/lib/asymnvm/kv-" + inst + ".pool")},
                     {"size", Quote("64M")},
                     {"listen", Quote("tcp://" + ip + ":7120")},
                     {"log-listen", Quote("tcp://" + ip + ":7121")},
                     {"rdmp-listen", Quote("tcp://" + ip + ":7122")},
                     {"oq-worker-listen", Quote("tcp://" + ip + ":7123")},
                     {"coord", coord},
                     {"rf", "3"},
                     {"secret-file", secret_file},
                     {"resp-bind", Quote(ip)},
                     {"metrics-listen", Quote(ip + ":9473")}}));
  }

  // doc/deploy.md §Start: the mirror first (the back-end copies its pool to it before serving).
  // Each waited for as systemd waits for a Type=notify unit (READY=1), then its printed address.
  ASSERT_NO_FATAL_FAILURE(d.Start("mir", "mirror", "pool1"));
  ASSERT_TRUE(d.WaitReady("mir"));
  ASSERT_EQ(d.WaitLine("mir", "listening"), "tcp://" + mir + ":7110");
  ASSERT_NO_FATAL_FAILURE(d.Start("be", "backend", "pool1"));
  for (const auto& [host, inst] : kvs) ASSERT_NO_FATAL_FAILURE(d.Start(host, "kv", inst));
  ASSERT_TRUE(d.WaitReady("be"));
  ASSERT_EQ(d.WaitLine("be", "listening"), "tcp://" + be + ":7100");
  for (const auto& [host, inst] : kvs) {
    ASSERT_TRUE(d.WaitReady(host));
    ASSERT_EQ(d.WaitLine(host, "resp"), d.ip(host) + ":6380");
  }
  std::string view;
  int rc = -1;
  ASSERT_TRUE(d.WaitCluster(0, &view, &rc)) << "never healthy; last exit " << rc << ":\n" << view;
  std::printf("=== asymnvm-ctl cluster --coord zk:%s (exit 0)\n%s", d.zk_connect().c_str(),
              view.c_str());
  EXPECT_NE(view.find("backend-pool1"), std::string::npos);
  EXPECT_NE(view.find("tcp://" + mir + ":7110=in-sync"), std::string::npos);

  // doc/deploy.md §Ports: what each host listens on, nothing more (the KV servers' second OQ
  // worker included: oq-worker-listen names its port, so no port is ephemeral).
  const std::map<std::string, std::set<int>> ports = {
      {"be", {7100, 7101, 9471}},
      {"mir", {7110, 7111, 9472}},
      {"kv1", {6380, 7120, 7121, 7122, 7123, 9473}},
      {"kv2", {6380, 7120, 7121, 7122, 7123, 9473}},
      {"kv3", {6380, 7120, 7121, 7122, 7123, 9473}}};
  for (const auto& [host, want] : ports) {
    std::set<int> got = d.ListeningPorts(host);
    EXPECT_EQ(got, want) << host << " listens on " << Format(got) << ", doc/deploy.md lists "
                         << Format(want);
  }
  std::printf("deploy: listening ports exactly as doc/deploy.md §Ports\n");

  // doc/deploy.md §Ports, the firewall: every connection between hosts goes to a listed port from
  // a host allowed there (checked at the end, with every kind of traffic flowing).
  auto check_firewall = [&] {
    std::map<std::string, std::string> host_of;
    for (const auto& h : d.net().hosts()) host_of[d.ip(h)] = h;
    auto split = [&](const std::string& a) {
      const size_t c = a.rfind(':');
      return std::make_pair(
          host_of.count(a.substr(0, c)) ? host_of[a.substr(0, c)] : a.substr(0, c),
          std::atoi(a.c_str() + c + 1));
    };
    // (server host, port) -> the client hosts allowed.
    const std::set<std::string> kv_hosts = {"kv1", "kv2", "kv3", "cli"};
    std::map<std::pair<std::string, int>, std::set<std::string>> allowed;
    for (const auto& z : kZk) {
      for (const std::string c : {"be", "mir", "kv1", "kv2", "kv3", "cli"}) {
        allowed[{z, 2181}].insert(c);
      }
    }
    allowed[{"be", 7100}] = allowed[{"be", 7101}] = {"cli"};
    allowed[{"mir", 7110}] = {"be", "cli"};
    allowed[{"mir", 7111}] = {"be"};
    // After the failover and the rejoin (the end of the test) the roles are swapped.
    allowed[{"mir", 7112}] = allowed[{"mir", 7113}] = {"cli"};
    allowed[{"be", 7110}] = {"mir", "cli"};
    allowed[{"be", 7111}] = {"mir"};
    for (const std::string k : {"kv1", "kv2", "kv3"}) {
      for (int p : {7120, 7121, 7122, 7123}) allowed[{k, p}] = kv_hosts;
      allowed[{k, 6380}] = {"cli"};
    }
    int checked = 0;
    for (const std::string h : {"be", "mir", "kv1", "kv2", "kv3", "cli"}) {
      for (const auto& [local, peer] : d.Connections(h)) {
        const auto [lh, lp] = split(local);
        const auto [ph, pp] = split(peer);
        if (lh == ph) continue;  // within the host
        // One side listens on a port of the table: the other is the client.
        const bool inbound = allowed.count({lh, lp}) != 0;
        const auto server = inbound ? std::make_pair(lh, lp) : std::make_pair(ph, pp);
        const std::string client = inbound ? ph : lh;
        auto it = allowed.find(server);
        EXPECT_TRUE(it != allowed.end() && it->second.count(client) != 0)
            << h << ": connection " << local << " <-> " << peer << " is not in doc/deploy.md's "
            << "firewall table (" << client << " -> " << server.first << ":" << server.second
            << ")";
        checked++;
      }
    }
    std::printf("deploy: %d connections between hosts, all as doc/deploy.md §Ports lists\n",
                checked);
  };

  // The SDK from the client host: asymnvm-txn (front-end ids claimed in ZooKeeper).
  const std::vector<std::pair<std::string, std::string>> sdk_env = {
      {"ASYMNVM_SECRET_FILE", R + "/etc/asymnvm/secret"}};
  const std::string ledger = (d.dir() / "ledger").string();
  std::vector<std::string> target = {"--backend", "tcp://" + be + ":7100", "--ledger", ledger,
                                     "--coord",   "zk:" + d.zk_connect()};
  auto txn = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "asymnvm-txn");
    args.insert(args.begin() + 2, target.begin(), target.end());
    std::string out;
    const int code = d.Run("cli", args, &out, sdk_env);
    std::printf("deploy: asymnvm-txn %s: exit %d\n%s", args[1].c_str(), code, out.c_str());
    return code;
  };
  ASSERT_EQ(txn({"load", "--workload", "smallbank", "--scale", "1000"}), 0);
  ASSERT_EQ(txn({"run", "--frontends", "2", "--txns", "300", "--seconds", "0"}), 0);
  ASSERT_EQ(txn({"check"}), 0);

  // redis-cli against the gateways: written through kv1's, read back through kv2's and kv3's.
  const std::vector<std::pair<std::string, std::string>> auth = {{"REDISCLI_AUTH", d.secret()}};
  std::string out;
  ASSERT_EQ(d.Run("cli", {"redis-cli", "-h", d.ip("kv1"), "-p", "6380", "PING"}, &out, auth), 0);
  ASSERT_EQ(out, "PONG\n");
  // Without the password: refused, as Redis words it.
  (void)d.Run("cli", {"redis-cli", "-h", d.ip("kv2"), "-p", "6380", "GET", "k"}, &out);
  EXPECT_NE(out.find("NOAUTH Authentication required."), std::string::npos) << out;
  constexpr int kKeys = 40;
  for (int i = 0; i < kKeys; i++) {
    ASSERT_EQ(d.Run("cli",
                    {"redis-cli", "-h", d.ip("kv1"), "-p", "6380", "SET",
                     "user:" + std::to_string(i), "v" + std::to_string(i * 7)},
                    &out, auth),
              0);
    ASSERT_EQ(out, "OK\n") << "SET user:" << i;
  }
  for (const std::string host : {"kv2", "kv3"}) {
    std::vector<std::string> mget = {"redis-cli", "-h", d.ip(host), "-p", "6380", "MGET"};
    std::string want;
    for (int i = 0; i < kKeys; i++) {
      mget.push_back("user:" + std::to_string(i));
      want += "v" + std::to_string(i * 7) + "\n";
    }
    ASSERT_EQ(d.Run("cli", mget, &out, auth), 0);
    EXPECT_EQ(out, want) << "MGET through " << host;
  }
  ASSERT_EQ(d.Run("cli", {"redis-cli", "-h", d.ip("kv3"), "-p", "6380", "DBSIZE"}, &out, auth), 0);
  EXPECT_EQ(out, std::to_string(kKeys) + "\n");
  check_firewall();

  // The mirror dies: the group has no in-sync mirror left (exit 8); the back-end goes on.
  ASSERT_NO_FATAL_FAILURE(d.Kill("mir"));
  ASSERT_TRUE(d.WaitCluster(8, &view, &rc)) << "mirror killed: last exit " << rc << ":\n" << view;
  std::printf("=== mirror killed: asymnvm-ctl cluster --coord zk:%s (exit 8)\n%s",
              d.zk_connect().c_str(), view.c_str());
  ASSERT_EQ(txn({"run", "--frontends", "2", "--txns", "100", "--seconds", "0"}), 0);
  ASSERT_EQ(txn({"check"}), 0);

  // doc/deploy.md §Upgrade, the mirror: restarted, copied again, in sync (exit 0).
  ASSERT_NO_FATAL_FAILURE(d.Start("mir", "mirror", "pool1"));
  ASSERT_TRUE(d.WaitReady("mir"));
  ASSERT_TRUE(d.WaitCluster(0, &view, &rc)) << "mirror restarted: last exit " << rc << ":\n"
                                            << view;
  // A KV server, one at a time: stopped (SIGTERM, exit 0), started again, the cluster healthy
  // again; its gateway serves what was written before.
  ASSERT_EQ(d.Stop("kv3"), 0);
  ASSERT_NO_FATAL_FAILURE(d.Start("kv3", "kv", "c"));
  ASSERT_TRUE(d.WaitReady("kv3"));
  ASSERT_EQ(d.WaitLine("kv3", "resp"), d.ip("kv3") + ":6380");
  ASSERT_TRUE(d.WaitCluster(0, &view, &rc)) << "kv3 restarted: last exit " << rc << ":\n" << view;
  ASSERT_EQ(
      d.Run("cli", {"redis-cli", "-h", d.ip("kv3"), "-p", "6380", "GET", "user:39"}, &out, auth),
      0);
  EXPECT_EQ(out, "v273\n");
  std::printf("deploy: mirror and kv3 restarted, cluster healthy again\n");

  // The back-end, the mirror taking over: SIGKILLed, the mirror is promoted (term 2, serving on
  // its serve-listen address); the ledgers check against it (nothing acknowledged lost) and
  // transactions go on there.
  ASSERT_NO_FATAL_FAILURE(d.Kill("be"));
  // The promoted mirror forwards to no mirror: one copy until the old host rejoins, so the view
  // says so (exit 8), as it does when a mirror is down.
  ASSERT_TRUE(d.WaitCluster(8, &view, &rc, "tcp://" + mir + ":7112"))
      << "back-end killed: the mirror was not promoted; last exit " << rc << ":\n"
      << view;
  EXPECT_NE(view.find("promoted at term 2 and no mirror since (single copy)"), std::string::npos)
      << view;
  std::printf("=== back-end killed, mirror promoted: asymnvm-ctl cluster (exit %d)\n%s", rc,
              view.c_str());
  target[1] = "tcp://" + mir + ":7112";
  ASSERT_EQ(txn({"check"}), 0);
  ASSERT_EQ(txn({"run", "--frontends", "2", "--txns", "100", "--seconds", "0"}), 0);
  ASSERT_EQ(txn({"check"}), 0);

  // doc/deploy.md §Upgrade: the old back-end's host comes back as the new primary's mirror in one
  // step — its unit restarted with rejoin = true: the fenced pool becomes a mirror on be's ports
  // 7110/7111 (rejoin-listen, rejoin-data-listen) and is copied while the primary serves. The
  // group is whole again: exit 0, the mirror in sync; nothing acknowledged lost.
  auto rejoin_conf = backend_conf;
  rejoin_conf.push_back({"rejoin", "true"});
  rejoin_conf.push_back({"rejoin-listen", Quote("tcp://" + be + ":7110")});
  rejoin_conf.push_back({"rejoin-data-listen", Quote("tcp://" + be + ":7111")});
  ASSERT_NO_FATAL_FAILURE(d.Configure("backend", "pool1", rejoin_conf));
  ASSERT_NO_FATAL_FAILURE(d.Start("be", "backend", "pool1"));
  ASSERT_TRUE(d.WaitCluster(0, &view, &rc, "tcp://" + be + ":7110=in-sync"))
      << "old back-end host rejoined: last exit " << rc << ":\n"
      << view;
  std::printf("=== old back-end host rejoined as a mirror: asymnvm-ctl cluster (exit 0)\n%s",
              view.c_str());
  ASSERT_EQ(txn({"run", "--frontends", "2", "--txns", "100", "--seconds", "0"}), 0);
  ASSERT_EQ(txn({"check"}), 0);
  check_firewall();
  std::printf("deploy: %.1f s in all\n", std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace
}  // namespace asymnvm
