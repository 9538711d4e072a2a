// Suite "kv": Rowan-KV (asymnvm-kv, doc/kv.md) — three server processes on this machine sharing an
// embedded coordinator (rf 3), closed-loop client threads in this process.
//
// Workloads: YCSB Load (100 % PUT of every key once) and A (50 % PUT / 50 % GET, Zipf 0.99 over the
// loaded keys); 8-byte keys and ZippyDB-like values (the Rowan approximation of
// doc/workloads.md "Value sizes": average object 91 B, max 512 B). Each workload runs on a fresh
// cluster; the servers model the XPLine buffer (--xpline) and report DLWA when stopped.
// Failover (unless --no-failover): workload A, server 0 SIGKILLed a third into the run; reports
// the time until the coordinator holds a map without it as a primary (failover_ms), until the
// throughput is back to half its pre-kill mean for 50 ms (full_service_ms), throughput in 10 ms
// bins (and a gnuplot PNG with --plot), and lost_acknowledged: private keys whose last
// acknowledged PUT is not what a final GET reads.
// Resharding (unless --no-reshard; first variant only): rf 2, --rebalance-threshold 1.5
// --rebalance-period-ms 200; after a uniform preload, 90 % of the requests (50 % PUT) go to the
// keys of one server's shards; reports reshard_detect_ms (skew start -> the manager's move planned
// in the map), reshard_commit_ms (-> the map naming the new primary), and the migration: the moved
// shard's preloaded entries over the time from the plan to the target marked synced (an upper
// bound of the catch-up: it includes the target's joining), as migration_entries_per_sec and
// migration_mb_per_sec (doc/kv.md §Resharding).
// Variants (--variants, default all): how a primary replicates a PUT to its backups, the
// asymnvm-kv --replication switch — rowan, and the Rowan paper's §6.1 baselines rpc, rwrite,
// batch, share (doc/kv.md §Baselines). Each variant runs every workload on fresh clusters.
// Per record also: replication round trips and bytes per replicated write (the primaries' sender
// connections, from the servers' stop lines) and the servers' CPU per operation (/proc).
// Traces (--trace FILE[,FILE...], the public Twitter cache-trace format, workloads/gen/
// twitter_trace.h): instead of YCSB, each trace is replayed closed-loop for the run's duration
// (looping over it) on one asymnvm-kv server (rf 1: a PUT is nilext) once per Ordered-Queue policy
// (--trace-policies oq,rawrpc,deferred): set/add/replace/cas/append/prepend → PUT of a value of the
// record's size, get/gets → GET, delete → DELETE, incr/decr → INCR; a client id's requests stay in
// order on one thread. Records: variant = policy, trace, ops_per_sec, p50/p99 overall and per kind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/kv.h"
#include "common/proc_stat.h"
#include "common/spawn.h"
#include "coord/testing/zk_server.h"
#include "fabric/oq/oq.h"
#include "kv/shard_map.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"
#include "workloads/gen/generators.h"
#include "workloads/gen/twitter_trace.h"

namespace asymnvm::bench {
namespace {

using workloads::KeyNumToKey;
using workloads::Rng;
using workloads::ScrambledZipfianGenerator;

struct ServerProc {
  pid_t pid = -1;
  std::string err_path;
};

class KvSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--variants", variants_, "replication variants (rowan,rpc,rwrite,batch,share)")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--workloads", workloads_, "load,a")->delimiter(',')->capture_default_str();
    cmd->add_option("--threads", threads_, "client threads (closed loop)")->capture_default_str();
    cmd->add_option("--server-workers", server_workers_,
                    "worker threads per server (more t-logs, and rwrite/batch logs per backup)")
        ->capture_default_str();
    cmd->add_option("--clients", clients_, "kv::Client objects the threads share")
        ->capture_default_str();
    cmd->add_option("--keys", keys_, "records")->capture_default_str();
    cmd->add_flag("--no-failover", no_failover_, "skip the failover run");
    cmd->add_flag("--no-reshard", no_reshard_, "skip the resharding run");
    cmd->add_option("--faults", faults_,
                    "fault runs (failover-embedded, failover-zookeeper, pause-primary, "
                    "pause-backup; empty string: none)")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--fault-rounds", fault_rounds_, "faults per fault run (0: 20 quick, 40)")
        ->capture_default_str();
    cmd->add_option("--session-timeout-ms", session_timeout_ms_,
                    "ZooKeeper session timeout of the servers in the ZooKeeper fault runs")
        ->capture_default_str();
    cmd->add_option("--pause-ms", pause_ms_, "pause-backup: how long a backup stays stopped")
        ->capture_default_str();
    cmd->add_option("--fault-client-timeout-ms", fault_client_timeout_ms_,
                    "fault runs: the clients' per-request timeout")
        ->capture_default_str();
    cmd->add_option("--plot", plot_, "PNG of throughput over time across the failover (gnuplot)");
    cmd->add_option("--dir", dir_, "working directory for pools and the coordinator");
    cmd->add_option("--kv-binary", binary_, "path of asymnvm-kv (default: next to this binary)");
    cmd->add_option(
           "--trace", traces_,
           "replay Twitter cache traces (public format; workloads/traces/*.csv, asymnvm-trace gen) "
           "instead of YCSB")
        ->delimiter(',');
    cmd->add_option("--trace-policies", trace_policies_, "OQ policies to compare on each trace")
        ->delimiter(',')
        ->capture_default_str();
  }

  Status Validate(const CommonOptions& common) override {
    for (const auto& v : variants_) {
      if (v != "rowan" && v != "rpc" && v != "rwrite" && v != "batch" && v != "share") {
        return Status::InvalidArgument("kv: variant '" + v +
                                       "' (rowan, rpc, rwrite, batch, share; doc/kv.md)");
      }
    }
    for (const auto& w : workloads_) {
      if (w != "load" && w != "a") return Status::InvalidArgument("kv: --workloads: load,a");
    }
    if (server_workers_ < 1 || server_workers_ > 32) {
      return Status::InvalidArgument("kv: --server-workers 1..32");
    }
    if (threads_ < 1 || threads_ > 64 || clients_ < 1 || clients_ > threads_) {
      return Status::InvalidArgument("kv: --threads 1..64, --clients 1..threads");
    }
    if (keys_ < 10) return Status::InvalidArgument("kv: --keys >= 10");
    std::erase(faults_, std::string());
    for (const auto& f : faults_) {
      if (f != "failover-embedded" && f != "failover-zookeeper" && f != "pause-primary" &&
          f != "pause-backup") {
        return Status::InvalidArgument("kv: --faults: '" + f +
                                       "' (failover-embedded, failover-zookeeper, pause-primary, "
                                       "pause-backup)");
      }
    }
    if (fault_rounds_ < 0 || fault_rounds_ > 10000) {
      return Status::InvalidArgument("kv: --fault-rounds 0..10000");
    }
    if (session_timeout_ms_ < 400 || session_timeout_ms_ > 4000) {
      return Status::InvalidArgument("kv: --session-timeout-ms 400..4000 (ZooKeeper tickTime 200)");
    }
    if (pause_ms_ < 1 || fault_client_timeout_ms_ < 10) {
      return Status::InvalidArgument("kv: --pause-ms >= 1, --fault-client-timeout-ms >= 10");
    }
    for (const auto& p : trace_policies_) {
      ASYMNVM_RETURN_IF_ERROR(oq::ParsePolicy(p).status().WithContext("kv: --trace-policies"));
    }
    for (const auto& f : traces_) {
      if (!std::filesystem::exists(f))
        return Status::InvalidArgument("kv: --trace " + f + ": no such file");
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    common_ = common;
    if (common.quick && keys_ == 20000) keys_ = 2000;
    if (binary_.empty()) {
      auto self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
      for (auto p : {self / ".." / "kv" / "asymnvm-kv", self / "asymnvm-kv"}) {
        if (std::filesystem::exists(p)) binary_ = p.string();
      }
      if (binary_.empty()) return Status::NotFound("kv: asymnvm-kv not found; pass --kv-binary");
    }
    if (dir_.empty()) dir_ = "/tmp/asymnvm-bench-kv-" + std::to_string(getpid());
    const double seconds = common.duration_s > 0 ? common.duration_s : (common.quick ? 1.0 : 5.0);
    if (!traces_.empty()) return RunTraces(seconds, report);
    report->AddHeader("asymnvm-bench kv: 3 asymnvm-kv processes (rf 3, pm-mode flush), " +
                      std::to_string(threads_) + " client threads on " + std::to_string(clients_) +
                      " clients, " + std::to_string(MachineCores()) + " cores for everything.");
    report->AddHeader("8 B keys, ZippyDB-like values (avg object 91 B), Zipf 0.99 over " +
                      std::to_string(keys_) + " keys.");
    for (const auto& v : variants_) {
      variant_ = v;
      if (!no_reshard_ && v == variants_.front()) {
        Json rec;
        ASYMNVM_RETURN_IF_ERROR(RunReshard(v, &rec));
        report->Add(rec);
      }
      for (const auto& w : workloads_) {
        Json rec;
        ASYMNVM_RETURN_IF_ERROR(RunWorkload(v, w, seconds, false, &rec));
        report->Add(rec);
      }
      if (!no_failover_) {
        Json rec;
        ASYMNVM_RETURN_IF_ERROR(RunWorkload(v, "a", std::max(seconds * 3, 4.0), true, &rec));
        report->Add(rec);
      }
    }
    if (!no_failover_) {
      for (const auto& f : faults_) {
        Json rec;
        ASYMNVM_RETURN_IF_ERROR(RunFault(f, &rec));
        report->Add(rec);
      }
    }
    report->set_columns({{"put p50", "put_p50_us", 1},
                         {"put p99", "put_p99_us", 1},
                         {"get p50", "get_p50_us", 1},
                         {"dlwa", "dlwa", 3},
                         {"repl rt", "replication_round_trips_per_put", 2},
                         {"repl B", "replication_bytes_per_put", 0},
                         {"srv cpu µs/op", "server_cpu_us_per_op", 1},
                         {"failover ms", "failover_ms", 1},
                         {"fo p50 ms", "failover_p50_ms", 0},
                         {"fo p99 ms", "failover_p99_ms", 0},
                         {"fo max ms", "failover_max_ms", 0},
                         {"cold ms", "cold_start_ms", 1},
                         {"lost", "lost_acknowledged", 0},
                         {"detect ms", "reshard_detect_ms", 0},
                         {"migr MB/s", "migration_mb_per_sec", 1}});
    report->AddNote(
        "variants = asymnvm-kv --replication (doc/kv.md §Baselines); repl rt/B = doorbells and "
        "wire bytes of the primary's replication per replicated write, summed over its backups.");
    std::filesystem::remove_all(dir_);
    return Status::Ok();
  }

 private:
  std::string Coord() const { return coord_uri_.empty() ? "dir:" + dir_ + "/coord" : coord_uri_; }

  Result<ServerProc> Spawn(int i, int servers = 3, const std::string& policy = "oq") {
    ServerProc p;
    p.err_path = dir_ + "/kv" + std::to_string(i) + ".err";
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return Status::IoError("pipe", errno);
    SpawnSpec spec;
    spec.path = binary_;
    spec.argv = {
        binary_, "--pool", dir_ + "/kv" + std::to_string(i) + ".pool", "--size",
        server_workers_ <= 2 ? std::string("96M") : std::to_string(96 + 16 * server_workers_) + "M",
        "--blog-size",
        // Room for one 1.25 MiB ring per (other server, worker) (rwrite).
        std::to_string(std::max(16, 6 + 3 * server_workers_)) + "M", "--listen",
        "unix://" + dir_ + "/kv" + std::to_string(i), "--pm-mode", "flush", "--coord", Coord(),
        "--initial-servers", std::to_string(servers), "--oq-policy", policy, "--workers",
        std::to_string(server_workers_), "--shards",
        std::to_string(std::max(12, 2 * server_workers_)), "--replication",
        servers == 1 ? std::string("rowan") : variant_, "--xpline", "--log-level", "warn"};
    spec.argv.insert(spec.argv.end(), extra_args_.begin(), extra_args_.end());
    spec.out = SpawnSpec::Out::kFd;
    spec.out_fd = out[1];
    spec.err_file = p.err_path;
    std::string error;
    const pid_t pid = SpawnProcess(spec, &error);  // no fork: this process has threads
    if (pid < 0) {
      close(out[0]);
      close(out[1]);
      return Status::IoError("kv: server " + std::to_string(i) + ": " + error);
    }
    close(out[1]);
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
    close(out[0]);
    p.pid = pid;
    if (line.rfind("listening ", 0) != 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return Status::Internal("kv: server " + std::to_string(i) + " did not start (see " +
                              p.err_path + ")");
    }
    return p;
  }

  // Sums "N replicated writes, R replication round trips, B replication bytes" of a stop line.
  static void ReadReplication(const std::string& err_path, double* writes, double* rts,
                              double* bytes) {
    std::ifstream in(err_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    if (std::regex_search(text, m,
                          std::regex("([0-9]+) replicated writes, ([0-9]+) replication round "
                                     "trips, ([0-9]+) replication bytes"))) {
      *writes += std::stod(m[1]);
      *rts += std::stod(m[2]);
      *bytes += std::stod(m[3]);
    }
  }

  double ServersCpuSeconds(const std::vector<ServerProc>& servers) {
    double sum = 0;
    for (const auto& p : servers) {
      if (p.pid <= 0) continue;
      auto c = ProcessCpuSeconds(p.pid);
      if (c.ok()) sum += *c;
    }
    return sum;
  }

  static double ReadDlwa(const std::string& err_path) {
    std::ifstream in(err_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    if (std::regex_search(text, m, std::regex("dlwa ([0-9.]+)"))) return std::stod(m[1]);
    return 0;
  }

  std::string Value(Rng& rng) {
    const uint64_t avg = 91, key = 8, v = avg - key;
    uint64_t n = v;
    if (rng.Below(2) == 1) {
      n = rng.Below(100) < 84 ? rng.Below(v) : v + rng.Below(512 - avg);
    }
    return std::string(n, static_cast<char>('a' + rng.Below(26)));
  }

  static std::string Key(uint64_t keynum) {
    uint64_t k = KeyNumToKey(keynum, true);
    return std::string(reinterpret_cast<const char*>(&k), 8);
  }

  Status RunTraces(double seconds, Report* report) {
    report->AddHeader(
        "asymnvm-bench kv --trace: one asymnvm-kv server (rf 1, pm-mode flush; a PUT is "
        "nilext), " +
        std::to_string(threads_) + " client threads on " + std::to_string(clients_) +
        " clients, closed loop, " + std::to_string(MachineCores()) + " cores for everything.");
    for (const auto& file : traces_) {
      std::vector<workloads::TraceRecord> recs;
      ASYMNVM_ASSIGN_OR_RETURN(auto reader, workloads::TraceReader::Open(file));
      workloads::TraceRecord r;
      for (;;) {
        ASYMNVM_ASSIGN_OR_RETURN(bool more, reader->Next(&r));
        if (!more || recs.size() >= 2000000) break;
        recs.push_back(r);
      }
      if (recs.empty()) return Status::InvalidArgument("kv: --trace " + file + " holds no request");
      for (const auto& policy : trace_policies_) {
        Json rec;
        ASYMNVM_RETURN_IF_ERROR(RunTrace(file, recs, policy, seconds, &rec));
        report->Add(rec);
      }
    }
    report->set_columns({{"put p50", "put_p50_us", 1},
                         {"put p99", "put_p99_us", 1},
                         {"get p50", "get_p50_us", 1},
                         {"get p99", "get_p99_us", 1},
                         {"errors", "errors", 0}});
    std::filesystem::remove_all(dir_);
    return Status::Ok();
  }

  Status RunTrace(const std::string& file, const std::vector<workloads::TraceRecord>& recs,
                  const std::string& policy, double seconds, Json* out) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ASYMNVM_ASSIGN_OR_RETURN(ServerProc server, Spawn(0, 1, policy));
    struct Stop {
      ServerProc& p;
      ~Stop() {
        if (p.pid > 0) {
          kill(p.pid, SIGTERM);
          waitpid(p.pid, nullptr, 0);
        }
      }
    } stop_server{server};
    std::vector<std::unique_ptr<kv::Client>> clients;
    for (int i = 0; i < clients_; i++) {
      kv::ClientOptions co;
      co.coordinator = Coord();
      co.retry_deadline = std::chrono::seconds(30);
      ASYMNVM_ASSIGN_OR_RETURN(auto c, kv::Client::Open(co));
      clients.push_back(std::move(c));
    }
    // A client id's requests in order on one thread.
    std::vector<std::vector<const workloads::TraceRecord*>> per(threads_);
    for (const auto& r : recs) per[r.client % threads_].push_back(&r);
    auto key_of = [](const workloads::TraceRecord& r) {
      return r.key.size() <= kv::kMaxKeySize ? r.key : r.key.substr(0, kv::kMaxKeySize);
    };
    // Warm-up (not measured): the keys exist, so GETs find data as in a running cache.
    for (const auto& r : recs) {
      if (r.op == workloads::TraceOp::kGet || r.op == workloads::TraceOp::kGets) {
        (void)clients[0]->Put(key_of(r),
                              std::string(std::min<uint32_t>(r.value_size, 1u << 20), 'w'));
      }
    }
    std::vector<LatencySampler> put_lat(threads_), get_lat(threads_), other_lat(threads_);
    std::atomic<uint64_t> errors{0};
    const auto budget = std::chrono::duration<double>(seconds);
    const auto start = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads_; t++) {
      ts.emplace_back([&, t] {
        kv::Client& c = *clients[t % clients_];
        const auto& mine = per[t];
        if (mine.empty()) return;
        for (size_t i = 0; Clock::now() - start < budget; i = (i + 1) % mine.size()) {
          const workloads::TraceRecord& r = *mine[i];
          const std::string key = key_of(r);
          const auto t0 = Clock::now();
          Status st;
          LatencySampler* lat = &other_lat[t];
          switch (r.op) {
            case workloads::TraceOp::kGet:
            case workloads::TraceOp::kGets:
              st = c.Get(key).status();
              lat = &get_lat[t];
              break;
            case workloads::TraceOp::kDelete:
              st = c.Delete(key).status();
              break;
            case workloads::TraceOp::kIncr:
            case workloads::TraceOp::kDecr:
              st = c.Incr(key, r.op == workloads::TraceOp::kIncr ? 1 : -1).status();
              if (st.code() == StatusCode::kInvalidArgument)
                st = Status::Ok();  // not a number: refused, as memcached does
              break;
            default:
              st = c.Put(key, std::string(std::min<uint32_t>(r.value_size, 1u << 20), 'v'));
              lat = &put_lat[t];
              break;
          }
          if (!st.ok()) {
            errors++;
            continue;
          }
          lat->Add(ElapsedNs(t0, Clock::now()));
          if (common_.ops && put_lat[t].count() + get_lat[t].count() + other_lat[t].count() >=
                                 common_.ops / threads_)
            break;
        }
      });
    }
    for (auto& t : ts) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    LatencySampler puts, gets, all;
    for (int t = 0; t < threads_; t++) {
      for (auto ns : put_lat[t].samples()) {
        puts.Add(ns);
        all.Add(ns);
      }
      for (auto ns : get_lat[t].samples()) {
        gets.Add(ns);
        all.Add(ns);
      }
      for (auto ns : other_lat[t].samples()) all.Add(ns);
    }
    clients.clear();
    Json rec = MakeRecord(policy, {{"trace", std::filesystem::path(file).filename().string()},
                                   {"threads", threads_},
                                   {"clients", clients_},
                                   {"seconds", seconds},
                                   {"requests_in_trace", recs.size()}});
    rec["trace"] = std::filesystem::path(file).filename().string();
    rec["ops_per_sec"] = static_cast<double>(all.count()) / elapsed;
    rec["p50_us"] = all.PercentileUs(50);
    rec["p99_us"] = all.PercentileUs(99);
    rec["put_p50_us"] = puts.PercentileUs(50);
    rec["put_p99_us"] = puts.PercentileUs(99);
    rec["get_p50_us"] = gets.PercentileUs(50);
    rec["get_p99_us"] = gets.PercentileUs(99);
    rec["puts"] = puts.count();
    rec["gets"] = gets.count();
    rec["errors"] = errors.load();
    *out = std::move(rec);
    return Status::Ok();
  }

  // Starts the three servers at once (each on its pool in dir_). On a failure the others are
  // killed and the first error returned.
  Status SpawnAll(std::vector<ServerProc>* servers) {
    std::vector<std::thread> ts;
    std::vector<Status> sts(3);
    for (int i = 0; i < 3; i++) {
      ts.emplace_back([&, i] {
        auto p = Spawn(i);
        if (p.ok()) {
          (*servers)[i] = *p;
        } else {
          sts[i] = p.status();
        }
      });
    }
    for (auto& t : ts) t.join();
    for (auto& st : sts) {
      if (st.ok()) continue;
      for (auto& p : *servers) {
        if (p.pid > 0) {
          kill(p.pid, SIGKILL);
          waitpid(p.pid, nullptr, 0);
          p.pid = -1;
        }
      }
      return st;
    }
    return Status::Ok();
  }

  // Restarts the three servers on their pools at once and waits until 200 sampled keys of the
  // `loaded` first ones all read back (or 60 s). *missing = sampled keys still absent then.
  Status ColdStart(std::vector<ServerProc>* servers, uint64_t loaded, double* ms,
                   uint64_t* missing) {
    const auto t0 = std::chrono::steady_clock::now();
    ASYMNVM_RETURN_IF_ERROR(SpawnAll(servers).WithContext("kv cold start"));
    kv::ClientOptions co;
    co.coordinator = Coord();
    co.retry_deadline = std::chrono::seconds(60);
    ASYMNVM_ASSIGN_OR_RETURN(auto client, kv::Client::Open(co));
    const uint64_t step = std::max<uint64_t>(1, loaded / 200);
    const auto deadline = t0 + std::chrono::seconds(60);
    *missing = 0;
    for (uint64_t k = 0; k < loaded; k += step) {
      for (;;) {
        auto g = client->Get(Key(k));
        if (g.ok() && g->found) break;
        if (std::chrono::steady_clock::now() >= deadline) {
          (*missing)++;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Status::Ok();
  }

  Status RunWorkload(const std::string& variant, const std::string& workload, double seconds,
                     bool failover, Json* out) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::vector<ServerProc> servers(3);
    ASYMNVM_RETURN_IF_ERROR(SpawnAll(&servers));
    auto stop_all = [&](int sig) {
      for (auto& p : servers) {
        if (p.pid > 0) {
          kill(p.pid, sig);
          waitpid(p.pid, nullptr, 0);
          p.pid = -1;
        }
      }
    };
    std::vector<std::unique_ptr<kv::Client>> clients;
    for (int i = 0; i < clients_; i++) {
      kv::ClientOptions co;
      co.coordinator = Coord();
      co.retry_deadline = std::chrono::seconds(30);
      auto c = kv::Client::Open(co);
      if (!c.ok()) {
        stop_all(SIGKILL);
        return c.status();
      }
      clients.push_back(std::move(c).value());
    }
    // Wait for every shard to have two synced backups.
    {
      auto coord = coord::Coordinator::Open(Coord());
      if (!coord.ok()) return coord.status();
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      for (;;) {
        auto n = (*coord)->Get("/asymnvm/kv/default/map");
        bool ok = false;
        if (n.ok()) {
          auto m = kv::ShardMap::Decode(n->data);
          ok = m.ok();
          for (auto& a : m.ok() ? m->assignment : std::vector<kv::ShardAssignment>{}) {
            int synced = 0;
            for (auto& b : a.backups) synced += b.synced;
            ok &= synced == 2;
          }
        }
        if (ok) break;
        if (Clock::now() > deadline) {
          stop_all(SIGKILL);
          return Status::TimedOut("kv: the cluster never reached rf 3 with synced backups");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    // Warm-up (not measured): every primary's worker connects its Rowan senders to its backups
    // on first use.
    for (int i = 0; i < 200; i++) {
      if (!clients[0]->Put("warm" + std::to_string(i), "w").ok()) break;
    }
    // Preload for A (not measured).
    if (workload == "a") {
      std::vector<std::thread> ts;
      std::atomic<bool> failed{false};
      for (int t = 0; t < threads_; t++) {
        ts.emplace_back([&, t] {
          Rng rng(common_.seed + 1000 + t);
          for (uint64_t k = t; k < keys_ && !failed; k += threads_) {
            if (!clients[t % clients_]->Put(Key(k), Value(rng)).ok()) failed = true;
          }
        });
      }
      for (auto& t : ts) t.join();
      if (failed) {
        stop_all(SIGKILL);
        return Status::Internal("kv: preload failed");
      }
    }
    // Measure.
    fabric::Counters before;
    for (auto& c : clients) before += c->counters();
    const auto budget = std::chrono::duration<double>(seconds);
    const size_t bins = static_cast<size_t>(seconds * 100) + 2;
    std::vector<LatencySampler> put_lat(threads_), get_lat(threads_);
    std::vector<std::vector<uint32_t>> bin_ops(threads_, std::vector<uint32_t>(bins, 0));
    std::vector<std::map<std::string, std::string>> acked(threads_), pending(threads_);
    std::atomic<uint64_t> errors{0};
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> next_load{0};
    const double cpu0 = ServersCpuSeconds(servers);
    const auto start = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads_; t++) {
      ts.emplace_back([&, t] {
        Rng rng(common_.seed + t);
        auto zipf = ScrambledZipfianGenerator::Create(0, keys_ - 1);
        kv::Client& c = *clients[t % clients_];
        uint64_t seq = 0;
        while (!stop) {
          const auto t0 = Clock::now();
          if (t0 - start > budget) break;
          bool put;
          std::string key;
          if (workload == "load") {
            const uint64_t k = next_load++;
            if (k >= keys_) break;
            put = true;
            key = Key(k);
          } else {
            put = rng.Below(2) == 0;
            key = Key((*zipf)->Next(rng));
          }
          // Failover runs: one PUT in ten goes to this thread's private keys (lost-ack check).
          std::string priv;
          if (failover && put && rng.Below(10) == 0) {
            priv = "p" + std::to_string(t) + "-" + std::to_string(rng.Below(50));
            key = priv;
          }
          Status st;
          std::string value = priv.empty() ? Value(rng) : std::to_string(++seq);
          if (put) {
            st = c.Put(key, value);
          } else {
            auto r = c.Get(key);
            st = r.status();
          }
          const auto t1 = Clock::now();
          if (!st.ok()) {
            errors++;
            if (!priv.empty()) pending[t][priv] = value;
            continue;
          }
          if (!priv.empty()) {
            acked[t][priv] = value;
            pending[t].erase(priv);
          }
          (put ? put_lat[t] : get_lat[t]).Add(ElapsedNs(t0, t1));
          const size_t b = ElapsedNs(start, t1) / 10'000'000;
          if (b < bins) bin_ops[t][b]++;
          if (common_.ops && put_lat[t].count() + get_lat[t].count() >= common_.ops / threads_)
            break;
        }
      });
    }
    double failover_ms = -1;
    double kill_at_s = 0;
    if (failover) {
      std::this_thread::sleep_for(budget / 3);
      kill_at_s = std::chrono::duration<double>(Clock::now() - start).count();
      // The uuid of server 0 = its node name; learn it from the map's server addresses.
      auto coord = coord::Coordinator::Open(Coord());
      if (coord.ok()) {
        std::string victim;
        int64_t version = 0;
        auto n = (*coord)->Get("/asymnvm/kv/default/map");
        if (n.ok()) {
          version = n->version;
          auto m = kv::ShardMap::Decode(n->data);
          if (m.ok()) {
            for (auto& [u, a] : m->servers) {
              if (a.oq.find("/kv0") != std::string::npos) victim = u;
            }
          }
        }
        const auto killed = Clock::now();
        kill(servers[0].pid, SIGKILL);
        waitpid(servers[0].pid, nullptr, 0);
        servers[0].pid = -1;
        const auto deadline = killed + std::chrono::seconds(30);
        while (Clock::now() < deadline) {
          auto ch = (*coord)->WaitForChange("/asymnvm/kv/default/map", version, deadline);
          if (!ch.ok() || !ch->has_value()) break;
          version = (*ch)->version;
          auto m = kv::ShardMap::Decode((*ch)->data);
          bool gone = m.ok();
          for (auto& a : m.ok() ? m->assignment : std::vector<kv::ShardAssignment>{}) {
            gone &= a.primary != victim;
          }
          if (gone) {
            failover_ms = std::chrono::duration<double, std::milli>(Clock::now() - killed).count();
            break;
          }
        }
      }
    }
    for (auto& t : ts) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu1 = ServersCpuSeconds(servers);
    LatencySampler puts, gets;
    std::vector<uint64_t> total_bins(bins, 0);
    for (int t = 0; t < threads_; t++) {
      for (auto ns : put_lat[t].samples()) puts.Add(ns);
      for (auto ns : get_lat[t].samples()) gets.Add(ns);
      for (size_t b = 0; b < bins; b++) total_bins[b] += bin_ops[t][b];
    }
    fabric::Counters after;
    for (auto& c : clients) after += c->counters();
    const fabric::Counters delta = after - before;
    // Lost acknowledged PUTs: a private key must read its last acknowledged value, or a later
    // one whose PUT failed (outcome unknown).
    uint64_t lost = 0, checked = 0;
    if (failover) {
      for (int t = 0; t < threads_; t++) {
        for (auto& [k, v] : acked[t]) {
          auto r = clients[0]->Get(k);
          checked++;
          const bool pending_match = pending[t].count(k) && r.ok() && r->value == pending[t][k];
          if (!r.ok() || !r->found || (r->value != v && !pending_match)) lost++;
        }
      }
    }
    clients.clear();
    stop_all(SIGTERM);
    double dlwa = 0, repl_writes = 0, repl_rts = 0, repl_bytes = 0;
    int n = 0;
    for (int i = failover ? 1 : 0; i < 3; i++) {
      ReadReplication(servers[i].err_path, &repl_writes, &repl_rts, &repl_bytes);
      double d = ReadDlwa(servers[i].err_path);
      if (d > 0) {
        dlwa += d;
        n++;
      }
    }
    // Cold start after Load: all three servers restarted on their pools at once; the time until
    // every sampled key reads back (index rebuilt by scanning the logs, the map adopted).
    double cold_ms = -1;
    uint64_t cold_missing = 0, cold_objects = 0;
    if (workload == "load" && !failover) {
      cold_objects = std::min<uint64_t>(next_load.load(), keys_);
      ASYMNVM_RETURN_IF_ERROR(ColdStart(&servers, cold_objects, &cold_ms, &cold_missing));
      stop_all(SIGTERM);
    }
    const uint64_t ops = puts.count() + gets.count();
    Json rec = MakeRecord(variant, {{"workload", failover ? "a-failover" : workload},
                                    {"server_workers", server_workers_},
                                    {"threads", threads_},
                                    {"clients", clients_},
                                    {"keys", keys_},
                                    {"servers", 3},
                                    {"rf", 3}});
    rec["ops_per_sec"] = elapsed > 0 ? static_cast<double>(ops) / elapsed : 0;
    rec["p50_us"] = puts.count() ? puts.PercentileUs(50) : gets.PercentileUs(50);
    rec["p99_us"] = puts.count() ? puts.PercentileUs(99) : gets.PercentileUs(99);
    rec["put_p50_us"] = puts.PercentileUs(50);
    rec["put_p99_us"] = puts.PercentileUs(99);
    rec["get_p50_us"] = gets.PercentileUs(50);
    rec["get_p99_us"] = gets.PercentileUs(99);
    rec["dlwa"] = n ? dlwa / n : 0;
    // The primaries' replication (whole server lifetimes: preload and warm-up included).
    if (repl_writes > 0) {
      rec["replication_round_trips_per_put"] = repl_rts / repl_writes;
      rec["replication_bytes_per_put"] = repl_bytes / repl_writes;
    } else {
      rec["replication_round_trips_per_put"] = nullptr;
      rec["replication_bytes_per_put"] = nullptr;
    }
    // Three servers' CPU (their soft NICs included) per client operation; not for the failover
    // run (a server is killed during it).
    if (!failover && ops > 0) {
      rec["server_cpu_us_per_op"] = (cpu1 - cpu0) * 1e6 / static_cast<double>(ops);
    } else {
      rec["server_cpu_us_per_op"] = nullptr;
    }
    // Client side only (doorbells and wire bytes of the clients' connections); the primary's
    // replication to its backups is not included. A failover replaces connections: not counted.
    if (!failover && ops > 0) {
      rec["round_trips_per_op"] = static_cast<double>(delta.round_trips) / static_cast<double>(ops);
      rec["bytes_per_op"] =
          static_cast<double>(delta.bytes_out + delta.bytes_in) / static_cast<double>(ops);
    } else {
      rec["round_trips_per_op"] = nullptr;
    }
    rec["errors"] = errors.load();
    rec["seconds"] = elapsed;
    if (cold_ms >= 0) {
      // Every server scans its whole pool: objects = loaded keys × 3 copies (primary + backups).
      rec["cold_start_ms"] = cold_ms;
      rec["cold_start_objects"] = cold_objects * 3;
      rec["cold_start_objects_per_sec_per_core"] =
          cold_ms > 0 ? static_cast<double>(cold_objects) * 3 / (cold_ms / 1000.0) / MachineCores()
                      : 0;
      rec["cold_start_missing"] = cold_missing;
    }
    if (failover) {
      rec["failover_ms"] = failover_ms;
      // Full service: first 10 ms bin after the kill from which 5 bins in a row reach half the
      // pre-kill mean.
      const size_t kb = static_cast<size_t>(kill_at_s * 100);
      double pre = 0;
      for (size_t b = 1; b < kb; b++) pre += static_cast<double>(total_bins[b]);
      pre = kb > 1 ? pre / static_cast<double>(kb - 1) : 0;
      double full = -1;
      for (size_t b = kb; b + 5 < bins; b++) {
        bool ok = true;
        for (size_t k = 0; k < 5; k++) ok &= total_bins[b + k] >= pre / 2;
        if (ok) {
          full = static_cast<double>(b - kb) * 10.0;
          break;
        }
      }
      rec["full_service_ms"] = full;
      rec["lost_acknowledged"] = lost;
      rec["acknowledged_checked"] = checked;
      rec["throughput_bins_10ms"] = total_bins;
      rec["kill_at_s"] = kill_at_s;
      if (!plot_.empty()) WritePlot(total_bins, kill_at_s);
    }
    *out = rec;
    return Status::Ok();
  }

  // The resharding run (see the file comment).
  Status RunReshard(const std::string& variant, Json* out) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::vector<ServerProc> servers(3);
    extra_args_ = {"--rf", "2", "--rebalance-threshold", "1.5", "--rebalance-period-ms", "200"};
    Status spawned = SpawnAll(&servers);
    extra_args_.clear();
    ASYMNVM_RETURN_IF_ERROR(spawned.WithContext("kv reshard"));
    auto stop_all = [&](int sig) {
      for (auto& p : servers) {
        if (p.pid > 0) {
          kill(p.pid, sig);
          waitpid(p.pid, nullptr, 0);
          p.pid = -1;
        }
      }
    };
    auto fail = [&](Status st) {
      stop_all(SIGKILL);
      return st.WithContext("kv reshard");
    };
    kv::ClientOptions co;
    co.coordinator = Coord();
    co.retry_deadline = std::chrono::seconds(30);
    auto opened = kv::Client::Open(co);
    if (!opened.ok()) return fail(opened.status());
    auto client = std::move(opened).value();
    auto coord = coord::Coordinator::Open(Coord());
    if (!coord.ok()) return fail(coord.status());
    const std::string map_path = "/asymnvm/kv/default/map";
    auto read_map = [&]() -> Result<std::pair<kv::ShardMap, int64_t>> {
      ASYMNVM_ASSIGN_OR_RETURN(auto n, (*coord)->Get(map_path));
      ASYMNVM_ASSIGN_OR_RETURN(auto m, kv::ShardMap::Decode(n.data));
      return std::make_pair(m, n.version);
    };
    // Every shard with its synced backup.
    for (const auto deadline = Clock::now() + std::chrono::seconds(30);;) {
      auto m = read_map();
      bool ok = m.ok();
      for (auto& a : m.ok() ? m->first.assignment : std::vector<kv::ShardAssignment>{}) {
        ok &= a.backups.size() == 1 && a.backups[0].synced;
      }
      if (ok) break;
      if (Clock::now() > deadline) return fail(Status::TimedOut("backups never synced"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Uniform preload (nothing should move): what a move migrates.
    {
      std::vector<std::thread> ts;
      std::atomic<bool> failed{false};
      for (int t = 0; t < threads_; t++) {
        ts.emplace_back([&, t] {
          Rng rng(common_.seed + 2000 + t);
          for (uint64_t k = t; k < keys_ && !failed; k += threads_) {
            if (!client->Put(Key(k), Value(rng)).ok()) failed = true;
          }
        });
      }
      for (auto& t : ts) t.join();
      if (failed) return fail(Status::Internal("preload failed"));
    }
    auto m0 = read_map();
    if (!m0.ok()) return fail(m0.status());
    const kv::ShardMap& map0 = m0->first;
    const std::string hot = map0.assignment[0].primary;
    std::vector<uint64_t> hot_keys;
    std::map<uint32_t, uint64_t> per_shard;
    for (uint64_t k = 0; k < keys_; k++) {
      const uint32_t s = kv::ShardOf(Key(k), map0.shards);
      per_shard[s]++;
      if (map0.assignment[s].primary == hot) hot_keys.push_back(k);
    }
    if (hot_keys.empty()) return fail(Status::Internal("no key on the hot server"));
    // Skew.
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> ops{0}, errors{0};
    const auto start = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads_; t++) {
      ts.emplace_back([&, t] {
        Rng rng(common_.seed + 3000 + t);
        while (!stop) {
          const uint64_t k =
              rng.Below(10) < 9 ? hot_keys[rng.Below(hot_keys.size())] : rng.Below(keys_);
          Status st =
              rng.Below(2) == 0 ? client->Put(Key(k), Value(rng)) : client->Get(Key(k)).status();
          if (st.ok()) {
            ops++;
          } else {
            errors++;
          }
        }
      });
    }
    double planned_ms = -1, synced_ms = -1, committed_ms = -1;
    int moved = -1;
    int64_t version = m0->second;
    const auto deadline = start + std::chrono::seconds(30);
    while (committed_ms < 0 && Clock::now() < deadline) {
      auto ch = (*coord)->WaitForChange(map_path, version, deadline);
      if (!ch.ok() || !ch->has_value()) break;
      version = (*ch)->version;
      auto m = kv::ShardMap::Decode((*ch)->data);
      if (!m.ok()) continue;
      const double now_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      for (uint32_t s = 0; s < m->assignment.size() && moved < 0; s++) {
        if (map0.assignment[s].primary == hot && !m->assignment[s].move_to.empty()) {
          moved = static_cast<int>(s);
          planned_ms = now_ms;
        }
      }
      if (moved < 0) continue;
      const auto& a = m->assignment[static_cast<uint32_t>(moved)];
      for (const auto& b : a.backups) {
        if (synced_ms < 0 && b.uuid == a.move_to && b.synced) synced_ms = now_ms;
      }
      if (a.primary != hot) {
        if (synced_ms < 0) synced_ms = now_ms;
        committed_ms = now_ms;
      }
    }
    stop = true;
    for (auto& t : ts) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    client.reset();
    stop_all(SIGTERM);
    Json rec = MakeRecord(variant, {{"workload", "a-reshard"},
                                    {"threads", threads_},
                                    {"keys", keys_},
                                    {"servers", 3},
                                    {"rf", 2},
                                    {"rebalance_threshold", std::string("1.5")},
                                    {"rebalance_period_ms", 200}});
    rec["ops_per_sec"] = elapsed > 0 ? static_cast<double>(ops.load()) / elapsed : 0;
    rec["errors"] = errors.load();
    rec["reshard_detect_ms"] = planned_ms;
    rec["reshard_commit_ms"] = committed_ms;
    rec["moved_shard"] = moved;
    if (moved >= 0 && synced_ms > planned_ms) {
      const double entries = static_cast<double>(per_shard[static_cast<uint32_t>(moved)]);
      const double ms = synced_ms - planned_ms;
      rec["migration_entries"] = entries;
      rec["migration_ms"] = ms;
      rec["migration_entries_per_sec"] = entries * 1000 / ms;
      rec["migration_mb_per_sec"] = entries * 91 / 1e3 / ms;  // average object 91 B
    } else {
      rec["migration_mb_per_sec"] = nullptr;
    }
    *out = rec;
    return Status::Ok();
  }

  // ---- Fault runs (doc/kv.md §Failure model) -------------------------------------------------

  Result<kv::ShardMap> ReadMap(coord::Coordinator& c) {
    ASYMNVM_ASSIGN_OR_RETURN(auto n, c.Get("/asymnvm/kv/default/map"));
    return kv::ShardMap::Decode(n.data);
  }

  // The map is settled: every shard has two synced backups, no move is pending and no server
  // leads more than ceil(shards / 3) (the manager has spread the primaries back).
  static bool Settled(const kv::ShardMap& m) {
    if (m.epoch == 0 || m.assignment.empty()) return false;
    std::map<std::string, uint32_t> leads;
    for (const auto& a : m.assignment) {
      int synced = 0;
      for (const auto& b : a.backups) synced += b.synced;
      if (synced != 2 || !a.move_to.empty()) return false;
      leads[a.primary]++;
    }
    const auto limit = (static_cast<uint32_t>(m.assignment.size()) + 2) / 3;
    for (const auto& [u, n] : leads) {
      if (n > limit) return false;
    }
    return true;
  }

  Result<kv::ShardMap> WaitSettled(coord::Coordinator& c, std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      auto m = ReadMap(c);
      if (m.ok() && Settled(*m)) return m;
      if (Clock::now() > deadline) {
        return Status::TimedOut(
            "kv faults: the map did not settle (two synced backups per shard, primaries spread) "
            "in " +
            std::to_string(timeout.count()) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  static std::string ServerOf(const kv::ShardMap& m, int i) {
    for (const auto& [u, a] : m.servers) {
      if (a.oq.find("/kv" + std::to_string(i)) != std::string::npos) return u;
    }
    return "";
  }

  static double Percentile(std::vector<double> v, double p) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * v.size()));
    return v[i];
  }

  // `fault`: failover-embedded | failover-zookeeper (SIGKILL of a primary), pause-primary
  // (SIGSTOP of a primary past its ZooKeeper session), pause-backup (SIGSTOP of a backup for
  // --pause-ms). Each round faults one server (rotating), measures, restores it, and waits until
  // the map has settled again.
  Status RunFault(const std::string& fault, Json* out) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const bool zk_needed = fault == "failover-zookeeper" || fault == "pause-primary";
    std::unique_ptr<coord::testing::ZkEnsemble> zk;
    if (zk_needed) {
      const std::string why = coord::testing::ZooKeeperUnavailableReason();
      if (!why.empty()) return Status::NotSupported("kv " + fault + ": ZooKeeper needs " + why);
      ASYMNVM_ASSIGN_OR_RETURN(
          zk, coord::testing::ZkEnsemble::Start(1, Clock::now() + std::chrono::seconds(60)));
      coord_uri_ = "zk:" + zk->connect_string();
      extra_args_ = {"--session-timeout-ms", std::to_string(session_timeout_ms_)};
    }
    struct Restore {
      KvSuite* s;
      ~Restore() {
        s->coord_uri_.clear();
        s->extra_args_.clear();
      }
    } restore{this};
    const std::string saved_variant = variant_;
    variant_ = "rowan";
    std::vector<ServerProc> servers(3);
    Status spawned = SpawnAll(&servers);
    variant_ = saved_variant;
    ASYMNVM_RETURN_IF_ERROR(spawned.WithContext("kv " + fault));
    auto stop_all = [&](int sig) {
      for (auto& p : servers) {
        if (p.pid > 0) {
          kill(p.pid, SIGCONT);
          kill(p.pid, sig);
          waitpid(p.pid, nullptr, 0);
          p.pid = -1;
        }
      }
    };
    struct Guard {
      std::function<void()> f;
      ~Guard() { f(); }
    } guard{[&] { stop_all(SIGKILL); }};
    coord::Options copt;
    copt.session_timeout = std::chrono::milliseconds(session_timeout_ms_);
    ASYMNVM_ASSIGN_OR_RETURN(auto coord, coord::Coordinator::Open(Coord(), copt));
    ASYMNVM_ASSIGN_OR_RETURN(kv::ShardMap map, WaitSettled(*coord, std::chrono::seconds(60)));
    const uint32_t shards = map.shards;
    std::vector<std::unique_ptr<kv::Client>> clients;
    for (int i = 0; i < clients_ + 1; i++) {  // the last one: the probes'
      kv::ClientOptions co;
      co.coordinator = Coord();
      co.timeout = std::chrono::milliseconds(fault_client_timeout_ms_);
      co.retry_deadline = std::chrono::seconds(60);
      ASYMNVM_ASSIGN_OR_RETURN(auto c, kv::Client::Open(co));
      clients.push_back(std::move(c));
    }
    // One probe key per shard.
    std::vector<std::string> probe_key(shards);
    for (uint32_t found = 0, i = 0; found < shards; i++) {
      const std::string k = "probe-" + std::to_string(i);
      const uint32_t s = kv::ShardOf(k, shards);
      if (probe_key[s].empty()) {
        probe_key[s] = k;
        found++;
      }
    }
    // Load: PUTs of increasing numbers to each thread's 50 private keys (the oracle: the last
    // acknowledged number of each key; a final GET must read it or a later one).
    struct Op {
      int64_t start_ns, end_ns;
      uint32_t shard;
    };
    std::vector<std::vector<Op>> ops(threads_);
    std::vector<std::map<std::string, uint64_t>> acked(threads_);
    std::atomic<uint64_t> errors{0};
    std::atomic<bool> stop{false};
    const auto t_start = Clock::now();
    auto since = [&](Clock::time_point t) { return static_cast<int64_t>(ElapsedNs(t_start, t)); };
    std::vector<std::thread> ts;
    for (int t = 0; t < threads_; t++) {
      ts.emplace_back([&, t] {
        Rng rng(common_.seed + 77 + t);
        kv::Client& c = *clients[t % clients_];
        uint64_t seq = 0;
        while (!stop) {
          const std::string key = "f" + std::to_string(t) + "-" + std::to_string(rng.Below(50));
          const uint64_t v = ++seq;
          const auto t0 = Clock::now();
          Status st = c.Put(key, std::to_string(v));
          const auto t1 = Clock::now();
          if (!st.ok()) {
            errors++;
            continue;
          }
          acked[t][key] = v;
          ops[t].push_back({since(t0), since(t1), kv::ShardOf(key, shards)});
        }
      });
    }
    const int rounds = fault_rounds_ > 0 ? fault_rounds_ : (common_.quick ? 20 : 40);
    std::vector<double> samples;  // ms
    // pause-backup: [start, end] ns of each pause and the shards the paused server led (it is
    // their primary too; with the embedded coordinator a stopped primary keeps its shards, so
    // writes to them wait for it: they are not what this run measures).
    struct Window {
      int64_t start, end;
      std::set<uint32_t> led;
    };
    std::vector<Window> windows;
    std::map<std::string, uint64_t> probe_acked;
    uint64_t probe_seq = 0;
    int done_rounds = 0;
    Status failed;
    for (int r = 0; r < rounds && failed.ok(); r++) {
      auto settled = WaitSettled(*coord, std::chrono::seconds(60));
      if (!settled.ok()) {
        failed = settled.status();
        break;
      }
      const int i = r % 3;
      const std::string victim = ServerOf(*settled, i);
      std::vector<uint32_t> victim_shards;
      for (uint32_t s = 0; s < shards; s++) {
        if (settled->assignment[s].primary == victim) victim_shards.push_back(s);
      }
      const pid_t pid = servers[i].pid;
      const auto t0 = Clock::now();
      if (fault == "pause-backup") {
        kill(pid, SIGSTOP);
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms_));
        kill(pid, SIGCONT);
        windows.push_back({since(t0), since(Clock::now()),
                           std::set<uint32_t>(victim_shards.begin(), victim_shards.end())});
        done_rounds++;
        continue;
      }
      kill(pid, fault == "pause-primary" ? SIGSTOP : SIGKILL);
      // Probes: one thread per victim shard PUTs its key until a PUT is acknowledged.
      std::vector<std::thread> probes;
      std::vector<double> took(victim_shards.size(), -1);
      std::vector<uint64_t> probe_value(victim_shards.size());
      for (size_t k = 0; k < victim_shards.size(); k++) probe_value[k] = ++probe_seq;
      for (size_t k = 0; k < victim_shards.size(); k++) {
        probes.emplace_back([&, k] {
          const std::string& key = probe_key[victim_shards[k]];
          while (Clock::now() - t0 < std::chrono::seconds(60)) {
            if (clients.back()->Put(key, std::to_string(probe_value[k])).ok()) {
              took[k] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
              return;
            }
          }
        });
      }
      for (auto& p : probes) p.join();
      for (size_t k = 0; k < took.size(); k++) {
        if (took[k] < 0) {
          failed = Status::TimedOut("kv " + fault + ": shard " + std::to_string(victim_shards[k]) +
                                    " never took a write");
        } else {
          samples.push_back(took[k]);
          probe_acked[probe_key[victim_shards[k]]] = probe_value[k];
        }
      }
      if (fault == "pause-primary") {
        // Woken after its session expired, it exits (status 5, doc/kv.md §Fencing).
        kill(pid, SIGCONT);
        const auto dl = Clock::now() + std::chrono::seconds(15);
        int st = 0;
        while (waitpid(pid, &st, WNOHANG) == 0) {
          if (Clock::now() > dl) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      } else {
        waitpid(pid, nullptr, 0);
      }
      servers[i].pid = -1;
      variant_ = "rowan";
      auto p = Spawn(i);
      variant_ = saved_variant;
      if (!p.ok()) {
        failed = p.status();
        break;
      }
      servers[i] = *p;
      done_rounds++;
    }
    stop = true;
    for (auto& t : ts) t.join();
    // The oracle.
    uint64_t lost = 0, checked = 0;
    if (failed.ok()) {
      auto check = [&](const std::string& key, uint64_t want) {
        checked++;
        auto g = clients[0]->Get(key);
        uint64_t got = 0;
        if (g.ok() && g->found) got = std::strtoull(g->value.c_str(), nullptr, 10);
        if (!g.ok() || !g->found || got < want) lost++;
      };
      for (int t = 0; t < threads_; t++) {
        for (const auto& [k, v] : acked[t]) check(k, v);
      }
      for (const auto& [k, v] : probe_acked) check(k, v);
    }
    clients.clear();
    ASYMNVM_RETURN_IF_ERROR(failed.WithContext("kv " + fault));
    uint64_t writes = 0;
    std::vector<double> during;  // pause-backup: latencies of writes overlapping a pause (ms)
    for (const auto& v : ops) {
      writes += v.size();
      for (const auto& o : v) {
        for (const auto& w : windows) {
          if (o.end_ns >= w.start && o.start_ns <= w.end && !w.led.count(o.shard)) {
            during.push_back(static_cast<double>(o.end_ns - o.start_ns) / 1e6);
            break;
          }
        }
      }
    }
    if (fault == "pause-backup") samples = during;
    Json rec = MakeRecord(fault, {{"fault", fault},
                                  {"threads", threads_},
                                  {"servers", 3},
                                  {"rf", 3},
                                  {"client_timeout_ms", fault_client_timeout_ms_}});
    rec[fault.rfind("pause", 0) == 0 ? "pauses" : "kills"] = done_rounds;
    rec["failover_p50_ms"] = Percentile(samples, 50);
    rec["failover_p99_ms"] = Percentile(samples, 99);
    rec["failover_max_ms"] =
        samples.empty() ? -1 : *std::max_element(samples.begin(), samples.end());
    rec["failover_samples"] = samples.size();
    if (fault == "pause-backup") {
      rec["pause_ms"] = pause_ms_;
      rec["write_p99_during_pause_ms"] = Percentile(during, 99);
      rec["writes_during_pauses"] = during.size();
    }
    rec["lost_acknowledged"] = lost;
    rec["acknowledged_checked"] = checked;
    rec["writes"] = writes;
    rec["errors"] = errors.load();
    if (zk_needed) {
      rec["session_timeout_ms"] = session_timeout_ms_;
    } else {
      rec["session_timeout_ms"] = nullptr;
    }
    *out = rec;
    return Status::Ok();
  }

  void WritePlot(const std::vector<uint64_t>& bins, double kill_at_s) {
    const std::string dat = plot_ + ".dat";
    {
      std::ofstream o(dat);
      for (size_t b = 0; b < bins.size(); b++) o << b * 10 << " " << bins[b] * 100 << "\n";
    }
    const std::string gp = plot_ + ".gp";
    {
      std::ofstream o(gp);
      o << "set terminal png size 900,400\nset output '" << plot_ << "'\n"
        << "set xlabel 'time (ms)'\nset ylabel 'ops/s (10 ms bins)'\n"
        << "set title 'Rowan-KV YCSB A across a failover (server SIGKILLed at "
        << static_cast<int>(kill_at_s * 1000) << " ms)'\n"
        << "set arrow from " << kill_at_s * 1000 << ", graph 0 to " << kill_at_s * 1000
        << ", graph 1 nohead lc rgb 'red'\n"
        << "plot '" << dat << "' using 1:2 with lines title 'throughput'\n";
    }
    const int rc = std::system(("gnuplot " + gp + " 2>/dev/null").c_str());
    (void)rc;
  }

  CommonOptions common_;
  std::vector<std::string> variants_{"rowan", "rpc", "rwrite", "batch", "share"};
  std::string variant_ = "rowan";  // the one running (Spawn passes it as --replication)
  std::vector<std::string> workloads_{"load", "a"};
  int threads_ = 4;
  int server_workers_ = 2;
  int clients_ = 2;
  uint64_t keys_ = 20000;
  bool no_failover_ = false;
  bool no_reshard_ = false;
  std::vector<std::string> extra_args_;  // appended to the servers' command lines (Spawn)
  std::string coord_uri_;                // the servers' and clients' coordinator ("": embedded)
  std::vector<std::string> faults_{"failover-embedded", "failover-zookeeper", "pause-primary",
                                   "pause-backup"};
  int fault_rounds_ = 0;  // 0: 20 with --quick, else 40
  uint32_t session_timeout_ms_ = 2000;
  uint32_t pause_ms_ = 1500;
  uint32_t fault_client_timeout_ms_ = 300;
  std::vector<std::string> traces_;
  std::vector<std::string> trace_policies_ = {"oq", "rawrpc", "deferred"};
  std::string plot_, dir_, binary_;
};

}  // namespace

ASYMNVM_REGISTER_SUITE(kv_suite_registered, "kv",
                       "Rowan-KV: YCSB Load/A on three replicated asymnvm-kv servers, failover",
                       KvSuite);

}  // namespace asymnvm::bench
