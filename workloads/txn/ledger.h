// A worker's ledger of committed transactions (workloads/txn/workload.h; doc/workloads.md
// "Crash checks"), in memory and optionally in a file that survives a SIGKILL of the driver.
//
// File format (text, one record per line, each written with one write(2) so that a killed process
// leaves whole lines, except possibly a torn last one, which readers ignore):
//   id <frontend id>              first line: the front-end id whose op logs hold the transactions
//   P <q>:<delta> <q>:<delta>...  an effect about to be committed (possibly empty: "P")
//   C [<inc>:<n>]                 the preceding P committed (Txn::Commit returned Ok); the op_seq
//                                 of its op log when known (diagnostics: the back-end and replay
//                                 logs name op logs the same way)
// A P followed by another P or by the end of the file is in doubt: its Commit did not return (the
// driver died, or the back-end did and the commit failed with the outcome unknown).
//
// Resolutions (file DIR/resolved, written by asymnvm-txn check): "<file>:<line> 1|0" — the P at
// that line was found applied (1) or not (0) by a check that first recovered every front-end of
// the ledgers (so the outcome is final) and found exactly one explanation. Readers then count it
// as committed or drop it, so in-doubt transactions do not pile up across repeated crashes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/status.h"
#include "workloads/txn/workload.h"

namespace asymnvm::txnbench {

class Ledger {
 public:
  // In memory only.
  explicit Ledger(size_t quantities);
  // Appends to `path` (created if absent; an existing file must start with the same id).
  static Result<std::unique_ptr<Ledger>> Open(const std::string& path, size_t quantities,
                                              uint64_t frontend_id);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // kInvalidArgument: a quantity index out of range, or a Pending while one is pending.
  Status Pending(const Effect& effect);
  // kFailedPrecondition without a pending effect. `op_seq` (0: unknown) goes into the C line.
  Status Committed(uint64_t op_seq = 0);
  // Forgets a pending effect whose Commit failed with nothing written (not in doubt): in memory
  // only (a file keeps it in doubt, which the check accepts either way).
  void Drop() { pending_ = false; }
  // Committed effects, summed per quantity; committed transactions.
  const std::vector<int64_t>& totals() const { return totals_; }
  uint64_t committed() const { return committed_; }

 private:
  Status Append(const std::string& line);
  std::vector<int64_t> totals_;
  Effect pending_effect_;
  bool pending_ = false;
  uint64_t committed_ = 0;
  int fd_ = -1;
  std::string path_;
};

// Every ledger file (*.ledger) of a directory, summed.
struct LedgerSet {
  std::vector<int64_t> committed;         // per quantity
  std::vector<Effect> in_doubt;           // each a whole transaction's effect
  std::vector<std::string> in_doubt_ids;  // "<file>:<line>" of each, for WriteResolutions
  uint64_t resolved = 0;                  // in-doubt transactions settled by earlier checks
  std::vector<uint64_t> frontend_ids;     // one per file, in file-name order
  uint64_t committed_txns = 0;
  size_t files = 0;
};
// kCorruption naming file and line for a malformed line (other than a torn last one), a C without
// its P, a quantity out of range.
Result<LedgerSet> ReadLedgers(const std::string& dir, size_t quantities);

// Whether measured == initial + committed + the sum of some subset of `in_doubt` (each in-doubt
// transaction wholly applied or not at all). Ok with *applied = the size of the subset found;
// kCorruption naming the first quantity that differs (by `name`) when no subset fits;
// kResourceExhausted when more than 20 in-doubt effects touch the quantities that differ.
// *outcome (optional): per in-doubt effect, 1 applied / 0 not applied when exactly one subset of
// its group fits, -1 when several do (ambiguous) — an effect that changes nothing is 0.
Status Resolve(const std::vector<int64_t>& measured, const std::vector<int64_t>& initial,
               const std::vector<int64_t>& committed, const std::vector<Effect>& in_doubt,
               const std::function<std::string(uint32_t)>& name, size_t* applied,
               std::vector<int>* outcome = nullptr);
// Appends the unambiguous outcomes (ids[i] → outcome[i] ∈ {0, 1}) to DIR/resolved.
Status WriteResolutions(const std::string& dir, const std::vector<std::string>& ids,
                        const std::vector<int>& outcome);

}  // namespace asymnvm::txnbench
