// Internal scaffolding shared by every structure (doc/structures.md "Common machinery"): opening
// by name with a type check, the anchor block, the writer lock, the update protocol (op log →
// memory logs → tx_write), seqlock reads for reader handles, value slots, op-log parameter
// encoding and the replay registry.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "common/logging.h"

namespace asymnvm::structures::internal {

// Naming-entry params of every structure: [0] value_size, [1] param (shape), [2] layout version.
inline constexpr uint64_t kLayoutVersion = 1;

// A value slot in PM: u32 length | bytes, padded to a multiple of 8 (SlotBytes).
inline uint32_t SlotBytes(uint32_t value_size) { return (4 + value_size + 7) / 8 * 8; }
void EncodeSlot(std::span<const uint8_t> value, std::span<uint8_t> slot);
// kCorruption when the stored length exceeds value_size.
Status DecodeSlot(std::span<const uint8_t> slot, uint32_t value_size, Value* out);

// Key slots in PM (doc/structures.md "Keys"): an integer map stores the u64 (8 B, as before byte
// keys existed); a byte-key map stores u16 length (1..key_size) | the bytes, zero-padded to a
// multiple of 8.
constexpr uint32_t KeySlotBytes(uint32_t key_size) {
  return key_size == 0 ? 8 : (2 + key_size + 7) / 8 * 8;
}
inline constexpr uint32_t kMaxKeySlot = KeySlotBytes(kMaxKeySize);
// Writes KeySlotBytes(key_size) bytes at `slot` (the key already checked by Base::CheckKey).
void EncodeKeySlot(const Key& key, uint32_t key_size, uint8_t* slot);
// kCorruption when a byte key's stored length is 0 or exceeds key_size.
Status DecodeKeySlot(const uint8_t* slot, uint32_t key_size, Key* key);
// The key's hash (XXH3 64-bit, seed 0): of the 8 little-endian bytes of an integer key (the hash
// table's bucket function since its first layout), of the bytes of a byte key.
uint64_t KeyHash(const Key& key, uint64_t seed = 0);

// Op-log parameters of a keyed update: key | len u32 | value bytes, where the key is a u64 (integer
// maps) or u16 length | bytes (byte-key maps; no padding).
std::vector<uint8_t> EncodeKeyValue(const Key& key, std::span<const uint8_t> value);
// Where EncodeKeyValue puts the value (after the key and its length).
inline size_t KeyValueValueOffset(const Key& key) {
  return key.is_int() ? 12 : 2 + key.bytes().size() + 4;
}
// key_size: the map's (0 = integer keys). kCorruption when the lengths do not match.
Status DecodeKeyValue(std::span<const uint8_t> params, uint32_t key_size, Key* key, Value* value);

// The op-log types of every map kind: a single put (parameters: EncodeKeyValue) and delete (the
// key, EncodeKeyValue with an empty value).
inline constexpr uint16_t kOpPut = 1, kOpDelete = 2;
// Vector operations (Map::PutBatch; doc/structures.md "Vector operations"). Op type 3 of every
// vectorized kind; its op-log parameters: count u32 | count × (key | len u32 | value bytes) in the
// key encoding of EncodeKeyValue, keys strictly ascending.
inline constexpr uint16_t kOpPutVector = 3;
// A vector delete (Map::DeleteBatch of the kinds with a vector path): the same parameters with
// every value empty; keys absent at replay are skipped.
inline constexpr uint16_t kOpDeleteVector = 4;
// A vector's op-log parameters stay within this many bytes (longer input is cut into runs).
inline constexpr size_t kVectorPayloadMax = 64 * 1024;
// A vector's memory logs (each counted as 16 B of entry header + its bytes padded to 8) stay
// within this many bytes, and within half the session's largest transaction
// (Base::VectorWriteBudget); a run whose gathered writes exceed it is cut (a single pair is
// applied whatever its size, like Put).
inline constexpr size_t kVectorWriteBudget = 32 * 1024;
std::vector<uint8_t> EncodeVector(std::span<const KeyValue> kvs);
// kCorruption when the count, a length or the key order does not match.
Status DecodeVector(std::span<const uint8_t> params, uint32_t key_size, std::vector<KeyValue>* out);
// The pairs sorted by key; of equal keys the last one in the input is kept.
std::vector<KeyValue> SortedUnique(std::span<const KeyValue> kvs);

// What a vector's gather phase decided, applied in one operation: redo writes (each node's bytes
// once), blocks allocated for it (freed when the plan is abandoned), and the writer's DRAM
// state to adopt once it is applied.
struct VectorPlan {
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> writes;
  std::vector<uint64_t> allocs;
  // Blocks unlinked by the plan, freed once it is applied (the unlinks precede any reuse).
  std::vector<uint64_t> frees;
  size_t bytes = 0;  // memory-log footprint of `writes`
  std::function<void()> commit;
  void Add(uint64_t addr, std::vector<uint8_t> data) {
    bytes += 16 + (data.size() + 7) / 8 * 8;
    writes.emplace_back(addr, std::move(data));
  }
  void AddU64(uint64_t addr, uint64_t v) {
    std::vector<uint8_t> b(8);
    std::memcpy(b.data(), &v, 8);
    Add(addr, std::move(b));
  }
};
// Fills a plan for a sorted, duplicate-free run (reads only; allocations recorded in the plan).
using VectorGather = std::function<Status(std::span<const KeyValue> run, VectorPlan* plan)>;
// An upper bound of the memory-log bytes one pair adds to a plan (kinds that know one), so runs
// are cut to the budget before they are gathered rather than gathered twice.
using VectorKeyBound = std::function<size_t(const KeyValue& kv)>;

inline void PutU64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline uint32_t GetU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

class Base {
 public:
  // Resolves `name` (create-or-open for writers with options.create, open otherwise), checks
  // the kind, validates options, and replaces options->value_size / param with the stored ones.
  // default_param: the kind's default shape when options->param == 0 at creation.
  static Result<frontend::Structure> Resolve(frontend::Session& s, Kind kind,
                                             const std::string& name, Options* options,
                                             uint64_t default_param);

  Base(frontend::Session& s, frontend::Structure st, Kind kind, const Options& options);
  virtual ~Base();  // Sync (errors logged) and release the writer lock when held
  Base(const Base&) = delete;
  Base& operator=(const Base&) = delete;

  // Re-executes a recovered operation (Session::Replay through RegisterReplays).
  virtual Status ReplayOp(const frontend::RecoveredOp& op) = 0;
  // Structures that keep op logs open across calls call this once (in their constructor): the
  // session then calls `close` before another structure's op log (Session::SetOpCloser).
  void KeepsOpsOpen(std::function<Status()> close);

  // Lock-based writers: takes the writer lock (held until destruction); nothing when
  // Options::lock_at_open is false.
  Status AcquireWriterLock();
  // Re-reads the writer's DRAM view of the structure (anchor words) from PM: another front-end
  // may have changed it while this handle did not hold the lock (Options::lock_at_open false).
  virtual Status Refresh() { return Status::Ok(); }
  // After the session reconnected (Session::SetReconnectHook): drops every op this handle holds
  // open in DRAM (the replay re-executes them from their op logs) and whatever it derived from
  // transactions that may be lost, then re-reads its view from the pool. Default: Refresh().
  virtual Status Resync() { return Refresh(); }
  // Inside a multi-structure transaction (structures/transaction.cc): Update runs only the body;
  // the transaction writes the one op log and the one TxWrite for all its operations.
  void set_in_txn(bool on) { in_txn_ = on; }
  bool in_txn() const { return in_txn_; }
  // The anchor block: a data-area block whose address is the root word. A writer creates it
  // (allocated, written with `init` and fenced, then published by CAS 0 → addr; a loser of the
  // race frees its block); a reader of a structure without one gets kNotFound.
  Result<uint64_t> EnsureAnchor(std::span<const uint8_t> init);

  // Reads through the session (cached for the writer at rc/rcb; remote inside Query for readers).
  // cached = false: one-sided READ even at rc/rcb (for data a structure chooses not to cache).
  Status Read(uint64_t addr, std::span<uint8_t> out, bool cached = true);
  Result<uint64_t> ReadU64(uint64_t addr, bool cached = true);
  // A redo write of the current update (Session::MemLog).
  Status Write(uint64_t addr, std::span<const uint8_t> data);
  Status WriteU64(uint64_t addr, uint64_t v);

  // One update: op log (not at naive), body (reads + Write), tx_write. Writers only.
  // value_from != 0: params[value_from..] is the op's value (KeyValueValueOffset(key) for
  // EncodeKeyValue params); a Write of the body whose bytes contain it sends that range as a
  // pointer into the op log (Session::MemLogFromOp): the value crosses the wire once.
  Status Update(uint16_t op_type, std::span<const uint8_t> params,
                const std::function<Status()>& body, size_t value_from = 0);
  // A vector put (Map::PutBatch of the vectorized kinds): validates every value, sorts and
  // de-duplicates, cuts the vector into runs of bounded op log and of bounded writes (by
  // `bound`, or else by the bytes per pair of the previous plan), and applies each run as
  // gather → (cut again and re-gathered when its writes still exceed kVectorWriteBudget) → op
  // log (type 3) → writes → tx_write → plan.commit.
  Status PutVector(std::span<const KeyValue> kvs, const VectorGather& gather,
                   const VectorKeyBound& bound = {});
  // A vector delete (Map::DeleteBatch): the keys as a run of pairs with empty values, cut and
  // applied like PutVector under op type kOpDeleteVector; the gather unlinks the keys it finds
  // and lists their blocks in plan->frees.
  Status DeleteVector(std::span<const Key> keys, const VectorGather& gather,
                      const VectorKeyBound& bound = {});
  // An atomic vector put (the hash table's Map::PutBatch): the whole sorted, de-duplicated batch
  // is ONE run — one op log (type 3) and one memory-log transaction — so it is all-or-nothing
  // across a crash (Session::Replay re-applies it iff its transaction was not applied). A batch
  // whose writes exceed one transaction keeps its one op log and sends its writes in parts
  // (Session::TxWritePart) that leave the op log open until the last one, so it is replayed whole
  // after a crash in between (the gather must make replay idempotent over any prefix of parts).
  // Inside a multi-structure transaction `each` runs per pair instead (the transaction's own op
  // log and transaction make it atomic).
  Status PutVectorAtomic(std::span<const KeyValue> kvs, const VectorGather& gather,
                         const std::function<Status(const KeyValue&)>& each);
  // Replays a type-3 op log: the recorded run, gathered again and applied whole.
  Status ReplayVector(const frontend::RecoveredOp& op, const VectorGather& gather);
  // ReplayOp of the single-version maps (one place for the four kinds): a vector put or delete is
  // re-gathered whole (ReplayVector with `gather_put` / `gather_delete`; an empty
  // `gather_delete`: the kind logs no vector deletes), a single put or delete is decoded and
  // re-applied with `put` / `del`. Every malformed record — undecodable, a value longer than
  // value_size, an op type the kind never logs — is kCorruption: the op log was checked when it
  // was written, so a bad one is damage, not bad input.
  Status ReplayMapOp(const frontend::RecoveredOp& op, const VectorGather& gather_put,
                     const VectorGather& gather_delete,
                     const std::function<Status(const Key&, std::span<const uint8_t>)>& put,
                     const std::function<Status(const Key&)>& del);

  // A read-only operation: the writer runs it directly (it sees its own writes); a reader runs
  // it under the seqlock (retried while the writer's transactions apply).
  Status Query(const std::function<Status()>& body);

  // kVectorWriteBudget, or half the back-end's largest transaction when that is smaller (a
  // back-end with small OQ buffers).
  size_t VectorWriteBudget() const {
    return std::min(kVectorWriteBudget, s_.max_transaction_bytes() / 2);
  }
  Status CheckWritable() const;  // kFailedPrecondition for reader handles
  Status CheckValue(std::span<const uint8_t> value) const;  // kInvalidArgument when too long
  // kInvalidArgument: a key of the other kind than the map's, an empty byte key or one longer
  // than key_size.
  Status CheckKey(const Key& key) const;
  // A Scan's start: like CheckKey, but the empty byte string (scan from the first key) and a
  // longer string (ordered after every key it is a prefix of) are accepted.
  Status CheckScanFrom(const Key& from) const;
  // This map's key slots in PM (KeySlotBytes).
  uint32_t ksize() const { return opt_.key_size; }
  uint32_t kslot() const { return KeySlotBytes(opt_.key_size); }
  void StoreKey(const Key& key, uint8_t* slot) const { EncodeKeySlot(key, opt_.key_size, slot); }
  Status LoadKey(const uint8_t* slot, Key* key) const {
    return DecodeKeySlot(slot, opt_.key_size, key);
  }
  Status SyncBase();  // Flush + Fence

  frontend::Session& session() { return s_; }
  const frontend::Structure& st() const { return st_; }
  bool writer() const { return opt_.access == Access::kWriter; }
  const Options& opt() const { return opt_; }
  frontend::Level level() const { return s_.level(); }
  uint32_t vsize() const { return static_cast<uint32_t>(opt_.value_size); }

 protected:
  frontend::Session& s_;
  frontend::Structure st_;
  Kind kind_;
  Options opt_;
  bool locked_ = false;
  bool closer_set_ = false;
  bool in_txn_ = false;

 private:
  // atomic: never cut the run (kResourceExhausted when its writes exceed one transaction).
  Status ApplyVectorRun(std::span<const KeyValue> run, bool replay, const VectorGather& gather,
                        bool atomic = false, uint16_t op_type = kOpPutVector);
  Status CutAndApply(std::span<const KeyValue> sorted, const VectorGather& gather,
                     const VectorKeyBound& bound, uint16_t op_type);
  double vector_pair_bytes_ = 0;  // memory-log bytes per pair of the last applied vector plan
  // The value of the update in progress (Update with value_from) and its op log.
  std::span<const uint8_t> op_value_;
  uint64_t op_value_seq_ = 0;
  uint32_t op_value_offset_ = 0;
};

// The smallest power-of-two cache page (64 B .. 4 KiB) holding `bytes`: structures whose nodes
// are much smaller than a 4 KiB page cache them at node granularity, so a cache of a tenth of
// the data holds the hot nodes rather than pages of unrelated neighbours (§8).
inline uint32_t NodePageSize(uint64_t bytes) {
  uint32_t p = 64;
  while (p < bytes && p < 4096) p *= 2;
  return p;
}

// Default name of a kind in messages: "stack 'name'".
std::string Describe(Kind kind, const std::string& name);

// A dead writer's adoption (Session::SetAdopter): opens a handle in `recovery` for every
// structure of a kind that is not in `skip` (taking its lock under the dead writer's id), runs
// `replay`, then closes them (sync + unlock) and fences. The default adopter (RegisterReplays)
// replays with recovery.Replay(); a Database adds its transactions (transaction.cc).
Status AdoptStructures(frontend::Session& recovery,
                       const std::vector<frontend::Structure>& structures,
                       const std::vector<uint32_t>& skip, const std::function<Status()>& replay);

}  // namespace asymnvm::structures::internal
