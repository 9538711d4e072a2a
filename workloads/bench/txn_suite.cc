// Suites "tatp" and "smallbank": the transaction benchmarks over multi-structure transactions
// (asymnvm/structures/transaction.h; doc/workloads.md "TATP", "SmallBank").
//
//   asymnvm-bench tatp --subscribers N --frontends F[,F...] --seconds S [--levels L,...] [--hold H]
//   asymnvm-bench smallbank --accounts N --frontends F[,F...] --seconds S ...
//
// Per level × front-end count: a fresh asymnvm-backend daemon (pool in --dir), the loader (one
// session, progress on stderr), F threads each with its own Session (front-end ids 1..F) and
// Database running the standard mix for S seconds, then the workload's checks (invariants_ok).
// Level "symmetric": local PM (an in-process back-end) + op logs shipped asynchronously to the
// daemon (doc/frontend.md §Symmetric baseline), at rc.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/transaction.h"
#include "backend/backend.h"
#include "tools/ctl.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"
#include "workloads/driver/backend_process.h"
#include "workloads/txn/ledger.h"
#include "workloads/txn/workload.h"

namespace asymnvm::bench {
namespace {

using frontend::Level;

Result<std::string> LogAddressOf(const std::string& oq_address) {
  ASYMNVM_ASSIGN_OR_RETURN(std::string text,
                           tools::FetchStatus(oq_address, std::chrono::seconds(5)));
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("log_address") || !j["log_address"].is_string()) {
    return Status::ProtocolError(oq_address + ": status reply names no log_address");
  }
  return j["log_address"].get<std::string>();
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) {
    if (!x.empty()) out.push_back(x);
  }
  return out;
}

class TxnSuite : public Suite {
 public:
  explicit TxnSuite(bool tatp) : tatp_(tatp) {}

  void AddOptions(CLI::App* cmd) override {
    if (tatp_) {
      cmd->add_option("--subscribers", scale_, "TATP subscribers P (default 100000; --quick 1000)");
    } else {
      cmd->add_option("--accounts", scale_, "SmallBank accounts N (default 100000; --quick 1000)");
    }
    cmd->add_option("--frontends", frontends_,
                    "front-end threads, a comma list (default 1; --quick 1,2,4)");
    cmd->add_option("--seconds", seconds_, "seconds per run (default 10; --quick 1)");
    cmd->add_option("--levels", levels_, "naive,r,rc,rcb,symmetric (default all)");
    cmd->add_option("--hold", hold_, "transactions a front-end keeps its locks for (default 64)");
    cmd->add_option("--lock-timeout-ms", lock_ms_,
                    "per-lock deadline before a transaction aborts (default 200)");
    cmd->add_option("--dir", dir_, "directory for pool files (default /tmp)");
    cmd->add_option("--fabric", fabric_,
                    "fabric provider of the back-end and the front-ends: soft (default) | shm "
                    "(same host: one-sided operations on the shared pool, doc/fabric.md) | auto")
        ->check(CLI::IsMember({"soft", "shm", "verbs", "auto"}));
    cmd->add_option(
           "--pm-mode", pm_mode_,
           "persistence of the back-end pools: flush (PM's cost model, the paper's setting; "
           "default) | msync (disk-durable redo-log mode) | auto")
        ->check(CLI::IsMember({"flush", "msync", "auto"}));
  }

  Status Run(const CommonOptions& common, Report* report) override {
    if (scale_ == 0) scale_ = common.quick ? (tatp_ ? 1000 : 1000) : 100000;
    if (frontends_.empty()) frontends_ = common.quick ? "1,2,4" : "1";
    if (seconds_ <= 0)
      seconds_ = common.duration_s > 0 ? common.duration_s : common.quick ? 1.0 : 10;
    ASYMNVM_ASSIGN_OR_RETURN(bin_, driver::FindBackendBinary(""));
    report->machine()["cores"] = MachineCores();
    report->AddHeader(std::string(tatp_ ? "TATP subscribers " : "SmallBank accounts ") +
                      std::to_string(scale_) + ", " + std::to_string(seconds_) +
                      " s per run, locks held for " + std::to_string(hold_) + " txns, pm-mode " +
                      pm_mode_);
    report->extra()["pm_mode"] = pm_mode_;
    report->machine()["provider"] = fabric_;
    std::map<std::string, double> tput;
    bool all_ok = true;
    for (const std::string& lv : Split(levels_)) {
      for (const std::string& f : Split(frontends_)) {
        const int fe = std::stoi(f);
        if (fe < 1 || fe > 64) return Status::InvalidArgument("--frontends must be 1..64");
        Json rec;
        ASYMNVM_RETURN_IF_ERROR(RunOne(common, lv, fe, &rec));
        if (!rec["invariants_ok"].get<bool>()) all_ok = false;
        if (fe == 1) tput[lv] = rec["ops_per_sec"].get<double>();
        report->Add(std::move(rec));
      }
    }
    Json ratios = Json::object();
    if (tput.count("naive") && tput["naive"] > 0) {
      for (const char* l : {"r", "rc", "rcb"}) {
        if (tput.count(l)) ratios[std::string(l) + "_over_naive"] = tput[l] / tput["naive"];
      }
    }
    if (tput.count("symmetric") && tput["symmetric"] > 0 && tput.count("rcb")) {
      ratios["rcb_over_symmetric"] = tput["rcb"] / tput["symmetric"];
    }
    report->extra()["ratios_1_frontend"] = ratios;
    report->set_columns(
        {{"commit", "committed", 0}, {"abort%", "abort_rate_pct", 2}, {"ok", "invariants_ok", 0}});
    if (!all_ok)
      return Status::Corruption("an invariant check failed (see invariants_error in the records)");
    return Status::Ok();
  }

 private:
  Status RunOne(const CommonOptions& common, const std::string& level_name, int nfe, Json* out) {
    const bool symmetric = level_name == "symmetric";
    Level level = Level::kRc;
    if (!symmetric) {
      ASYMNVM_ASSIGN_OR_RETURN(level, frontend::ParseLevel(level_name));
    }
    auto wl = tatp_ ? txnbench::MakeTatp(scale_) : txnbench::MakeSmallBank(scale_);
    const std::string pool =
        dir_ + "/asymnvm-bench-" + wl->name() + "-" + std::to_string(getpid()) + ".pool";
    std::filesystem::remove(pool);
    ASYMNVM_ASSIGN_OR_RETURN(
        auto be, driver::BackendProcess::Start(
                     bin_, pool, "1G", {"--pm-mode", pm_mode_, "--fabric", fabric_}, "warn"));
    struct Cleanup {
      std::string pool;
      std::unique_ptr<backend::Backend> local;
      ~Cleanup() {
        if (local) local->Stop();
        local.reset();
        std::filesystem::remove(pool);
        std::filesystem::remove(pool + ".backend.log");
        std::filesystem::remove(pool + ".local");
      }
    } cleanup{pool, nullptr};
    std::string data_address = be->address(), log_address;
    if (symmetric) {
      ASYMNVM_ASSIGN_OR_RETURN(log_address, LogAddressOf(be->address()));
      backend::BackendOptions bo;
      bo.pool_path = pool + ".local";
      bo.pool_size = 1ull << 30;
      bo.fabric.provider = fabric_;
      ASYMNVM_ASSIGN_OR_RETURN(bo.persist_mode, pm::ParsePersistMode(pm_mode_));
      const std::string tag =
          "asymnvm-bench-txn-" + std::to_string(getpid()) + "-" + level_name + std::to_string(nfe);
      bo.listen_address = "inproc://" + tag;
      bo.log_listen_address = "inproc://" + tag + "-log";
      ASYMNVM_ASSIGN_OR_RETURN(cleanup.local, backend::Backend::Start(bo));
      data_address = cleanup.local->address();
    }
    auto options = [&](uint64_t fe) {
      frontend::SessionOptions so;
      so.fabric.provider = fabric_;
      so.backends = {data_address};
      so.frontend_id = fe;
      so.level = level;
      so.op_log_address = log_address;
      so.async_op_logs = symmetric;
      so.cache_bytes = 256ull << 20;
      so.batch_ops = 64;
      so.timeout = std::chrono::milliseconds(30000);
      so.lock_timeout = std::chrono::milliseconds(lock_ms_);
      return so;
    };
    structures::DatabaseOptions dbo = wl->Schema();
    dbo.hold_txns = hold_;
    const std::string label = wl->name() + "/" + level_name + "/" + std::to_string(nfe) + "fe";
    {  // Load (front-end id 1), at rcb whatever the measured level (the load is not measured).
      auto so = options(1);
      if (!symmetric) so.level = Level::kRcb;
      ASYMNVM_ASSIGN_OR_RETURN(auto s, frontend::Session::Open(so));
      ASYMNVM_ASSIGN_OR_RETURN(auto db, structures::Database::Open(*s, dbo));
      const bool tty = isatty(2);
      ASYMNVM_RETURN_IF_ERROR(wl->Load(*db, common.seed, [&](uint64_t d, uint64_t t) {
        if (tty) std::cerr << "\r" << label << ": loading " << d << "/" << t << std::flush;
      }));
      if (tty) std::cerr << "\r" << label << ": loaded" << std::string(20, ' ') << "\n";
    }
    const auto types = wl->TypeNames();
    struct Fe {
      std::unique_ptr<frontend::Session> s;
      std::unique_ptr<structures::Database> db;
      std::unique_ptr<txnbench::Worker> w;
      std::unique_ptr<txnbench::Ledger> ledger;
      std::vector<std::array<uint64_t, 3>> by_type;
      LatencySampler lat;
      std::vector<LatencySampler> lat_type;
      Status st;
      frontend::Counters c0;
    };
    std::vector<Fe> fes(static_cast<size_t>(nfe));
    for (int i = 0; i < nfe; i++) {
      ASYMNVM_ASSIGN_OR_RETURN(fes[i].s,
                               frontend::Session::Open(options(static_cast<uint64_t>(i + 1))));
      ASYMNVM_ASSIGN_OR_RETURN(fes[i].db, structures::Database::Open(*fes[i].s, dbo));
      fes[i].w = wl->MakeWorker(i);
      fes[i].ledger = std::make_unique<txnbench::Ledger>(wl->NumQuantities());
      fes[i].w->set_ledger(fes[i].ledger.get());
      fes[i].by_type.assign(types.size(), {0, 0, 0});
      fes[i].lat_type.resize(types.size());
      fes[i].c0 = fes[i].s->counters();
    }
    auto cpu_now = [&]() {
      auto c = be->CpuSeconds();
      return c.ok() ? *c : 0.0;
    };
    const double cpu0 = cpu_now();
    std::atomic<bool> stop{false};
    std::vector<std::thread> th;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < nfe; i++) {
      th.emplace_back([&, i] {
        Fe& f = fes[i];
        std::mt19937_64 rng(common.seed * 1000 + static_cast<uint64_t>(i) + 1);
        uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          const auto a = std::chrono::steady_clock::now();
          int type = 0;
          auto o = f.w->RunOne(*f.db, rng, &type);
          if (!o.ok()) {
            f.st = o.status();
            return;
          }
          const uint64_t ns =
              static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now() - a)
                                        .count());
          f.by_type[type][static_cast<int>(*o)]++;
          if (*o == txnbench::Outcome::kCommitted) {
            f.lat.Add(ns);
            f.lat_type[type].Add(ns);
          }
          if (common.ops && ++n >= common.ops) return;
        }
      });
    }
    while (std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(seconds_)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      bool all_done = true;
      for (auto& f : fes) all_done = all_done && !f.st.ok();
      if (all_done) break;
    }
    stop = true;
    for (auto& t : th) t.join();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_now() - cpu0;
    for (auto& f : fes) ASYMNVM_RETURN_IF_ERROR(f.st.WithContext(label));
    // Totals.
    uint64_t committed = 0, failed = 0, aborted = 0, rts = 0;
    LatencySampler all;
    std::vector<std::array<uint64_t, 3>> per(types.size(), {0, 0, 0});
    std::map<std::string, uint64_t> breakdown;
    std::vector<LatencySampler> lt(types.size());
    for (auto& f : fes) {
      for (size_t t = 0; t < types.size(); t++) {
        for (int k = 0; k < 3; k++) per[t][k] += f.by_type[t][k];
        for (uint64_t x : f.lat_type[t].samples()) lt[t].Add(x);
      }
      for (uint64_t x : f.lat.samples()) all.Add(x);
      const auto c = f.s->counters();
      rts += c.fabric.round_trips - f.c0.fabric.round_trips;
      // Where the round trips go (per committed or failed transaction in the record).
      breakdown["remote_reads"] += c.remote_reads - f.c0.remote_reads;
      breakdown["cache_hits"] += c.cache_hits - f.c0.cache_hits;
      breakdown["cache_misses"] += c.cache_misses - f.c0.cache_misses;
      breakdown["op_logs"] += c.op_logs - f.c0.op_logs;
      breakdown["txns"] += c.txns - f.c0.txns;
      breakdown["fences"] += c.fences - f.c0.fences;
      breakdown["lock_acquires"] += c.lock_acquires - f.c0.lock_acquires;
      breakdown["reader_retries"] += c.reader_retries - f.c0.reader_retries;
    }
    for (auto& p : per) {
      committed += p[0];
      failed += p[1];
      aborted += p[2];
    }
    // Checks: after the run (every front-end's locks released first), then from a new session.
    for (auto& f : fes) ASYMNVM_RETURN_IF_ERROR(f.db->ReleaseLocks());
    std::vector<const txnbench::Ledger*> ws;
    for (auto& f : fes) ws.push_back(f.ledger.get());
    Status inv = txnbench::Check(*wl, *fes[0].db, common.seed, ws);
    for (auto& f : fes) {
      f.db.reset();
      f.s.reset();
    }
    if (inv.ok()) {
      auto s = frontend::Session::Open(options(static_cast<uint64_t>(nfe + 1)));
      if (!s.ok()) return s.status();
      auto db = structures::Database::Open(**s, dbo);
      if (!db.ok()) return db.status();
      inv = txnbench::Check(*wl, **db, common.seed, ws).WithContext("after reopening");
    }
    Json config = {{"frontends", nfe},
                   {"scale", scale_},
                   {"seconds", seconds_},
                   {"hold_txns", hold_},
                   {"level", level_name}};
    Json rec = MakeRecord(level_name, config);
    const uint64_t tried = committed + aborted;
    rec["ops_per_sec"] = static_cast<double>(committed) / secs;
    rec["p50_us"] = all.PercentileUs(50);
    rec["p99_us"] = all.PercentileUs(99);
    rec["round_trips_per_op"] =
        committed ? static_cast<double>(rts) / static_cast<double>(committed + failed) : 0.0;
    Json per_txn = Json::object();
    for (const auto& [k, v] : breakdown) {
      per_txn[k] = committed + failed
                       ? static_cast<double>(v) / static_cast<double>(committed + failed)
                       : 0.0;
    }
    rec["per_txn"] = per_txn;
    rec["backend_cpu_us_per_txn"] =
        committed ? cpu * 1e6 / static_cast<double>(committed + failed) : 0.0;
    rec["committed"] = committed;
    rec["failed"] = failed;
    rec["aborted"] = aborted;
    rec["abort_rate"] =
        tried ? static_cast<double>(aborted) / static_cast<double>(tried + failed) : 0.0;
    rec["abort_rate_pct"] = rec["abort_rate"].get<double>() * 100;
    rec["invariants_ok"] = inv.ok();
    if (!inv.ok()) rec["invariants_error"] = inv.ToString();
    Json bt = Json::object();
    std::string line = label + ":";
    for (size_t t = 0; t < types.size(); t++) {
      bt[types[t]] = {{"committed", per[t][0]},
                      {"failed", per[t][1]},
                      {"aborted", per[t][2]},
                      {"p50_us", lt[t].PercentileUs(50)},
                      {"p99_us", lt[t].PercentileUs(99)}};
      line += " " + types[t] + " " + std::to_string(per[t][0]) + "/" + std::to_string(per[t][1]) +
              "/" + std::to_string(per[t][2]);
    }
    rec["by_type"] = bt;
    std::cerr << line << " (committed/failed/aborted)"
              << (inv.ok() ? "" : " INVARIANT FAILED: " + inv.ToString()) << "\n";
    *out = std::move(rec);
    return Status::Ok();
  }

  bool tatp_;
  uint64_t scale_ = 0;
  std::string frontends_;
  double seconds_ = 0;
  std::string levels_ = "naive,r,rc,rcb,symmetric";
  uint32_t hold_ = 64;
  int lock_ms_ = 200;
  std::string dir_ = "/tmp";
  std::string pm_mode_ = "flush";
  std::string fabric_ = "soft";
  std::string bin_;
};

class TatpSuite : public TxnSuite {
 public:
  TatpSuite() : TxnSuite(true) {}
};
class SmallBankSuite : public TxnSuite {
 public:
  SmallBankSuite() : TxnSuite(false) {}
};

}  // namespace
}  // namespace asymnvm::bench

ASYMNVM_REGISTER_SUITE(g_tatp_suite, "tatp", "TATP over multi-structure transactions (B+trees)",
                       asymnvm::bench::TatpSuite);
ASYMNVM_REGISTER_SUITE(g_smallbank_suite, "smallbank",
                       "SmallBank over multi-structure transactions (hash tables)",
                       asymnvm::bench::SmallBankSuite);
