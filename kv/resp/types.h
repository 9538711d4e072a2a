// Redis hashes, sets and lists on the KV store (doc/types.md): the record layouts and the
// per-command transaction the type commands are built from.
//
// Per Redis key one metadata record — the key itself, holding a tag-2 value frame (value.h): type,
// expiry, then Meta (incarnation id, element count, list head/tail) — and one sub-record per
// field, member or element, keyed by (route hash of the key, incarnation id, kind, suffix). Sub
// keys are kv routed keys (include/asymnvm/kv.h kRoutedKeyMagic): they live in the shard of their
// Redis key, so a command's records commit as one atomic batch.
//
// Every command that changes a collection is one CollTx: it reads the metadata (remembering its
// store version), reads and stages sub-record writes, then commits all of them with the metadata
// rewritten conditionally on that version (Store::CommitBatch: acknowledged as a SET is). The
// metadata thus serializes every writer of a collection, so sub-record writes need no condition of
// their own. Deleting or expiring a key drops only its metadata: a later write starts a new
// incarnation (a fresh random id), and the old sub-records are garbage (doc/types.md §Garbage).
//
// Thread safety: a CollTx belongs to one command on one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/resp/commands.h"
#include "kv/resp/store.h"

namespace asymnvm::kv::resp {

enum class KeyType : uint8_t { kNone = 0, kString = 1, kHash = 2, kList = 3, kSet = 4, kZset = 5 };
const char* TypeName(KeyType t);  // "none", "string", "hash", "list", "set", "zset"

inline constexpr std::string_view kErrWrongType =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

// The type of a stored value as value.h decodes it (a string unless a tag-2 frame says otherwise).
KeyType TypeOfValue(std::string_view raw);

// Records one atomic batch may hold (kv::kMaxBatchOps) and the bytes it may carry (one request).
inline constexpr size_t kMaxTxRecords = 64;
inline constexpr size_t kMaxTxBytes = 60 * 1024;

struct Meta {
  uint64_t id = 0;   // the incarnation: names the sub-records; new on every (re)creation
  int64_t size = 0;  // fields / elements / members
  int64_t head = 0;  // lists: the elements are sequence numbers [head, tail)
  int64_t tail = 0;
};
std::string EncodeMeta(const Meta& m);
bool DecodeMeta(std::string_view payload, Meta* m);

// Sub-record keys. kind 'f': a hash field / set member → its slot (8 bytes LE); kind 's': slot i
// (0..size-1, dense) → hash: field length (4 LE) + field + value, set: the member; kind 'l': list
// element at sequence number seq → the element.
std::string SubKey(std::string_view key, uint64_t id, char kind, std::string_view suffix);
std::string FieldKey(std::string_view key, uint64_t id, std::string_view field);
std::string SlotKey(std::string_view key, uint64_t id, int64_t slot);
std::string ElemKey(std::string_view key, uint64_t id, int64_t seq);
// A hash's slot record: field length (4 bytes LE), field, value.
std::string EncodeHashSlot(std::string_view field, std::string_view value);
bool DecodeHashSlot(std::string_view raw, std::string_view* field, std::string_view* value);
std::string EncodeI64(int64_t v);
bool DecodeI64(std::string_view s, int64_t* v);
// Longest field/member a sub-record key can carry for `key` (kv::kMaxKeySize bound).
size_t MaxFieldSize(std::string_view key);

// Slotted members: the layout sets and sorted sets share (doc/types.md §Records). Member m →
// record 'f'+m holding its slot (8 bytes LE) then a fixed-size payload; slot i (0..size-1, dense)
// → record 's'+i holding the payload then m. Payload: none for a set, the score (8 bytes) for a
// sorted set. Removing a member moves the last slot's entry into the freed slot.
struct SlotRef {
  int64_t slot = 0;
  std::string payload;
};
struct SlottedMember {
  std::string member;
  std::string payload;
};

// One collection of a CollTx.
struct Coll {
  std::string key;
  KeyType type = KeyType::kNone;  // kNone: absent or expired
  int64_t expire_at_ms = 0;
  uint64_t store_version = 0;  // of the metadata record as read (0: nothing stored)
  Meta meta;
  bool changed = false;  // the metadata must be written
  bool deleted = false;  // the key must be deleted (emptied, or replaced by a STORE command)
  bool fresh = false;    // made by Create in this transaction: no record of meta.id is stored yet
};

// Redis's errors for the type commands.
inline constexpr std::string_view kErrNotFloat = "ERR value is not a valid float";
inline constexpr std::string_view kErrTryAgain =
    "TRYAGAIN the key kept changing; nothing was written";
inline constexpr std::string_view kErrOutOfRange = "ERR value is out of range, must be positive";
std::string TxError(const Status& st);
// Parses a Redis double argument as getDoubleFromObject does ("inf", "-inf", decimal, any
// length); false for NaN, junk, or a value that overflows or underflows to zero.
bool ParseDouble(std::string_view s, double* out);
// The same in long double precision (HINCRBYFLOAT computes in it, as Redis does).
bool ParseLongDouble(std::string_view s, long double* out);
// Redis's text for a double (as INCRBYFLOAT replies it: up to 17 significant digits, no exponent).
std::string FormatDouble(long double v);
// A random 64-bit number (incarnation ids, SPOP/SRANDMEMBER/HRANDFIELD).
uint64_t RandomU64();

// Random slots: k distinct of n (all when k >= n), or k with repetition (SRANDMEMBER,
// ZRANDMEMBER, HRANDFIELD's count semantics).
std::vector<int64_t> RandomSlots(int64_t n, int64_t k, bool distinct);

enum class TxOutcome { kCommitted, kRetry, kError };

class CollTx {
 public:
  CollTx(Store& store, int64_t now_ms) : store_(store), now_ms_(now_ms) {}

  // Reads the metadata of `key`. The returned Coll stays valid for the transaction.
  Result<Coll*> Open(std::string_view key);
  // Open + type check: nullptr with *wrongtype when the key holds another type.
  Result<Coll*> OpenAs(std::string_view key, KeyType want, bool* wrongtype);
  // Makes an absent collection exist as `t` (a new incarnation, no elements).
  void Create(Coll* c, KeyType t);

  // A sub-record as this transaction sees it (its own staged writes first).
  Result<std::optional<std::string>> Get(const std::string& sub_key);
  void Put(std::string sub_key, std::string value);
  void Del(std::string sub_key);

  // Commits every staged write and the changed metadata as one batch conditional on each opened
  // collection's metadata version; kRetry when one changed since it was read (nothing visible
  // written). kError after it replied an error on `out` (a store failure). A commit too large for
  // one batch (kMaxTxRecords, kMaxTxBytes) writes each changed collection whole under a new
  // incarnation first, in as many batches as it takes (invisible: no metadata names it yet), and
  // then the metadata alone as the one conditional batch (doc/types.md §Large commands).
  TxOutcome Commit(ReplyWriter& out);
  // For reads: whether every opened collection's metadata is still the version read (a
  // multi-record read that saw the same version before and after is a snapshot, because every
  // write rewrites the metadata).
  Result<bool> Unchanged();
  // A sub-record that contradicts the metadata read (a slot out of range, a missing slot): a
  // stale read (IsStaleRead: the command starts over) when an opened metadata record moved since
  // it was read — a concurrent writer committed between two reads — else Corruption(what).
  Status Inconsistent(std::string what);

 private:
  TxOutcome CommitInParts(ReplyWriter& out, std::vector<BatchWrite> metas);

  Store& store_;
  int64_t now_ms_;
  std::vector<std::unique_ptr<Coll>> colls_;
  std::map<std::string, std::optional<std::string>, std::less<>> staged_;
};

// The records of collection `c` as transaction `tx` sees it (its staged writes over the store),
// named for `key` and incarnation `id`: what a copy of it under that name holds (COPY, RENAME, a
// command too large for one batch). One read per element; a stale read when `c` moved meanwhile.
Status CollectionImage(CollTx& tx, const Coll& c, std::string_view key, uint64_t id,
                       std::vector<std::pair<std::string, std::string>>* out);

// The slotted-member operations (see SlotRef above); payload_size is the type's fixed payload.
Result<std::optional<SlotRef>> SlottedFind(CollTx& tx, const Coll& c, std::string_view member,
                                           size_t payload_size);
Result<SlottedMember> SlottedAt(CollTx& tx, const Coll& c, int64_t slot, size_t payload_size);
// Stages `member` with `payload`: at `slot` when the member is there (SlottedFind's slot), else
// appended as a new member (size + 1).
void SlottedPut(CollTx& tx, Coll* c, std::string_view member, std::string_view payload,
                std::optional<int64_t> slot);
// Removes `member`; whether it was there.
Result<bool> SlottedRemove(CollTx& tx, Coll* c, std::string_view member, size_t payload_size);
// Every member, in slot order (one read per member).
Result<std::vector<SlottedMember>> SlottedAll(CollTx& tx, const Coll& c, size_t payload_size);

// Opens `key` expecting type `want` (or absent): nullptr after replying WRONGTYPE on w.
Result<Coll*> OpenTyped(CollTx& tx, std::string_view key, KeyType want, ReplyWriter& w);
// Whether st is CollTx::Inconsistent's stale read (the command must start over).
bool IsStaleRead(const Status& st);
// For write commands: replies the store error on out; kError. A stale read replies nothing:
// kRetry.
TxOutcome TxFail(ReplyWriter& out, const Status& st);
// Whether `member` fits a sub-record key of `key`; else replies the error (doc/types.md §Limits).
bool MemberSizeOk(ReplyWriter& out, std::string_view key, std::string_view member);

// The optimistic retries of one command. Commands commit conditionally on the versions they read;
// when another client changed a key meanwhile, the command runs again. Many clients writing one
// hot key (redis-benchmark's 50 on "myhash") would otherwise keep invalidating each other: after
// each conflict Again() pauses for a random time that doubles from 20 µs up to 2 ms (the losers
// spread out and the key's writers go through one after another, as they queue on Redis), and
// gives up — the command then replies TRYAGAIN, nothing written — only after kBudget of conflicts.
class ConflictRetry {
 public:
  static constexpr std::chrono::milliseconds kBudget{10000};
  // After a conflict: pauses and returns true to run again, or false once the budget is spent.
  bool Again();
  // Tests only: a shorter budget for the whole process (restore kBudget afterwards).
  static void SetBudgetForTesting(std::chrono::milliseconds budget);

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  uint32_t conflicts_ = 0;
};

// Runs body(tx) until it commits (or replies an error); TRYAGAIN after too many conflicts. body
// returns kCommitted when it has committed and written its reply, kRetry to start over, kError
// after replying an error.
template <typename Body>
void RunTx(CommandContext& c, Body&& body) {
  ConflictRetry retry;
  do {
    CollTx tx(c.store, c.state.NowMs());
    TxOutcome o = body(tx);
    if (o != TxOutcome::kRetry) return;
  } while (retry.Again());
  c.out.Error(std::string(kErrTryAgain));
}

// A read of several records: runs body(tx, w) — which opens keys, reads, and writes its reply
// (WRONGTYPE included) into w — and sends that reply only when no opened key's metadata changed
// meanwhile (every write rewrites it, so the reads were a snapshot); else it runs again. A Status
// error from body is replied as a store error.
template <typename Body>
void SnapshotRead(CommandContext& c, Body&& body) {
  ConflictRetry retry;
  do {
    CollTx tx(c.store, c.state.NowMs());
    std::string reply;
    ReplyWriter w(&reply, c.session.proto);
    Status st = body(tx, w);
    if (IsStaleRead(st)) continue;
    if (!st.ok()) return c.out.Error(TxError(st));
    auto same = tx.Unchanged();
    if (!same.ok()) return c.out.Error(TxError(same.status()));
    if (*same) return c.out.Raw(reply);
  } while (retry.Again());
  c.out.Error("TRYAGAIN the key kept changing");
}

namespace handlers {
// A sorted set's members by score (ties by member), as ZRANGE 0 -1 gives them (zset_commands.cc).
Result<std::vector<std::string>> ZsetMembersByScore(CollTx& tx, const Coll& z);
// hash_commands.cc
void HSet(CommandContext&, const std::vector<std::string>&);
void HSetNx(CommandContext&, const std::vector<std::string>&);
void HGet(CommandContext&, const std::vector<std::string>&);
void HMGet(CommandContext&, const std::vector<std::string>&);
void HDel(CommandContext&, const std::vector<std::string>&);
void HLen(CommandContext&, const std::vector<std::string>&);
void HExists(CommandContext&, const std::vector<std::string>&);
void HStrLen(CommandContext&, const std::vector<std::string>&);
void HGetAll(CommandContext&, const std::vector<std::string>&);
void HIncrBy(CommandContext&, const std::vector<std::string>&);
void HIncrByFloat(CommandContext&, const std::vector<std::string>&);
void HRandField(CommandContext&, const std::vector<std::string>&);
void HScan(CommandContext&, const std::vector<std::string>&);
// set_commands.cc
void SAdd(CommandContext&, const std::vector<std::string>&);
void SRem(CommandContext&, const std::vector<std::string>&);
void SIsMember(CommandContext&, const std::vector<std::string>&);  // and SMISMEMBER
void SCard(CommandContext&, const std::vector<std::string>&);
void SMembers(CommandContext&, const std::vector<std::string>&);
void SRandMember(CommandContext&, const std::vector<std::string>&);
void SPop(CommandContext&, const std::vector<std::string>&);
void SMove(CommandContext&, const std::vector<std::string>&);
void SCombine(CommandContext&, const std::vector<std::string>&);       // SINTER SUNION SDIFF
void SCombineStore(CommandContext&, const std::vector<std::string>&);  // ...STORE
void SInterCard(CommandContext&, const std::vector<std::string>&);
void SScan(CommandContext&, const std::vector<std::string>&);
// list_commands.cc
void LPush(CommandContext&, const std::vector<std::string>&);  // LPUSH RPUSH LPUSHX RPUSHX
void LPop(CommandContext&, const std::vector<std::string>&);   // LPOP RPOP
void LLen(CommandContext&, const std::vector<std::string>&);
void LIndex(CommandContext&, const std::vector<std::string>&);
void LRange(CommandContext&, const std::vector<std::string>&);
void LSet(CommandContext&, const std::vector<std::string>&);
void LTrim(CommandContext&, const std::vector<std::string>&);
void LRem(CommandContext&, const std::vector<std::string>&);
void LInsert(CommandContext&, const std::vector<std::string>&);
void LPos(CommandContext&, const std::vector<std::string>&);
void LMove(CommandContext&, const std::vector<std::string>&);  // LMOVE RPOPLPUSH
// The pops the blocking commands are built on (blocking_commands.cc). `empty` null: as the plain
// command (nil when every key is empty). Non-null: nothing is replied when there is nothing to pop
// (*empty = true); skip_wrongtype: a source key of another type counts as empty (a re-run of a
// blocked command, which Redis wakes only for a key of its type).
// LMOVE: the source first (WRONGTYPE / empty), the destination's type only when moving.
void ListMove(CommandContext& c, const std::string& src, const std::string& dst, bool from_left,
              bool to_left, bool skip_wrongtype, bool* empty);
// From the first non-empty list of `keys`: count -1 one element, replied [key, element] (BLPOP);
// count >= 1 up to count, replied [key, [elements]] (LMPOP).
void ListPopFirst(CommandContext& c, const std::vector<std::string>& keys, bool left, int64_t count,
                  bool skip_wrongtype, bool* empty);
// zset_commands.cc
void ZAdd(CommandContext&, const std::vector<std::string>&);  // ZADD ZINCRBY
void ZRem(CommandContext&, const std::vector<std::string>&);
void ZCard(CommandContext&, const std::vector<std::string>&);
void ZScore(CommandContext&, const std::vector<std::string>&);
void ZMScore(CommandContext&, const std::vector<std::string>&);
void ZCount(CommandContext&, const std::vector<std::string>&);  // ZCOUNT ZLEXCOUNT
void ZRange(CommandContext&, const std::vector<std::string>&);  // ZRANGE ZREVRANGE ZRANGEBY*...
void ZRangeStore(CommandContext&, const std::vector<std::string>&);
void ZRank(CommandContext&, const std::vector<std::string>&);      // ZRANK ZREVRANK
void ZRemRange(CommandContext&, const std::vector<std::string>&);  // ZREMRANGEBY*
void ZPop(CommandContext&, const std::vector<std::string>&);       // ZPOPMIN ZPOPMAX
void ZMPop(CommandContext&, const std::vector<std::string>&);
// From the first non-empty sorted set of `keys`: count -1 one member, replied [key, member, score]
// (BZPOPMIN); count >= 1, replied [key, [[member, score]...]] (ZMPOP). `empty`/skip_wrongtype as
// ListPopFirst.
void ZsetPopFirst(CommandContext& c, const std::vector<std::string>& keys, bool max, int64_t count,
                  bool skip_wrongtype, bool* empty);
void ZRandMember(CommandContext&, const std::vector<std::string>&);
void ZScan(CommandContext&, const std::vector<std::string>&);
void ZCombine(CommandContext&, const std::vector<std::string>&);  // ZUNION ZINTER ZDIFF, *STORE,
                                                                  // ZINTERCARD
}  // namespace handlers

// The type commands' dispatch entries (appended to CommandTable()).
void AppendTypeCommands(std::vector<CommandSpec>* table);

}  // namespace asymnvm::kv::resp
