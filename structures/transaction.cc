// Transactions across structures (include/asymnvm/structures/transaction.h; doc/frontend.md
// "Transactions across structures").
//
// Op-log payload of a transaction (op type kOpTxn on the transaction root, little-endian):
//   version u8 (1) | reserved u8 | count u16 | count × op
//   op: structure id u32 | kind u8 (1 put, 2 delete) | reserved u8 | value length u16 |
//       key u64 | value bytes
#include "asymnvm/structures/transaction.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "common/logging.h"
#include "structures/base.h"

namespace asymnvm::structures {
namespace {

constexpr uint8_t kPayloadVersion = 1;
constexpr uint8_t kPut = 1, kDelete = 2;
constexpr size_t kOpHeader = 16;     // with an integer key
constexpr size_t kOpHeaderMin = 11;  // with a 1-byte key

std::mutex g_mu;
std::map<const frontend::Session*, Database*>& Registry() {
  static auto* r = new std::map<const frontend::Session*, Database*>();
  return *r;
}

internal::Base* AsBase(Map* m) { return dynamic_cast<internal::Base*>(m); }

}  // namespace

// ---- Txn ----

Status Txn::CheckTable(size_t table) const {
  if (done_) return Status::FailedPrecondition("transaction already committed or aborted");
  if (std::find(tables_.begin(), tables_.end(), table) == tables_.end()) {
    return Status::InvalidArgument("table " + std::to_string(table) +
                                   " is not in the transaction's table set");
  }
  return Status::Ok();
}

Status Txn::Get(size_t table, const Key& key, Value* value) {
  ASYMNVM_RETURN_IF_ERROR(CheckTable(table));
  Map& m = (read_only_ && !db_->read_direct_) ? *db_->readers_[table] : *db_->writers_[table];
  return m.Get(key, value);
}

Status Txn::Put(size_t table, const Key& key, std::span<const uint8_t> value) {
  ASYMNVM_RETURN_IF_ERROR(CheckTable(table));
  if (read_only_) return Status::FailedPrecondition("Put in a read-only transaction");
  Map& m = *db_->writers_[table];
  // A bad key or value is refused before anything reaches the session (a clean error).
  ASYMNVM_RETURN_IF_ERROR(AsBase(&m)->CheckKey(key));
  if (value.size() > m.value_size()) {
    return Status::InvalidArgument("table '" + db_->o_.tables[table].name + "': value of " +
                                   std::to_string(value.size()) + " bytes exceeds value_size " +
                                   std::to_string(m.value_size()));
  }
  if (nops_ == 0xFFFF)
    return Status::ResourceExhausted("more than 65535 writes in one transaction");
  Status st = m.Put(key, value);
  if (!st.ok()) {
    // Part of the put may be in the session's current operation: not a clean abort.
    db_->broken_ = st.WithContext("transaction write");
    return db_->broken_;
  }
  AppendOp(m.structure().id, kPut, key, value);
  nops_++;
  return Status::Ok();
}

void Txn::AppendOp(uint32_t id, uint8_t kind, const Key& key, std::span<const uint8_t> value) {
  const size_t key_bytes = key.is_int() ? 8 : 2 + key.bytes().size();
  const size_t at = payload_.size();
  payload_.resize(at + 8 + key_bytes + value.size());
  uint8_t* p = payload_.data() + at;
  internal::PutU32(p, id);
  p[4] = kind;
  p[5] = 0;
  const uint16_t len = static_cast<uint16_t>(value.size());
  std::memcpy(p + 6, &len, 2);
  if (key.is_int()) {
    internal::PutU64(p + 8, key.u64());
  } else {
    const uint16_t klen = static_cast<uint16_t>(key.bytes().size());
    std::memcpy(p + 8, &klen, 2);
    std::memcpy(p + 10, key.bytes().data(), klen);
  }
  if (!value.empty()) std::memcpy(p + 8 + key_bytes, value.data(), value.size());
}

Status Txn::Delete(size_t table, const Key& key) {
  ASYMNVM_RETURN_IF_ERROR(CheckTable(table));
  if (read_only_) return Status::FailedPrecondition("Delete in a read-only transaction");
  Map& m = *db_->writers_[table];
  ASYMNVM_RETURN_IF_ERROR(AsBase(&m)->CheckKey(key));
  {
    Value v;
    Status g = m.Get(key, &v);
    if (!g.ok()) return g;  // kNotFound: nothing written
  }
  if (nops_ == 0xFFFF)
    return Status::ResourceExhausted("more than 65535 writes in one transaction");
  Status st = m.Delete(key);
  if (!st.ok()) {
    db_->broken_ = st.WithContext("transaction delete");
    return db_->broken_;
  }
  AppendOp(m.structure().id, kDelete, key, {});
  nops_++;
  return Status::Ok();
}

Txn::~Txn() {
  if (!done_) (void)Abort();
}

Status Txn::Commit() {
  if (done_) return Status::FailedPrecondition("transaction already committed or aborted");
  done_ = true;
  return db_->Finish(this);
}

Status Txn::Abort() {
  if (done_) return Status::FailedPrecondition("transaction already committed or aborted");
  done_ = true;
  db_->SetInTxn(false);
  db_->open_txn_ = false;
  if (nops_ > 0) {
    // Its writes are in the session's current operation, not logged. A session that reconnects
    // at its next call drops them with the old connection (and the tables re-read their state:
    // Base::Resync); otherwise they cannot be taken back.
    if (db_->s_.reconnect_pending()) return Status::Ok();
    db_->broken_ =
        Status::FailedPrecondition("a transaction was aborted after it wrote; reopen the session");
    return db_->broken_;
  }
  return Status::Ok();
}

// ---- Database ----

Database::Database(frontend::Session& s, DatabaseOptions o) : s_(s), o_(std::move(o)) {}

Result<std::unique_ptr<Database>> Database::Open(frontend::Session& session,
                                                 const DatabaseOptions& options) {
  if (options.tables.empty()) return Status::InvalidArgument("database: no tables");
  if (options.name.empty() || options.name.size() + 4 > 63) {
    return Status::InvalidArgument("database: name must be 1..59 bytes");
  }
  std::set<std::string> names;
  for (const TableSpec& t : options.tables) {
    if (t.kind != Kind::kHashTable && t.kind != Kind::kBPlusTree) {
      return Status::InvalidArgument("database: table '" + t.name + "' is a " + KindName(t.kind) +
                                     "; transactions support hash and bptree tables");
    }
    if (!names.insert(t.name).second)
      return Status::InvalidArgument("database: duplicate table '" + t.name + "'");
  }
  std::unique_ptr<Database> db(new Database(session, options));
  ASYMNVM_ASSIGN_OR_RETURN(db->root_, session.CreateRoot(options.name + ".txn", kTxnRootType));
  for (const TableSpec& t : options.tables) {
    Options wo;
    wo.value_size = t.value_size;
    wo.param = t.param;
    wo.key_size = t.key_size;
    wo.optimize = false;  // no DRAM state beyond the anchor words (Refresh re-reads them)
    wo.lock_at_open = false;
    Options ro = wo;
    ro.access = Access::kReader;
    // Created by a writer first; then the reader, then the writer, so that the writer is the
    // handle Session::Replay finds for the table's own op logs (a loader's puts).
    { ASYMNVM_ASSIGN_OR_RETURN(auto created, OpenMap(session, t.kind, t.name, wo)); }
    ASYMNVM_ASSIGN_OR_RETURN(auto r, OpenMap(session, t.kind, t.name, ro));
    ASYMNVM_ASSIGN_OR_RETURN(auto w, OpenMap(session, t.kind, t.name, wo));
    db->readers_.push_back(std::move(r));
    db->writers_.push_back(std::move(w));
  }
  db->held_.assign(options.tables.size(), false);
  db->order_.resize(options.tables.size());
  for (size_t i = 0; i < db->order_.size(); i++) db->order_[i] = i;
  std::sort(db->order_.begin(), db->order_.end(),
            [&](size_t a, size_t b) { return options.tables[a].name < options.tables[b].name; });
  {
    std::lock_guard<std::mutex> l(g_mu);
    Registry()[&session] = db.get();
  }
  session.RegisterReplay(
      kTxnRootType,
      [](frontend::Session& s, const frontend::Structure&,
         const frontend::RecoveredOp& op) -> Status {
        Database* d = nullptr;
        {
          std::lock_guard<std::mutex> l(g_mu);
          auto it = Registry().find(&s);
          if (it != Registry().end()) d = it->second;
        }
        if (d == nullptr)
          return Status::FailedPrecondition("replay: no database open in this session");
        return d->ReplayTxn(op);
      });
  RegisterReplays(session);  // plain ops of the tables (loads) replay through their handles
  // A dead writer holding a lock this session waits for (Session::AdoptDeadWriter): its
  // transactions replay through a Database on the recovery session — the Recover a restarted
  // front-end runs (replay, release its table locks) — and other structures it names as
  // RegisterReplays' adopter does. (That adopter alone cannot replay a transaction: the replay
  // function finds no Database in the recovery session, and failed.)
  session.SetAdopter([options](frontend::Session& recovery,
                               const std::vector<frontend::Structure>& named) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(auto rdb, Database::Open(recovery, options));
    std::vector<uint32_t> mine = {rdb->root_.id};
    for (const auto& w : rdb->writers_) mine.push_back(w->structure().id);
    Status st = internal::AdoptStructures(recovery, named, mine, [&] { return rdb->Recover(); });
    rdb.reset();
    return st;
  });
  return db;
}

Database::~Database() {
  Status st = ReleaseLocks();
  if (!st.ok())
    LOG_WARN("txn", "database '" << o_.name << "': release at close: " << st.ToString());
  std::lock_guard<std::mutex> l(g_mu);
  auto it = Registry().find(&s_);
  if (it != Registry().end() && it->second == this) Registry().erase(it);
}

void Database::SetInTxn(bool on) {
  for (auto& w : writers_) AsBase(w.get())->set_in_txn(on);
  s_.SetGroupWrites(on);
}

namespace {

// Takes a table's writer lock for a Database (see Release).
Status LockTable(frontend::Session& session, const frontend::Structure& st) {
  Status s = session.WriterLock(st);
  if (s.code() == StatusCode::kFailedPrecondition) {
    // The session holds the lock though this database does not: an earlier release failed on a
    // lost connection. Release it for real (after a fence; if the lock word is not ours any more
    // the session just forgets it), then take it again — with the cache invalidation and refresh
    // of a fresh acquisition: another front-end may have held it in between.
    Status u = session.WriterUnlock(st);
    if (!u.ok() && u.code() != StatusCode::kFailedPrecondition) return u;
    s = session.WriterLock(st);
  }
  return s;
}

}  // namespace

Status Database::Release(size_t t) {
  if (!held_[t]) return Status::Ok();
  held_[t] = false;
  // A release lost with the connection leaves the truth unknown (the CAS may have run before the
  // back-end died): this database no longer counts on the lock, and the next LockTable sorts
  // out the session's view.
  return s_.WriterUnlock(writers_[t]->structure());
}

Status Database::ReleaseLocks() {
  Status first = Status::Ok();
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    Status st = Release(*it);
    if (first.ok() && !st.ok()) first = st;
  }
  since_lock_ = 0;
  return first;
}

Status Database::TakeLock(size_t t, bool wait, bool* taken) {
  *taken = false;
  if (wait) {
    Status st = LockTable(s_, writers_[t]->structure());
    if (!st.ok()) return st;
  } else {
    // One CAS, no waiting: taken out of name order, so it must never wait (a front-end blocked
    // here while holding a later lock could close a cycle with one taking them in order).
    auto got = s_.TryWriterLock(writers_[t]->structure(), std::chrono::milliseconds(0));
    if (!got.ok()) return got.status();
    if (!*got) return Status::Ok();
  }
  held_[t] = true;
  *taken = true;
  since_lock_ = 0;
  if (!wait) c_.try_locks++;
  return Status::Ok();
}

Status Database::AcquireFor(const std::vector<size_t>& tables) {
  if (o_.hold_txns != 0 && since_lock_ >= o_.hold_txns) ASYMNVM_RETURN_IF_ERROR(ReleaseLocks());
  // The first missing table in name order.
  std::vector<bool> need(writers_.size(), false);
  for (size_t t : tables) need[t] = true;
  size_t first_missing_rank = order_.size();
  for (size_t r = 0; r < order_.size(); r++) {
    if (need[order_[r]] && !held_[order_[r]]) {
      first_missing_rank = r;
      break;
    }
  }
  if (first_missing_rank == order_.size()) return Status::Ok();
  // A missing lock that sorts before a held one is first tried without waiting (the lock words
  // are almost always free when one front-end runs alone): taken, nothing held is given up and
  // the cache keeps what it holds under the held locks. Only when such a try fails are the held
  // locks after the first missing one released, so that every wait is in ascending name order.
  bool later_held = false;
  for (size_t r = first_missing_rank + 1; r < order_.size(); r++) later_held |= held_[order_[r]];
  if (later_held) {
    bool all = true;
    for (size_t r = first_missing_rank; r < order_.size() && all; r++) {
      const size_t t = order_[r];
      if (!need[t] || held_[t]) continue;
      bool after = false;
      for (size_t q = r + 1; q < order_.size(); q++) after |= held_[order_[q]];
      if (!after) break;  // the rest can wait in order below
      bool taken = false;
      ASYMNVM_RETURN_IF_ERROR(TakeLock(t, /*wait=*/false, &taken));
      if (!taken) {
        c_.try_lock_misses++;
        all = false;
        break;
      }
      // Another front-end may have changed the table since this one last held it.
      ASYMNVM_RETURN_IF_ERROR(AsBase(writers_[t].get())->Refresh());
    }
    first_missing_rank = order_.size();
    for (size_t r = 0; r < order_.size(); r++) {
      if (need[order_[r]] && !held_[order_[r]]) {
        first_missing_rank = r;
        break;
      }
    }
    if (first_missing_rank == order_.size()) return Status::Ok();
  }
  // Held locks after it are released first: locks are only ever waited for in ascending name
  // order.
  for (size_t r = order_.size(); r-- > first_missing_rank + 1;)
    ASYMNVM_RETURN_IF_ERROR(Release(order_[r]));
  for (size_t r = first_missing_rank; r < order_.size(); r++) {
    const size_t t = order_[r];
    if (!need[t] || held_[t]) continue;
    bool taken = false;
    Status st = TakeLock(t, /*wait=*/true, &taken);
    if (!st.ok()) {
      Status rel = ReleaseLocks();
      if (!rel.ok()) LOG_WARN("txn", "release after a lock failure: " << rel.ToString());
      if (st.code() == StatusCode::kTimedOut) {
        c_.lock_aborts++;
        return Status::Aborted("lock of table '" + o_.tables[t].name +
                               "' not obtained in time: " + st.message());
      }
      return st;
    }
    ASYMNVM_RETURN_IF_ERROR(AsBase(writers_[t].get())->Refresh());
  }
  return Status::Ok();
}

Status Database::LockAll() {
  std::vector<size_t> all(writers_.size());
  for (size_t i = 0; i < all.size(); i++) all[i] = i;
  return AcquireFor(all);
}

Result<std::unique_ptr<Txn>> Database::Begin(std::vector<size_t> tables) {
  ASYMNVM_RETURN_IF_ERROR(broken_);
  if (open_txn_) return Status::FailedPrecondition("another transaction is open in this database");
  for (size_t t : tables) {
    if (t >= writers_.size()) return Status::InvalidArgument("no table " + std::to_string(t));
  }
  ASYMNVM_RETURN_IF_ERROR(AcquireFor(tables));
  std::unique_ptr<Txn> txn(new Txn(this));
  txn->tables_ = std::move(tables);
  txn->payload_.resize(4);
  txn->payload_[0] = kPayloadVersion;
  open_txn_ = true;
  SetInTxn(true);
  return txn;
}

Status Database::Finish(Txn* t) {
  open_txn_ = false;
  if (t->nops_ == 0) {
    SetInTxn(false);
    since_lock_++;
    return Status::Ok();
  }
  std::memcpy(t->payload_.data() + 2, &t->nops_, 2);
  Status st = Status::Ok();
  if (s_.level() != frontend::Level::kNaive) {
    auto seq = s_.OpLog(root_, kOpTxn, t->payload_);
    st = seq.status();
    if (seq.ok()) t->op_seq_ = *seq;
  }
  // The writes are in the session's current operation: one memory-log transaction bracketing
  // the transaction root's sequence word (naive: sent and fenced here).
  if (st.ok()) st = s_.TxWrite(root_);
  SetInTxn(false);
  if (!st.ok()) {
    if (s_.reconnect_pending()) {
      // The connection broke: the session reconnects at its next call and its replay applies
      // this transaction exactly once if its op log was acknowledged, not at all otherwise.
      return st.WithContext(
          "transaction commit: outcome unknown (the session reconnects and replays at its "
          "next call; this database stays usable)");
    }
    broken_ = st.WithContext("transaction commit");
    return broken_;
  }
  c_.commits++;
  since_lock_++;
  return Status::Ok();
}

Status Database::Read(std::vector<size_t> tables, const std::function<Status(Txn&)>& body) {
  ASYMNVM_RETURN_IF_ERROR(broken_);
  if (open_txn_) return Status::FailedPrecondition("another transaction is open in this database");
  for (size_t t : tables) {
    if (t >= writers_.size()) return Status::InvalidArgument("no table " + std::to_string(t));
  }
  if (o_.hold_txns != 0 && since_lock_ >= o_.hold_txns) ASYMNVM_RETURN_IF_ERROR(ReleaseLocks());
  bool all_held = true;
  for (size_t t : tables) all_held = all_held && held_[t];
  if (!all_held && o_.read_locks) {
    if (read_try_skip_ > 0) {
      read_try_skip_--;
    } else {
      // The missing locks, each tried once without waiting (so in any order): with them the
      // body reads through the cache and needs no validation round trip, and so do the next
      // read-only transactions on these tables while the locks are held. A lock another
      // front-end holds is not tried again for the next hold_txns read-only transactions.
      all_held = true;
      for (size_t t : tables) {
        if (held_[t]) continue;
        bool taken = false;
        ASYMNVM_RETURN_IF_ERROR(TakeLock(t, /*wait=*/false, &taken));
        if (!taken) {
          c_.try_lock_misses++;
          read_try_skip_ = o_.hold_txns != 0 ? o_.hold_txns : 64;
          all_held = false;
          break;
        }
        ASYMNVM_RETURN_IF_ERROR(AsBase(writers_[t].get())->Refresh());
      }
    }
  }
  Txn txn(this);
  txn.tables_ = std::move(tables);
  txn.read_only_ = true;
  since_lock_++;
  if (all_held) {
    read_direct_ = true;
    Status st = body(txn);
    read_direct_ = false;
    return st;
  }
  const uint64_t before = s_.counters().reader_retries;
  Status st = s_.ReadConsistent(root_, [&]() { return body(txn); });
  c_.read_retries += s_.counters().reader_retries - before;
  return st;
}

Status Database::ReplayTxn(const frontend::RecoveredOp& op) {
  if (op.op_type != kOpTxn)
    return Status::Corruption("transaction root: unknown op type " + std::to_string(op.op_type));
  const auto& p = op.payload;
  if (p.size() < 4 || p[0] != kPayloadVersion)
    return Status::Corruption("transaction op log: bad header");
  uint16_t n;
  std::memcpy(&n, p.data() + 2, 2);
  std::map<uint32_t, size_t> by_id;
  for (size_t i = 0; i < writers_.size(); i++) by_id[writers_[i]->structure().id] = i;
  // Decode everything before writing anything.
  struct Op {
    size_t table;
    uint8_t kind;
    Key key;
    std::span<const uint8_t> value;
  };
  std::vector<Op> ops;
  size_t at = 4;
  for (uint16_t i = 0; i < n; i++) {
    if (p.size() - at < kOpHeaderMin)
      return Status::Corruption("transaction op log: op " + std::to_string(i) + " truncated");
    const uint32_t id = internal::GetU32(p.data() + at);
    const uint8_t kind = p[at + 4];
    uint16_t len;
    std::memcpy(&len, p.data() + at + 6, 2);
    auto it = by_id.find(id);
    if (it == by_id.end())
      return Status::Corruption("transaction op log names structure " + std::to_string(id) +
                                ", not a table of this database");
    const uint32_t key_size = writers_[it->second]->key_size();
    Key key;
    size_t key_bytes = 8;
    if (key_size == 0) {
      if (p.size() - at < kOpHeader)
        return Status::Corruption("transaction op log: op " + std::to_string(i) + " truncated");
      key = Key(internal::GetU64(p.data() + at + 8));
    } else {
      uint16_t klen;
      std::memcpy(&klen, p.data() + at + 8, 2);
      if (klen == 0 || klen > key_size || p.size() - at - 10 < klen) {
        return Status::Corruption("transaction op log: op " + std::to_string(i) +
                                  " has a bad key length");
      }
      key = Key(std::string_view(reinterpret_cast<const char*>(p.data()) + at + 10, klen));
      key_bytes = 2 + klen;
    }
    const size_t head = 8 + key_bytes;
    if ((kind != kPut && kind != kDelete) || (kind == kDelete && len != 0) ||
        p.size() - at < head || p.size() - at - head < len) {
      return Status::Corruption("transaction op log: op " + std::to_string(i) + " malformed");
    }
    if (len > writers_[it->second]->value_size())
      return Status::Corruption("transaction op log: value too long");
    ops.push_back(
        {it->second, kind, std::move(key), std::span<const uint8_t>(p.data() + at + head, len)});
    at += head + len;
  }
  if (at != p.size()) return Status::Corruption("transaction op log: trailing bytes");
  // The tables' locks are still held by this front-end id (its crashed session never released
  // them: a lock is released only after a fence, when the transaction is covered by the OPN), so
  // the tables are exactly as before the transaction.
  for (auto& w : writers_) ASYMNVM_RETURN_IF_ERROR(AsBase(w.get())->Refresh());
  SetInTxn(true);
  Status st = Status::Ok();
  for (const Op& o : ops) {
    st = o.kind == kPut ? writers_[o.table]->Put(o.key, o.value) : writers_[o.table]->Delete(o.key);
    if (!st.ok()) break;
  }
  // Session::Replay sends the memory logs with TxWrite(transaction root).
  SetInTxn(false);
  if (!st.ok()) {
    return st.WithContext("transaction replay");
  }
  c_.replayed++;
  return Status::Ok();
}

Status Database::Recover() {
  ASYMNVM_RETURN_IF_ERROR(s_.Replay());
  // Locks an earlier session of this front-end id held (its crash kept them).
  for (size_t r = 0; r < order_.size(); r++) {
    const size_t t = order_[r];
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t owner, s_.ReadWord(writers_[t]->structure().lock_addr));
    if (owner == s_.frontend_id() && !held_[t]) {
      ASYMNVM_RETURN_IF_ERROR(LockTable(s_, writers_[t]->structure()));
      ASYMNVM_RETURN_IF_ERROR(s_.WriterUnlock(writers_[t]->structure()));
    }
  }
  for (auto& w : writers_) ASYMNVM_RETURN_IF_ERROR(AsBase(w.get())->Refresh());
  return Status::Ok();
}

}  // namespace asymnvm::structures
