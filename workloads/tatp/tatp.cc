// TATP (doc/workloads.md "TATP"; spec: workloads.md §1): five B+trees — SUBSCRIBER, ACCESS_INFO,
// SPECIAL_FACILITY, CALL_FORWARDING with composite keys packed into u64, and the sub_nbr → s_id
// index keyed by the 15-character sub_nbr itself (a byte-key B+tree) — NURand s_ids, the standard
// mix 35/10/35/2/14/2/2 and the spec-text population.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "workloads/txn/workload.h"

namespace asymnvm::txnbench {
namespace {

using structures::Database;
using structures::Txn;
using structures::Value;

// Table indexes; lock order is by name: tatp.ai < tatp.cf < tatp.nbr < tatp.sf < tatp.sub.
constexpr size_t kSub = 0, kAi = 1, kSf = 2, kCf = 3, kNbr = 4;
constexpr uint32_t kSubBytes = 40, kAiBytes = 16, kSfBytes = 8, kCfBytes = 16, kNbrBytes = 8;
constexpr uint32_t kNbrKeyBytes = 15;  // sub_nbr: VARCHAR(15)
enum Type { kGetSub, kGetNewDest, kGetAccess, kUpdSub, kUpdLoc, kInsCf, kDelCf, kTypes };
constexpr int kMix[kTypes] = {35, 10, 35, 2, 14, 2, 2};

uint64_t AiKey(uint64_t s, uint64_t t) { return s << 8 | t; }
uint64_t SfKey(uint64_t s, uint64_t t) { return s << 8 | t; }
uint64_t CfKey(uint64_t s, uint64_t t, uint64_t start) { return s << 16 | t << 8 | start; }
std::string SubNbr(uint64_t s) {
  char b[32];
  std::snprintf(b, sizeof b, "%015llu", static_cast<unsigned long long>(s));
  return b;
}
// The sub_nbr index key: the 15-character string itself.
structures::Key NbrKey(const std::string& nbr) { return structures::Key(nbr); }

uint64_t U(std::mt19937_64& r, uint64_t lo, uint64_t hi) { return lo + r() % (hi - lo + 1); }

struct Rng {
  uint64_t p, a;
  uint64_t NURand(std::mt19937_64& r) const { return ((U(r, 0, a) | U(r, 1, p)) % p) + 1; }
};

Value SubRow(std::mt19937_64& r, uint64_t s) {
  Value v(kSubBytes, 0);
  for (int i = 0; i < 10; i++) v[i] = static_cast<uint8_t>(U(r, 0, 1));         // bit_1..10
  for (int i = 0; i < 10; i++) v[10 + i] = static_cast<uint8_t>(U(r, 0, 15));   // hex_1..10
  for (int i = 0; i < 10; i++) v[20 + i] = static_cast<uint8_t>(U(r, 0, 255));  // byte2 (low)
  const uint32_t msc = static_cast<uint32_t>(U(r, 1, 0xFFFFFFFFull)),
                 vlr = static_cast<uint32_t>(U(r, 1, 0xFFFFFFFFull));
  std::memcpy(v.data() + 30, &msc, 4);
  std::memcpy(v.data() + 34, &vlr, 4);
  const uint16_t id16 = static_cast<uint16_t>(s);  // a check that the row belongs to s_id
  std::memcpy(v.data() + 38, &id16, 2);
  return v;
}

// Quantities (workload.h): the row counts of the five tables, by table index.
class TatpWorker final : public Worker {
 public:
  explicit TatpWorker(Rng g) : g_(g) {}
  Result<Outcome> RunOne(Database& db, std::mt19937_64& r, int* type) override {
    int x = static_cast<int>(r() % 100), t = 0;
    while (x >= kMix[t]) x -= kMix[t++];
    *type = t;
    const uint64_t s = g_.NURand(r);
    Status st = Status::Ok();
    bool found = true;
    auto abort_or = [](const Status& e) -> Result<Outcome> {
      if (e.code() == StatusCode::kAborted || e.code() == StatusCode::kTimedOut)
        return Outcome::kAborted;
      return e;
    };
    switch (t) {
      case kGetSub: {
        st = db.Read({kSub}, [&](Txn& tx) -> Status {
          Value v;
          ASYMNVM_RETURN_IF_ERROR(tx.Get(kSub, s, &v));
          uint16_t id16;
          std::memcpy(&id16, v.data() + 38, 2);
          if (v.size() != kSubBytes || id16 != static_cast<uint16_t>(s))
            return Status::Corruption("subscriber row of " + std::to_string(s) + " is not its own");
          return Status::Ok();
        });
        if (!st.ok()) return abort_or(st);
        return Outcome::kCommitted;
      }
      case kGetNewDest: {
        const uint64_t sf = U(r, 1, 4), start = 8 * U(r, 0, 2), end = U(r, 1, 24);
        st = db.Read({kSf, kCf}, [&](Txn& tx) -> Status {
          found = false;
          Value v;
          Status g = tx.Get(kSf, SfKey(s, sf), &v);
          if (g.code() == StatusCode::kNotFound) return Status::Ok();
          ASYMNVM_RETURN_IF_ERROR(g);
          if (v[0] != 1) return Status::Ok();
          for (uint64_t st0 = 0; st0 <= start; st0 += 8) {
            Value c;
            Status h = tx.Get(kCf, CfKey(s, sf, st0), &c);
            if (h.code() == StatusCode::kNotFound) continue;
            ASYMNVM_RETURN_IF_ERROR(h);
            if (end < c[0]) found = true;
          }
          return Status::Ok();
        });
        if (!st.ok()) return abort_or(st);
        return found ? Outcome::kCommitted : Outcome::kFailed;
      }
      case kGetAccess: {
        const uint64_t ai = U(r, 1, 4);
        st = db.Read({kAi}, [&](Txn& tx) -> Status {
          Value v;
          Status g = tx.Get(kAi, AiKey(s, ai), &v);
          found = g.ok();
          return g.code() == StatusCode::kNotFound ? Status::Ok() : g;
        });
        if (!st.ok()) return abort_or(st);
        return found ? Outcome::kCommitted : Outcome::kFailed;
      }
      default:
        break;
    }
    // Write transactions: every check before the first write.
    std::vector<size_t> tables;
    if (t == kUpdSub)
      tables = {kSub, kSf};
    else if (t == kUpdLoc)
      tables = {kNbr, kSub};
    else if (t == kInsCf)
      tables = {kNbr, kSf, kCf};
    else
      tables = {kNbr, kCf};
    auto txn = db.Begin(tables);
    if (!txn.ok()) return abort_or(txn.status());
    Txn& tx = **txn;
    int cf_delta = 0;
    auto resolve = [&](uint64_t* sid) -> Status {  // sub_nbr → s_id through the index
      const std::string nbr = SubNbr(s);
      Value v;
      ASYMNVM_RETURN_IF_ERROR(tx.Get(kNbr, NbrKey(nbr), &v).WithContext("sub_nbr " + nbr));
      if (v.size() != kNbrBytes)
        return Status::Corruption("sub_nbr index row of " + nbr + " is not an s_id");
      std::memcpy(sid, v.data(), 8);
      return Status::Ok();
    };
    auto body = [&]() -> Status {
      switch (t) {
        case kUpdSub: {
          const uint64_t sf = U(r, 1, 4);
          const uint8_t bit = static_cast<uint8_t>(U(r, 0, 1)),
                        data_a = static_cast<uint8_t>(U(r, 0, 255));
          Value sfrow, sub;
          Status g = tx.Get(kSf, SfKey(s, sf), &sfrow);
          if (g.code() == StatusCode::kNotFound) {
            found = false;
            return Status::Ok();
          }
          ASYMNVM_RETURN_IF_ERROR(g);
          ASYMNVM_RETURN_IF_ERROR(tx.Get(kSub, s, &sub));
          sub[0] = bit;
          sfrow[2] = data_a;
          ASYMNVM_RETURN_IF_ERROR(tx.Put(kSub, s, sub));
          return tx.Put(kSf, SfKey(s, sf), sfrow);
        }
        case kUpdLoc: {
          const uint32_t vlr = static_cast<uint32_t>(U(r, 1, 0xFFFFFFFFull));
          uint64_t sid;
          ASYMNVM_RETURN_IF_ERROR(resolve(&sid));
          Value sub;
          ASYMNVM_RETURN_IF_ERROR(tx.Get(kSub, sid, &sub));
          std::memcpy(sub.data() + 34, &vlr, 4);
          return tx.Put(kSub, sid, sub);
        }
        case kInsCf: {
          const uint64_t sf = U(r, 1, 4), start = 8 * U(r, 0, 2), end = U(r, 1, 24);
          uint64_t sid;
          ASYMNVM_RETURN_IF_ERROR(resolve(&sid));
          Value sfrow, cf;
          Status g = tx.Get(kSf, SfKey(sid, sf), &sfrow);
          if (g.code() == StatusCode::kNotFound) {  // FK violation: an expected failure
            found = false;
            return Status::Ok();
          }
          ASYMNVM_RETURN_IF_ERROR(g);
          g = tx.Get(kCf, CfKey(sid, sf, start), &cf);
          if (g.ok()) {  // PK violation: an expected failure
            found = false;
            return Status::Ok();
          }
          if (g.code() != StatusCode::kNotFound) return g;
          Value row(kCfBytes, 0);
          row[0] = static_cast<uint8_t>(end);
          const std::string nx = SubNbr(g_.NURand(r));
          std::memcpy(row.data() + 1, nx.data(), 15);
          cf_delta = 1;
          return tx.Put(kCf, CfKey(sid, sf, start), row);
        }
        case kDelCf: {
          const uint64_t sf = U(r, 1, 4), start = 8 * U(r, 0, 2);
          uint64_t sid;
          ASYMNVM_RETURN_IF_ERROR(resolve(&sid));
          Status g = tx.Delete(kCf, CfKey(sid, sf, start));
          if (g.code() == StatusCode::kNotFound) {
            found = false;
            return Status::Ok();
          }
          cf_delta = -1;
          return g;
        }
      }
      return Status::Internal("unknown type");
    };
    st = body();
    Effect eff;
    if (cf_delta != 0) eff.emplace_back(static_cast<uint32_t>(kCf), cf_delta);
    if (st.ok()) st = found ? CommitWith(tx, eff) : tx.Abort();
    if (!st.ok()) return st;
    if (!found) return Outcome::kFailed;
    return Outcome::kCommitted;
  }

 private:
  Rng g_;
};

class Tatp final : public Workload {
 public:
  explicit Tatp(uint64_t p) : p_(p) {}
  std::string name() const override { return "tatp"; }
  std::vector<std::string> TypeNames() const override {
    return {"get_subscriber_data",    "get_new_destination", "get_access_data",
            "update_subscriber_data", "update_location",     "insert_call_forwarding",
            "delete_call_forwarding"};
  }
  structures::DatabaseOptions Schema() const override {
    structures::DatabaseOptions o;
    o.name = "tatp";
    o.tables = {{"tatp.sub", structures::Kind::kBPlusTree, kSubBytes, 0},
                {"tatp.ai", structures::Kind::kBPlusTree, kAiBytes, 0},
                {"tatp.sf", structures::Kind::kBPlusTree, kSfBytes, 0},
                {"tatp.cf", structures::Kind::kBPlusTree, kCfBytes, 0},
                {"tatp.nbr", structures::Kind::kBPlusTree, kNbrBytes, 0, kNbrKeyBytes}};
    return o;
  }
  Status Load(Database& db, uint64_t seed,
              const std::function<void(uint64_t, uint64_t)>& progress) override {
    ASYMNVM_RETURN_IF_ERROR(db.LockAll());
    std::vector<structures::KeyValue> rows[5];
    auto flush = [&]() -> Status {
      for (size_t t = 0; t < 5; t++) {
        if (!rows[t].empty()) ASYMNVM_RETURN_IF_ERROR(db.table(t).PutBatch(rows[t]));
        rows[t].clear();
      }
      return Status::Ok();
    };
    Status st = Status::Ok();
    Populate(
        seed,
        [&](size_t t, const structures::Key& k, const Value& v) { rows[t].emplace_back(k, v); },
        [&](uint64_t s) {
          if (!st.ok()) return;
          if (rows[kSub].size() >= 512) st = flush();
          if (progress && s % std::max<uint64_t>(1, p_ / 10) == 0) progress(s, p_);
        });
    ASYMNVM_RETURN_IF_ERROR(st);
    ASYMNVM_RETURN_IF_ERROR(flush());
    return db.ReleaseLocks();
  }
  std::unique_ptr<Worker> MakeWorker(int) override {
    uint64_t a = p_ <= 1000000 ? 65535 : p_ <= 10000000 ? 1048575 : 2097151;
    return std::make_unique<TatpWorker>(Rng{p_, a});
  }
  size_t NumQuantities() const override { return 5; }
  std::string QuantityName(uint32_t q) const override {
    return Schema().tables.at(q).name + " row count";
  }
  std::vector<int64_t> Initial(uint64_t seed) const override {
    std::vector<int64_t> n(5, 0);
    Populate(
        seed, [&](size_t t, const structures::Key&, const Value&) { n[t]++; }, [](uint64_t) {});
    return n;
  }
  Result<std::vector<int64_t>> Measure(Database& db) override {
    std::vector<int64_t> n(5, 0);
    for (size_t t = 0; t < 5; t++) {
      ASYMNVM_RETURN_IF_ERROR(db.table(t).Verify().WithContext(db.options().tables[t].name));
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t c, db.table(t).Count());
      n[t] = static_cast<int64_t>(c);
    }
    if (n[kSub] != static_cast<int64_t>(p_) || n[kNbr] != static_cast<int64_t>(p_)) {
      return Status::Corruption("tatp.sub has " + std::to_string(n[kSub]) + " rows and tatp.nbr " +
                                std::to_string(n[kNbr]) + ", want " + std::to_string(p_) + " each");
    }
    // Every call-forwarding row has its special-facility row; sub_nbr rows match their ids.
    std::vector<structures::KeyValue> rows;
    for (uint64_t from = 0;;) {
      ASYMNVM_RETURN_IF_ERROR(db.table(kCf).Scan(from, 1024, &rows));
      for (auto& [key, v] : rows) {
        const uint64_t k = key.u64();
        const uint64_t s = k >> 16, sf = (k >> 8) & 0xFF, start = k & 0xFF;
        Value x;
        if (s < 1 || s > p_ || sf < 1 || sf > 4 || start % 8 != 0 || start > 16)
          return Status::Corruption("call-forwarding key " + std::to_string(k) + " is malformed");
        if (!db.table(kSf).Get(SfKey(s, sf), &x).ok()) {
          return Status::Corruption("call-forwarding row (" + std::to_string(s) + ", " +
                                    std::to_string(sf) + ", " + std::to_string(start) +
                                    ") has no special-facility row");
        }
        if (v.size() != kCfBytes || v[0] < 1 || v[0] > 24)
          return Status::Corruption("call-forwarding end_time out of range");
      }
      if (rows.size() < 1024) break;
      from = rows.back().first.u64() + 1;
    }
    for (uint64_t s = 1; s <= p_; s++) {
      const std::string nb = SubNbr(s);
      Value v, sub;
      ASYMNVM_RETURN_IF_ERROR(db.table(kNbr).Get(NbrKey(nb), &v).WithContext("sub_nbr " + nb));
      uint64_t id;
      std::memcpy(&id, v.data(), 8);
      if (v.size() != kNbrBytes || id != s)
        return Status::Corruption("sub_nbr " + nb + " maps to s_id " + std::to_string(id));
      ASYMNVM_RETURN_IF_ERROR(
          db.table(kSub).Get(s, &sub).WithContext("subscriber " + std::to_string(s)));
      uint16_t id16;
      std::memcpy(&id16, sub.data() + 38, 2);
      if (id16 != static_cast<uint16_t>(s))
        return Status::Corruption("subscriber row " + std::to_string(s) + " holds another id");
    }
    return n;
  }

 private:
  // The spec-text population drawn from `seed`: row(table, key, value) for every row, then
  // subscriber_done(s) after subscriber s's rows (Load writes them, Initial counts them).
  void Populate(uint64_t seed,
                const std::function<void(size_t, const structures::Key&, const Value&)>& row,
                const std::function<void(uint64_t)>& subscriber_done) const {
    std::mt19937_64 r(seed);
    for (uint64_t s = 1; s <= p_; s++) {
      row(kSub, s, SubRow(r, s));
      const std::string nb = SubNbr(s);
      Value nrow(kNbrBytes, 0);
      std::memcpy(nrow.data(), &s, 8);
      row(kNbr, NbrKey(nb), nrow);
      auto pick = [&](uint64_t n) {  // n distinct of {1,2,3,4}
        std::vector<uint64_t> all{1, 2, 3, 4};
        std::shuffle(all.begin(), all.end(), r);
        all.resize(n);
        return all;
      };
      for (uint64_t t : pick(U(r, 1, 4))) {
        Value v(kAiBytes, 0);
        v[0] = static_cast<uint8_t>(U(r, 0, 255));
        v[2] = static_cast<uint8_t>(U(r, 0, 255));
        for (int i = 0; i < 8; i++) v[4 + i] = static_cast<uint8_t>('A' + U(r, 0, 25));
        row(kAi, AiKey(s, t), v);
      }
      for (uint64_t t : pick(U(r, 1, 4))) {
        Value v(kSfBytes, 0);
        v[0] = U(r, 1, 100) <= 85 ? 1 : 0;
        v[1] = static_cast<uint8_t>(U(r, 0, 255));
        v[2] = static_cast<uint8_t>(U(r, 0, 255));
        for (int i = 0; i < 5; i++) v[3 + i] = static_cast<uint8_t>('A' + U(r, 0, 25));
        row(kSf, SfKey(s, t), v);
        std::vector<uint64_t> starts{0, 8, 16};
        std::shuffle(starts.begin(), starts.end(), r);
        starts.resize(U(r, 0, 3));
        for (uint64_t st : starts) {
          Value c(kCfBytes, 0);
          c[0] = static_cast<uint8_t>(st + U(r, 1, 8));  // spec text: start_time + U[1,8]
          const std::string nx = SubNbr(U(r, 1, p_));
          std::memcpy(c.data() + 1, nx.data(), 15);
          row(kCf, CfKey(s, t, st), c);
        }
      }
      subscriber_done(s);
    }
  }

  uint64_t p_;
};

}  // namespace

std::unique_ptr<Workload> MakeTatp(uint64_t subscribers) {
  return std::make_unique<Tatp>(subscribers);
}

}  // namespace asymnvm::txnbench
