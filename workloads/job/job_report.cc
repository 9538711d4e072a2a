// PrintReport: asymnvm-job's result table, costs, failover summary and JSON (workloads/job/job.h).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "workloads/job/job.h"

namespace asymnvm::job {

int PrintReport(const JobReport& r, const std::string& json_path) {
  std::printf("\nrun %llu: %llu operations in %.2f s = %.0f ops/s at level %s\n",
              static_cast<unsigned long long>(r.run + 1), static_cast<unsigned long long>(r.ops),
              r.seconds, static_cast<double>(r.ops) / r.seconds, r.level.c_str());
  std::printf("%-10s %8s %10s %10s %10s %8s\n", "structure", "ops", "p50 us", "p99 us", "elements",
              "check");
  nlohmann::ordered_json j;
  j["run"] = r.run + 1;
  j["ops"] = r.ops;
  j["seconds"] = r.seconds;
  j["level"] = r.level;
  j["verified_elements_from_earlier_runs"] = r.verified_elements;
  j["structures"] = nlohmann::ordered_json::array();
  for (const StructureReport& s : r.structures) {
    std::printf("%-10s %8llu %10.1f %10.1f %10llu %8s\n", s.name.c_str(),
                static_cast<unsigned long long>(s.ops), s.p50_us, s.p99_us,
                static_cast<unsigned long long>(s.elements), s.read_mismatches ? "WRONG" : "ok");
    j["structures"].push_back({{"structure", s.name},
                               {"ops", s.ops},
                               {"p50_us", s.p50_us},
                               {"p99_us", s.p99_us},
                               {"elements", s.elements},
                               {"read_mismatches", s.read_mismatches}});
  }
  std::printf(
      "round trips/op %.2f, bytes out/op %.0f, back-end CPU %.1f us/op, cache hits %.1f%%\n",
      r.round_trips_per_op, r.bytes_per_op, r.backend_cpu_us_per_op, r.cache_hit_percent);
  j["round_trips_per_op"] = r.round_trips_per_op;
  j["bytes_per_op"] = r.bytes_per_op;
  j["backend_cpu_us_per_op"] = r.backend_cpu_us_per_op;
  std::printf("back-end syncs/op %.2f (%.2f per update), pm mode %s\n", r.syncs_per_op,
              r.syncs_per_update, r.pm_mode.c_str());
  j["syncs_per_op"] = r.syncs_per_op;
  j["syncs_per_update"] = r.syncs_per_update;
  j["pm_mode"] = r.pm_mode;
  j["backends"] = r.backends;
  const FailoverReport& fo = r.failover;
  if (fo.killed) {
    std::printf(
        "failover of back-end 0 (killed after %llu acknowledged operations, pool deleted):\n"
        "  %-12s %s (%s, pid %d, SIGKILL)\n  %-12s %s (%s, term %llu)\n"
        "  %-12s %.0f ms kill -> sessions switched (%llu op(s) replayed), %.0f ms kill -> "
        "first successful operation\n  %-12s %s in sync %.0f ms after the kill (full copy "
        "while serving)\n  %-12s %llu elements in %zu structures, every one as acknowledged\n",
        static_cast<unsigned long long>(r.kill_primary_after), "old primary",
        fo.old_address.c_str(), fo.old_pool.c_str(), fo.old_pid, "new primary",
        fo.new_address.c_str(), fo.new_pool.c_str(), static_cast<unsigned long long>(fo.term),
        "switch-over", fo.switch_ms, static_cast<unsigned long long>(fo.replayed), fo.first_op_ms,
        "rejoined", fo.old_pool.c_str(), fo.rejoin_ms, "verified",
        static_cast<unsigned long long>(fo.verified_elements), r.structures.size());
    j["failover"] = {{"killed_after_ops", r.kill_primary_after},
                     {"old_address", fo.old_address},
                     {"old_pool", fo.old_pool},
                     {"new_address", fo.new_address},
                     {"new_pool", fo.new_pool},
                     {"term", fo.term},
                     {"switch_ms", fo.switch_ms},
                     {"first_op_ms", fo.first_op_ms},
                     {"replayed_ops", fo.replayed},
                     {"rejoin_in_sync_ms", fo.rejoin_ms},
                     {"verified_elements", fo.verified_elements}};
  }
  for (const std::string& line : r.stop_lines) std::cout << line << "\n";
  if (!r.stop_failure_text.empty()) {
    std::cerr << r.stop_failure_text;
    return r.stop_failure_exit;
  }
  if (r.mirrors > 0) {
    std::cout << r.mirrors << " " << r.mirror_mode << " mirror(s) per back-end stopped after it; "
              << "asymnvm-ctl diff POOL MIRROR_POOL compares them\n";
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
  }
  if (const uint64_t wrong = r.total_read_mismatches(); wrong > 0) {
    std::cerr << "asymnvm-job: VERIFICATION FAILED: " << wrong
              << " reads returned data that differs from the model\n";
    return kExitVerification;
  }
  std::cout << "ok: data kept in " << r.data_dir << " (" << r.pools
            << " pool(s); run again to reopen and verify it)\n";
  return kExitOk;
}

}  // namespace asymnvm::job
