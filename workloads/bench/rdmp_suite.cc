// Suite "rdmp": RDMP-KV's server-reply vs server-bypass vs the threshold hybrid (doc/kv.md §RDMP)
// on one asymnvm-kv process (--coord none: unreplicated shards), one closed-loop client thread.
//
// For every value size (--sizes) and variant: `reply` (kv::ClientOptions::bypass_threshold =
// kNoBypass: values travel in requests and replies, chunked above 48 KiB), `bypass` (threshold 0:
// every PUT reserves a slot, writes value + persist flag one-sidedly and publishes; every GET is
// located by the server and read one-sidedly) and `hybrid` (threshold --threshold, the paper's
// 16 KiB). PUTs then GETs over 64 keys of that size. Records: variant, op, value_bytes,
// ops_per_sec, p50/p99, round trips per operation (OQ doorbells + bypass doorbells), client wire
// bytes per operation (OQ connections; bypass payload bytes added), server CPU µs per operation
// (/proc/PID/stat of the server process), and the share of operations that took the bypass path.
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "asymnvm/kv.h"
#include "asymnvm/pm.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"
#include "workloads/bench/process.h"

namespace asymnvm::bench {
namespace {

namespace fs = std::filesystem;

class RdmpSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--sizes", sizes_text_, "value sizes (K/M suffixes)")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--variants", variants_, "reply,bypass,hybrid")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--threshold", threshold_text_, "the hybrid's switch size")
        ->capture_default_str();
    cmd->add_option("--pm-mode", pm_mode_, "the server's PM mode (flush|msync|auto)")
        ->capture_default_str();
  }

  Status Validate(const CommonOptions&) override {
    sizes_.clear();
    for (const auto& t : sizes_text_) {
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t n, pm::ParseSize(t));
      if (n > kv::kMaxValueSize) return Status::InvalidArgument("rdmp: --sizes up to 1M");
      sizes_.push_back(n);
    }
    ASYMNVM_ASSIGN_OR_RETURN(threshold_, pm::ParseSize(threshold_text_));
    for (const auto& v : variants_) {
      if (v != "reply" && v != "bypass" && v != "hybrid") {
        return Status::InvalidArgument("rdmp: --variants: reply,bypass,hybrid");
      }
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    ASYMNVM_ASSIGN_OR_RETURN(std::string binary,
                             FindTool("asymnvm-kv", "ASYMNVM_KV_BIN", "../kv/asymnvm-kv"));
    char tmpl[] = "/tmp/asymnvm-bench-rdmp.XXXXXX";
    if (!mkdtemp(tmpl)) return Status::IoError("mkdtemp", errno);
    const std::string dir = tmpl;
    struct Cleanup {
      std::string d;
      ~Cleanup() { fs::remove_all(d); }
    } cleanup{dir};
    ASYMNVM_ASSIGN_OR_RETURN(
        auto server,
        Child::Start({binary, "--pool", dir + "/kv.pool", "--size", "1G", "--listen",
                      "unix://" + dir + "/kv.sock", "--coord", "none", "--pm-mode", pm_mode_,
                      "--workers", "2", "--shards", "4", "--log-level", "warn"},
                     dir + "/out", dir + "/err"));
    std::string address;
    for (int i = 0; i < 600 && address.empty(); i++) {
      const std::string out = ReadFile(dir + "/out");
      if (out.rfind("listening ", 0) == 0 && out.find('\n') != std::string::npos) {
        address = out.substr(10, out.find('\n') - 10);
        break;
      }
      if (!server->Running())
        return Status::Internal("asymnvm-kv exited: " + ReadFile(dir + "/err"));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (address.empty()) return Status::TimedOut("asymnvm-kv did not start");
    report->machine()["cores"] = MachineCores();
    report->AddHeader("asymnvm-bench rdmp: one asymnvm-kv (--coord none, pm-mode " + pm_mode_ +
                      ", 2 workers), one closed-loop client thread, 64 keys per point; hybrid "
                      "threshold " +
                      std::to_string(threshold_) + " B; " + std::to_string(MachineCores()) +
                      " cores for everything.");
    const uint64_t ops = common.ops > 0 ? common.ops : (common.quick ? 600 : 3000);
    for (uint64_t size : sizes_) {
      for (const auto& variant : variants_) {
        kv::ClientOptions co;
        co.servers = {address};
        co.bypass_threshold = variant == "reply"    ? kv::kNoBypass
                              : variant == "bypass" ? 0
                                                    : threshold_;
        ASYMNVM_ASSIGN_OR_RETURN(auto client, kv::Client::Open(co));
        std::string value(size, '\0');
        std::mt19937_64 rng(size);
        for (auto& c : value) c = static_cast<char>(rng());
        for (const char* op : {"put", "get"}) {
          const bool put = op[0] == 'p';
          const auto c0 = client->counters();
          const auto r0 = client->rdmp_counters();
          ASYMNVM_ASSIGN_OR_RETURN(double cpu0, ProcessCpuSeconds(server->pid()));
          LatencySampler lat;
          lat.Reserve(ops);
          const auto start = std::chrono::steady_clock::now();
          for (uint64_t i = 0; i < ops; i++) {
            const std::string key =
                variant + "-" + std::to_string(size) + "-" + std::to_string(i % 64);
            const auto t0 = std::chrono::steady_clock::now();
            if (put) {
              value[0] = static_cast<char>(i);
              ASYMNVM_RETURN_IF_ERROR(client->Put(key, value).WithContext("rdmp put " + key));
            } else {
              ASYMNVM_ASSIGN_OR_RETURN(kv::GetReply g, client->Get(key));
              if (!g.found || g.value.size() != size) {
                return Status::Internal("rdmp: get " + key + " returned the wrong value");
              }
            }
            lat.Add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - t0)
                                              .count()));
          }
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          ASYMNVM_ASSIGN_OR_RETURN(double cpu1, ProcessCpuSeconds(server->pid()));
          const auto c1 = client->counters();
          const auto r1 = client->rdmp_counters();
          const double n = static_cast<double>(ops);
          const uint64_t bypassed =
              put ? r1.bypass_puts - r0.bypass_puts : r1.bypass_gets - r0.bypass_gets;
          Json rec = MakeRecord(variant + "-" + op, Json{{"op", op}, {"value_bytes", size}});
          rec["ops_per_sec"] = n / secs;
          rec["p50_us"] = lat.PercentileUs(50);
          rec["p99_us"] = lat.PercentileUs(99);
          rec["round_trips_per_op"] = static_cast<double>((c1.round_trips - c0.round_trips) +
                                                          (r1.round_trips - r0.round_trips)) /
                                      n;
          rec["bytes_per_op"] =
              static_cast<double>((c1.bytes_out - c0.bytes_out) + (c1.bytes_in - c0.bytes_in) +
                                  (r1.bypass_bytes - r0.bypass_bytes)) /
              n;
          rec["server_cpu_us_per_op"] = (cpu1 - cpu0) * 1e6 / n;
          rec["bypassed_fraction"] = static_cast<double>(bypassed) / n;
          rec["fallbacks"] = r1.fallbacks - r0.fallbacks;
          report->Add(rec);
        }
      }
    }
    report->set_columns(
        {{"srv cpu µs/op", "server_cpu_us_per_op", 1}, {"bypassed", "bypassed_fraction", 2}});
    return Status::Ok();
  }

 private:
  std::vector<std::string> sizes_text_ = {"64", "1K", "4K", "16K", "64K", "256K"};
  std::vector<uint64_t> sizes_;
  std::vector<std::string> variants_ = {"reply", "bypass", "hybrid"};
  std::string threshold_text_ = "16K";
  uint64_t threshold_ = 16 * 1024;
  std::string pm_mode_ = "flush";
};

}  // namespace

ASYMNVM_REGISTER_SUITE(rdmp_suite_registered, "rdmp",
                       "RDMP-KV server-reply vs server-bypass vs hybrid PUT/GET by value size",
                       RdmpSuite);

}  // namespace asymnvm::bench
