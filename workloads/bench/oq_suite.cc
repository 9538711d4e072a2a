// Suite "oq": the Ordered Queue's nilext fast path against the software-response paths
// (JUNE BERRY paper §6; doc/oq.md).
//
// For every policy (oq, rawrpc, deferred) × set ratio × client-thread count: a server (its own
// software NIC) runs the demo key-value map behind `workers` OQ workers; one Client per run (its
// own software NIC, shared by all client threads through the OQ's delegation) drives closed-loop
// threads, each with one request in flight, choosing keys uniformly and the operation by the set
// ratio: set = nilext Submit, get = non-nilext Call. Latency is measured per operation kind; the
// set latency is the OQ's headline (a set commits on the NIC ack under `oq`, on the software
// response under the others). `--exec-ns` adds busy work to every execution (a stand-in for a
// heavier store such as PMemKV) — 0 by default.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstring>
#include <iomanip>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "fabric/oq/kv_store.h"
#include "fabric/oq/oq.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"

namespace asymnvm::bench {
namespace {

void BusyWork(int64_t ns) {
  if (ns <= 0) return;
  const auto until = Clock::now() + std::chrono::nanoseconds(ns);
  while (Clock::now() < until) {
  }
}

class OqSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--policies", policies_, "Execution policies: oq,rawrpc,deferred")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--set-percent", set_percent_, "Share of sets (nilext), in percent")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--clients", clients_, "Client threads (closed loop, one request each)")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--workers", workers_, "Server OQ workers")->capture_default_str();
    cmd->add_option("--keys", keys_, "Distinct keys (uniform)")->capture_default_str();
    cmd->add_option("--exec-ns", exec_ns_, "Busy work per executed request (ns)")
        ->capture_default_str();
    cmd->add_option("--transport", transport_, "soft transport: tcp|unix|inproc")
        ->capture_default_str();
    cmd->add_option("--pm-dir", pm_dir_,
                    "Durable mode: receive buffers in a PM pool file in this directory "
                    "(Submit = SEND + FLUSH)");
  }

  Status Validate(const CommonOptions& common) override {
    for (const auto& p : policies_) ASYMNVM_RETURN_IF_ERROR(oq::ParsePolicy(p).status());
    for (int s : set_percent_) {
      if (s < 0 || s > 100) return Status::InvalidArgument("--set-percent must be in 0..100");
    }
    for (int c : clients_) {
      if (c < 1 || c > 256) return Status::InvalidArgument("--clients must be in 1..256");
    }
    if (workers_ < 1 || workers_ > oq::kMaxWorkers) {
      return Status::InvalidArgument("--workers must be in 1.." + std::to_string(oq::kMaxWorkers));
    }
    if (keys_ < 1) return Status::InvalidArgument("--keys must be >= 1");
    if (exec_ns_ < 0 || exec_ns_ > 1000000) {
      return Status::InvalidArgument("--exec-ns must be in 0..1000000");
    }
    if (transport_ != "tcp" && transport_ != "unix" && transport_ != "inproc") {
      return Status::InvalidArgument("--transport must be tcp, unix or inproc");
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    duration_ = std::chrono::duration<double>(common.duration_s > 0 ? common.duration_s
                                              : common.quick        ? 0.4
                                                                    : 1.5);
    if (common.quick && clients_ == std::vector<int>{1, 4, 16}) clients_ = {1, 8};
    seed_ = common.seed;
    max_ops_ = common.ops;
    Json& m = report->machine();
    m["cores"] = MachineCores();
    m["provider"] = "soft";
    m["transport"] = transport_;
    m["pm_mode"] = pm_dir_.empty() ? "dram" : "pool file (durable OQ)";
    m["server"] = "same process, own software NIC";
    m["spin_us"] = fabric::DefaultSpin().count();
    report->AddHeader(
        "asymnvm-bench oq: " + std::to_string(MachineCores()) +
        " cores shared by server NIC, server workers, client NIC and client threads.");
    report->AddHeader("set = nilext Submit, get = Call; " + std::to_string(workers_) +
                      " workers, " + std::to_string(keys_) + " keys uniform, " +
                      "8 B values (the demo KV store of fabric/oq/kv_store.h), exec " +
                      std::to_string(exec_ns_) + " ns; " +
                      (pm_dir_.empty() ? "DRAM buffers" : "durable (PM buffers)") + ".");
    std::map<std::tuple<std::string, int, int>, Json> results;
    for (int sp : set_percent_) {
      for (int c : clients_) {
        for (const auto& p : policies_) {
          Json rec;
          ASYMNVM_RETURN_IF_ERROR(RunOne(p, sp, c, &rec));
          results[{p, sp, c}] = rec;
          report->Add(rec);
        }
      }
    }
    // Same-run ratios: set latency of oq relative to rawrpc (the paper's −57% / −41%).
    Json summary = Json::array();
    report->AddNote("");
    report->AddNote("set latency, oq vs rawrpc (paper: -57% median write-only, -41% at 50% puts):");
    for (int sp : set_percent_) {
      if (sp == 0) continue;
      for (int c : clients_) {
        auto a = results.find({"oq", sp, c});
        auto b = results.find({"rawrpc", sp, c});
        if (a == results.end() || b == results.end()) continue;
        const double p50a = a->second["set_p50_us"], p50b = b->second["set_p50_us"];
        const double p99a = a->second["set_p99_us"], p99b = b->second["set_p99_us"];
        const double tpa = a->second["ops_per_sec"], tpb = b->second["ops_per_sec"];
        Json s{{"set_percent", sp},
               {"clients", c},
               {"set_p50_change", p50b > 0 ? p50a / p50b - 1 : 0},
               {"set_p99_change", p99b > 0 ? p99a / p99b - 1 : 0},
               {"throughput_ratio", tpb > 0 ? tpa / tpb : 0}};
        std::ostringstream os;
        os << std::fixed << std::setprecision(1) << "  " << sp << "% sets, " << c
           << " clients: set p50 " << 100.0 * (p50b > 0 ? p50a / p50b - 1 : 0) << "%, p99 "
           << 100.0 * (p99b > 0 ? p99a / p99b - 1 : 0) << "%, throughput x" << std::setprecision(2)
           << (tpb > 0 ? tpa / tpb : 0);
        report->AddNote(os.str());
        summary.push_back(s);
      }
    }
    report->extra()["oq_vs_rawrpc"] = summary;
    report->set_columns({{"set p50", "set_p50_us", 1},
                         {"set p99", "set_p99_us", 1},
                         {"get p50", "get_p50_us", 1},
                         {"get p99", "get_p99_us", 1}});
    return Status::Ok();
  }

 private:
  std::string Address(const std::string& tag) const {
    if (transport_ == "tcp") return "tcp://127.0.0.1:0";
    if (transport_ == "unix") {
      return "unix:///tmp/asymnvm-bench-oq-" + std::to_string(getpid()) + "-" + tag;
    }
    return "inproc://bench-oq-" + tag;
  }

  Status RunOne(const std::string& policy_name, int set_percent, int clients, Json* out) {
    ASYMNVM_ASSIGN_OR_RETURN(oq::Policy policy, oq::ParsePolicy(policy_name));
    fabric::FabricOptions fo;
    ASYMNVM_ASSIGN_OR_RETURN(auto server_fabric, fabric::Fabric::Open(fo));
    ASYMNVM_ASSIGN_OR_RETURN(auto server_pd, server_fabric->AllocPd());
    std::unique_ptr<oq::KvStore> store = oq::KvStore::OpenDram();
    oq::Handler kv = store->handler();
    oq::ServerOptions so;
    so.fabric = server_fabric.get();
    so.pd = server_pd.get();
    so.listen_address = Address(policy_name + std::to_string(set_percent) + "-" +
                                std::to_string(clients) + "-" + std::to_string(run_++));
    so.workers = workers_;
    so.policy = policy;
    std::unique_ptr<pm::Pool> pool;
    std::string pool_path;
    if (!pm_dir_.empty()) {
      pool_path = pm_dir_ + "/bench-oq-" + std::to_string(getpid()) + ".pool";
      std::remove(pool_path.c_str());
      const size_t area = oq::DurableAreaSize(so.workers, so.buffers_per_worker, so.buffer_size);
      pm::PoolOptions po;
      po.mode = pm::PersistMode::kFlushOnly;
      ASYMNVM_ASSIGN_OR_RETURN(pool, pm::Pool::Create(pool_path, area + (1u << 20), po));
      so.durable = true;
      so.pm_area = pool->user_base();
      so.pm_area_size = pool->user_size();
      so.persister = pool->persister();
    }
    ASYMNVM_ASSIGN_OR_RETURN(auto server,
                             oq::Server::Start(so, [this, &kv](const oq::RequestContext& ctx,
                                                               std::span<const uint8_t> payload,
                                                               std::vector<uint8_t>* response) {
                               BusyWork(exec_ns_);
                               return kv(ctx, payload, response);
                             }));
    ASYMNVM_ASSIGN_OR_RETURN(auto client_fabric, fabric::Fabric::Open(fo));
    ASYMNVM_ASSIGN_OR_RETURN(auto client_pd, client_fabric->AllocPd());
    oq::ClientOptions co;
    co.fabric = client_fabric.get();
    co.pd = client_pd.get();
    co.server_address = server->address();
    co.window = static_cast<uint32_t>(std::max(clients, 8));
    ASYMNVM_ASSIGN_OR_RETURN(auto client, oq::Client::Connect(co));

    // Pre-load every key so gets return a value.
    for (uint64_t k = 0; k < keys_; k++) {
      ASYMNVM_RETURN_IF_ERROR(
          client->Submit(WorkerOf(k), oq::kKvSet, oq::KvStore::SetPayload(k, k + 1)));
    }

    struct PerThread {
      LatencySampler sets, gets;
      uint64_t ops = 0;
      Status status;
    };
    std::vector<PerThread> per(clients);
    const fabric::Counters before = client->counters();
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> total_ops{0};
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(duration_);
    std::vector<std::thread> threads;
    for (int t = 0; t < clients; t++) {
      threads.emplace_back([&, t] {
        PerThread& me = per[t];
        std::mt19937_64 rng(seed_ * 1000003 + static_cast<uint64_t>(t));
        std::vector<uint8_t> response;
        uint64_t value = static_cast<uint64_t>(t) << 40;
        while (!stop.load(std::memory_order_relaxed)) {
          const uint64_t key = rng() % keys_;
          const bool set = static_cast<int>(rng() % 100) < set_percent;
          const std::vector<uint8_t> p =
              set ? oq::KvStore::SetPayload(key, ++value) : oq::KvStore::KeyPayload(key);
          const auto t0 = Clock::now();
          Status s = set ? client->Submit(WorkerOf(key), oq::kKvSet, p)
                         : client->Call(WorkerOf(key), oq::kKvGet, p, &response);
          const auto t1 = Clock::now();
          if (!s.ok()) {
            me.status = s;
            stop = true;
            break;
          }
          (set ? me.sets : me.gets).Add(ElapsedNs(t0, t1));
          me.ops++;
          const uint64_t n = total_ops.fetch_add(1, std::memory_order_relaxed) + 1;
          if ((max_ops_ && n >= max_ops_) || t1 >= deadline) stop = true;
        }
      });
    }
    for (auto& th : threads) th.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const fabric::Counters delta = client->counters() - before;
    for (auto& p : per) {
      if (!p.status.ok()) {
        return Status(p.status.code(), "oq bench (" + policy_name + "): " + p.status.message());
      }
    }
    LatencySampler sets, gets, all;
    uint64_t ops = 0;
    for (auto& p : per) ops += p.ops;
    MergeInto(per, &sets, &gets, &all);
    const oq::ServerStats ss = server->stats();
    client.reset();
    server->Stop();
    if (pool) {
      pool.reset();
      std::remove(pool_path.c_str());
    }
    Json cfg{{"set_percent", set_percent},
             {"clients", clients},
             {"workers", workers_},
             {"exec_ns", exec_ns_},
             {"durable", !pm_dir_.empty()}};
    Json rec = MakeRecord(policy_name, cfg);
    rec["ops_per_sec"] = seconds > 0 ? static_cast<double>(ops) / seconds : 0;
    rec["p50_us"] = all.PercentileUs(50);
    rec["p99_us"] = all.PercentileUs(99);
    rec["round_trips_per_op"] = ops ? static_cast<double>(delta.round_trips) / ops : 0;
    rec["bytes_per_op"] =
        ops ? static_cast<double>(delta.bytes_out + delta.bytes_in) / static_cast<double>(ops) : 0;
    rec["ops"] = ops;
    rec["set_p50_us"] = sets.PercentileUs(50);
    rec["set_p99_us"] = sets.PercentileUs(99);
    rec["get_p50_us"] = gets.PercentileUs(50);
    rec["get_p99_us"] = gets.PercentileUs(99);
    rec["sets"] = sets.count();
    rec["gets"] = gets.count();
    rec["server_executed"] = ss.executed;
    rec["server_rnr"] = ss.rnr_seen;
    *out = std::move(rec);
    return Status::Ok();
  }

  template <typename PerThread>
  static void MergeInto(std::vector<PerThread>& per, LatencySampler* sets, LatencySampler* gets,
                        LatencySampler* all) {
    for (auto& p : per) {
      for (uint64_t ns : p.sets.samples()) {
        sets->Add(ns);
        all->Add(ns);
      }
      for (uint64_t ns : p.gets.samples()) {
        gets->Add(ns);
        all->Add(ns);
      }
    }
  }

  uint32_t WorkerOf(uint64_t key) const { return oq::KvStore::WorkerFor(key, workers_); }

  std::vector<std::string> policies_{"oq", "rawrpc", "deferred"};
  std::vector<int> set_percent_{100, 50};
  std::vector<int> clients_{1, 4, 16};
  uint32_t workers_ = 2;
  uint64_t keys_ = 1000;
  int64_t exec_ns_ = 0;
  std::string transport_ = "tcp";
  std::string pm_dir_;
  std::chrono::duration<double> duration_{1.5};
  uint64_t seed_ = 42;
  uint64_t max_ops_ = 0;
  int run_ = 0;
};

ASYMNVM_REGISTER_SUITE(kOqSuite, "oq",
                       "Ordered Queue: nilext set latency/throughput, oq vs rawrpc vs deferred",
                       OqSuite);

}  // namespace
}  // namespace asymnvm::bench
