// TEST HELPER: asymnvm-kv daemons with their RESP gateway for the process tests of the gateway
// (kv_resp_fast_test, kv_resp_types_test): one daemon whose "resp HOST:PORT" line is read from its
// stdout, three of them sharing a coordinator with rf 3, RESP request encoding and INFO counters.
#pragma once

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/coord.h"
#include "kv/resp/test_client.h"
#include "kv/shard_map.h"
#include "tests/kv/kv_test_util.h"

namespace asymnvm::kv::testutil {

inline std::string Cmd(const std::vector<std::string>& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

inline std::string Bulk(const std::string& v) {
  return "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
}

// An asymnvm-kv whose stdout goes to a file, so that its "resp HOST:PORT" line can be read.
struct Daemon {
  pid_t pid = -1;
  uint16_t port = 0;
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() { Kill9(); }
  void Kill9() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      WaitExit(pid);
      pid = -1;
    }
  }
  int Term() {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    int st = WaitExit(pid);
    pid = -1;
    return st;
  }
  // Starts it and waits for the resp line (a generous 90 s: three daemons whose first map waits
  // for all of them, under ASan on two loaded cores, took more than 20 s); port stays 0 on
  // failure.
  void Start(const std::vector<std::string>& args, const std::string& out) {
    std::filesystem::remove(out);
    SpawnSpec spec = KvSpec(args, "warn");
    spec.out = SpawnSpec::Out::kFile;
    spec.out_file = out;
    std::string error;
    pid = SpawnProcess(spec, &error);
    port = 0;
    if (pid < 0) {
      ADD_FAILURE() << error;
      return;
    }
    WaitFor(
        [&] {
          std::ifstream in(out);
          std::string line;
          while (std::getline(in, line)) {
            if (line.rfind("resp ", 0) == 0) {
              port = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
              return true;
            }
          }
          return false;
        },
        std::chrono::seconds(90));
  }
};

// A counter of the gateway's INFO stats section (-1 when absent).
inline int64_t InfoStat(uint16_t port, const std::string& name) {
  resp::testing::TestClient c(port);
  const std::string r = c.Call("INFO stats");
  const std::string key = name + ":";
  size_t at = r.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(r.substr(at + key.size(), r.find("\r\n", at) - at - key.size()));
}

// Three servers sharing an embedded coordinator, rf 3 (6 shards: each server is the primary of
// two and a backup of the others).
struct Trio {
  TempDir& d;
  Daemon servers[3];
  explicit Trio(TempDir& dir) : d(dir) {}
  std::string coord() const { return "dir:" + d.File("coord"); }
  std::vector<std::string> Args(int i) const {
    return {"--pool",      d.File("kv" + std::to_string(i) + ".pool"),
            "--size",      "64M",
            "--listen",    "unix://" + d.File("kv" + std::to_string(i) + ".sock"),
            "--pm-mode",   "flush",
            "--coord",     coord(),
            "--workers",   "2",
            "--shards",    "6",
            "--rf",        "3",
            "--resp-port", "0"};
  }
  void StartAll() {
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; i++) {
      ts.emplace_back(
          [this, i] { servers[i].Start(Args(i), d.File("out" + std::to_string(i) + ".txt")); });
    }
    for (auto& t : ts) t.join();
  }
  // Every shard has a primary and `backups` synced backups.
  bool WaitSynced(size_t backups) {
    return WaitFor(
        [&] {
          auto c = coord::Coordinator::Open(coord());
          if (!c.ok()) return false;
          auto n = (*c)->Get("/asymnvm/kv/default/map");
          if (!n.ok()) return false;
          auto m = ShardMap::Decode(n->data);
          if (!m.ok() || m->assignment.empty()) return false;
          for (auto& a : m->assignment) {
            size_t synced = 0;
            for (auto& b : a.backups) synced += b.synced ? 1 : 0;
            if (synced != backups) return false;
          }
          return true;
        },
        std::chrono::seconds(60));
  }
};

}  // namespace asymnvm::kv::testutil
