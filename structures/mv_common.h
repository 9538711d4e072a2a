// Shared machinery of the multi-version structures (MV-BST, MV-B+tree; AsymNVM paper
// §6.2): the anchor, immutable published objects, the writer's private working version, publish,
// grace-period reclamation and validated lock-free reader traversal.
//
// PM layout (little-endian). The naming entry's root word points at the anchor (32 B, data area):
//   +0 magic u64 "AYNVMMV1" | +8 root ptr u64 | +16 count word u64 (count in the low 48 bits, the
//   root ptr's tag in the high 16) | +24 version u64 (number of publishes).
// A ptr is a tagged address: pool offset in the low 48 bits, the low 16 bits of the version that
// created the object in the high 16 (0 = null). Every object (node or value block) starts with a
// 16-byte header: +0 magic u32 | +4 checksum u32 (of the whole object, this field excluded) |
// +8 version u64 (the publish that made it visible). A value block is the header + a value slot
// (u32 length | bytes, padded to 8): 16 + SlotBytes(value_size) bytes.
// Nodes are the kinds' own (mv_bst.cc, mv_bptree.cc); their keys are key slots of
// KeySlotBytes(key_size) bytes (the u64 of an integer key, or u16 length | bytes of a byte key).
//
// Writer (single, holds the writer lock from open): updates path-copy. Objects created since the
// last publish form the private working version: they live in DRAM, are modified in place, and
// are written only at publish — every private object as a memory log, then the anchor's
// root/count/version words (last), in ONE transaction (TxWrite), then Fence. The transaction is
// atomic at the back-end and carries the OPN of every op it contains, so the published root and
// the OPN move together: a crash before it applied leaves the old root and OPN (replay re-executes
// the ops from their op logs), after it both moved. Between publishes no memory log is pending in
// the session (other structures of the session can Fence). Publish happens every 64 updates at rcb
// with optimize on (every update otherwise), when the private objects exceed 48 KiB, on Sync,
// Verify and close. An acknowledged update is durable through its op log before it is published;
// readers see the last published version only.
//
// Reclamation: an object replaced in the private version is freed at once; a replaced published
// object is freed only after the grace period (default 5000 µs, the paper's n + l) counted from the
// fence of the publish that made it unreachable (a DRAM list; lost on a crash: leaked).
//
// Readers never lock and never wait for the writer: read root + count from the anchor (16 bytes,
// tags must agree), traverse; every object read (through the cache at rc/rcb) is validated (magic,
// checksum, tag = the pointer's tag); an invalid one is re-read remotely; still invalid (freed and
// reused under a reader slower than the grace period) or a traversal older than the grace period
// restarts from the root (counted). Traversals are bounded.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/crash_point.h"
#include "structures/base.h"
#include "structures/kinds.h"

namespace asymnvm::structures::internal::mv {

using Clock = std::chrono::steady_clock;
inline constexpr uint64_t kAnchorMagic = 0x31564d4d564e5941ull;  // "AYNVMMV1"
inline constexpr uint32_t kValueMagic = 0x4c56564du;             // "MVVL"
inline constexpr uint64_t kRootOff = 8, kCountOff = 16, kVersionOff = 24, kAnchorBytes = 32;
inline constexpr uint32_t kHdr = 16;
inline constexpr uint64_t kAddrMask = (1ull << 48) - 1;
inline constexpr size_t kPublishBytes = 48 * 1024;  // memory logs of one publish
inline constexpr uint32_t kBatchUpdates = 64;
inline constexpr std::chrono::microseconds kDefaultGrace{5000};
inline constexpr std::chrono::seconds kReaderDeadline{5};  // kAborted after restarting this long
inline constexpr int kTimedAttempts = 3;  // grace-period restarts before a reader runs untimed

inline uint64_t Addr(uint64_t p) { return p & kAddrMask; }
inline uint16_t Tag(uint64_t p) { return static_cast<uint16_t>(p >> 48); }
inline uint64_t MakePtr(uint64_t addr, uint64_t version) {
  return addr | ((version & 0xFFFF) << 48);
}

inline uint64_t Mix(uint64_t h) {
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 32);
}
// Checksum of an object (size a multiple of 8), bytes 4..8 (the checksum itself) excluded.
inline uint32_t ObjSum(const uint8_t* p, size_t n) {
  uint64_t h = Mix(0x243F6A8885A308D3ull ^ n ^ GetU32(p));
  for (size_t i = 8; i + 8 <= n; i += 8) h = Mix(h ^ GetU64(p + i));
  return static_cast<uint32_t>(h ^ (h >> 29));
}

struct MvStats {
  uint64_t publishes = 0;
  uint64_t private_frees = 0;    // replaced before being published: freed at once
  uint64_t reclaimed_frees = 0;  // replaced published objects freed after the grace period
  uint64_t pending_reclaim = 0;  // waiting for their grace period
  uint64_t reader_restarts = 0;  // reader traversals restarted from the root
  uint64_t anchor_retries = 0;   // reader read a torn root/count pair
  // MV-BST: nodes the last Verify found above a parent they belong below (treap order). Counted,
  // not an error: trees written before the treap are valid BSTs of another shape.
  uint64_t treap_violations = 0;
  uint64_t version = 0;
};

class MvBase : public Map, public Base {
 public:
  MvBase(frontend::Session& s, frontend::Structure st, Kind kind, const Options& o,
         uint32_t node_magic, uint32_t node_bytes)
      : Base(s, std::move(st), kind, o), node_magic_(node_magic), node_bytes_(node_bytes) {
    val_bytes_ = kHdr + SlotBytes(vsize());
    batch_ = (level() == frontend::Level::kRcb && opt_.optimize) ? kBatchUpdates : 1;
    // Unpublished updates keep their op logs open; another structure's op publishes them first.
    if (writer()) KeepsOpsOpen([this] { return dirty_ ? Publish() : s_.TxWrite(st_); });
  }
  ~MvBase() override {
    if (!writer()) return;
    Status st = Publish();
    if (st.ok() && !reclaim_.empty()) {
      // Readers of other sessions may still be inside the last versions: wait out the grace.
      const auto last = reclaim_.back().first;
      if (last > Clock::now()) std::this_thread::sleep_until(last);
      st = ReclaimDue();
    }
    if (!st.ok()) LOG_WARN("structures", Describe(kind_, st_.name) << ": close: " << st.ToString());
  }

  Status Init() {
    ASYMNVM_RETURN_IF_ERROR(AcquireWriterLock());
    uint8_t init[kAnchorBytes] = {};
    PutU64(init, kAnchorMagic);
    ASYMNVM_ASSIGN_OR_RETURN(anchor_, EnsureAnchor(init));
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(s_.ReadRemote(anchor_, a));
    if (GetU64(a) != kAnchorMagic) {
      return Status::Corruption(Describe(kind_, st_.name) + ": anchor has a bad magic");
    }
    root_ = GetU64(a + kRootOff);
    count_ = GetU64(a + kCountOff) & kAddrMask;
    version_ = GetU64(a + kVersionOff);
    return Status::Ok();
  }

  // Unpublished updates are dropped (their ops were past the OPN: the replay redoes them) and the
  // working version is the pool's last published one. Published versions were fenced, so the
  // reclamation queue of their replaced objects stays.
  Status Resync() override {
    priv_.clear();
    priv_bytes_ = 0;
    ops_ = 0;
    dirty_ = false;
    in_vector_ = false;
    retired_.clear();
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(s_.ReadRemote(anchor_, a));
    if (GetU64(a) != kAnchorMagic) {
      return Status::Corruption(Describe(kind_, st_.name) + ": anchor has a bad magic");
    }
    root_ = GetU64(a + kRootOff);
    count_ = GetU64(a + kCountOff) & kAddrMask;
    version_ = GetU64(a + kVersionOff);
    return Status::Ok();
  }

  Kind kind() const override { return kind_; }
  const frontend::Structure& structure() const override { return st_; }
  uint32_t value_size() const override { return vsize(); }

  uint32_t key_size() const override { return ksize(); }
  Status Put(const Key& key, std::span<const uint8_t> value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    ASYMNVM_RETURN_IF_ERROR(CheckValue(value));
    return DoPut(key, value, /*replay=*/false);
  }
  Status Delete(const Key& key) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    return DoDelete(key, /*replay=*/false);
  }
  Status Get(const Key& key, Value* value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    return Run([&](uint64_t root, uint64_t count) { return GetIn(root, count, key, value); },
               /*timed=*/true);
  }
  // `from` may be the empty byte string or longer than key_size (CheckScanFrom).
  Status Scan(const Key& from, size_t limit, std::vector<KeyValue>* out) override {
    ASYMNVM_RETURN_IF_ERROR(CheckScanFrom(from));
    return Run(
        [&](uint64_t root, uint64_t count) {
          out->clear();
          return ScanIn(root, count, from, limit, out);
        },
        /*timed=*/false);
  }
  Result<uint64_t> Count() override {
    uint64_t n = 0;
    ASYMNVM_RETURN_IF_ERROR(Run(
        [&](uint64_t, uint64_t count) {
          n = count;
          return Status::Ok();
        },
        /*timed=*/true));
    return n;
  }
  Status Sync() override {
    if (!writer()) return Status::Ok();
    ASYMNVM_RETURN_IF_ERROR(Publish());
    ASYMNVM_RETURN_IF_ERROR(ReclaimDue());
    return SyncBase();
  }
  Status Verify() override {
    ASYMNVM_RETURN_IF_ERROR(Sync());
    verifying_ = true;
    Status st = Run([&](uint64_t root, uint64_t count) { return VerifyIn(root, count); }, false);
    verifying_ = false;
    return st;
  }
  // A vector (doc/structures.md "Vector operations"): each run of the sorted vector is applied
  // to a fresh working version in DRAM (path copies shared by its keys), then one op log (type 3)
  // and one publish — one root swap — for the whole run. A run whose private objects would exceed
  // one publish is dropped before its op log and applied in parts.
  Status PutBatch(std::span<const KeyValue> kvs) override {
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    for (const KeyValue& kv : kvs) {
      ASYMNVM_RETURN_IF_ERROR(CheckKey(kv.first));
      ASYMNVM_RETURN_IF_ERROR(CheckValue(kv.second));
    }
    return ApplyRuns(SortedUnique(kvs), kOpPutVector, nullptr);
  }

  Status ReplayOp(const frontend::RecoveredOp& op) override {
    if (op.op_type == kOpPutVector || op.op_type == kOpDeleteVector) {
      std::vector<KeyValue> run;
      Status st = DecodeVector(op.payload, ksize(), &run);
      if (!st.ok()) return Status::Corruption(What() + ": " + st.message());
      for (const KeyValue& kv : run) {
        if (kv.second.size() > vsize() || (op.op_type == kOpDeleteVector && !kv.second.empty()))
          return Status::Corruption(What() + ": replayed value too long");
      }
      return ApplyVectorRun(run, true, op.op_type, nullptr);
    }
    Key key;
    Value v;
    ASYMNVM_RETURN_IF_ERROR(DecodeKeyValue(op.payload, ksize(), &key, &v));
    if (op.op_type == kOpPut && v.size() > vsize()) {
      return Status::Corruption(What() + ": replayed value too long");  // as Base::ReplayMapOp
    }
    if (op.op_type == kOpPut) return DoPut(key, v, /*replay=*/true);
    if (op.op_type == kOpDelete) return DoDelete(key, /*replay=*/true);
    return Status::Corruption(Describe(kind_, st_.name) + ": unknown op type " +
                              std::to_string(op.op_type));
  }

  MvStats stats() const {
    MvStats m = stats_;
    m.pending_reclaim = reclaim_.size() + retired_.size();
    m.version = version_;
    return m;
  }
  // Also brings pending deadlines forward to now + g.
  void set_grace(std::chrono::microseconds g) {
    grace_ = g;
    const auto cap = Clock::now() + g;
    for (auto& e : reclaim_) e.first = std::min(e.first, cap);
  }

 protected:
  // Keys are the map's kind (CheckKey): integers, or byte strings ordered bytewise.
  virtual Status DoPut(const Key& key, std::span<const uint8_t> value, bool replay) = 0;
  virtual Status DoDelete(const Key& key, bool replay) = 0;
  virtual Status GetIn(uint64_t root, uint64_t count, const Key& key, Value* value) = 0;
  virtual Status ScanIn(uint64_t root, uint64_t count, const Key& from, size_t limit,
                        std::vector<KeyValue>* out) = 0;
  virtual Status VerifyIn(uint64_t root, uint64_t count) = 0;

  std::string What() const { return Describe(kind_, st_.name); }

  // Runs a read-only body on the writer's working version, or for a reader on the published one
  // (restarted from the root when a traversal asks for it). timed: a traversal older than the grace
  // period restarts (the paper's rule; point operations). Scans and Verify may legitimately take
  // longer than the grace period over a large structure — they would never finish — and rely on
  // validation alone (a freed and reused object fails its tag or checksum).
  Status Run(const std::function<Status(uint64_t, uint64_t)>& body, bool timed) {
    op_start_ = Clock::now();
    timed_ = timed;
    if (writer()) return body(root_, count_);
    const auto deadline = Clock::now() + kReaderDeadline;
    for (int attempt = 0;; attempt++) {
      if (Clock::now() > deadline) return Status::Aborted(What() + ": reader kept restarting");
      // After kTimedAttempts traversals that outlived the grace period (a slow or loaded reader),
      // the next ones run untimed and rely on validation alone, as scans do: the reader stays
      // live on a slow machine instead of restarting forever.
      timed_ = timed && attempt < kTimedAttempts;
      uint8_t a[16];
      ASYMNVM_RETURN_IF_ERROR(s_.ReadRemote(anchor_ + kRootOff, a));
      const uint64_t root = GetU64(a), cw = GetU64(a + 8);
      if (Tag(root) != Tag(cw)) {
        stats_.anchor_retries++;
        continue;
      }
      restart_ = false;
      op_start_ = Clock::now();
      Status st = body(root, cw & kAddrMask);
      if (!restart_) return st;
      stats_.reader_restarts++;
    }
  }

  // A reader must start over from the root.
  Status Restart(const std::string& why) {
    restart_ = true;
    return Status::Aborted(What() + ": restart: " + why);
  }

  bool Valid(const std::vector<uint8_t>& b, uint32_t magic, uint64_t ptr) const {
    return GetU32(b.data()) == magic && GetU32(b.data() + 4) == ObjSum(b.data(), b.size()) &&
           (GetU64(b.data() + 8) & 0xFFFF) == Tag(ptr);
  }

  // Reads object `ptr` (`bytes` long, `magic`). The writer sees its private objects; a reader
  // validates what it read (see the top of the file).
  Status Fetch(uint64_t ptr, uint32_t magic, uint32_t bytes, std::vector<uint8_t>* out) {
    const uint64_t a = Addr(ptr);
    if (a == 0)
      return writer() ? Status::Corruption(What() + ": null pointer") : Restart("null pointer");
    if (writer()) {
      if (auto it = priv_.find(a); it != priv_.end()) {
        *out = it->second;
        return Status::Ok();
      }
      out->resize(bytes);
      ASYMNVM_RETURN_IF_ERROR(Read(a, *out, /*cached=*/true));
      if (GetU32(out->data()) != magic || (verifying_ && !Valid(*out, magic, ptr))) {
        return Status::Corruption(What() + ": object at " + std::to_string(a) +
                                  " has a bad magic, checksum or tag");
      }
      return Status::Ok();
    }
    if (timed_ && Clock::now() - op_start_ > grace_)
      return Restart("traversal outlived the grace period");
    out->resize(bytes);
    if (level() >= frontend::Level::kRc) {
      ASYMNVM_RETURN_IF_ERROR(Read(a, *out, /*cached=*/true));
      if (Valid(*out, magic, ptr)) return Status::Ok();
    }
    ASYMNVM_RETURN_IF_ERROR(Read(a, *out, /*cached=*/false));
    if (Valid(*out, magic, ptr)) return Status::Ok();
    return Restart("object at " + std::to_string(a) + " is stale or reused");
  }

  Status ReadValue(uint64_t ptr, Value* value) {
    std::vector<uint8_t> b;
    ASYMNVM_RETURN_IF_ERROR(Fetch(ptr, kValueMagic, val_bytes_, &b));
    Status st = DecodeSlot(std::span<const uint8_t>(b).subspan(kHdr), vsize(), value);
    if (!st.ok()) return Status::Corruption(What() + ": value block: " + st.message());
    return Status::Ok();
  }

  // ---- the writer's working version ----
  bool IsPrivate(uint64_t ptr) const { return priv_.count(Addr(ptr)) != 0; }
  uint8_t* P(uint64_t ptr) { return priv_.at(Addr(ptr)).data(); }
  uint64_t NextVersion() const { return version_ + 1; }

  // A new private object with these bytes (magic already set); version stamped here.
  Result<uint64_t> NewObject(std::vector<uint8_t> bytes) {
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, s_.Malloc(bytes.size()));
    PutU64(bytes.data() + 8, NextVersion());
    priv_bytes_ += bytes.size() + 32;
    priv_[a] = std::move(bytes);
    return MakePtr(a, NextVersion());
  }
  Result<uint64_t> NewValue(std::span<const uint8_t> value) {
    std::vector<uint8_t> b(val_bytes_, 0);
    PutU32(b.data(), kValueMagic);
    EncodeSlot(value, std::span<uint8_t>(b).subspan(kHdr));
    return NewObject(std::move(b));
  }
  // The private version of node `ptr` whose current bytes are `bytes`: itself when private, else
  // a private copy (the original is retired).
  Result<uint64_t> Own(uint64_t ptr, const std::vector<uint8_t>& bytes) {
    if (IsPrivate(ptr)) return ptr;
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t n, NewObject(bytes));
    ASYMNVM_RETURN_IF_ERROR(Retire(ptr));
    return n;
  }
  // `ptr` is no longer reachable from the working version.
  Status Retire(uint64_t ptr) {
    const uint64_t a = Addr(ptr);
    if (a == 0) return Status::Ok();
    if (auto it = priv_.find(a); it != priv_.end()) {
      priv_bytes_ -= std::min<size_t>(priv_bytes_, it->second.size() + 32);
      priv_.erase(it);
      stats_.private_frees++;
      return s_.Free(a);
    }
    retired_.push_back(a);
    return Status::Ok();
  }

  // Before an update whose private objects may take `estimate` bytes: publish first when they
  // would not fit (fails before the op log when one update alone cannot), then the op log.
  // Inside a vector run neither: the run's op log follows its DRAM work (ApplyVectorRun).
  // kPublishBytes, or the back-end's largest transaction less room for the transaction's header,
  // commit record and anchor words when that is smaller.
  size_t PublishBudget() const {
    const size_t max = s_.max_transaction_bytes();
    return std::min(kPublishBytes, max > 512 ? max - 512 : max / 2);
  }
  Status Begin(uint16_t op, const Key& key, std::span<const uint8_t> value, size_t estimate) {
    if (estimate > PublishBudget()) {
      return Status::ResourceExhausted(
          What() + ": one update would copy " + std::to_string(estimate) +
          " bytes, more than one publish holds (" + std::to_string(PublishBudget()) + ")");
    }
    if (in_vector_) return Status::Ok();
    if (priv_bytes_ + estimate > PublishBudget()) ASYMNVM_RETURN_IF_ERROR(Publish());
    ASYMNVM_RETURN_IF_ERROR(s_.OpLog(st_, op, EncodeKeyValue(key, value)).status());
    dirty_ = true;
    return Status::Ok();
  }
  Status End(bool replay) {
    ops_++;
    if (in_vector_) return Status::Ok();
    if (replay || ops_ >= batch_ || priv_bytes_ >= PublishBudget()) return Publish();
    return ReclaimDue();
  }

  // A vector delete (Map::DeleteBatch of a kind that opts in: the MV-B+tree): the sorted keys in
  // runs of bounded op log, each applied by ApplyVectorRun as the kind's own Deletes in one
  // working version (each node copied once per run, the kind's single-key handling of emptied
  // nodes), one op log (type 4) and one publish. *deleted: the keys removed.
  Status DeleteVectorRuns(std::span<const Key> keys, uint64_t* deleted) {
    if (deleted) *deleted = 0;
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    std::vector<KeyValue> kvs;
    kvs.reserve(keys.size());
    for (const Key& k : keys) {
      ASYMNVM_RETURN_IF_ERROR(CheckKey(k));
      kvs.emplace_back(k, Value{});
    }
    return ApplyRuns(SortedUnique(kvs), kOpDeleteVector, deleted);
  }

  // Cuts a sorted, duplicate-free vector into runs whose op-log parameters stay within
  // kVectorPayloadMax and applies each (ApplyVectorRun cuts a run again by the publish budget).
  Status ApplyRuns(std::span<const KeyValue> sorted, uint16_t op_type, uint64_t* removed) {
    size_t begin = 0;
    while (begin < sorted.size()) {
      size_t end = begin, bytes = 4;
      while (end < sorted.size() &&
             (end == begin ||
              bytes + KeyValueValueOffset(sorted[end].first) + sorted[end].second.size() <=
                  kVectorPayloadMax)) {
        bytes += KeyValueValueOffset(sorted[end].first) + sorted[end].second.size();
        end++;
      }
      ASYMNVM_RETURN_IF_ERROR(
          ApplyVectorRun(sorted.subspan(begin, end - begin), false, op_type, removed));
      begin = end;
    }
    return Status::Ok();
  }

  // One run of a vector: everything unpublished is published first, so the working version then
  // holds this run's objects alone and dropping them undoes the run. The puts (op type 3) or
  // deletes (type 4) run in DRAM (no op log, no publish); then the run's op log and one publish,
  // or — too many private bytes for one publish, nothing logged yet — the run is dropped and
  // applied in parts. A delete run skips absent keys; one that found none logs nothing (its
  // replay logs and closes its op). removed (deletes): += the keys the run removed.
  Status ApplyVectorRun(std::span<const KeyValue> run, bool replay, uint16_t op_type,
                        uint64_t* removed) {
    ASYMNVM_RETURN_IF_ERROR(Publish());
    const uint64_t root = root_, count = count_;
    const size_t retired = retired_.size();
    auto drop = [&]() {
      for (const auto& [a, b] : priv_) (void)s_.Free(a);
      priv_.clear();
      priv_bytes_ = 0;
      root_ = root;
      count_ = count;
      retired_.resize(retired);
      ops_ = 0;
    };
    const bool del = op_type == kOpDeleteVector;
    in_vector_ = true;
    Status st = Status::Ok();
    if (del) {
      // Ascending: a key's path shares the nodes the previous keys made private. Stopped at the
      // first key that takes the private objects beyond one publish: the keys before it fit.
      for (size_t i = 0; i < run.size() && st.ok(); i++) {
        st = DoDelete(run[i].first, replay);
        if (st.code() == StatusCode::kNotFound) st = Status::Ok();
        if (st.ok() && !replay && i > 0 && priv_bytes_ > PublishBudget()) {
          in_vector_ = false;
          drop();
          ASYMNVM_RETURN_IF_ERROR(ApplyVectorRun(run.first(i), false, op_type, removed));
          return ApplyVectorRun(run.subspan(i), false, op_type, removed);
        }
      }
    } else {
      // Medians first (breadth-first over the halves of the sorted run): a run that falls into
      // an empty part of the MV-BST becomes a balanced subtree rather than a chain.
      // Deterministic, so a replay builds the same shape.
      std::deque<std::pair<size_t, size_t>> halves{{0, run.size()}};
      while (!halves.empty() && st.ok()) {
        const auto [lo, hi] = halves.front();
        halves.pop_front();
        if (lo >= hi) continue;
        const size_t mid = lo + (hi - lo) / 2;
        st = DoPut(run[mid].first, run[mid].second, replay);
        halves.emplace_back(lo, mid);
        halves.emplace_back(mid + 1, hi);
      }
    }
    in_vector_ = false;
    if (!st.ok()) {
      drop();
      return st;
    }
    if (!replay && run.size() > 1 && priv_bytes_ > PublishBudget()) {
      const size_t parts = std::min(
          run.size(),
          std::max<size_t>(2, (priv_bytes_ * 5 / 4 + PublishBudget() - 1) / PublishBudget()));
      drop();
      size_t at = 0;
      for (size_t k = 0; k < parts; k++) {
        const size_t n = run.size() / parts + (k < run.size() % parts ? 1 : 0);
        ASYMNVM_RETURN_IF_ERROR(ApplyVectorRun(run.subspan(at, n), false, op_type, removed));
        at += n;
      }
      return Status::Ok();
    }
    const bool changed = !priv_.empty() || count_ != count || root_ != root;
    if (!changed && !replay && del) {
      ops_ = 0;
      return Status::Ok();  // no key found: nothing to log
    }
    st = s_.OpLog(st_, op_type, EncodeVector(run)).status();
    if (!st.ok()) {
      drop();
      return st;
    }
    const uint64_t gone = count - count_;
    dirty_ = changed;
    if (!dirty_) return s_.TxWrite(st_);  // nothing changed (a replayed delete run): close the op
    ASYMNVM_RETURN_IF_ERROR(Publish(/*vector=*/true, /*vector_delete=*/del));
    if (removed && del) *removed += gone;
    return Status::Ok();
  }

  // Writes the working version and swaps the root in one transaction, fenced.
  // vector: a vector run's publish, whose op log is durable: crash tests kill it between its
  // memory logs (crash point structures.vector.mid_writes, as Base's vector runs).
  // vector_delete: a delete run's, which also reaches structures.vector_delete.mid_writes (the
  // point a test arms to stop in a delete rather than a put).
  Status Publish(bool vector = false, bool vector_delete = false) {
    if (!writer() || !dirty_) return Status::Ok();
    const uint64_t v = NextVersion();
    size_t i = 0;
    for (auto& [a, b] : priv_) {
      if (vector && i++ == priv_.size() / 2) VectorCrashPoints(vector_delete);
      PutU32(b.data() + 4, ObjSum(b.data(), b.size()));
      ASYMNVM_RETURN_IF_ERROR(Write(a, b));
    }
    if (vector && priv_.empty()) VectorCrashPoints(vector_delete);
    uint8_t w[24];
    PutU64(w, root_);
    PutU64(w + 8, count_ | (static_cast<uint64_t>(Tag(root_)) << 48));
    PutU64(w + 16, v);
    ASYMNVM_RETURN_IF_ERROR(Write(anchor_ + kRootOff, w));  // last: after every object
    ASYMNVM_RETURN_IF_ERROR(s_.TxWrite(st_));
    ASYMNVM_RETURN_IF_ERROR(s_.Fence());
    version_ = v;
    priv_.clear();
    priv_bytes_ = 0;
    ops_ = 0;
    dirty_ = false;
    stats_.publishes++;
    const auto deadline = Clock::now() + grace_;
    for (uint64_t a : retired_) reclaim_.emplace_back(deadline, a);
    retired_.clear();
    return ReclaimDue();
  }

  static void VectorCrashPoints(bool vector_delete) {
    ASYMNVM_CRASH_POINT("structures.vector.mid_writes");
    if (vector_delete) ASYMNVM_CRASH_POINT("structures.vector_delete.mid_writes");
  }

  Status ReclaimDue() {
    const auto now = Clock::now();
    while (!reclaim_.empty() && reclaim_.front().first <= now) {
      const uint64_t a = reclaim_.front().second;
      reclaim_.pop_front();
      stats_.reclaimed_frees++;
      ASYMNVM_RETURN_IF_ERROR(s_.Free(a));
    }
    return Status::Ok();
  }

  const uint32_t node_magic_;
  const uint32_t node_bytes_;
  uint32_t val_bytes_ = 0;
  uint32_t batch_ = 1;
  uint64_t anchor_ = 0;
  // Writer: the working version (root, count) and the last published version number.
  uint64_t root_ = 0, count_ = 0, version_ = 0;
  std::unordered_map<uint64_t, std::vector<uint8_t>> priv_;
  size_t priv_bytes_ = 0;
  uint32_t ops_ = 0;
  bool dirty_ = false;
  bool in_vector_ =
      false;  // DoPut/DoDelete inside ApplyVectorRun: no op log, no publish of its own
  std::vector<uint64_t> retired_;  // published objects replaced since the last publish
  std::deque<std::pair<Clock::time_point, uint64_t>> reclaim_;
  std::chrono::microseconds grace_ = kDefaultGrace;
  // Readers.
  Clock::time_point op_start_{};
  bool restart_ = false;
  bool timed_ = true;
  bool verifying_ = false;
  MvStats stats_;
};

// Test hooks (nullptr / no-op for other kinds).
inline MvStats GetMvStats(Map* m) {
  auto* b = dynamic_cast<MvBase*>(m);
  return b ? b->stats() : MvStats{};
}
inline void SetMvGraceForTesting(Map* m, std::chrono::microseconds g) {
  if (auto* b = dynamic_cast<MvBase*>(m)) b->set_grace(g);
}

}  // namespace asymnvm::structures::internal::mv
