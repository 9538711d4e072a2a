// Latency samples and measurement budgets shared by the benchmark suites.
//
// LatencySampler keeps every sample (nanoseconds) and answers percentiles from the sorted sample
// (nearest-rank). A one-second run at a million ops/s costs 8 MB, which is fine for a benchmark.
// Thread safety: none; one sampler per measuring thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace asymnvm::bench {

using Clock = std::chrono::steady_clock;

inline uint64_t ElapsedNs(Clock::time_point from, Clock::time_point to) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

class LatencySampler {
 public:
  void Reserve(size_t n) { ns_.reserve(n); }
  void Add(uint64_t ns) {
    ns_.push_back(ns);
    sorted_ = false;
  }
  size_t count() const { return ns_.size(); }
  const std::vector<uint64_t>& samples() const { return ns_; }
  // p in [0, 100]; 0 when empty.
  double PercentileUs(double p) {
    if (ns_.empty()) return 0;
    if (!sorted_) {
      std::sort(ns_.begin(), ns_.end());
      sorted_ = true;
    }
    double rank = std::ceil(p / 100.0 * static_cast<double>(ns_.size()));
    size_t idx = rank <= 1 ? 0 : static_cast<size_t>(rank) - 1;
    idx = std::min(idx, ns_.size() - 1);
    return static_cast<double>(ns_[idx]) / 1000.0;
  }

 private:
  std::vector<uint64_t> ns_;
  bool sorted_ = true;
};

// How long one measurement runs: until `duration` passes or `max_ops` operations complete
// (0 = no cap), whichever comes first.
struct Budget {
  std::chrono::nanoseconds duration{std::chrono::milliseconds(500)};
  uint64_t max_ops = 0;
};

// Result of one measurement.
struct Measurement {
  uint64_t ops = 0;
  double seconds = 0;
  LatencySampler latency;
  double ops_per_sec() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

}  // namespace asymnvm::bench
