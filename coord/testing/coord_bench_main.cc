// coord_bench: what coordination costs, for the embedded and the ZooKeeper coordinator.
//
//   coord_bench [--ops N] [--kills K] [--zk-session-ms MS]
//
// Prints one JSON object per implementation: median / p99 latency in microseconds of Create, Get,
// Set (CAS) and Delete from one client; and the failure-detection time — from SIGKILL of a process
// holding an ephemeral registration to a watcher in another process seeing it gone (median / max
// of K kills). ZooKeeper runs against a standalone server started here (tickTime 200); skipped
// with a note when java or the jar is missing.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "asymnvm/coord.h"
#include "coord/testing/zk_server.h"

using namespace asymnvm;
using namespace asymnvm::coord;
using namespace std::chrono_literals;
using Micros = std::chrono::duration<double, std::micro>;

namespace {

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int Run(const std::string& name, const std::string& uri, int ops, int kills, int session_ms) {
  auto c = Coordinator::Open(uri);
  if (!c.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), c.status().ToString().c_str());
    return 1;
  }
  Coordinator& co = **c;
  if (!co.EnsurePath("/bench/ops").ok() || !co.EnsurePath("/bench/reg").ok()) return 1;
  std::vector<double> create, get, set, del;
  for (int i = 0; i < ops; ++i) {
    const std::string p = "/bench/ops/n" + std::to_string(i);
    auto t0 = Clock::now();
    if (!co.Create(p, "x").ok()) return 1;
    auto t1 = Clock::now();
    if (!co.Get(p).ok()) return 1;
    auto t2 = Clock::now();
    if (!co.Set(p, "y", 0).ok()) return 1;
    auto t3 = Clock::now();
    if (!co.Delete(p, 1).ok()) return 1;
    auto t4 = Clock::now();
    create.push_back(Micros(t1 - t0).count());
    get.push_back(Micros(t2 - t1).count());
    set.push_back(Micros(t3 - t2).count());
    del.push_back(Micros(t4 - t3).count());
  }
  std::vector<double> detect_ms;
  for (int k = 0; k < kills; ++k) {
    const std::string path = "/bench/reg/h" + std::to_string(k);
    auto p = testing::Subprocess::Start({ASYMNVM_COORD_TEST_HELPER, "register", uri, path,
                                         "--session-ms", std::to_string(session_ms)});
    if (!p.ok()) return 1;
    if (!(*p)->WaitForLine("ready", testing::After(60s)).ok()) return 1;
    auto n = co.Get(path);
    if (!n.ok()) return 1;
    const auto t0 = Clock::now();
    (*p)->Signal(SIGKILL);
    auto gone = co.WaitForChange(path, n->version, Clock::now() + 60s);
    const auto t1 = Clock::now();
    if (!gone.ok() || gone->has_value()) return 1;
    detect_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    (void)(*p)->Wait(testing::After(60s));
  }
  std::printf(
      "{\"coordinator\":\"%s\",\"ops\":%d,"
      "\"create_us\":{\"p50\":%.1f,\"p99\":%.1f},\"get_us\":{\"p50\":%.1f,\"p99\":%.1f},"
      "\"set_us\":{\"p50\":%.1f,\"p99\":%.1f},\"delete_us\":{\"p50\":%.1f,\"p99\":%.1f},"
      "\"kills\":%d,\"session_ms\":%d,\"kill_to_gone_ms\":{\"p50\":%.1f,\"max\":%.1f}}\n",
      name.c_str(), ops, Pct(create, .5), Pct(create, .99), Pct(get, .5), Pct(get, .99),
      Pct(set, .5), Pct(set, .99), Pct(del, .5), Pct(del, .99), kills,
      name == "zookeeper" ? session_ms : 0, Pct(detect_ms, .5), Pct(detect_ms, 1.0));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ops = 200, kills = 5, session_ms = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ops") ops = std::atoi(argv[i + 1]);
    if (a == "--kills") kills = std::atoi(argv[i + 1]);
    if (a == "--zk-session-ms") session_ms = std::atoi(argv[i + 1]);
  }
  char tmpl[] = "/tmp/asymnvm-coord-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  int rc = Run("embedded", std::string("dir:") + tmpl, ops, kills, session_ms);
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  const std::string why = testing::ZooKeeperUnavailableReason();
  if (!why.empty()) {
    std::printf("{\"coordinator\":\"zookeeper\",\"skipped\":\"%s\"}\n", why.c_str());
    return rc;
  }
  auto zk = testing::ZkEnsemble::Start(1, testing::After(60s));
  if (!zk.ok()) {
    std::fprintf(stderr, "zookeeper: %s\n", zk.status().ToString().c_str());
    return 1;
  }
  rc |= Run("zookeeper", "zk:" + (*zk)->connect_string(), ops, kills, session_ms);
  return rc;
}
