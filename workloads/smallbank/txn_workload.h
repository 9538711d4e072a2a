// The interface the transaction benchmarks (asymnvm-bench tatp | smallbank, doc/workloads.md
// "TATP" / "SmallBank") drive: a schema of tables, a loader, per-front-end workers that run one
// transaction of the standard mix at a time and keep what the checks need, and the checks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "asymnvm/structures/transaction.h"

namespace asymnvm::txnbench {

// What one transaction did.
enum class Outcome : uint8_t {
  kCommitted = 0,  // committed (read-only: returned)
  kFailed = 1,     // the spec's expected logical failure (missing row, insufficient funds): no writes
  kAborted = 2,    // concurrency abort (a lock not obtained in time, a reader timed out)
};

// One front-end's worker (one thread, one Session, one Database).
class Worker {
 public:
  virtual ~Worker() = default;
  // Runs one transaction drawn from the mix; *type = its index in TypeNames().
  virtual Result<Outcome> RunOne(structures::Database& db, std::mt19937_64& rng, int* type) = 0;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string name() const = 0;
  virtual std::vector<std::string> TypeNames() const = 0;
  virtual structures::DatabaseOptions Schema() const = 0;
  // Populates the tables (fresh pool); `progress(done, total)` now and then.
  virtual Status Load(structures::Database& db, uint64_t seed,
                      const std::function<void(uint64_t, uint64_t)>& progress) = 0;
  virtual std::unique_ptr<Worker> MakeWorker(int index) = 0;
  // Checks the tables against the initial state and every worker's record of its committed
  // transactions (workers are kept until Check). kCorruption naming the first violation.
  virtual Status Check(structures::Database& db, const std::vector<Worker*>& workers) = 0;
};

// scale: accounts (SmallBank) / subscribers (TATP).
std::unique_ptr<Workload> MakeSmallBank(uint64_t accounts);
std::unique_ptr<Workload> MakeTatp(uint64_t subscribers);

}  // namespace asymnvm::txnbench
