// Persistent data structures over the AsymNVM front-end SDK (AsymNVM paper §4.3–4.4,
// §6, §8; doc/structures.md).
//
// Every structure is a named root in a back-end's naming space, created or opened through a
// frontend::Session. Two shapes share one interface each so that benchmarks, the main job and the
// differential tests drive any structure the same way:
//   Sequence — stack (LIFO) and queue (FIFO): Push / Pop.
//   Map      — hash table, skip list, BST, B+tree, MV-BST, MV-B+tree: Put / Get / Delete / Scan.
//
// Keys are, per instance (Options::key_size, fixed at creation), either 8-byte unsigned integers
// (key_size 0, the default and the fast path) ordered numerically, or byte strings of 1..key_size
// bytes (key_size 1..kMaxKeySize) ordered bytewise (memcmp order, a proper prefix first). Values
// are byte strings of at most `value_size` bytes, fixed per instance at creation (64 by default,
// up to kMaxValueSize).
//
// Concurrency (SWMR, §6): a handle opened with Access::kWriter is the structure's single writer.
// Lock-based structures (stack, queue, hash, skip list, BST, B+tree) take the writer lock at Open
// and hold it until the handle is destroyed; readers (Access::kReader) read under the seqlock
// (Session::ReadConsistent) and never block the writer. Multi-version structures (MV-BST,
// MV-B+tree) never lock readers: the writer path-copies, makes the new nodes durable, and swaps
// the root word with a remote CAS; replaced nodes are freed after a grace period.
//
// Every update writes one operation log (levels r, rc, rcb) and is re-executed by its replay
// function after a front-end crash (RegisterReplays).
//
// Thread safety: a handle belongs to one thread, like its Session.
#pragma once

#include <compare>
#include <concepts>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "asymnvm/frontend.h"
#include "asymnvm/status.h"

namespace asymnvm::structures {

// The naming-space type of each structure (Structure::type).
enum class Kind : uint32_t {
  kStack = 1,
  kQueue = 2,
  kHashTable = 3,
  kSkipList = 4,
  kBst = 5,
  kBPlusTree = 6,
  kMvBst = 7,
  kMvBPlusTree = 8,
};
inline constexpr Kind kAllKinds[] = {Kind::kStack,    Kind::kQueue,      Kind::kHashTable,
                                     Kind::kSkipList, Kind::kBst,        Kind::kBPlusTree,
                                     Kind::kMvBst,    Kind::kMvBPlusTree};
const char* KindName(Kind kind);  // "stack" | "queue" | "hash" | "skiplist" | "bst" | "bptree" |
                                  // "mvbst" | "mvbptree"
Result<Kind> ParseKind(const std::string& name);  // kInvalidArgument listing the valid names
bool IsSequence(Kind kind);                       // stack, queue
bool IsOrdered(Kind kind);                        // maps with Scan
bool IsMultiVersion(Kind kind);

inline constexpr uint32_t kDefaultValueSize = 64;
inline constexpr uint32_t kMaxValueSize = 16384;
inline constexpr uint32_t kMaxKeySize = 256;  // longest byte-string key (Options::key_size)

// A map key: an 8-byte unsigned integer (maps created with key_size 0) or a byte string (maps
// created with key_size 1..kMaxKeySize). Integers convert implicitly (`map->Put(42, v)`), and so
// do strings (`map->Put("alice", v)`, `map->Put(std::string_view(buf, n), v)`; bytes may be any
// value, NUL included). Integer keys compare numerically, byte keys bytewise; a map rejects the
// other kind of key with kInvalidArgument.
class Key {
 public:
  template <std::integral T>
  constexpr Key(T v) : int_(static_cast<uint64_t>(v)) {}  // NOLINT(google-explicit-constructor)
  Key(std::string_view bytes) : bytes_(bytes), is_int_(false) {}   // NOLINT
  Key(const char* bytes) : Key(std::string_view(bytes)) {}         // NOLINT
  Key(const std::string& bytes) : Key(std::string_view(bytes)) {}  // NOLINT
  Key() = default;                                                 // the integer 0

  bool is_int() const { return is_int_; }
  uint64_t u64() const { return int_; }              // 0 for a byte key
  std::string_view bytes() const { return bytes_; }  // empty for an integer key
  // For messages: the integer in decimal, or the bytes quoted with non-printable bytes as \xHH
  // (at most 64 bytes shown).
  std::string ToString() const;

  // Integers numerically, byte strings bytewise (unsigned, a prefix first); every integer key
  // orders before every byte key (a map never holds both).
  friend std::strong_ordering operator<=>(const Key& a, const Key& b) {
    if (a.is_int_ != b.is_int_)
      return a.is_int_ ? std::strong_ordering::less : std::strong_ordering::greater;
    if (a.is_int_) return a.int_ <=> b.int_;
    const int c = a.bytes_.compare(b.bytes_);  // char_traits<char>: unsigned bytes, like memcmp
    return c < 0   ? std::strong_ordering::less
           : c > 0 ? std::strong_ordering::greater
                   : std::strong_ordering::equal;
  }
  friend bool operator==(const Key& a, const Key& b) {
    return a.is_int_ == b.is_int_ && (a.is_int_ ? a.int_ == b.int_ : a.bytes_ == b.bytes_);
  }

 private:
  std::string bytes_;
  uint64_t int_ = 0;
  bool is_int_ = true;
};
std::ostream& operator<<(std::ostream& os, const Key& key);  // Key::ToString()

enum class Access : uint8_t { kWriter, kReader };

struct Options {
  // Used when the structure is created; an existing structure keeps the values it was created
  // with (read back from the naming entry's params).
  uint32_t value_size = kDefaultValueSize;  // 1..kMaxValueSize
  // Maps: 0 = 8-byte integer keys; 1..kMaxKeySize = byte-string keys of at most this many bytes
  // (stored inline in the nodes, so a larger bound makes every node larger). Sequences: 0.
  uint32_t key_size = 0;
  uint64_t param = 0;  // structure-specific shape (0 = default): B+tree fan-out (32), hash
                       // buckets (65536), skip-list max level (20)
  Access access = Access::kWriter;
  // Structure-specific optimizations of §8 (stack/queue annulment, hot-item caching, tree level
  // caching and vector batches, ...). Off = the plain algorithm at the session's level.
  bool optimize = true;
  // Create when missing (writers only; a reader of a missing structure gets kNotFound).
  bool create = true;
  // Lock-based writers take the writer lock at Open and hold it until the handle is destroyed.
  // false: the handle never locks by itself; whoever drives it (the multi-structure transactions
  // of asymnvm/structures/transaction.h) takes Session::WriterLock around its updates, and the
  // handle re-reads its DRAM view of the structure after each acquisition. Hash table and B+tree.
  bool lock_at_open = true;
};

using Value = std::vector<uint8_t>;
using KeyValue = std::pair<Key, Value>;

// Common to both shapes.
class Handle {
 public:
  virtual ~Handle() = default;
  virtual Kind kind() const = 0;
  virtual const frontend::Structure& structure() const = 0;
  virtual uint32_t value_size() const = 0;
  // Number of elements (walks the structure for some kinds; a reader reads it consistently).
  virtual Result<uint64_t> Count() = 0;
  // Makes every acknowledged update of this handle visible to other sessions (flush + fence).
  virtual Status Sync() = 0;
  // Walks the whole structure and checks its invariants (ordering, balance/fill, counts, no
  // cycles, values within value_size). kCorruption naming what is wrong.
  virtual Status Verify() = 0;
};

class Sequence : public Handle {
 public:
  // kInvalidArgument: value longer than value_size. kFailedPrecondition: reader handle.
  virtual Status Push(std::span<const uint8_t> value) = 0;
  // Removes the top (stack) / front (queue) element. kNotFound when empty.
  virtual Status Pop(Value* value) = 0;
  // Reads the element Pop would remove. kNotFound when empty.
  virtual Status Peek(Value* value) = 0;
  // Up to `limit` elements in the order Pop would remove them (stack: newest first; queue: oldest
  // first), removing nothing (`out` is replaced). A writer's pending pushes are made durable first
  // (as Count does); a reader reads a consistent snapshot. kCorruption if the chain is broken.
  virtual Status List(size_t limit, std::vector<Value>* out) = 0;
};

class Map : public Handle {
 public:
  // 0: integer keys; else the longest byte-string key (Options::key_size).
  virtual uint32_t key_size() const = 0;
  // Every keyed call: kInvalidArgument for a key of the other kind, an empty byte key, or one
  // longer than key_size.
  // Insert or update. kInvalidArgument: value longer than value_size. kFailedPrecondition: reader.
  virtual Status Put(const Key& key, std::span<const uint8_t> value) = 0;
  // kNotFound when the key is absent.
  virtual Status Get(const Key& key, Value* value) = 0;
  // kNotFound when the key is absent.
  virtual Status Delete(const Key& key) = 0;
  // Up to `limit` pairs with key >= from, in key order. kNotSupported for unordered maps.
  virtual Status Scan(const Key& from, size_t limit, std::vector<KeyValue>* out) = 0;
  // Insert or update every pair (a vector operation, §8.3 Algorithm 3). The input may be in any
  // order; of pairs with the same key the last one wins. Every value is checked before anything
  // is logged: one value longer than value_size fails the whole call (kInvalidArgument) with
  // nothing written; kFailedPrecondition for a reader. B+tree, BST, skip list, MV-BST and
  // MV-B+tree apply the sorted vector as few operations (op type 3, doc/structures.md "Vector
  // operations"): one op log and one tx_write per run of the vector whose op log and memory logs
  // fit the bounds there; each run is atomic across a crash. The hash table applies the whole
  // batch as one op log and one transaction (sent in parts when its writes exceed one
  // transaction, replayed whole after a crash): all or nothing. This default (kinds without a
  // vector path) applies the pairs as one Put each, so a crash can leave any prefix of them. On a
  // later error the runs applied before it stay applied.
  virtual Status PutBatch(std::span<const KeyValue> kvs);
  // Deletes every listed key that is present (absent keys are not an error); *deleted (when set)
  // = how many were. Every key is checked before anything is written (kInvalidArgument: one bad
  // key fails the call with nothing deleted); kFailedPrecondition for a reader. The skip list,
  // BST and B+tree apply the sorted keys as vector runs (op type 4, doc/structures.md "Vector
  // operations"): one op log, one walk and one transaction per run, each run atomic across a
  // crash; the MV-BST and the MV-B+tree likewise (one op log and one publish per run). This
  // default (the hash table) deletes them one Delete each, so a crash can leave any prefix.
  virtual Status DeleteBatch(std::span<const Key> keys, uint64_t* deleted = nullptr);
};

// Create-or-open (writers; Options::create) or open (readers) the structure `name` of `kind`.
// Errors: kInvalidArgument (bad options or name), kNotFound (reader of a missing structure),
// kFailedPrecondition (the name holds another kind — "type mismatch"), kTimedOut (another writer
// holds the lock), kNotSupported (a kind not built), session errors.
Result<std::unique_ptr<Sequence>> OpenSequence(frontend::Session& session, Kind kind,
                                               const std::string& name,
                                               const Options& options = {});
Result<std::unique_ptr<Map>> OpenMap(frontend::Session& session, Kind kind, const std::string& name,
                                     const Options& options = {});
// Either shape.
Result<std::unique_ptr<Handle>> Open(frontend::Session& session, Kind kind, const std::string& name,
                                     const Options& options = {});

// Registers the replay function of every kind with the session (before Session::Replay), and its
// reconnect hook: after a reconnection every writer handle of the session drops its DRAM state
// (ops held open, anchor words, unpublished versions) and re-reads it from the pool before the
// replay re-executes the ops past the new OPN (Session::SetReconnectHook).
void RegisterReplays(frontend::Session& session);

}  // namespace asymnvm::structures
