// Transactions across structures of one back-end (doc/frontend.md "Transactions").
//
// A Database is a set of maps ("tables": hash tables or B+trees) plus a transaction root, all
// named roots of one back-end, opened in one Session. A write transaction
//   Begin(tables)            writer locks of `tables`, taken in name order, each within
//                            SessionOptions::lock_timeout; a lock not obtained → kAborted, every
//                            lock this call took released, nothing written
//   Get / Put / Delete ...   reads see the transaction's own writes; writes are memory logs only
//   Commit()                 ONE op log (op type kOpTxn on the transaction root: the write set)
//                            and ONE memory-log transaction holding every write of every table
// is all-or-nothing across a crash of the front-end or of the back-end: the op log is durable
// before any memory log is sent, the memory logs travel in one Ordered-Queue transaction that
// also carries the OPN covering the op log, and Session::Replay re-executes the op log (its
// write set, logically) iff that transaction was not applied. At `naive` (no op log) Commit sends
// the one transaction and fences it before returning.
//
// Locks stay held after Commit for up to DatabaseOptions::hold_txns transactions (the writer of
// §6 keeps its lock; batching at rcb needs it). A transaction that needs a lock sorting before
// one it holds first tries it with one CAS and no waiting; only when another front-end holds it
// are the held locks that sort after the first missing one released, so every front-end WAITS
// for locks in one global order (no deadlock: a try never waits).
//
// A read-only transaction (Read) runs directly through the page cache when this front-end holds
// every lock it needs — with DatabaseOptions::read_locks (default) after trying the missing ones
// without waiting — and otherwise with no locks, under the transaction root's sequence word
// (every committed transaction's memory-log transaction brackets it), retried while a
// transaction applies.
//
// Thread safety: like its Session, one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"

namespace asymnvm::structures {

// Naming-space type of a database's transaction root, and its op type.
inline constexpr uint32_t kTxnRootType = 0x40;
inline constexpr uint16_t kOpTxn = 1;

struct TableSpec {
  std::string name;              // naming-space name (1..63 bytes); also the lock order
  Kind kind = Kind::kHashTable;  // kHashTable or kBPlusTree
  uint32_t value_size = kDefaultValueSize;
  uint64_t param = 0;     // buckets / fan-out (0: the kind's default)
  uint32_t key_size = 0;  // 0: integer keys; else byte-string keys of 1..key_size bytes
};

struct DatabaseOptions {
  std::string name;  // the transaction root is named "<name>.txn"
  std::vector<TableSpec> tables;
  // Locks are released after this many transactions (read or write) since they were taken;
  // 0 = only when another lock set is needed or at ReleaseLocks / close.
  uint32_t hold_txns = 64;
  // A read-only transaction whose tables are not all held tries to take the missing locks,
  // each with one CAS and no waiting; when it gets them it runs through the cache (no seqlock
  // round trips), and so do later ones while the locks are held (hold_txns). A lock another
  // front-end holds is not tried again for the next hold_txns read-only transactions. False:
  // read-only transactions never lock (always the seqlock path unless every lock is held).
  bool read_locks = true;
};

struct TxnCounters {
  uint64_t commits = 0, lock_aborts = 0, read_retries = 0, replayed = 0;
  // Locks tried with one CAS and no waiting (out of name order, or for a read-only
  // transaction): taken, and found held by another front-end.
  uint64_t try_locks = 0, try_lock_misses = 0;
};

class Database;

// One write transaction (Database::Begin). Not reusable after Commit or Abort.
class Txn {
 public:
  ~Txn();  // Abort when neither committed nor aborted
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  // kNotFound when absent.
  Status Get(size_t table, const Key& key, Value* value);
  // Insert or update. kInvalidArgument: value longer than the table's value_size.
  Status Put(size_t table, const Key& key, std::span<const uint8_t> value);
  // kNotFound when absent (nothing written then).
  Status Delete(size_t table, const Key& key);
  // Writes the op log and hands the memory logs over (see the file comment). A transaction with
  // no write commits without logging anything.
  Status Commit();
  // Before the first write: nothing happens (locks stay held per the hold policy). After a
  // write the writes cannot be taken back: kFailedPrecondition and the database is broken
  // (reopen the session).
  Status Abort();
  bool wrote() const { return nops_ > 0; }
  // After a Commit that wrote: the op_seq of its op log (0 at level naive), for diagnostics.
  uint64_t op_seq() const { return op_seq_; }

 private:
  friend class Database;
  explicit Txn(Database* db) : db_(db) {}
  Status CheckTable(size_t table) const;
  // Appends one op to the payload: structure id u32 | kind u8 | 0 | value length u16 | key (u64,
  // or u16 length | bytes for a byte-key table) | value.
  void AppendOp(uint32_t id, uint8_t kind, const Key& key, std::span<const uint8_t> value);
  Database* db_;
  std::vector<uint8_t> payload_;
  std::vector<size_t> tables_;
  uint16_t nops_ = 0;
  uint64_t op_seq_ = 0;
  bool done_ = false;
  bool read_only_ = false;
};

class Database {
 public:
  // Creates or opens every table (writer handles that never lock on their own, with
  // Options::lock_at_open false, and reader handles) and the transaction root, and registers
  // the transaction replay function with the session. kInvalidArgument: no tables, a kind other
  // than hash/bptree, duplicate names.
  static Result<std::unique_ptr<Database>> Open(frontend::Session& session,
                                                const DatabaseOptions& options);
  // Releases held locks (errors logged).
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // After a crash of an earlier session of this front-end id: Session::Replay (re-executes the
  // transactions whose op log is durable and whose memory logs were not applied, each exactly
  // once), then releases the table locks that session held.
  Status Recover();

  // Starts a write transaction over `tables` (indexes into options.tables; it may read and write
  // only these). kAborted when a lock was not obtained in time (nothing written, the locks this
  // call took released). kFailedPrecondition while another transaction is open.
  Result<std::unique_ptr<Txn>> Begin(std::vector<size_t> tables);
  // A read-only transaction: `body` may call Get on `tables` and is retried (so it must not have
  // side effects it cannot repeat) while transactions apply. kTimedOut after options.timeout.
  Status Read(std::vector<size_t> tables, const std::function<Status(Txn&)>& body);

  // Bulk access for loaders and checkers: every lock taken (kAborted on timeout), then the
  // writer handles, used outside transactions; ReleaseLocks fences and unlocks.
  Status LockAll();
  Status ReleaseLocks();
  Map& table(size_t i) { return *writers_[i]; }
  size_t num_tables() const { return writers_.size(); }
  const DatabaseOptions& options() const { return o_; }
  frontend::Session& session() { return s_; }
  const TxnCounters& counters() const { return c_; }

 private:
  friend class Txn;
  Database(frontend::Session& s, DatabaseOptions o);
  Status AcquireFor(const std::vector<size_t>& tables);
  // Takes table t's writer lock: waiting up to lock_timeout (wait) or with one CAS (*taken false
  // when another front-end holds it). The caller refreshes the table's writer handle.
  Status TakeLock(size_t t, bool wait, bool* taken);
  Status Release(size_t t);
  void SetInTxn(bool on);
  Status ReplayTxn(const frontend::RecoveredOp& op);
  Status Finish(Txn* t);

  frontend::Session& s_;
  DatabaseOptions o_;
  frontend::Structure root_;
  std::vector<std::unique_ptr<Map>> writers_, readers_;
  std::vector<size_t> order_;  // table indexes in name order
  std::vector<bool> held_;     // by table index
  uint32_t since_lock_ = 0;
  uint32_t read_try_skip_ = 0;  // read-only transactions left before locks are tried again
  bool open_txn_ = false;
  bool read_direct_ = false;  // Read through the writer handles (every lock held)
  Status broken_ = Status::Ok();
  TxnCounters c_;
};

}  // namespace asymnvm::structures
