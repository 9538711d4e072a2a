// The parts of the transaction-workload interface shared by TATP and SmallBank
// (workloads/txn/workload.h).
#include "workloads/txn/workload.h"

#include "workloads/txn/ledger.h"

namespace asymnvm::txnbench {

Status Worker::CommitWith(structures::Txn& txn, const Effect& effect) {
  if (ledger_ == nullptr)
    return Status::FailedPrecondition("a worker committed without a ledger (set_ledger)");
  ASYMNVM_RETURN_IF_ERROR(ledger_->Pending(effect));
  Status st = txn.Commit();
  if (!st.ok()) {
    // A commit that failed on the lock or before its op log is not in doubt in memory; a file
    // ledger keeps its P (in doubt: the check accepts either outcome).
    ledger_->Drop();
    return st;
  }
  return ledger_->Committed(txn.op_seq());
}

Status Check(Workload& workload, structures::Database& db, uint64_t seed,
             const std::vector<const Ledger*>& ledgers) {
  ASYMNVM_RETURN_IF_ERROR(db.LockAll());
  auto measured = workload.Measure(db);
  ASYMNVM_RETURN_IF_ERROR(db.ReleaseLocks());
  if (!measured.ok()) return measured.status();
  std::vector<int64_t> committed(workload.NumQuantities(), 0);
  for (const Ledger* l : ledgers) {
    for (size_t q = 0; q < committed.size() && q < l->totals().size(); q++)
      committed[q] += l->totals()[q];
  }
  size_t applied = 0;
  return Resolve(
      *measured, workload.Initial(seed), committed, {},
      [&](uint32_t q) { return workload.QuantityName(q); }, &applied);
}

Result<std::unique_ptr<Workload>> MakeWorkload(const std::string& name, uint64_t scale) {
  if (scale == 0)
    return Status::InvalidArgument("the scale (accounts / subscribers) must be at least 1");
  if (name == "tatp") return MakeTatp(scale);
  if (name == "smallbank") {
    if (scale < 2) return Status::InvalidArgument("SmallBank needs at least 2 accounts");
    return MakeSmallBank(scale);
  }
  return Status::InvalidArgument("unknown workload \"" + name + "\" (tatp | smallbank)");
}

}  // namespace asymnvm::txnbench
