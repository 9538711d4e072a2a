// Suite "coord": what coordination costs and how fast it recovers (doc/coord.md,
// doc/frontend.md §Dead writers, §Reconnection, §Fencing), for the embedded coordinator and
// ZooKeeper (a standalone server started here, tickTime 200 ms, session timeout 4 s; skipped with
// a note when java or the jar is missing). One asymnvm-backend daemon per variant, registered on
// the same coordinator.
//
//   steady-none      puts on a hash table by a session without a coordinator (the baseline)
//   steady-<coord>   the same with the session's id claimed on the coordinator (lease, heartbeat):
//                    coord_round_trips_per_op = its round trips per op minus the baseline's (0:
//                    nothing of coordination is on the data path)
//   takeover-<coord> a writer process (its own session, holding the map's lock) is SIGKILLed mid
//                    stream; takeover_ms = SIGKILL → another front-end's first acknowledged put
//                    on the map (lease expiry + claim + replay + lock), median / max of --kills
//   restart-<coord>  the back-end is SIGKILLed and restarted on the same pool (a new address);
//                    restart_ms = SIGKILL → the first successful operation of a session that
//                    was idle meanwhile (registration watch + reconnection + replay), median /
//                    max of --kills
// Fields: ops_per_sec / p50_us / p99_us (steady), round_trips_per_op, coord_round_trips_per_op,
// takeover_ms / takeover_max_ms, restart_ms / restart_max_ms, lost_acknowledged (takeover and
// restart: acknowledged puts the next front-end did not find).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "coord/testing/zk_server.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::bench {
namespace {

namespace fs = std::filesystem;
double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

structures::Value ValueOf(uint64_t key) {
  structures::Value v(64, static_cast<uint8_t>(key * 13 + 7));
  std::memcpy(v.data(), &key, 8);
  return v;
}

class CoordSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--coordinators", coords_, "embedded,zookeeper")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--kills", kills_, "take-overs and restarts measured per coordinator")
        ->capture_default_str();
    cmd->add_option("--puts", puts_, "steady: puts per variant")->capture_default_str();
    cmd->add_option("--dir", dir_, "directory for pools and the embedded coordinator")
        ->capture_default_str();
    cmd->add_option("--backend-bin", backend_bin_, "asymnvm-backend binary");
  }

  Status Validate(const CommonOptions&) override {
    for (const auto& c : coords_) {
      if (c != "embedded" && c != "zookeeper") {
        return Status::InvalidArgument("--coordinators: unknown '" + c + "'");
      }
    }
    if (kills_ < 1 || kills_ > 100) return Status::InvalidArgument("--kills must be 1..100");
    if (puts_ < 10) return Status::InvalidArgument("--puts must be >= 10");
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    report->machine()["cores"] = MachineCores();
    report->machine()["provider"] = "soft";
    if (common.quick) {
      kills_ = std::min<int>(kills_, 3);
      puts_ = std::min<uint64_t>(puts_, 2000);
    }
    if (backend_bin_.empty()) {
      ASYMNVM_ASSIGN_OR_RETURN(backend_bin_, driver::FindBackendBinary(""));
    }
    fs::create_directories(dir_);
    root_ = dir_ + "/coord-bench-" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
    struct Cleanup {
      std::string d;
      ~Cleanup() {
        std::error_code ec;
        fs::remove_all(d, ec);
      }
    } cleanup{root_};

    double baseline_rt = -1;
    {
      ASYMNVM_ASSIGN_OR_RETURN(Json rec, Steady("steady-none", "", ""));
      baseline_rt = rec["round_trips_per_op"].get<double>();
      rec["coord_round_trips_per_op"] = 0.0;
      report->Add(std::move(rec));
    }
    for (const std::string& kind : coords_) {
      std::unique_ptr<coord::testing::ZkEnsemble> zk;
      std::string uri = "dir:" + root_ + "/coord-" + kind;
      if (kind == "zookeeper") {
        const std::string why = coord::testing::ZooKeeperUnavailableReason();
        if (!why.empty()) {
          report->AddNote("zookeeper variants skipped: " + why);
          continue;
        }
        auto started =
            coord::testing::ZkEnsemble::Start(1, Clock::now() + std::chrono::seconds(60));
        if (!started.ok()) return started.status().WithContext("starting ZooKeeper");
        zk = std::move(started).value();
        uri = "zk:" + zk->connect_string();
      }
      ASYMNVM_ASSIGN_OR_RETURN(Json steady, Steady("steady-" + kind, kind, uri));
      steady["coord_round_trips_per_op"] = steady["round_trips_per_op"].get<double>() - baseline_rt;
      report->Add(std::move(steady));
      ASYMNVM_ASSIGN_OR_RETURN(Json takeover, Takeover(kind, uri));
      report->Add(std::move(takeover));
      ASYMNVM_ASSIGN_OR_RETURN(Json restart, Restart(kind, uri));
      report->Add(std::move(restart));
    }
    report->set_columns({{"coord rt/op", "coord_round_trips_per_op", 3},
                         {"takeover ms", "takeover_ms", 1},
                         {"max", "takeover_max_ms", 1},
                         {"restart ms", "restart_ms", 1},
                         {"max", "restart_max_ms", 1},
                         {"lost", "lost_acknowledged", 0}});
    report->AddNote(
        "takeover_ms: SIGKILL of the writer → another front-end's first acknowledged put "
        "(ZooKeeper: includes the 4 s session timeout before the lease lapses)");
    report->AddNote(
        "restart_ms: SIGKILL of the back-end → an idle session's first successful op "
        "(includes the daemon's restart and recovery)");
    return Status::Ok();
  }

 private:
  frontend::SessionOptions Options(const std::string& address, const std::string& uri) const {
    frontend::SessionOptions o;
    o.backends = {address};
    o.coordinator = uri;
    o.frontend_id = uri.empty() ? 1 : 0;
    o.level = frontend::Level::kRcb;
    o.timeout = std::chrono::milliseconds(30000);
    o.lock_timeout = std::chrono::milliseconds(60000);
    return o;
  }

  Result<std::unique_ptr<driver::BackendProcess>> StartBackend(const std::string& pool,
                                                               const std::string& uri) {
    std::vector<std::string> extra = {"--pm-mode", "flush"};
    extra.push_back("--coord");
    extra.push_back(uri.empty() ? "none" : uri);
    return driver::BackendProcess::Start(backend_bin_, pool, "64M", extra);
  }

  Result<Json> Steady(const std::string& variant, const std::string& kind, const std::string& uri) {
    const std::string pool = root_ + "/" + variant + ".pool";
    ASYMNVM_ASSIGN_OR_RETURN(auto be, StartBackend(pool, uri));
    ASYMNVM_ASSIGN_OR_RETURN(auto s, frontend::Session::Open(Options(be->address(), uri)));
    structures::RegisterReplays(*s);
    ASYMNVM_ASSIGN_OR_RETURN(auto map,
                             structures::OpenMap(*s, structures::Kind::kHashTable, "steady"));
    for (uint64_t k = 0; k < 64; k++) ASYMNVM_RETURN_IF_ERROR(map->Put(k, ValueOf(k)));
    ASYMNVM_RETURN_IF_ERROR(map->Sync());
    const frontend::Counters c0 = s->counters();
    LatencySampler lat;
    lat.Reserve(puts_);
    const auto start = Clock::now();
    for (uint64_t i = 0; i < puts_; i++) {
      const auto t = Clock::now();
      ASYMNVM_RETURN_IF_ERROR(map->Put(i % 4096, ValueOf(i)));
      lat.Add(ElapsedNs(t, Clock::now()));
    }
    ASYMNVM_RETURN_IF_ERROR(map->Sync());
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    const frontend::Counters c1 = s->counters();
    Json rec = MakeRecord(variant, {{"coordinator", kind.empty() ? "none" : kind}});
    rec["ops_per_sec"] = static_cast<double>(puts_) / secs;
    rec["p50_us"] = lat.PercentileUs(50);
    rec["p99_us"] = lat.PercentileUs(99);
    rec["round_trips_per_op"] = static_cast<double>(c1.fabric.round_trips - c0.fabric.round_trips) /
                                static_cast<double>(puts_);
    rec["bytes_per_op"] =
        static_cast<double>(c1.fabric.bytes_out - c0.fabric.bytes_out) / static_cast<double>(puts_);
    map.reset();
    s.reset();
    ASYMNVM_RETURN_IF_ERROR(be->Stop());
    return rec;
  }

  // A writer child: opens the map (taking over whoever held it) and puts keys base, base+1, ...
  // writing each acknowledged key to `acks` (8 bytes); runs until killed. fork() without exec: the
  // parent has no session or coordinator threads while it forks.
  pid_t StartWriter(const std::string& address, const std::string& uri, const std::string& acks,
                    uint64_t base) {
    const pid_t pid = fork();
    if (pid != 0) return pid;
    auto s = frontend::Session::Open(Options(address, uri));
    if (!s.ok()) _exit(2);
    structures::RegisterReplays(**s);
    auto map = structures::OpenMap(**s, structures::Kind::kHashTable, "takeover");
    if (!map.ok()) _exit(3);
    FILE* f = std::fopen(acks.c_str(), "ab");
    if (f == nullptr) _exit(4);
    for (uint64_t k = base;; k++) {
      if (!(*map)->Put(k, ValueOf(k)).ok()) _exit(5);
      std::fwrite(&k, 8, 1, f);
      std::fflush(f);
    }
  }

  static std::vector<uint64_t> ReadAcks(const std::string& path) {
    std::vector<uint64_t> keys;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return keys;
    uint64_t k;
    while (std::fread(&k, 8, 1, f) == 1) keys.push_back(k);
    std::fclose(f);
    return keys;
  }

  Result<Json> Takeover(const std::string& kind, const std::string& uri) {
    const std::string pool = root_ + "/takeover-" + kind + ".pool";
    ASYMNVM_ASSIGN_OR_RETURN(auto be, StartBackend(pool, uri));
    std::vector<double> times;
    uint64_t lost = 0;
    for (int round = 0; round < kills_; round++) {
      const std::string acks = root_ + "/acks-" + kind + "-" + std::to_string(round);
      const pid_t pid = StartWriter(be->address(), uri, acks, uint64_t(round + 1) << 32);
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      while (ReadAcks(acks).size() < 200 && Clock::now() < deadline) {
        if (waitpid(pid, nullptr, WNOHANG) == pid) {
          return Status::Internal("takeover: the writer exited before 200 puts");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      kill(pid, SIGKILL);
      const auto killed = Clock::now();
      waitpid(pid, nullptr, 0);
      const std::vector<uint64_t> acked = ReadAcks(acks);
      ASYMNVM_ASSIGN_OR_RETURN(auto s, frontend::Session::Open(Options(be->address(), uri)));
      structures::RegisterReplays(*s);
      ASYMNVM_ASSIGN_OR_RETURN(auto map,
                               structures::OpenMap(*s, structures::Kind::kHashTable, "takeover"));
      ASYMNVM_RETURN_IF_ERROR(map->Put(0, ValueOf(0)));
      times.push_back(Ms(Clock::now() - killed));
      for (uint64_t k : acked) {
        structures::Value v;
        if (!map->Get(k, &v).ok() || v != ValueOf(k)) lost++;
      }
    }
    ASYMNVM_RETURN_IF_ERROR(be->Stop());
    Json rec = MakeRecord("takeover-" + kind, {{"coordinator", kind}, {"kills", kills_}});
    rec["takeover_ms"] = Median(times);
    rec["takeover_max_ms"] = *std::max_element(times.begin(), times.end());
    rec["lost_acknowledged"] = lost;
    return rec;
  }

  Result<Json> Restart(const std::string& kind, const std::string& uri) {
    const std::string pool = root_ + "/restart-" + kind + ".pool";
    ASYMNVM_ASSIGN_OR_RETURN(auto be, StartBackend(pool, uri));
    auto o = Options(be->address(), uri);
    o.reconnect_deadline = std::chrono::milliseconds(60000);
    ASYMNVM_ASSIGN_OR_RETURN(auto s, frontend::Session::Open(o));
    structures::RegisterReplays(*s);
    ASYMNVM_ASSIGN_OR_RETURN(auto map,
                             structures::OpenMap(*s, structures::Kind::kHashTable, "restart"));
    std::vector<double> times;
    uint64_t lost = 0, next = 1;
    for (int round = 0; round < kills_; round++) {
      for (int i = 0; i < 100; i++, next++) ASYMNVM_RETURN_IF_ERROR(map->Put(next, ValueOf(next)));
      be->Kill();
      const auto killed = Clock::now();
      ASYMNVM_ASSIGN_OR_RETURN(be, StartBackend(pool, uri));
      structures::Value v;
      Status st = map->Get(1, &v);
      for (int retry = 0; !st.ok() && retry < 3; retry++)
        st = map->Get(1, &v);  // first call may report the loss
      ASYMNVM_RETURN_IF_ERROR(st.WithContext("restart: first op after the back-end restart"));
      times.push_back(Ms(Clock::now() - killed));
    }
    for (uint64_t k = 1; k < next; k++) {
      structures::Value v;
      if (!map->Get(k, &v).ok() || v != ValueOf(k)) lost++;
    }
    map.reset();
    s.reset();
    ASYMNVM_RETURN_IF_ERROR(be->Stop());
    Json rec = MakeRecord("restart-" + kind, {{"coordinator", kind}, {"kills", kills_}});
    rec["restart_ms"] = Median(times);
    rec["restart_max_ms"] = *std::max_element(times.begin(), times.end());
    rec["lost_acknowledged"] = lost;
    return rec;
  }

  std::vector<std::string> coords_ = {"embedded", "zookeeper"};
  int kills_ = 5;
  uint64_t puts_ = 5000;
  std::string dir_ = "/tmp";
  std::string backend_bin_;
  std::string root_;
};

}  // namespace

ASYMNVM_REGISTER_SUITE(kCoordSuite, "coord",
                       "coordination: op-path cost, dead-writer take-over and back-end restart "
                       "times (embedded, ZooKeeper)",
                       CoordSuite);

}  // namespace asymnvm::bench
