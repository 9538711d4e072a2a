// SmallBank (doc/workloads.md "SmallBank"; spec: workloads.md §2, canonical semantics): two hash
// tables, checking and savings, balances in integer cents; FORD's account selection (4 % hot
// accounts, 90 % of transactions on them) and the standard mix 15/15/15/25/15/15.
#include <cstring>

#include "workloads/txn/workload.h"

namespace asymnvm::txnbench {
namespace {

using structures::Database;
using structures::Txn;

constexpr size_t kChk = 0, kSav = 1;  // table indexes ("sb.chk" < "sb.sav": also the lock order)
constexpr int64_t kStartCents = 1000000000;  // FORD: both balances 1e9, accounts never run dry
enum Type { kAmalgamate, kBalance, kDeposit, kSendPayment, kTransactSavings, kWriteCheck, kTypes };
constexpr int kMix[kTypes] = {15, 15, 15, 25, 15, 15};

std::vector<uint8_t> Enc(int64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

Result<int64_t> Bal(Txn& t, size_t table, uint64_t acct) {
  structures::Value v;
  Status st = t.Get(table, acct, &v);
  if (!st.ok()) return st.WithContext("account " + std::to_string(acct));
  if (v.size() != 8)
    return Status::Corruption("balance of account " + std::to_string(acct) + " has " +
                              std::to_string(v.size()) + " bytes");
  int64_t x;
  std::memcpy(&x, v.data(), 8);
  return x;
}

bool IsAbort(const Status& st) {
  return st.code() == StatusCode::kAborted || st.code() == StatusCode::kTimedOut;
}

// Quantities (workload.h): 0..n-1 checking balances, n..2n-1 savings balances, 2n the total money.
class SbWorker final : public Worker {
 public:
  SbWorker(uint64_t n, uint64_t hot) : n_(n), hot_(hot) {}

  Result<Outcome> RunOne(Database& db, std::mt19937_64& rng, int* type) override {
    int r = static_cast<int>(rng() % 100), t = 0;
    while (r >= kMix[t]) r -= kMix[t++];
    *type = t;
    const bool hot = rng() % 100 < 90;
    auto pick = [&]() { return hot ? rng() % hot_ : rng() % n_; };
    const uint64_t a0 = pick();
    uint64_t a1 = pick();
    while (a1 == a0) a1 = pick();
    Status st = Status::Ok();
    bool failed = false;
    if (t == kBalance) {
      st = db.Read({kChk, kSav}, [&](Txn& x) -> Status {
        ASYMNVM_ASSIGN_OR_RETURN(int64_t c, Bal(x, kChk, a0));
        ASYMNVM_ASSIGN_OR_RETURN(int64_t s, Bal(x, kSav, a0));
        return c + s == INT64_MIN ? Status::Internal("overflow") : Status::Ok();
      });
      if (!st.ok()) return IsAbort(st) ? Result<Outcome>(Outcome::kAborted) : Result<Outcome>(st);
      return Outcome::kCommitted;
    }
    std::vector<size_t> tables;
    if (t == kAmalgamate || t == kWriteCheck)
      tables = {kChk, kSav};
    else if (t == kTransactSavings)
      tables = {kSav};
    else
      tables = {kChk};
    auto txn = db.Begin(tables);
    if (!txn.ok())
      return IsAbort(txn.status()) ? Result<Outcome>(Outcome::kAborted)
                                   : Result<Outcome>(txn.status());
    Txn& x = **txn;
    // Every check happens before the first write (a write cannot be taken back).
    auto body = [&]() -> Status {
      switch (t) {
        case kAmalgamate: {
          ASYMNVM_ASSIGN_OR_RETURN(int64_t s0, Bal(x, kSav, a0));
          ASYMNVM_ASSIGN_OR_RETURN(int64_t c0, Bal(x, kChk, a0));
          ASYMNVM_ASSIGN_OR_RETURN(int64_t c1, Bal(x, kChk, a1));
          ASYMNVM_RETURN_IF_ERROR(x.Put(kChk, a1, Enc(c1 + s0 + c0)));
          ASYMNVM_RETURN_IF_ERROR(x.Put(kSav, a0, Enc(0)));
          ASYMNVM_RETURN_IF_ERROR(x.Put(kChk, a0, Enc(0)));
          eff_ = {{Q(kChk, a1), s0 + c0}, {Q(kSav, a0), -s0}, {Q(kChk, a0), -c0}};
          return Status::Ok();
        }
        case kDeposit: {
          ASYMNVM_ASSIGN_OR_RETURN(int64_t c, Bal(x, kChk, a0));
          ASYMNVM_RETURN_IF_ERROR(x.Put(kChk, a0, Enc(c + 130)));
          eff_ = {{Q(kChk, a0), 130}, {Money(), 130}};
          return Status::Ok();
        }
        case kSendPayment: {
          ASYMNVM_ASSIGN_OR_RETURN(int64_t c0, Bal(x, kChk, a0));
          ASYMNVM_ASSIGN_OR_RETURN(int64_t c1, Bal(x, kChk, a1));
          if (c0 < 500) {
            failed = true;
            return Status::Ok();
          }
          ASYMNVM_RETURN_IF_ERROR(x.Put(kChk, a0, Enc(c0 - 500)));
          ASYMNVM_RETURN_IF_ERROR(x.Put(kChk, a1, Enc(c1 + 500)));
          eff_ = {{Q(kChk, a0), -500}, {Q(kChk, a1), 500}};
          return Status::Ok();
        }
        case kTransactSavings: {
          ASYMNVM_ASSIGN_OR_RETURN(int64_t s, Bal(x, kSav, a0));
          ASYMNVM_RETURN_IF_ERROR(x.Put(kSav, a0, Enc(s + 2020)));
          eff_ = {{Q(kSav, a0), 2020}, {Money(), 2020}};
          return Status::Ok();
        }
        case kWriteCheck: {
          ASYMNVM_ASSIGN_OR_RETURN(int64_t s, Bal(x, kSav, a0));
          ASYMNVM_ASSIGN_OR_RETURN(int64_t c, Bal(x, kChk, a0));
          const int64_t debit = s + c < 500 ? 600 : 500;
          ASYMNVM_RETURN_IF_ERROR(x.Put(kChk, a0, Enc(c - debit)));
          eff_ = {{Q(kChk, a0), -debit}, {Money(), -debit}};
          return Status::Ok();
        }
      }
      return Status::Internal("unknown type");
    };
    eff_.clear();
    st = body();
    if (st.ok() && failed) st = x.Abort();
    if (st.ok() && !failed) st = CommitWith(x, eff_);
    if (!st.ok()) return st;
    if (failed) return Outcome::kFailed;
    return Outcome::kCommitted;
  }

 private:
  uint32_t Q(size_t table, uint64_t acct) const { return static_cast<uint32_t>(table * n_ + acct); }
  uint32_t Money() const { return static_cast<uint32_t>(2 * n_); }
  uint64_t n_, hot_;
  Effect eff_;
};

class SmallBank final : public Workload {
 public:
  explicit SmallBank(uint64_t n)
      : n_(n), hot_(std::max<uint64_t>(1, std::min<uint64_t>(4000, n / 25))) {}
  std::string name() const override { return "smallbank"; }
  std::vector<std::string> TypeNames() const override {
    return {"amalgamate",   "balance",          "deposit_checking",
            "send_payment", "transact_savings", "write_check"};
  }
  structures::DatabaseOptions Schema() const override {
    structures::DatabaseOptions o;
    o.name = "sb";
    uint64_t buckets = 1024;
    while (buckets < n_ && buckets < (1u << 20)) buckets *= 2;
    o.tables = {{"sb.chk", structures::Kind::kHashTable, 8, buckets},
                {"sb.sav", structures::Kind::kHashTable, 8, buckets}};
    return o;
  }
  Status Load(Database& db, uint64_t,
              const std::function<void(uint64_t, uint64_t)>& progress) override {
    ASYMNVM_RETURN_IF_ERROR(db.LockAll());
    const uint64_t total = 2 * n_;
    // Batches of 512 accounts per table: one op log each (the hash table's PutBatch is atomic),
    // as TATP's load does.
    std::vector<structures::KeyValue> chk, sav;
    for (uint64_t a = 0; a < n_; a++) {
      chk.emplace_back(a, Enc(kStartCents));
      sav.emplace_back(a, Enc(kStartCents));
      if (chk.size() == 512 || a + 1 == n_) {
        ASYMNVM_RETURN_IF_ERROR(db.table(kChk).PutBatch(chk));
        ASYMNVM_RETURN_IF_ERROR(db.table(kSav).PutBatch(sav));
        chk.clear();
        sav.clear();
      }
      if (progress && (a + 1) % std::max<uint64_t>(1, n_ / 10) == 0) progress(2 * (a + 1), total);
    }
    return db.ReleaseLocks();
  }
  std::unique_ptr<Worker> MakeWorker(int) override { return std::make_unique<SbWorker>(n_, hot_); }
  size_t NumQuantities() const override { return 2 * n_ + 1; }
  std::string QuantityName(uint32_t q) const override {
    if (q == 2 * n_) return "total money (cents)";
    return std::string(q < n_ ? "sb.chk[" : "sb.sav[") + std::to_string(q % n_) + "] (cents)";
  }
  std::vector<int64_t> Initial(uint64_t) const override {
    std::vector<int64_t> v(2 * n_ + 1, kStartCents);
    v[2 * n_] = 2 * static_cast<int64_t>(n_) * kStartCents;
    return v;
  }
  Result<std::vector<int64_t>> Measure(Database& db) override {
    std::vector<int64_t> v(2 * n_ + 1, 0);
    for (size_t tb : {kChk, kSav}) {
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t count, db.table(tb).Count());
      if (count != n_)
        return Status::Corruption(db.options().tables[tb].name + " has " + std::to_string(count) +
                                  " rows, want " + std::to_string(n_));
      for (uint64_t a = 0; a < n_; a++) {
        structures::Value x;
        ASYMNVM_RETURN_IF_ERROR(
            db.table(tb).Get(a, &x).WithContext("account " + std::to_string(a)));
        if (x.size() != 8)
          return Status::Corruption("balance of account " + std::to_string(a) + " has " +
                                    std::to_string(x.size()) + " bytes");
        int64_t bal;
        std::memcpy(&bal, x.data(), 8);
        v[tb * n_ + a] = bal;
        v[2 * n_] += bal;
      }
    }
    return v;
  }

 private:
  uint64_t n_, hot_;
};

}  // namespace

std::unique_ptr<Workload> MakeSmallBank(uint64_t accounts) {
  return std::make_unique<SmallBank>(accounts);
}

}  // namespace asymnvm::txnbench
