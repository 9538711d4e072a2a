// Drives operations against a structure handle (benchmarks and the main job): a key chooser from
// workloads/gen, a read/write mix, value sizes, per-operation latency.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "asymnvm/structures/structure.h"
#include "workloads/bench/latency.h"
#include "workloads/gen/generators.h"

namespace asymnvm::driver {

struct RunConfig {
  std::string distribution = "uniform";  // workloads::MakeKeyGenerator names
  double theta = 0.99;
  std::string mix = "0/100";  // read%/write% (workloads::ParseMix)
  // Writes insert fresh keys keynum = next_insert++ (a load / 100 % insert phase) instead of
  // insert-or-update of keys drawn from the chooser.
  bool fresh_inserts = false;
  uint64_t next_insert = 0;    // first fresh keynum
  uint64_t key_space = 10000;  // keys drawn from keynums [0, key_space)
  bool hashed_keys = true;     // key = FnvHash64(keynum) (random order), else keynum
  std::string value_size = "constant:64";
  uint64_t ops = 10000;
  // Maps: consecutive writes are gathered into vectors of this many pairs and sent with one
  // Map::PutBatch (Algorithm 3; a read first sends the pending vector). Each write's latency is
  // its vector's (the write is not done before the vector returns). 1 = every write is a Put.
  uint32_t vector = 1;
  std::chrono::nanoseconds max_time = std::chrono::seconds(60);
  uint64_t seed = 1;
};

struct RunResult {
  uint64_t ops = 0, reads = 0, writes = 0, not_found = 0;
  double seconds = 0;  // including the final Sync
  bench::LatencySampler latency;
  uint64_t next_insert = 0;  // after the run
};

// Sequences: a write pushes, a read peeks (kNotFound on empty counted, not an error).
// Maps: a write puts, a read gets (kNotFound counted). Any other error stops the run.
// `progress(done)` is called every 1024 operations when set.
Result<RunResult> Run(structures::Handle& h, const RunConfig& config,
                      const std::function<void(uint64_t)>& progress = nullptr);

// The map key of key number `key` for a map with `key_size` (Map::key_size): the integer itself,
// or YCSB's "user<decimal>" (up to 24 bytes) cut to key_size.
structures::Key MapKey(uint64_t key, uint32_t key_size);

// The value written for (key, version): deterministic bytes, so readers and a later run can
// verify it.
std::vector<uint8_t> ValueFor(uint64_t key, uint64_t version, size_t len);

}  // namespace asymnvm::driver
