// Suite "durability": the write path at the speed of its medium (doc/backend.md,
// doc/backend.md §Disk-durable mode). One asymnvm-backend daemon (child process) on a pool file
// in --dir, per variant:
//
//   msync      --pm-mode msync: the redo-log mode (acknowledged once the op log and the
//              transaction landings are synced, group-committed; data written back by checkpoints)
//   flush      --pm-mode flush: cache-line flush, PM's cost model (direct path)
//   msync-4fe  msync with four front-ends (sessions on their own threads) updating at once
//   flush-4fe  flush with four front-ends
//
// Each front-end runs the SDK's update protocol on its own registers of a persistent register
// array (OpLog → MemLog → TxWrite, level rcb, the session's default batching), then a Fence.
// Fields: ops_per_sec, p50_us, p99_us (per update, all front-ends), syncs_per_op (the back-end's
// pm_syncs during the run / updates: msync calls, group commits count once), backend_cpu_us_per_op,
// round_trips_per_op (doorbells of every session), txns_per_op, floor_us (the same run's loopback
// TCP ping-pong p50 for a 64-byte message: workloads/bench/floor.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "asymnvm/fabric.h"
#include "asymnvm/frontend.h"
#include "backend/rpc.h"
#include "fabric/oq/oq.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/floor.h"
#include "workloads/bench/latency.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::bench {
namespace {

class DurabilitySuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--variants", variants_, "msync,flush,msync-4fe,flush-4fe")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--updates", updates_, "updates per variant (all front-ends)")
        ->capture_default_str();
    cmd->add_option("--registers", registers_, "registers per front-end")->capture_default_str();
    cmd->add_option("--size", size_, "bytes per register")->capture_default_str();
    cmd->add_option("--dir", dir_, "directory for the pool file (a disk for msync)")
        ->capture_default_str();
    cmd->add_option("--backend-bin", backend_bin_, "asymnvm-backend binary");
  }

  Status Validate(const CommonOptions&) override {
    for (const auto& v : variants_) {
      if (v != "msync" && v != "flush" && v != "msync-4fe" && v != "flush-4fe") {
        return Status::InvalidArgument("--variants: unknown variant '" + v + "'");
      }
    }
    if (updates_ < 4) return Status::InvalidArgument("--updates must be >= 4");
    if (registers_ < 1 || registers_ > (1u << 16)) {
      return Status::InvalidArgument("--registers must be 1..65536");
    }
    if (size_ < 8 || size_ > 4096 || size_ % 8 != 0) {
      return Status::InvalidArgument("--size must be a multiple of 8 in 8..4096");
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    report->machine()["cores"] = MachineCores();
    report->machine()["provider"] = "soft";
    report->machine()["transport"] = "tcp";
    if (common.quick) updates_ = std::min<uint64_t>(updates_, 2000);
    if (common.ops > 0) updates_ = std::min(updates_, common.ops);
    if (backend_bin_.empty()) {
      ASYMNVM_ASSIGN_OR_RETURN(backend_bin_, driver::FindBackendBinary(""));
    }
    Budget fb;
    fb.duration = std::chrono::milliseconds(common.quick ? 200 : 1000);
    fb.max_ops = 20000;
    ASYMNVM_ASSIGN_OR_RETURN(Measurement floor, RunFloor("tcp", 64, fb));
    const double floor_us = floor.latency.PercentileUs(50);
    report->AddHeader("durability: " + std::to_string(updates_) + " updates per variant of " +
                      std::to_string(size_) + " B registers (OpLog + MemLog + TxWrite, rcb), " +
                      "pool in " + dir_ + "; floor (tcp ping-pong p50) " +
                      std::to_string(floor_us) + " us");
    for (const std::string& variant : variants_) {
      ASYMNVM_RETURN_IF_ERROR(RunVariant(variant, common, floor_us, report));
    }
    report->set_columns({{"syncs/op", "syncs_per_op", 3},
                         {"txns/op", "txns_per_op", 3},
                         {"be cpu us/op", "backend_cpu_us_per_op", 1},
                         {"floor us", "floor_us", 1}});
    report->AddNote(
        "syncs/op = msync calls of the back-end's pool during the run / updates "
        "(a group commit counts once; flush mode has none)");
    return Status::Ok();
  }

 private:
  Status RunVariant(const std::string& variant, const CommonOptions& common, double floor_us,
                    Report* report) {
    const bool msync = variant.rfind("msync", 0) == 0;
    const unsigned fes = variant.find("-4fe") != std::string::npos ? 4 : 1;
    const std::string pool =
        dir_ + "/asymnvm-bench-durability-" + std::to_string(getpid()) + ".pool";
    std::filesystem::remove(pool);
    struct Cleanup {
      std::string p;
      ~Cleanup() {
        std::filesystem::remove(p);
        std::filesystem::remove(p + ".backend.log");
      }
    } cleanup{pool};
    ASYMNVM_ASSIGN_OR_RETURN(
        auto be, driver::BackendProcess::Start(backend_bin_, pool, "256M",
                                               {"--pm-mode", msync ? "msync" : "flush"}));
    // Sessions, roots and registers first (not measured).
    std::vector<std::unique_ptr<frontend::Session>> sessions;
    std::vector<frontend::Structure> roots;
    std::vector<uint64_t> bases;
    for (unsigned f = 0; f < fes; f++) {
      frontend::SessionOptions so;
      so.backends = {be->address()};
      so.frontend_id = f + 1;
      so.level = frontend::Level::kRcb;
      ASYMNVM_ASSIGN_OR_RETURN(auto s, frontend::Session::Open(so));
      ASYMNVM_ASSIGN_OR_RETURN(auto st, s->CreateRoot("registers-" + std::to_string(f), 42));
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t base, s->Malloc(uint64_t{registers_} * size_));
      ASYMNVM_RETURN_IF_ERROR(s->Fence());
      sessions.push_back(std::move(s));
      roots.push_back(st);
      bases.push_back(base);
    }
    std::vector<frontend::Counters> c0;
    for (auto& s : sessions) c0.push_back(s->counters());
    ASYMNVM_ASSIGN_OR_RETURN(Json st0, DaemonStatus(be->address()));
    ASYMNVM_ASSIGN_OR_RETURN(double cpu0, be->CpuSeconds());
    const uint64_t per_fe = updates_ / fes;
    std::vector<LatencySampler> lat(fes);
    std::vector<Status> results(fes);
    const auto t0 = Clock::now();
    auto work = [&](unsigned f) {
      std::mt19937_64 rng(common.seed + f);
      std::vector<uint8_t> value(size_);
      frontend::Session& s = *sessions[f];
      lat[f].Reserve(per_fe);
      for (uint64_t u = 0; u < per_fe; u++) {
        const uint64_t i = rng() % registers_;
        std::fill(value.begin(), value.end(), static_cast<uint8_t>(u));
        uint8_t params[16];
        std::memcpy(params, &i, 8);
        std::memcpy(params + 8, &u, 8);
        const auto a = Clock::now();
        Status st = s.OpLog(roots[f], 1, params).status();
        if (st.ok()) st = s.MemLog(bases[f] + i * size_, value);
        if (st.ok()) st = s.TxWrite(roots[f]);
        if (!st.ok()) {
          results[f] = st;
          return;
        }
        lat[f].Add(ElapsedNs(a, Clock::now()));
      }
      results[f] = s.Fence();
    };
    std::vector<std::thread> threads;
    for (unsigned f = 1; f < fes; f++) threads.emplace_back(work, f);
    work(0);
    for (auto& t : threads) t.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const Status& st : results) ASYMNVM_RETURN_IF_ERROR(st);
    ASYMNVM_ASSIGN_OR_RETURN(double cpu1, be->CpuSeconds());
    ASYMNVM_ASSIGN_OR_RETURN(Json st1, DaemonStatus(be->address()));
    LatencySampler all;
    uint64_t round_trips = 0, txns = 0;
    for (unsigned f = 0; f < fes; f++) {
      for (uint64_t ns : lat[f].samples()) all.Add(ns);
      const auto c1 = sessions[f]->counters();
      round_trips += c1.fabric.round_trips - c0[f].fabric.round_trips;
      txns += c1.txns - c0[f].txns;
    }
    const double n = static_cast<double>(per_fe * fes);
    Json rec = MakeRecord(variant, Json{{"frontends", fes},
                                        {"pm_mode", msync ? "msync" : "flush"},
                                        {"registers", registers_},
                                        {"size", size_}});
    rec["ops_per_sec"] = n / secs;
    rec["p50_us"] = all.PercentileUs(50);
    rec["p99_us"] = all.PercentileUs(99);
    rec["syncs_per_op"] =
        static_cast<double>(st1.value("pm_syncs", 0ull) - st0.value("pm_syncs", 0ull)) / n;
    rec["backend_cpu_us_per_op"] = (cpu1 - cpu0) * 1e6 / n;
    rec["round_trips_per_op"] = static_cast<double>(round_trips) / n;
    rec["txns_per_op"] = static_cast<double>(txns) / n;
    rec["floor_us"] = floor_us;
    rec["durability"] = st1.value("durability", "");
    rec["checkpoints"] = st1.value("checkpoints", 0ull) - st0.value("checkpoints", 0ull);
    report->Add(std::move(rec));
    sessions.clear();
    return be->Stop();
  }

  std::vector<std::string> variants_ = {"msync", "flush", "msync-4fe", "flush-4fe"};
  uint64_t updates_ = 20000;
  uint32_t registers_ = 1024, size_ = 64;
  std::string dir_ = std::filesystem::temp_directory_path().string();
  std::string backend_bin_;
};

}  // namespace

ASYMNVM_REGISTER_SUITE(g_durability_suite, "durability",
                       "the write path per medium: msync redo log vs flush, 1 and 4 front-ends",
                       DurabilitySuite);

}  // namespace asymnvm::bench
