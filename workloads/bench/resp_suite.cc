// Suite "resp": the KV server's Redis gateway against Redis itself, same run, same machine, same
// client (redis-benchmark, a tool no one here wrote). Variants:
//   asymnvm        asymnvm-kv (fresh pool, default PM mode) driven through --resp-port
//   redis-always   redis-server --appendonly yes --appendfsync always (equal durability: every
//                  acknowledged write is on disk)
//   redis-default  redis-server with its defaults (RDB snapshots only: acknowledged writes can be
//                  lost)
// Each is driven by `redis-benchmark -t ping_mbulk,set,get,incr,hset,lpush,lpop,sadd -c CLIENTS
// -P {1,16} -n N --csv` (PING shows the front door's own ceiling: no store call; the type commands
// all hit one key each, redis-benchmark's own: every gateway write of it is an atomic batch
// conditional on that key's metadata, so they contend; doc/types.md); a record per variant ×
// command × pipeline depth with ops_per_sec, p50_us, p99_us (redis-benchmark's own figures).
// Processes are started by this suite and stopped by their PID.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "workloads/bench/bench.h"
#include "workloads/bench/process.h"

extern char** environ;

namespace asymnvm::bench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTests = "ping_mbulk,set,get,incr,hset,lpush,lpop,sadd";
constexpr int kTestCount = 8;

// Runs a command to completion, returns its stdout (stderr appended on failure).
Result<std::string> RunTool(const std::vector<std::string>& args, const std::string& tmp) {
  const std::string out = tmp + "/tool.out", err = tmp + "/tool.err";
  ASYMNVM_ASSIGN_OR_RETURN(auto child, Child::Start(args, out, err));
  while (child->Running()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return ReadFile(out) + ReadFile(err);
}

bool Pong(const std::string& cli, int port, const std::string& tmp) {
  auto r = RunTool({cli, "-p", std::to_string(port), "PING"}, tmp);
  return r.ok() && r->find("PONG") != std::string::npos;
}

// A free TCP port on 127.0.0.1 (bind 0, read it, release it).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  close(fd);
  return ntohs(sa.sin_port);
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> f;
  std::string cur;
  bool q = false;
  for (char c : line) {
    if (c == '"') {
      q = !q;
    } else if (c == ',' && !q) {
      f.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  f.push_back(cur);
  return f;
}

class RespSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--clients", clients_, "redis-benchmark connections")->capture_default_str();
    cmd->add_option("--requests", requests_, "requests per command and pipeline depth (0: by mode)")
        ->capture_default_str();
    cmd->add_option("--variants", variants_, "comma-separated: asymnvm,redis-always,redis-default")
        ->capture_default_str();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    ASYMNVM_ASSIGN_OR_RETURN(std::string bench,
                             FindTool("redis-benchmark", "REDIS_BENCHMARK_BIN", {}));
    ASYMNVM_ASSIGN_OR_RETURN(std::string cli, FindTool("redis-cli", "REDIS_CLI_BIN", {}));
    int n = requests_ > 0 ? requests_ : (common.quick ? 600 : 5000);
    if (common.ops > 0) n = static_cast<int>(std::min<uint64_t>(common.ops, 1u << 30));
    char tmpl[] = "/tmp/asymnvm-bench-resp.XXXXXX";
    if (!mkdtemp(tmpl)) return Status::IoError("mkdtemp", errno);
    const std::string tmp = tmpl;
    report->machine()["cores"] = MachineCores();
    report->machine()["provider"] = "soft";
    report->machine()["transport"] = "tcp";
    report->AddHeader(std::string("redis-benchmark -t ") + kTests + " -c " +
                      std::to_string(clients_) + " -n " + std::to_string(n) +
                      " -P {1,16}; asymnvm = asymnvm-kv through its RESP gateway");
    Status st = Status::Ok();
    std::stringstream vs(variants_);
    std::string v;
    while (st.ok() && std::getline(vs, v, ',')) st = RunVariant(v, bench, cli, n, tmp, report);
    std::error_code ec;
    fs::remove_all(tmp, ec);
    report->set_columns({});
    return st;
  }

 private:
  Status RunVariant(const std::string& variant, const std::string& bench, const std::string& cli,
                    int n, const std::string& tmp, Report* report) {
    std::unique_ptr<Child> server;
    int port = 0;
    const std::string dir = tmp + "/" + variant;
    fs::create_directories(dir);
    if (variant == "asymnvm") {
      ASYMNVM_ASSIGN_OR_RETURN(std::string kv,
                               FindTool("asymnvm-kv", "ASYMNVM_KV_BIN", "../kv/asymnvm-kv"));
      ASYMNVM_ASSIGN_OR_RETURN(
          server, Child::Start({kv, "--pool", dir + "/kv.pool", "--size", "256M", "--resp-port",
                                "0", "--log-level", "warn"},
                               dir + "/out", dir + "/err"));
      for (int i = 0; i < 1200 && port == 0; ++i) {
        std::string out = ReadFile(dir + "/out");
        auto p = out.find("\nresp ");
        if (p != std::string::npos && out.find('\n', p + 1) != std::string::npos) {
          auto colon = out.find(':', p);
          port = std::atoi(out.c_str() + colon + 1);
          break;
        }
        if (!server->Running()) {
          return Status::Internal("asymnvm-kv exited: " + ReadFile(dir + "/err"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } else if (variant == "redis-always" || variant == "redis-default") {
      ASYMNVM_ASSIGN_OR_RETURN(std::string rs, FindTool("redis-server", "REDIS_SERVER_BIN", {}));
      port = FreePort();
      std::vector<std::string> args = {
          rs,      "--port", std::to_string(port), "--bind", "127.0.0.1",
          "--dir", dir,      "--daemonize",        "no",     "--logfile",
          ""};
      if (variant == "redis-always") {
        for (const char* a : {"--appendonly", "yes", "--appendfsync", "always"}) args.push_back(a);
      }
      ASYMNVM_ASSIGN_OR_RETURN(server, Child::Start(args, dir + "/out", dir + "/err"));
    } else {
      return Status::InvalidArgument("unknown variant '" + variant + "'");
    }
    bool up = false;
    for (int i = 0; i < 1200 && !up && port != 0; ++i) {
      up = Pong(cli, port, dir);
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!up) return Status::Unavailable(variant + " did not answer PING within 60 s");
    for (int pipeline : {1, 16}) {
      ASYMNVM_ASSIGN_OR_RETURN(
          std::string out,
          RunTool({bench, "-p", std::to_string(port), "-t", kTests, "-n", std::to_string(n), "-c",
                   std::to_string(clients_), "-P", std::to_string(pipeline), "--csv"},
                  dir));
      int parsed = 0;
      std::stringstream ls(out);
      std::string line;
      while (std::getline(ls, line)) {
        auto f = SplitCsv(line);
        if (f.size() < 7 || f[0] == "test") continue;
        Json rec = MakeRecord(
            variant,
            Json{
                {"command", f[0]}, {"pipeline", pipeline}, {"clients", clients_}, {"requests", n}});
        rec["ops_per_sec"] = std::atof(f[1].c_str());
        rec["p50_us"] = std::atof(f[4].c_str()) * 1000;
        rec["p99_us"] = std::atof(f[6].c_str()) * 1000;
        rec["round_trips_per_op"] = 1.0 / pipeline;
        report->Add(std::move(rec));
        ++parsed;
      }
      if (parsed != kTestCount) {
        return Status::Internal(variant + ": redis-benchmark -P " + std::to_string(pipeline) +
                                " gave " + std::to_string(parsed) + " results: " + out);
      }
    }
    server->Stop();
    return Status::Ok();
  }

  int clients_ = 50;
  int requests_ = 0;
  std::string variants_ = "asymnvm,redis-always,redis-default";
};

}  // namespace

ASYMNVM_REGISTER_SUITE(kRespSuite, "resp",
                       "Redis gateway vs redis-server (appendfsync always / default) with "
                       "redis-benchmark",
                       RespSuite);

}  // namespace asymnvm::bench
