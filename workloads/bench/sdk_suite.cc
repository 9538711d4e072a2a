// Suite "sdk": round trips and bytes per update of a persistent register array at each
// optimization level (AsymNVM paper Table 1 APIs, doc/architecture.md).
//
// The array is --registers registers of --size bytes in one allocation of an asymnvm-backend
// daemon (child process, --pm-mode flush). An update of register i (uniform) is the SDK's update
// protocol: OpLog(i, value) → MemLog(register i) → TxWrite; the run ends with a Fence. Per level:
// throughput, p50/p99, round trips (doorbells) and wire bytes per update, op-log sends and
// transactions per update, back-end CPU per update. Anchors: naive ≥ 2 network writes per update
// (a transaction send and its fence), r/rc exactly 1 op-log send per update plus one transaction
// each, rcb 1 op-log send plus amortized transactions.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <random>

#include "asymnvm/frontend.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::bench {
namespace {

using frontend::Level;

class SdkSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--levels", levels_, "naive,r,rc,rcb")->delimiter(',')->capture_default_str();
    cmd->add_option("--registers", registers_, "registers in the array")->capture_default_str();
    cmd->add_option("--size", size_, "bytes per register")->capture_default_str();
    cmd->add_option("--updates", updates_, "updates per level")->capture_default_str();
    cmd->add_option("--batch", batch_, "operations per transaction at rcb")->capture_default_str();
    cmd->add_option("--dir", dir_, "directory for the pool file")->capture_default_str();
    cmd->add_option("--backend-bin", backend_bin_, "asymnvm-backend binary");
  }

  Status Validate(const CommonOptions&) override {
    for (const auto& l : levels_) {
      ASYMNVM_ASSIGN_OR_RETURN(Level lv, frontend::ParseLevel(l));
      level_values_.push_back(lv);
    }
    if (registers_ < 1 || registers_ > (1u << 20))
      return Status::InvalidArgument("--registers must be 1..1048576");
    if (size_ < 8 || size_ > 4096 || size_ % 8 != 0)
      return Status::InvalidArgument("--size must be a multiple of 8 in 8..4096");
    if (updates_ < 1) return Status::InvalidArgument("--updates must be >= 1");
    if (batch_ < 1 || batch_ > 65536) return Status::InvalidArgument("--batch must be 1..65536");
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    report->machine()["cores"] = MachineCores();
    report->machine()["provider"] = "soft";
    report->machine()["transport"] = "tcp";
    report->machine()["pm_mode"] = "flush";
    if (common.quick) updates_ = std::min<uint64_t>(updates_, 500);
    if (common.ops > 0) updates_ = std::min(updates_, common.ops);
    if (backend_bin_.empty()) {
      ASYMNVM_ASSIGN_OR_RETURN(backend_bin_, driver::FindBackendBinary(""));
    }
    report->AddHeader("sdk: register array of " + std::to_string(registers_) + " x " +
                      std::to_string(size_) + " B, " + std::to_string(updates_) +
                      " updates per level, batch " + std::to_string(batch_) +
                      ", back-end pm-mode flush (child process)");
    for (Level level : level_values_) {
      const std::string pool = dir_ + "/asymnvm-bench-sdk-" + std::to_string(getpid()) + ".pool";
      std::filesystem::remove(pool);
      ASYMNVM_ASSIGN_OR_RETURN(auto be, driver::BackendProcess::Start(backend_bin_, pool, "256M",
                                                                      {"--pm-mode", "flush"}));
      struct Cleanup {
        std::string p;
        ~Cleanup() {
          std::filesystem::remove(p);
          std::filesystem::remove(p + ".backend.log");
        }
      } cleanup{pool};
      frontend::SessionOptions so;
      so.backends = {be->address()};
      so.frontend_id = 1;
      so.level = level;
      so.batch_ops = batch_;
      so.cache_bytes = std::max<uint64_t>(1 << 20, uint64_t{registers_} * size_ * 2);
      ASYMNVM_ASSIGN_OR_RETURN(auto s, frontend::Session::Open(so));
      ASYMNVM_ASSIGN_OR_RETURN(auto st, s->CreateRoot("registers", 42));
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t base, s->Malloc(uint64_t{registers_} * size_));
      ASYMNVM_RETURN_IF_ERROR(s->Fence());
      std::mt19937_64 rng(common.seed);
      std::vector<uint8_t> value(size_);
      const auto c0 = s->counters();
      ASYMNVM_ASSIGN_OR_RETURN(double cpu0, be->CpuSeconds());
      LatencySampler lat;
      const auto t0 = Clock::now();
      for (uint64_t u = 0; u < updates_; u++) {
        const uint64_t i = rng() % registers_;
        std::fill(value.begin(), value.end(), static_cast<uint8_t>(u));
        uint8_t params[16];
        std::memcpy(params, &i, 8);
        std::memcpy(params + 8, &u, 8);
        const auto a = Clock::now();
        ASYMNVM_RETURN_IF_ERROR(s->OpLog(st, 1, params).status());
        ASYMNVM_RETURN_IF_ERROR(s->MemLog(base + i * size_, value));
        ASYMNVM_RETURN_IF_ERROR(s->TxWrite(st));
        lat.Add(ElapsedNs(a, Clock::now()));
      }
      ASYMNVM_RETURN_IF_ERROR(s->Fence());
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      ASYMNVM_ASSIGN_OR_RETURN(double cpu1, be->CpuSeconds());
      const auto c1 = s->counters();
      const double n = static_cast<double>(updates_);
      Json rec = MakeRecord(frontend::LevelName(level),
                            Json{{"registers", registers_}, {"size", size_}, {"batch", batch_}});
      rec["ops_per_sec"] = n / secs;
      rec["p50_us"] = lat.PercentileUs(50);
      rec["p99_us"] = lat.PercentileUs(99);
      rec["round_trips_per_op"] =
          static_cast<double>(c1.fabric.round_trips - c0.fabric.round_trips) / n;
      rec["bytes_per_op"] = static_cast<double>(c1.fabric.bytes_out - c0.fabric.bytes_out) / n;
      rec["op_log_sends_per_op"] = static_cast<double>(c1.op_logs - c0.op_logs) / n;
      rec["txns_per_op"] = static_cast<double>(c1.txns - c0.txns) / n;
      rec["fence_polls_per_op"] = static_cast<double>(c1.fence_polls - c0.fence_polls) / n;
      rec["backend_cpu_us_per_op"] = (cpu1 - cpu0) * 1e6 / n;
      report->Add(std::move(rec));
      s.reset();
      ASYMNVM_RETURN_IF_ERROR(be->Stop());
    }
    report->set_columns({{"op logs/op", "op_log_sends_per_op", 3},
                         {"txns/op", "txns_per_op", 4},
                         {"fence polls/op", "fence_polls_per_op", 3},
                         {"be cpu us/op", "backend_cpu_us_per_op", 2}});
    report->AddNote(
        "round trips = doorbells of every connection of the session (op logs, transactions, "
        "fences' READs)");
    return Status::Ok();
  }

 private:
  std::vector<std::string> levels_ = {"naive", "r", "rc", "rcb"};
  std::vector<Level> level_values_;
  uint32_t registers_ = 1024, size_ = 64, batch_ = 1024;
  uint64_t updates_ = 5000;
  std::string dir_ = std::filesystem::temp_directory_path().string();
  std::string backend_bin_;
};

}  // namespace

ASYMNVM_REGISTER_SUITE(g_sdk_suite, "sdk",
                       "round trips and bytes per update of a register array at each level",
                       SdkSuite);

}  // namespace asymnvm::bench
