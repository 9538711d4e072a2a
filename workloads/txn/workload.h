// The interface the transaction workloads (TATP, SmallBank; doc/workloads.md "TATP", "SmallBank",
// "Crash checks") present to their two drivers, `asymnvm-bench tatp|smallbank` (measures) and
// `asymnvm-txn` (load / run / check as separate processes that can be killed): a schema of tables,
// a loader, per-front-end workers that run one transaction of the standard mix at a time, and the
// checks.
//
// The checks compare "quantities" — SmallBank: every balance and the total money; TATP: the row
// count of every table — with the initial state plus the effects of the committed transactions.
// A worker reports each write transaction's effect to its Ledger (workloads/txn/ledger.h) before
// Commit (pending) and after Commit returned (committed); a ledger kept in a file survives a
// SIGKILL of its driver, and a transaction that was pending when the driver died is "in doubt": the
// check accepts the state only if it equals the committed effects plus some subset of the in-doubt
// ones (each either wholly applied or not at all — atomicity), and rejects everything else.
// Structural rules that do not depend on the ledger (TATP's referential rules, subscriber numbers
// matching their ids) are checked by Measure.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "asymnvm/structures/transaction.h"

namespace asymnvm::txnbench {

class Ledger;  // workloads/txn/ledger.h

// What one transaction did.
enum class Outcome : uint8_t {
  kCommitted = 0,  // committed (read-only: returned)
  kFailed = 1,   // the spec's expected logical failure (missing row, insufficient funds): no writes
  kAborted = 2,  // concurrency abort (a lock not obtained in time, a reader timed out)
};

// A committed write transaction's change to the checked quantities: (quantity index, delta).
using Effect = std::vector<std::pair<uint32_t, int64_t>>;

// One front-end's worker (one thread, one Session, one Database).
class Worker {
 public:
  virtual ~Worker() = default;
  // Runs one transaction drawn from the mix; *type = its index in TypeNames().
  virtual Result<Outcome> RunOne(structures::Database& db, std::mt19937_64& rng, int* type) = 0;
  // Where the effects of committed transactions go; set before the first RunOne (required).
  void set_ledger(Ledger* ledger) { ledger_ = ledger; }

 protected:
  // The one way a worker commits a write transaction: Ledger::Pending(effect), Txn::Commit,
  // Ledger::Committed() once the commit returned Ok (acknowledged: durable).
  Status CommitWith(structures::Txn& txn, const Effect& effect);

 private:
  Ledger* ledger_ = nullptr;
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

  // The checked quantities: how many, a name for messages ("sb.chk[17]"), their values right after
  // Load(seed) (computed, not read: a checker in another process needs no state of the loader).
  virtual size_t NumQuantities() const = 0;
  virtual std::string QuantityName(uint32_t q) const = 0;
  virtual std::vector<int64_t> Initial(uint64_t seed) const = 0;
  // Reads every quantity from the database and checks the structural rules (kCorruption naming the
  // first violation). The caller holds every lock (Database::LockAll).
  virtual Result<std::vector<int64_t>> Measure(structures::Database& db) = 0;
};

// The in-process check of asymnvm-bench: every lock taken, Measure, locks released, then the
// quantities must equal Initial(seed) + the ledgers' committed totals (nothing is in doubt when no
// driver died). kCorruption naming the first quantity that differs.
Status Check(Workload& workload, structures::Database& db, uint64_t seed,
             const std::vector<const Ledger*>& ledgers);

// scale: accounts (SmallBank) / subscribers (TATP).
std::unique_ptr<Workload> MakeSmallBank(uint64_t accounts);
std::unique_ptr<Workload> MakeTatp(uint64_t subscribers);
// "tatp" | "smallbank"; kInvalidArgument otherwise.
Result<std::unique_ptr<Workload>> MakeWorkload(const std::string& name, uint64_t scale);

}  // namespace asymnvm::txnbench
