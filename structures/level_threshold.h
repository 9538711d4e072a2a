// The §8 tree-cache rule shared by the trees: nodes at depth < N are read through the page cache,
// deeper ones one-sidedly; every kWindow node reads the session's hit/miss deltas adapt N
// (> 50 % misses → N − 1, < 25 % → N + 1, within [1, max]).
#pragma once

#include <algorithm>
#include <cstdint>

#include "asymnvm/frontend.h"

namespace asymnvm::structures::internal {

class LevelThreshold {
 public:
  LevelThreshold(int initial, int max) : n_(initial), max_(max) {}
  int n() const { return n_; }
  bool Cached(bool active, int depth) const { return !active || depth < n_; }
  // Runs `walk` without adapting N: a vector walk reads each node once for many keys, so its hit
  // ratio says nothing about the per-key descents the rule is tuned for.
  template <typename F>
  auto Paused(F&& walk) {
    paused_ = true;
    auto r = walk();
    paused_ = false;
    return r;
  }
  void Tick(frontend::Session& s) {
    if (paused_ || ++reads_ < kWindow) return;
    reads_ = 0;
    const frontend::Counters c = s.counters();
    const uint64_t h = c.cache_hits - last_hits_, m = c.cache_misses - last_misses_;
    last_hits_ = c.cache_hits;
    last_misses_ = c.cache_misses;
    if (h + m == 0) return;
    if (m * 2 > h + m) {
      n_ = std::max(1, n_ - 1);
    } else if (m * 4 < h + m) {
      n_ = std::min(max_, n_ + 1);
    }
  }

 private:
  static constexpr int kWindow = 1024;
  int n_, max_;
  int reads_ = 0;
  bool paused_ = false;
  uint64_t last_hits_ = 0, last_misses_ = 0;
};

}  // namespace asymnvm::structures::internal
