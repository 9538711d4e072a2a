// B+tree (AsymNVM paper §4.3–4.4, §6, §8; doc/structures.md "B+tree").
//
// Lock-based B+tree of fan-out F = Options::param (default 32, 4..256): every node holds at most
// F keys; leaves are linked left to right for scans. Readers use the seqlock.
//
// PM layout (little-endian):
//   Anchor (48 B, the root word points at it): magic u64 "AYNVMBPT" @0 | root u64 @8 |
//     height u64 @16 (0 = empty, 1 = the root is a leaf) | count u64 @24 | fanout u64 @32 |
//     flags u64 @40 (bit 0: values out of line; bit 1: nodes kept filled, see Delete).
//   K = KeySlotBytes(key_size): a key slot is the u64 of an integer key (K = 8, key_size 0), or
//   u16 length | the bytes of a byte-string key zero-padded to a multiple of 8 (K = 8·ceil((2 +
//   key_size)/8)); keys order numerically / bytewise (Key's operator<=>).
//   Internal node (16 + KF + 8(F+1) B; 24 + 16F with integer keys): tag u32 "BPIN" @0 | n u32 @4 |
//     unused u64 @8 | keys[F] slots of K B @16 | children[F+1] u64 @16+KF. Child i holds the keys
//     k with keys[i-1] <= k < keys[i].
//   Leaf (16 + KF + F·S B): tag u32 "BPLF" @0 | n u32 @4 | next leaf u64 @8 (0 = last) |
//     keys[F] slots of K B @16 (ascending) | values @16+KF: F value slots of S =
//     SlotBytes(value_size) (u32 length | bytes, padded to 8) inline, or, out of line, F value
//     pointers (S = 8) each to its own Malloc'ed block of SlotBytes(value_size) bytes.
//   Values are out of line when value_size > 256 or F·SlotBytes(value_size) > 16 KiB, so that a
//   leaf (and one split's memory logs) stays small.
//   Keys are always inline (every descent compares them). The fan-out is the user's and is kept
//   for every key size, but a tree whose key array F·K would exceed 16 KiB is refused at creation
//   (kInvalidArgument; at key_size 256, K = 264: F <= 62; the default F = 32 makes 8.25 KiB of
//   keys per node, an internal node of 8.7 KiB read whole on each descent). An update whose
//   memory logs could outgrow one transaction (FitsOneTransaction: an upper bound from what its
//   descent read, e.g. the number of full nodes on an insertion's path; no extra read) fails with
//   kResourceExhausted before its op log, so nothing is written; at key_size 256 and F = 32 on
//   the default 64 KiB OQ buffers that takes an insertion whose leaf and 5 internal nodes on its
//   path are all full (a tree of height 6 or more: millions of keys); with integer keys it does
//   not happen.
//
// Put: descend (recording the path); an existing key gets its slot rewritten (4 + length bytes);
// otherwise the key is inserted into the leaf (the keys/values right of it shift: one memory log
// for the header, one for the key range, one for the value range). A full leaf splits: the left
// half stays, the right half moves to a new leaf linked after it, and (first key of the right,
// new leaf) goes into the parent, which may split in turn (the middle key moves up); a root split
// adds a level. Every node an insertion needs is allocated before its op log.
// Delete and DeleteBatch share one planner: the keys descend as a vector put's (each node read
// once) and are removed from their leaves in DRAM. A non-root node left with fewer than MinFill =
// max(1, F/4) keys (a leaf: entries) is rebalanced with an adjacent sibling under the same parent
// (the right one; the left one for the last child): merged into the left of the two when the
// result holds at most MergeFill = max(1, 3F/4) keys (internal nodes count the separator, which
// comes down; the right node is freed and its separator and pointer leave the parent; only a right
// node is ever unlinked, so the leaf chain changes in the left node's next word), otherwise their
// entries (internal: children, through the separator) are split evenly and the separator
// replaced. The parent may be left under-full in turn, up to the root; a root internal node left
// without keys is replaced by its only child (the tree loses a level, repeatedly); the last key
// frees the root leaf (height 0). MergeFill >= 2·MinFill: a split pair is filled, and the gap
// keeps a node from merging and splitting on alternate operations (F/4 rather than ceil(F/2)-1:
// the leaves' bound). Each changed node is written once from its first changed entry (header, key
// range, value or child range), with the anchor words: one op log (type 2, or 4 for a vector
// run), one transaction; a plan beyond one transaction is refused before its op log
// (kResourceExhausted), as an insertion's. Out-of-line value blocks of removed entries and the
// unlinked nodes are freed after the transaction.
// Anchor flag bit 1 ("filled"): set when a tree is created by this version; Verify then rejects a
// non-root node below MinFill and a root internal node without keys. Trees created earlier (bit
// clear) may hold under-full nodes legitimately (0-key internal nodes, single-key leaves without
// a sibling): they work and verify as before, and a delete rebalances the under-full nodes it
// reads. A binary older than the flag refuses a flagged tree (kCorruption: anchor flags), so it
// cannot write under-full nodes into a tree held to the rule.
//
// §8 tree optimization (Options::optimize, writer at rc/rcb): nodes at depth < N (root = depth 0)
// are read through the page cache, deeper ones with one-sided READs that bypass it. Every 1024
// node reads the session's cache hit/miss counters are compared with the previous window: a miss
// ratio above 50% makes N smaller by one (not below 1), below 25% larger by one (not above 16).
// N starts at 3 (the levels nearest the root). With optimize off every read goes through the
// cache (plain replacement policy).
//
// Readers (Access::kReader) run every read-only operation under the seqlock; a bad tag, n > F, a
// key slot whose length is 0 or above key_size, a zero/unaligned address, a height above 64 or a
// scan longer than the count is reported as kAborted("torn ...") so the seqlock retries it
// (Verify reports it as kCorruption).
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "backend/log_format.h"
#include "structures/base.h"
#include "structures/kinds.h"
#include "structures/level_threshold.h"

namespace asymnvm::structures::internal {
namespace {

constexpr uint64_t kMagic = 0x5450424d564e5941ull;  // "AYNVMBPT"
constexpr uint32_t kInternalTag = 0x4e495042;       // "BPIN"
constexpr uint32_t kLeafTag = 0x464c5042;           // "BPLF"
constexpr uint64_t kRoot = 8, kHeight = 16, kCount = 24, kFanout = 32, kFlags = 40,
                   kAnchorBytes = 48;
constexpr uint64_t kNext = 8, kKeys = 16;
// Anchor flags: values out of line; nodes kept filled (set at creation since internal nodes are
// rebalanced on deletes: Verify then rejects under-full nodes; trees created earlier may hold
// them and are checked as before).
constexpr uint64_t kFlagOutOfLine = 1, kFlagFilled = 2;
constexpr uint64_t kDefaultFanout = 32, kMinFanout = 4, kMaxFanout = 256;
constexpr uint64_t kMaxHeight = 64;
constexpr uint32_t kInlineValueMax = 256;
constexpr uint64_t kInlineLeafValuesMax = 16 * 1024;
constexpr uint64_t kNodeKeysMax = 16 * 1024;  // F·K of a node (see the top of the file)

// The §8 level threshold: depth < n → cached read.

struct Node {
  uint64_t addr = 0;
  bool leaf = false;
  uint32_t n = 0;
  uint64_t next = 0;               // leaves
  std::vector<Key> keys;           // n
  std::vector<uint64_t> children;  // internal: n + 1
};

struct PathStep {
  Node node;
  uint32_t idx = 0;  // the child taken
};

class BPlusTree final : public Map, public Base {
 public:
  BPlusTree(frontend::Session& s, frontend::Structure st, const Options& o)
      : Base(s, std::move(st), Kind::kBPlusTree, o), levels_(3, 16) {
    f_ = static_cast<uint32_t>(opt_.param);
    slot_bytes_ = SlotBytes(vsize());
    ool_ = vsize() > kInlineValueMax || uint64_t{f_} * slot_bytes_ > kInlineLeafValuesMax;
    vstride_ = ool_ ? 8 : slot_bytes_;
    ks_ = kslot();
    internal_bytes_ = kKeys + uint64_t{ks_} * f_ + 8ull * (f_ + 1);
    leaf_bytes_ = kKeys + uint64_t{ks_} * f_ + uint64_t{f_} * vstride_;
    adapt_ = writer() && opt_.optimize &&
             (level() == frontend::Level::kRc || level() == frontend::Level::kRcb);
  }

  Status Init() {
    ASYMNVM_RETURN_IF_ERROR(AcquireWriterLock());
    uint8_t init[kAnchorBytes] = {};
    PutU64(init, kMagic);
    PutU64(init + kFanout, f_);
    PutU64(init + kFlags, (ool_ ? kFlagOutOfLine : 0) | kFlagFilled);
    ASYMNVM_ASSIGN_OR_RETURN(anchor_, EnsureAnchor(init));
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status { return Read(anchor_, a); }));
    const std::string what = Describe(kind_, st_.name);
    if (GetU64(a) != kMagic) return Status::Corruption(what + ": anchor has a bad magic");
    const uint64_t flags = GetU64(a + kFlags);
    if (GetU64(a + kFanout) != f_ || (flags & ~kFlagFilled) != (ool_ ? kFlagOutOfLine : 0)) {
      return Status::Corruption(what + ": anchor fan-out/flags do not match the naming entry");
    }
    filled_ = (flags & kFlagFilled) != 0;
    root_ = GetU64(a + kRoot);
    height_ = GetU64(a + kHeight);
    count_ = GetU64(a + kCount);
    return Status::Ok();
  }

  Status Refresh() override {
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a));
    if (GetU64(a) != kMagic)
      return Status::Corruption(Describe(kind_, st_.name) + ": anchor has a bad magic");
    root_ = GetU64(a + kRoot);
    height_ = GetU64(a + kHeight);
    count_ = GetU64(a + kCount);
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
    return DoPut(key, value);
  }

  Status Delete(const Key& key) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    return DoDelete(key, /*replay=*/false);
  }

  Status PutBatch(std::span<const KeyValue> kvs) override {
    return PutVector(kvs, [this](std::span<const KeyValue> run, VectorPlan* plan) {
      return GatherWalk(run, plan);
    });
  }

  Status DeleteBatch(std::span<const Key> keys, uint64_t* deleted) override {
    deleted_in_batch_ = 0;
    Status st = DeleteVector(keys, [this](std::span<const KeyValue> run, VectorPlan* plan) {
      return GatherDeleteWalk(run, plan);
    });
    if (deleted) *deleted = deleted_in_batch_;
    return st;
  }

  Status Get(const Key& key, Value* value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    return Query([&]() -> Status {
      Node leaf;
      ASYMNVM_RETURN_IF_ERROR(DescendRead(key, &leaf));
      if (leaf.addr == 0) return NotFound(key);
      auto it = std::lower_bound(leaf.keys.begin(), leaf.keys.end(), key);
      if (it == leaf.keys.end() || *it != key) return NotFound(key);
      return ReadValue(leaf, static_cast<uint32_t>(it - leaf.keys.begin()), value);
    });
  }

  Status Scan(const Key& from, size_t limit, std::vector<KeyValue>* out) override {
    ASYMNVM_RETURN_IF_ERROR(CheckScanFrom(from));
    if (out) out->clear();
    return Query([&]() -> Status {
      if (out) out->clear();
      Node leaf;
      uint64_t count = 0;
      ASYMNVM_RETURN_IF_ERROR(DescendRead(from, &leaf, &count));
      uint64_t leaves = 0;
      std::vector<KeyValue> got;
      while (leaf.addr != 0 && got.size() < limit) {
        for (uint32_t j = 0; j < leaf.n && got.size() < limit; j++) {
          if (leaf.keys[j] < from) continue;
          if (!got.empty() && got.back().first >= leaf.keys[j]) return Torn("scan out of order");
          Value v;
          ASYMNVM_RETURN_IF_ERROR(ReadValue(leaf, j, &v));
          got.emplace_back(leaf.keys[j], std::move(v));
        }
        if (got.size() >= limit || leaf.next == 0) break;
        if (++leaves > count + 64) return Torn("leaf chain longer than the count");
        const uint64_t next = leaf.next;
        ASYMNVM_RETURN_IF_ERROR(ReadNode(next, leaf_depth_, /*leaf=*/true, &leaf));
      }
      if (out) *out = std::move(got);
      return Status::Ok();
    });
  }

  Result<uint64_t> Count() override {
    if (writer()) return count_;
    uint64_t n = 0;
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status {
      ASYMNVM_ASSIGN_OR_RETURN(n, ReadU64(anchor_ + kCount));
      return Status::Ok();
    }));
    return n;
  }

  Status Sync() override { return writer() ? SyncBase() : Status::Ok(); }

  Status Verify() override {
    return Query([&]() -> Status {
      const std::string what = Describe(kind_, st_.name);
      uint8_t a[kAnchorBytes];
      ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a));
      if (GetU64(a) != kMagic) return Status::Corruption(what + ": anchor magic");
      const uint64_t root = GetU64(a + kRoot), height = GetU64(a + kHeight),
                     count = GetU64(a + kCount);
      if (writer() && (root != root_ || height != height_ || count != count_)) {
        return Status::Corruption(what + ": anchor does not match the writer's view");
      }
      if ((root == 0) != (height == 0) || height > kMaxHeight) {
        return Status::Corruption(what + ": root " + std::to_string(root) + " with height " +
                                  std::to_string(height));
      }
      if (root == 0) {
        if (count != 0)
          return Status::Corruption(what + ": empty tree with count " + std::to_string(count));
        verified_leaves_ = 0;
        verified_height_ = 0;
        return Status::Ok();
      }
      std::vector<uint64_t> leaves;
      uint64_t keys = 0;
      ASYMNVM_RETURN_IF_ERROR(VerifyNode(root, 0, height, nullptr, nullptr, &leaves, &keys, count));
      verified_leaves_ = leaves.size();
      verified_height_ = height;
      if (keys != count) {
        return Status::Corruption(what + ": " + std::to_string(keys) + " keys, count says " +
                                  std::to_string(count));
      }
      // The leaf chain visits exactly the leaves in key order.
      for (size_t i = 0; i < leaves.size(); i++) {
        ASYMNVM_ASSIGN_OR_RETURN(uint64_t next, ReadU64(leaves[i] + kNext));
        const uint64_t want = i + 1 < leaves.size() ? leaves[i + 1] : 0;
        if (next != want) {
          return Status::Corruption(what + ": leaf " + std::to_string(i) + " links to " +
                                    std::to_string(next) + ", expected " + std::to_string(want));
        }
      }
      return Status::Ok();
    });
  }

  Status ReplayOp(const frontend::RecoveredOp& op) override {
    return ReplayMapOp(
        op,
        [this](std::span<const KeyValue> run, VectorPlan* plan) { return GatherWalk(run, plan); },
        [this](std::span<const KeyValue> run, VectorPlan* plan) {
          return GatherDeleteWalk(run, plan);
        },
        [this](const Key& key, std::span<const uint8_t> value) { return DoPut(key, value); },
        [this](const Key& key) { return DoDelete(key, /*replay=*/true); });
  }

 private:
  Status Torn(const std::string& why) const {
    return Status::Aborted(Describe(kind_, st_.name) + ": torn read: " + why);
  }
  Status NotFound(const Key& key) const {
    return Status::NotFound(Describe(kind_, st_.name) + ": key " + key.ToString() + " not found");
  }
  bool Plausible(uint64_t addr, uint64_t bytes) const {
    return addr != 0 && addr % 8 == 0 && addr >= s_.data_begin() && addr + bytes <= s_.data_end();
  }
  uint64_t KeyOff(uint32_t i) const { return kKeys + uint64_t{ks_} * i; }
  uint64_t ValOff(uint32_t i) const { return KeyOff(f_) + uint64_t{i} * vstride_; }
  uint64_t ChildOff(uint32_t i) const { return KeyOff(f_) + 8ull * i; }
  static uint64_t Word0(uint32_t tag, uint32_t n) { return uint64_t{tag} | (uint64_t{n} << 32); }

  // Reads a node: internal nodes whole, leaves their header and keys (values on demand).
  Status ReadNode(uint64_t addr, int depth, bool leaf, Node* node) {
    const uint64_t bytes = leaf ? KeyOff(f_) : internal_bytes_;
    if (!Plausible(addr, leaf ? leaf_bytes_ : internal_bytes_))
      return Torn("node address " + std::to_string(addr));
    buf_.resize(bytes);
    ASYMNVM_RETURN_IF_ERROR(Read(addr, buf_, levels_.Cached(adapt_, depth)));
    if (adapt_) levels_.Tick(s_);
    const uint8_t* b = buf_.data();
    const uint32_t tag = GetU32(b), n = GetU32(b + 4);
    if (tag != (leaf ? kLeafTag : kInternalTag))
      return Torn("node tag at depth " + std::to_string(depth));
    if (n > f_) return Torn("node holds " + std::to_string(n) + " keys");
    node->addr = addr;
    node->leaf = leaf;
    node->n = n;
    node->next = leaf ? GetU64(b + kNext) : 0;
    node->keys.resize(n);
    for (uint32_t i = 0; i < n; i++) {
      if (!LoadKey(b + KeyOff(i), &node->keys[i]).ok()) return Torn("bad key slot");
    }
    node->children.clear();
    if (!leaf) {
      node->children.resize(n + 1);
      for (uint32_t i = 0; i <= n; i++) {
        node->children[i] = GetU64(b + ChildOff(i));
        if (node->children[i] == 0 || node->children[i] % 8 != 0) return Torn("bad child pointer");
      }
    }
    if (node->next % 8 != 0) return Torn("bad next pointer");
    return Status::Ok();
  }

  static uint32_t ChildIndex(const Node& node, const Key& key) {
    return static_cast<uint32_t>(std::upper_bound(node.keys.begin(), node.keys.end(), key) -
                                 node.keys.begin());
  }

  // Root, height, count: the writer's DRAM copy, or the anchor (readers, inside Query).
  Status LoadRoot(uint64_t* root, uint64_t* height, uint64_t* count) {
    if (writer()) {
      *root = root_;
      *height = height_;
      *count = count_;
      return Status::Ok();
    }
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a));
    if (GetU64(a) != kMagic) return Torn("anchor magic");
    *root = GetU64(a + kRoot);
    *height = GetU64(a + kHeight);
    *count = GetU64(a + kCount);
    if ((*root == 0) != (*height == 0) || *height > kMaxHeight) return Torn("anchor root/height");
    return Status::Ok();
  }

  // The leaf that holds (or would hold) `key`; leaf->addr == 0 when the tree is empty. The path
  // of internal nodes when `path` is given.
  Status DescendRead(const Key& key, Node* leaf, uint64_t* count_out = nullptr,
                     std::vector<PathStep>* path = nullptr) {
    uint64_t root = 0, height = 0, count = 0;
    ASYMNVM_RETURN_IF_ERROR(LoadRoot(&root, &height, &count));
    if (count_out) *count_out = count;
    if (path) path->clear();
    leaf->addr = 0;
    leaf->n = 0;
    leaf->keys.clear();
    if (root == 0) return Status::Ok();
    leaf_depth_ = static_cast<int>(height - 1);
    uint64_t at = root;
    for (int d = 0; d + 1 < static_cast<int>(height); d++) {
      Node node;
      ASYMNVM_RETURN_IF_ERROR(ReadNode(at, d, /*leaf=*/false, &node));
      const uint32_t c = ChildIndex(node, key);
      at = node.children[c];
      if (path) path->push_back({std::move(node), c});
    }
    return ReadNode(at, leaf_depth_, /*leaf=*/true, leaf);
  }

  // The value slot of entry i (inline, or the block its pointer names).
  Status ReadSlot(const Node& leaf, uint32_t i, std::vector<uint8_t>* slot,
                  uint64_t* slot_addr = nullptr) {
    uint64_t at = leaf.addr + ValOff(i);
    if (ool_) {
      ASYMNVM_ASSIGN_OR_RETURN(at, ReadU64(at, levels_.Cached(adapt_, leaf_depth_)));
      if (!Plausible(at, slot_bytes_)) return Torn("value pointer");
    }
    if (slot_addr) *slot_addr = at;
    slot->resize(slot_bytes_);
    return Read(at, *slot, levels_.Cached(adapt_, leaf_depth_));
  }

  Status ReadValue(const Node& leaf, uint32_t i, Value* value) {
    std::vector<uint8_t> slot;
    ASYMNVM_RETURN_IF_ERROR(ReadSlot(leaf, i, &slot));
    Status st = DecodeSlot(slot, vsize(), value);
    if (!st.ok()) return Torn(st.message());
    return Status::Ok();
  }

  // Raw value entries [from, to) of a leaf (slots or pointers), for shifting/splitting.
  Status ReadValues(const Node& leaf, uint32_t from, uint32_t to, std::vector<uint8_t>* out) {
    out->resize(uint64_t{to - from} * vstride_);
    if (to == from) return Status::Ok();
    return Read(leaf.addr + ValOff(from), *out, levels_.Cached(adapt_, leaf_depth_));
  }

  static std::vector<uint8_t> SlotPrefix(std::span<const uint8_t> value) {
    std::vector<uint8_t> b((4 + value.size() + 7) / 8 * 8);
    EncodeSlot(value, b);
    return b;
  }

  // n key slots (ks_ bytes each), as they are stored from keys[0] on.
  std::vector<uint8_t> KeyBytes(const Key* keys, size_t n) const {
    std::vector<uint8_t> b(uint64_t{ks_} * n);
    for (size_t i = 0; i < n; i++) StoreKey(keys[i], b.data() + uint64_t{ks_} * i);
    return b;
  }
  static std::vector<uint8_t> WordBytes(const uint64_t* words, size_t n) {
    std::vector<uint8_t> b(8 * n);
    for (size_t i = 0; i < n; i++) PutU64(b.data() + 8 * i, words[i]);
    return b;
  }

  Status WriteKeys(uint64_t node, uint32_t from, const std::vector<Key>& keys, uint32_t to) {
    if (to <= from) return Status::Ok();
    return Write(node + KeyOff(from), KeyBytes(keys.data() + from, to - from));
  }
  Status WriteChildren(uint64_t node, uint32_t from, const std::vector<uint64_t>& ch, uint32_t to) {
    if (to <= from) return Status::Ok();
    return Write(node + ChildOff(from), WordBytes(ch.data() + from, to - from));
  }
  // A node's first kKeys + n·K bytes: its header (word 0, next word) and keys[0..n).
  std::vector<uint8_t> HeaderAndKeys(uint64_t word0, uint64_t next, const Key* keys,
                                     size_t n) const {
    std::vector<uint8_t> b(kKeys + uint64_t{ks_} * n, 0);
    PutU64(b.data(), word0);
    PutU64(b.data() + kNext, next);
    for (size_t i = 0; i < n; i++) StoreKey(keys[i], b.data() + KeyOff(static_cast<uint32_t>(i)));
    return b;
  }

  // Anchor words of this op: count alone, or root | height | count when the shape changed.
  Status WriteAnchor(uint64_t root, uint64_t height, uint64_t count) {
    if (root == root_ && height == height_) return WriteU64(anchor_ + kCount, count);
    uint8_t a[24];
    PutU64(a, root);
    PutU64(a + 8, height);
    PutU64(a + 16, count);
    return Write(anchor_ + kRoot, a);
  }

  // ---- one update, one transaction ----
  // An update's memory logs must fit one transaction: Update fails after the op log otherwise.
  // Long byte keys (a node of 8 KiB at key_size 256 and F = 32), a deep split cascade or a
  // back-end with small OQ buffers can exceed it, so every update checks an upper bound of its
  // footprint (each write with its entry header, bytes padded to 8; arithmetic on what its
  // descent read, no extra round trip) and fails with kResourceExhausted before its op log:
  // nothing is written. With integer keys the bounds stay far below a transaction.
  static constexpr uint64_t kEntry = backend::kTxnEntryHeaderSize;
  Status FitsOneTransaction(uint64_t bytes, const char* what) const {
    bytes += 2 * kEntry + 24 + 3 * kEntry;  // the anchor words, slack
    const uint64_t limit =
        s_.max_transaction_bytes() - backend::kTxnHeaderSize - backend::kTxnCommitSize;
    if (bytes <= limit) return Status::Ok();
    return Status::ResourceExhausted(Describe(kind_, st_.name) + ": " + what + " may write " +
                                     std::to_string(bytes) + " bytes of memory logs, more than " +
                                     "one transaction holds (" + std::to_string(limit) + ")");
  }
  // A rewrite of `n` entries of a leaf (header, keys, values).
  uint64_t LeafWriteBound(uint64_t n) const {
    return 3 * kEntry + 16 + n * (uint64_t{ks_} + vstride_);
  }
  // A rewrite of an internal node with n keys (header, keys, children).
  uint64_t InternalWriteBound(uint64_t n) const { return 3 * kEntry + 8 + n * ks_ + (n + 1) * 8; }
  // An insertion with `splits` node splits (the leaf's first; the node that takes the last
  // separator, or the new root, counted as one more).
  Status CheckInsertFits(size_t splits) const {
    uint64_t bytes = ool_ ? kEntry + slot_bytes_ : 0;  // the value block
    if (splits == 0) {
      bytes += LeafWriteBound(f_);
    } else {  // both halves of the leaf, of each split internal node
      bytes += LeafWriteBound(f_ + 1) + LeafWriteBound(0) +
               splits * (2 * kEntry + 16 + InternalWriteBound(f_ + 1));
    }
    return FitsOneTransaction(bytes, "an insertion");
  }

  Status DoPut(const Key& key, std::span<const uint8_t> value) {
    std::vector<PathStep> path;
    Node leaf;
    ASYMNVM_RETURN_IF_ERROR(DescendRead(key, &leaf, nullptr, &path));
    const auto params = EncodeKeyValue(key, value);
    const std::vector<uint8_t> prefix = SlotPrefix(value);
    const uint32_t i = static_cast<uint32_t>(
        std::lower_bound(leaf.keys.begin(), leaf.keys.end(), key) - leaf.keys.begin());
    if (leaf.addr != 0 && i < leaf.n && leaf.keys[i] == key) {
      uint64_t slot_addr = leaf.addr + ValOff(i);
      if (ool_) {
        ASYMNVM_ASSIGN_OR_RETURN(slot_addr,
                                 ReadU64(slot_addr, levels_.Cached(adapt_, leaf_depth_)));
      }
      return Update(
          kOpPut, params, [&]() -> Status { return Write(slot_addr, prefix); },
          KeyValueValueOffset(key));
    }

    // Insertion: allocate everything first.
    size_t splits = 0;
    bool new_root = leaf.addr == 0;
    if (!new_root && leaf.n == f_) {
      splits = 1;
      size_t j = path.size();
      while (j > 0 && path[j - 1].node.n == f_) {
        splits++;
        j--;
      }
      new_root = j == 0;
    }
    ASYMNVM_RETURN_IF_ERROR(CheckInsertFits(splits));
    std::vector<uint64_t> fresh;  // [0, splits): new right nodes bottom-up; then the new root
    auto release = [&]() {
      for (uint64_t a : fresh) (void)s_.Free(a);
    };
    for (size_t k = 0; k < splits + (new_root ? 1 : 0); k++) {
      const bool is_leaf = (k == 0 && splits > 0) || (leaf.addr == 0);
      auto a = s_.Malloc(is_leaf ? leaf_bytes_ : internal_bytes_);
      if (!a.ok()) {
        release();
        return a.status();
      }
      fresh.push_back(*a);
    }
    uint64_t vblock = 0;
    if (ool_) {
      auto a = s_.Malloc(slot_bytes_);
      if (!a.ok()) {
        release();
        return a.status();
      }
      vblock = *a;
    }
    // The new entry's value bytes (full stride: it may be followed by shifted entries).
    std::vector<uint8_t> entry(vstride_, 0);
    if (ool_) {
      PutU64(entry.data(), vblock);
    } else {
      EncodeSlot(value, entry);
    }
    std::vector<uint8_t> vals;
    if (leaf.addr != 0) {
      ASYMNVM_RETURN_IF_ERROR(ReadValues(leaf, leaf.n == f_ ? 0 : i, leaf.n, &vals));
    }

    uint64_t root = root_, height = height_;
    Status st = Update(
        kOpPut, params,
        [&]() -> Status {
          if (ool_) ASYMNVM_RETURN_IF_ERROR(Write(vblock, prefix));
          if (leaf.addr == 0) {  // empty tree: a root leaf
            const uint64_t a = fresh[0];
            ASYMNVM_RETURN_IF_ERROR(Write(a, HeaderAndKeys(Word0(kLeafTag, 1), 0, &key, 1)));
            ASYMNVM_RETURN_IF_ERROR(Write(a + ValOff(0), ool_ ? std::span<const uint8_t>(entry)
                                                              : std::span<const uint8_t>(prefix)));
            root = a;
            height = 1;
            return WriteAnchor(root, height, count_ + 1);
          }
          if (leaf.n < f_) {
            std::vector<Key> keys = leaf.keys;
            keys.insert(keys.begin() + i, key);
            ASYMNVM_RETURN_IF_ERROR(WriteU64(leaf.addr, Word0(kLeafTag, leaf.n + 1)));
            ASYMNVM_RETURN_IF_ERROR(WriteKeys(leaf.addr, i, keys, leaf.n + 1));
            std::vector<uint8_t> nv;
            if (i == leaf.n && !ool_) {
              nv = prefix;
            } else {
              nv = entry;
              nv.insert(nv.end(), vals.begin(), vals.end());
            }
            ASYMNVM_RETURN_IF_ERROR(Write(leaf.addr + ValOff(i), nv));
            return WriteAnchor(root, height, count_ + 1);
          }
          // Leaf split: F + 1 entries, the left keeps l of them.
          std::vector<Key> keys = leaf.keys;
          keys.insert(keys.begin() + i, key);
          vals.insert(vals.begin() + uint64_t{i} * vstride_, entry.begin(), entry.end());
          const uint32_t total = f_ + 1, l = total / 2, r = total - l;
          const uint64_t right = fresh[0];
          {
            ASYMNVM_RETURN_IF_ERROR(
                Write(right, HeaderAndKeys(Word0(kLeafTag, r), leaf.next, keys.data() + l, r)));
            ASYMNVM_RETURN_IF_ERROR(Write(
                right + ValOff(0), std::span<const uint8_t>(vals).subspan(uint64_t{l} * vstride_)));
            uint8_t h[16];
            PutU64(h, Word0(kLeafTag, l));
            PutU64(h + 8, right);
            ASYMNVM_RETURN_IF_ERROR(Write(leaf.addr, h));
            if (i < l) {
              ASYMNVM_RETURN_IF_ERROR(WriteKeys(leaf.addr, i, keys, l));
              ASYMNVM_RETURN_IF_ERROR(Write(
                  leaf.addr + ValOff(i), std::span<const uint8_t>(vals).subspan(
                                             uint64_t{i} * vstride_, uint64_t{l - i} * vstride_)));
            }
          }
          Key sep = keys[l];
          uint64_t child = right;
          size_t next_fresh = 1;
          for (size_t j = path.size(); j-- > 0;) {
            const Node& p = path[j].node;
            const uint32_t c = path[j].idx;
            std::vector<Key> pk = p.keys;
            std::vector<uint64_t> pc = p.children;
            pk.insert(pk.begin() + c, sep);
            pc.insert(pc.begin() + c + 1, child);
            if (p.n < f_) {
              ASYMNVM_RETURN_IF_ERROR(WriteU64(p.addr, Word0(kInternalTag, p.n + 1)));
              ASYMNVM_RETURN_IF_ERROR(WriteKeys(p.addr, c, pk, p.n + 1));
              ASYMNVM_RETURN_IF_ERROR(WriteChildren(p.addr, c + 1, pc, p.n + 2));
              return WriteAnchor(root, height, count_ + 1);
            }
            // Internal split: F + 1 keys; the left keeps m, keys[m] moves up, the right gets F - m.
            const uint32_t m = (f_ + 1) / 2, rn = f_ - m;
            const uint64_t rnode = fresh[next_fresh++];
            ASYMNVM_RETURN_IF_ERROR(
                Write(rnode, HeaderAndKeys(Word0(kInternalTag, rn), 0, pk.data() + m + 1, rn)));
            std::vector<uint64_t> rc(pc.begin() + m + 1, pc.end());
            ASYMNVM_RETURN_IF_ERROR(WriteChildren(rnode, 0, rc, rn + 1));
            ASYMNVM_RETURN_IF_ERROR(WriteU64(p.addr, Word0(kInternalTag, m)));
            ASYMNVM_RETURN_IF_ERROR(WriteKeys(p.addr, std::min(c, m), pk, m));
            ASYMNVM_RETURN_IF_ERROR(WriteChildren(p.addr, std::min(c + 1, m + 1), pc, m + 1));
            sep = pk[m];
            child = rnode;
          }
          // The root split: a new root with one key.
          const uint64_t nr = fresh[next_fresh];
          ASYMNVM_RETURN_IF_ERROR(Write(nr, HeaderAndKeys(Word0(kInternalTag, 1), 0, &sep, 1)));
          ASYMNVM_RETURN_IF_ERROR(WriteChildren(nr, 0, std::vector<uint64_t>{root_, child}, 2));
          root = nr;
          height = height_ + 1;
          return WriteAnchor(root, height, count_ + 1);
        },
        KeyValueValueOffset(key));
    if (!st.ok()) {
      release();
      if (vblock != 0) (void)s_.Free(vblock);
      return st;
    }
    root_ = root;
    height_ = height;
    count_++;
    return Status::Ok();
  }

  // ---- vector put (Algorithm 3, Gather-Apply; doc/structures.md "Vector operations") ----
  // The sorted run is split at every internal node by its keys and each part descends into its
  // child, so every node on the way is read once for the whole run. At a leaf the run is merged
  // with the leaf's entries in DRAM; the merged leaf is written once from its first changed entry
  // (header, key range, value range), and when it holds more than F entries it is cut into
  // ceil(T/F) leaves of even size (the first stays in place, the rest are new and chained after
  // it). The new right siblings go up to the parent, merged the same way and cut into
  // ceil((K+1)/(F+1)) nodes when over-full; new levels above the root are built the same way.

  // Sizes of ceil(total / cap) groups of even size (each <= cap).
  static std::vector<uint64_t> Spread(uint64_t total, uint64_t cap) {
    const uint64_t k = (total + cap - 1) / cap;
    std::vector<uint64_t> g(k, total / k);
    for (uint64_t j = 0; j < total % k; j++) g[j]++;
    return g;
  }

  Result<uint64_t> PlanAlloc(uint64_t bytes, VectorPlan* plan) {
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, s_.Malloc(bytes));
    plan->allocs.push_back(a);
    return a;
  }

  // A whole new leaf: header (next), keys and value entries (vals: n entries of vstride_).
  void PlanLeaf(uint64_t addr, uint64_t next, std::span<const Key> keys,
                std::span<const uint8_t> vals, VectorPlan* plan) {
    plan->Add(addr, HeaderAndKeys(Word0(kLeafTag, static_cast<uint32_t>(keys.size())), next,
                                  keys.data(), keys.size()));
    plan->Add(addr + ValOff(0), std::vector<uint8_t>(vals.begin(), vals.end()));
  }

  // A whole new internal node with keys.size() keys and keys.size() + 1 children.
  void PlanInternal(uint64_t addr, std::span<const Key> keys, std::span<const uint64_t> children,
                    VectorPlan* plan) {
    plan->Add(addr, HeaderAndKeys(Word0(kInternalTag, static_cast<uint32_t>(keys.size())), 0,
                                  keys.data(), keys.size()));
    plan->Add(addr + ChildOff(0), WordBytes(children.data(), children.size()));
  }

  // Cuts an over-full internal level (keys.size() + 1 children) into nodes; `first` (0 = none)
  // is the node keeping the first group in place, written from entry `from` on. Appends the new
  // nodes as (separator, address) to *up.
  Status PlanInternalGroups(uint64_t first, uint32_t from, const std::vector<Key>& keys,
                            const std::vector<uint64_t>& children, VectorPlan* plan,
                            std::vector<std::pair<Key, uint64_t>>* up, uint64_t* first_out) {
    const std::vector<uint64_t> g = Spread(children.size(), uint64_t{f_} + 1);
    uint64_t c = 0;
    for (size_t j = 0; j < g.size(); j++) {
      const uint64_t nk = g[j] - 1;
      std::span<const Key> ks(keys.data() + c, nk);
      std::span<const uint64_t> cs(children.data() + c, g[j]);
      if (j == 0 && first != 0) {
        PlanU64Header(first, Word0(kInternalTag, static_cast<uint32_t>(nk)), plan);
        if (from < nk) plan->Add(first + KeyOff(from), KeyBytes(ks.data() + from, nk - from));
        if (from + 1 < g[j])
          plan->Add(first + ChildOff(from + 1), WordBytes(cs.data() + from + 1, g[j] - from - 1));
        if (first_out) *first_out = first;
      } else {
        ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, PlanAlloc(internal_bytes_, plan));
        PlanInternal(a, ks, cs, plan);
        if (j == 0) {
          if (first_out) *first_out = a;
        } else {
          up->emplace_back(keys[c - 1], a);
        }
      }
      c += g[j];
    }
    return Status::Ok();
  }
  static void PlanU64Header(uint64_t addr, uint64_t word0, VectorPlan* plan) {
    std::vector<uint8_t> b(8);
    PutU64(b.data(), word0);
    plan->Add(addr, std::move(b));
  }

  // Gathers `run` into the subtree at `addr` (depth d; a leaf at leaf_depth_). *added counts
  // new keys; *up receives the new right siblings (separator, node) for the parent.
  Status GatherSubtree(uint64_t addr, int d, std::span<const KeyValue> run, VectorPlan* plan,
                       uint64_t* added, std::vector<std::pair<Key, uint64_t>>* up) {
    const bool is_leaf = d == leaf_depth_;
    Node node;
    ASYMNVM_RETURN_IF_ERROR(ReadNode(addr, d, is_leaf, &node));
    if (is_leaf) return GatherLeaf(node, run, plan, added, up);
    // Split the run by the node's keys; every child with a part is visited once.
    std::vector<Key> keys;
    std::vector<uint64_t> children;
    uint32_t changed = UINT32_MAX;
    size_t r = 0;
    for (uint32_t c = 0; c <= node.n; c++) {
      size_t e = r;
      while (e < run.size() && (c == node.n || run[e].first < node.keys[c])) e++;
      children.push_back(node.children[c]);
      if (e > r) {
        std::vector<std::pair<Key, uint64_t>> sub;
        ASYMNVM_RETURN_IF_ERROR(
            GatherSubtree(node.children[c], d + 1, run.subspan(r, e - r), plan, added, &sub));
        if (!sub.empty() && changed == UINT32_MAX) changed = static_cast<uint32_t>(keys.size());
        for (auto& [sep, child] : sub) {
          keys.push_back(std::move(sep));
          children.push_back(child);
        }
      }
      if (c < node.n) keys.push_back(node.keys[c]);
      r = e;
    }
    if (changed == UINT32_MAX) return Status::Ok();
    if (keys.size() <= f_) {
      const uint32_t nk = static_cast<uint32_t>(keys.size());
      PlanU64Header(addr, Word0(kInternalTag, nk), plan);
      plan->Add(addr + KeyOff(changed), KeyBytes(keys.data() + changed, nk - changed));
      plan->Add(addr + ChildOff(changed + 1),
                WordBytes(children.data() + changed + 1, nk - changed));
      return Status::Ok();
    }
    return PlanInternalGroups(addr, changed, keys, children, plan, up, nullptr);
  }

  Status GatherLeaf(const Node& leaf, std::span<const KeyValue> run, VectorPlan* plan,
                    uint64_t* added, std::vector<std::pair<Key, uint64_t>>* up) {
    struct Ent {
      const Key* key;
      int64_t old;         // index in the leaf, -1 for a new key
      const Value* value;  // new value, or null (unchanged)
    };
    std::vector<Ent> m;
    m.reserve(leaf.n + run.size());
    size_t i = 0, j = 0;
    while (i < leaf.n || j < run.size()) {
      if (j == run.size() || (i < leaf.n && leaf.keys[i] < run[j].first)) {
        m.push_back({&leaf.keys[i], static_cast<int64_t>(i), nullptr});
        i++;
      } else if (i == leaf.n || run[j].first < leaf.keys[i]) {
        m.push_back({&run[j].first, -1, &run[j].second});
        j++;
      } else {
        m.push_back({&leaf.keys[i], static_cast<int64_t>(i), &run[j].second});
        i++;
        j++;
      }
    }
    const uint64_t total = m.size();
    uint64_t p = total;  // the first new entry: entries before it keep their positions
    for (uint64_t k = 0; k < total; k++) {
      if (m[k].old < 0) {
        p = k;
        break;
      }
    }
    const std::vector<uint64_t> g = total > f_ ? Spread(total, f_) : std::vector<uint64_t>{total};
    const uint64_t q = std::min(p, g[0]);  // entries [q, total) are rewritten
    std::vector<uint8_t> raw;
    ASYMNVM_RETURN_IF_ERROR(
        ReadValues(leaf, static_cast<uint32_t>(std::min<uint64_t>(q, leaf.n)), leaf.n, &raw));
    std::vector<uint8_t> vals((total - q) * vstride_, 0);
    std::vector<Key> keys(total);
    for (uint64_t k = 0; k < total; k++) {
      keys[k] = *m[k].key;
      const Ent& e = m[k];
      if (k < q) {  // in place; an update rewrites its slot
        if (e.value == nullptr) continue;
        uint64_t slot = leaf.addr + ValOff(static_cast<uint32_t>(k));
        if (ool_) {
          ASYMNVM_ASSIGN_OR_RETURN(slot, ReadU64(slot, levels_.Cached(adapt_, leaf_depth_)));
        }
        plan->Add(slot, SlotPrefix(*e.value));
        continue;
      }
      uint8_t* out = vals.data() + (k - q) * vstride_;
      if (e.old >= 0) {
        const uint8_t* in = raw.data() + (static_cast<uint64_t>(e.old) - q) * vstride_;
        if (e.value == nullptr || ool_) std::memcpy(out, in, vstride_);
        if (e.value != nullptr) {
          if (ool_) {
            plan->Add(GetU64(in), SlotPrefix(*e.value));
          } else {
            EncodeSlot(*e.value, std::span<uint8_t>(out, vstride_));
          }
        }
        continue;
      }
      (*added)++;
      if (ool_) {
        ASYMNVM_ASSIGN_OR_RETURN(uint64_t vb, PlanAlloc(slot_bytes_, plan));
        plan->Add(vb, SlotPrefix(*e.value));
        PutU64(out, vb);
      } else {
        EncodeSlot(*e.value, std::span<uint8_t>(out, vstride_));
      }
    }
    if (p == total) return Status::Ok();  // updates only
    // New leaves first (their addresses go into the chain).
    std::vector<uint64_t> addrs(g.size());
    addrs[0] = leaf.addr;
    for (size_t k = 1; k < g.size(); k++) {
      ASYMNVM_ASSIGN_OR_RETURN(addrs[k], PlanAlloc(leaf_bytes_, plan));
    }
    uint64_t at = g[0];
    for (size_t k = 1; k < g.size(); k++) {
      const uint64_t next = k + 1 < g.size() ? addrs[k + 1] : leaf.next;
      PlanLeaf(addrs[k], next, std::span<const Key>(keys).subspan(at, g[k]),
               std::span<const uint8_t>(vals).subspan((at - q) * vstride_, g[k] * vstride_), plan);
      up->emplace_back(keys[at], addrs[k]);
      at += g[k];
    }
    // The leaf itself: header, then its keys and values from q on.
    std::vector<uint8_t> h(g.size() > 1 ? 16 : 8);
    PutU64(h.data(), Word0(kLeafTag, static_cast<uint32_t>(g[0])));
    if (g.size() > 1) PutU64(h.data() + 8, addrs[1]);
    plan->Add(leaf.addr, std::move(h));
    if (q < g[0]) {
      plan->Add(leaf.addr + KeyOff(static_cast<uint32_t>(q)), KeyBytes(keys.data() + q, g[0] - q));
      plan->Add(leaf.addr + ValOff(static_cast<uint32_t>(q)),
                std::vector<uint8_t>(vals.begin(), vals.begin() + (g[0] - q) * vstride_));
    }
    return Status::Ok();
  }

  // A vector walk reads under the current N without adapting it (LevelThreshold::Paused).
  Status GatherWalk(std::span<const KeyValue> run, VectorPlan* plan) {
    return levels_.Paused([&] { return GatherVector(run, plan); });
  }

  Status GatherVector(std::span<const KeyValue> run, VectorPlan* plan) {
    uint64_t added = 0, root = root_, height = height_;
    std::vector<std::pair<Key, uint64_t>> up;
    if (root_ == 0) {
      // An empty tree: the run becomes ceil(n/F) chained leaves under new levels.
      const std::vector<uint64_t> g = Spread(run.size(), f_);
      std::vector<uint64_t> addrs(g.size());
      for (size_t k = 0; k < g.size(); k++) {
        ASYMNVM_ASSIGN_OR_RETURN(addrs[k], PlanAlloc(leaf_bytes_, plan));
      }
      uint64_t at = 0;
      for (size_t k = 0; k < g.size(); k++) {
        std::vector<Key> keys(g[k]);
        std::vector<uint8_t> vals(g[k] * vstride_, 0);
        for (uint64_t e = 0; e < g[k]; e++) {
          const KeyValue& kv = run[at + e];
          keys[e] = kv.first;
          if (ool_) {
            ASYMNVM_ASSIGN_OR_RETURN(uint64_t vb, PlanAlloc(slot_bytes_, plan));
            plan->Add(vb, SlotPrefix(kv.second));
            PutU64(vals.data() + e * vstride_, vb);
          } else {
            EncodeSlot(kv.second, std::span<uint8_t>(vals.data() + e * vstride_, vstride_));
          }
        }
        PlanLeaf(addrs[k], k + 1 < g.size() ? addrs[k + 1] : 0, keys, vals, plan);
        if (k > 0) up.emplace_back(keys[0], addrs[k]);
        at += g[k];
      }
      root = addrs[0];
      height = 1;
      added = run.size();
    } else {
      leaf_depth_ = static_cast<int>(height_ - 1);
      ASYMNVM_RETURN_IF_ERROR(GatherSubtree(root_, 0, run, plan, &added, &up));
    }
    // New levels while the top is more than one node.
    while (!up.empty()) {
      std::vector<Key> keys;
      std::vector<uint64_t> children{root};
      for (auto& [sep, child] : up) {
        keys.push_back(std::move(sep));
        children.push_back(child);
      }
      up.clear();
      ASYMNVM_RETURN_IF_ERROR(PlanInternalGroups(0, 0, keys, children, plan, &up, &root));
      height++;
      if (height > kMaxHeight)
        return Status::Corruption(Describe(kind_, st_.name) + ": tree too high");
    }
    if (root != root_ || height != height_) {
      uint8_t a[24];
      PutU64(a, root);
      PutU64(a + 8, height);
      PutU64(a + 16, count_ + added);
      plan->Add(anchor_ + kRoot, std::vector<uint8_t>(a, a + 24));
    } else if (added > 0) {
      plan->AddU64(anchor_ + kCount, count_ + added);
    }
    plan->commit = [this, root, height, added]() {
      root_ = root;
      height_ = height;
      count_ += added;
    };
    // A run of several pairs whose writes exceed the budget is cut by PutVector; a single pair's
    // writes would go out in parts of one op log, and a replay after a crash between parts
    // would gather again over a half-split node: refused instead, like Put's.
    if (run.size() == 1) return FitsOneTransaction(plan->bytes, "a one-pair vector");
    return Status::Ok();
  }

  // ---- deletes: Delete and DeleteBatch share one planner (doc/structures.md "B+tree") ----
  // The sorted keys descend like a vector put's (every node on the way read once); at a leaf
  // the found keys are removed in DRAM. Back up at each internal node, every child it holds in
  // DRAM that is left under-full (fewer than MinFill() keys) is rebalanced with an adjacent
  // sibling under that node: merged into the left one of the two when the result fits
  // MergeFill() (the right one freed, the separator and child removed from the node; the leaf
  // chain keeps working because only a right node is ever unlinked, and its left neighbour is in
  // DRAM), otherwise their entries (leaves) or children (internal nodes, through the separator)
  // are split evenly and the separator replaced. A merged or redistributed internal node has
  // its own children checked again (a vector may have left one with a lone under-full child).
  // The node itself may end under-full and is handled by its parent; a root internal node left
  // with no key is replaced by its only child (the tree loses a level, repeatedly), a root leaf
  // left empty frees the tree. Each changed node is then written once from its first changed
  // entry (header, key range, value or child range), with the anchor, as one plan.
  struct DNode {
    Node node;  // the DRAM state: keys, children (internal), n, next (leaves)
    int depth = 0;
    uint32_t orig_n = 0;
    uint64_t orig_next = 0;
    // Leaves: value entries [vbase, n) in vals (vstride_ each). Entries [0, wfrom) are still as
    // in PM (vbase <= wfrom), so a prefix can be read later.
    std::vector<uint8_t> vals;
    uint32_t vbase = 0;
    uint32_t wfrom = UINT32_MAX;  // first changed entry (leaf) or key (internal)
    uint32_t cfrom = UINT32_MAX;  // first changed child (internal)
    bool freed = false;
  };
  struct DelCtx {
    std::map<uint64_t, DNode> nodes;
    VectorPlan* plan = nullptr;
    uint64_t removed = 0;
  };

  // Non-root nodes keep at least MinFill() keys (leaves: entries); two siblings merge when the
  // result holds at most MergeFill() (an internal pair counts its separator). MergeFill() >=
  // 2·MinFill(), so an even split of a pair that does not merge leaves both at MinFill() or more.
  uint32_t MinFill() const { return std::max<uint32_t>(1, f_ / 4); }
  uint32_t MergeFill() const { return std::max<uint32_t>(1, f_ * 3 / 4); }

  Result<DNode*> DLoad(DelCtx& ctx, uint64_t addr, int d) {
    auto it = ctx.nodes.find(addr);
    if (it != ctx.nodes.end()) return &it->second;
    DNode x;
    ASYMNVM_RETURN_IF_ERROR(ReadNode(addr, d, d == leaf_depth_, &x.node));
    x.depth = d;
    x.orig_n = x.node.n;
    x.orig_next = x.node.next;
    x.vbase = x.node.n;
    return &ctx.nodes.emplace(addr, std::move(x)).first->second;
  }

  // Makes a leaf's value entries [from, n) present in DRAM.
  Status DVals(DNode& x, uint32_t from) {
    if (from >= x.vbase) return Status::Ok();
    std::vector<uint8_t> pre;
    ASYMNVM_RETURN_IF_ERROR(ReadValues(x.node, from, x.vbase, &pre));
    pre.insert(pre.end(), x.vals.begin(), x.vals.end());
    x.vals = std::move(pre);
    x.vbase = from;
    return Status::Ok();
  }
  static void DTouch(DNode& x, uint32_t w, uint32_t c = UINT32_MAX) {
    x.wfrom = std::min(x.wfrom, w);
    x.cfrom = std::min(x.cfrom, c);
  }

  Status DelSubtree(DelCtx& ctx, uint64_t addr, int d, std::span<const KeyValue> run) {
    ASYMNVM_ASSIGN_OR_RETURN(DNode * x, DLoad(ctx, addr, d));
    if (d == leaf_depth_) return DelLeaf(ctx, *x, run);
    const std::vector<Key> keys = x->node.keys;
    const std::vector<uint64_t> children = x->node.children;
    size_t r = 0;
    for (size_t c = 0; c < children.size() && r < run.size(); c++) {
      size_t e = r;
      while (e < run.size() && (c == keys.size() || run[e].first < keys[c])) e++;
      if (e > r)
        ASYMNVM_RETURN_IF_ERROR(DelSubtree(ctx, children[c], d + 1, run.subspan(r, e - r)));
      r = e;
    }
    return FixChildren(ctx, *x);
  }

  Status DelLeaf(DelCtx& ctx, DNode& x, std::span<const KeyValue> run) {
    std::vector<uint32_t> hit;
    const std::vector<Key>& k = x.node.keys;
    for (size_t i = 0, j = 0; i < k.size() && j < run.size();) {
      if (k[i] < run[j].first) {
        i++;
      } else if (run[j].first < k[i]) {
        j++;
      } else {
        hit.push_back(static_cast<uint32_t>(i));
        i++;
        j++;
      }
    }
    if (hit.empty()) return Status::Ok();
    const uint32_t i0 = hit[0], n = x.node.n;
    // Inline values: the removed first entry's bytes are not needed (as the shift of one Delete).
    ASYMNVM_RETURN_IF_ERROR(DVals(x, ool_ ? i0 : i0 + 1));
    std::vector<Key> nk(k.begin(), k.begin() + i0);
    std::vector<uint8_t> nv;
    if (x.vbase < i0) nv.assign(x.vals.begin(), x.vals.begin() + uint64_t{i0 - x.vbase} * vstride_);
    size_t h = 0;
    for (uint32_t i = i0; i < n; i++) {
      const uint8_t* e = i >= x.vbase ? x.vals.data() + uint64_t{i - x.vbase} * vstride_ : nullptr;
      if (h < hit.size() && hit[h] == i) {
        h++;
        if (ool_) ctx.plan->frees.push_back(GetU64(e));
        continue;
      }
      nk.push_back(k[i]);
      nv.insert(nv.end(), e, e + vstride_);
    }
    ctx.removed += hit.size();
    x.node.keys = std::move(nk);
    x.node.n = static_cast<uint32_t>(x.node.keys.size());
    x.vals = std::move(nv);
    x.vbase = std::min(x.vbase, i0);
    DTouch(x, i0);
    return Status::Ok();
  }

  // Rebalances every under-full child of x that is held in DRAM (children not read are as in PM).
  Status FixChildren(DelCtx& ctx, DNode& x) {
    for (bool again = true; again;) {
      again = false;
      for (size_t c = 0; c < x.node.children.size() && x.node.children.size() > 1; c++) {
        auto it = ctx.nodes.find(x.node.children[c]);
        if (it == ctx.nodes.end() || it->second.node.n >= MinFill()) continue;
        const uint32_t l = static_cast<uint32_t>(c + 1 < x.node.children.size() ? c : c - 1);
        ASYMNVM_RETURN_IF_ERROR(RebalancePair(ctx, x, l));
        again = true;
        break;
      }
    }
    return Status::Ok();
  }

  // Children l and l + 1 of x: merged into the left one, or their entries split evenly.
  Status RebalancePair(DelCtx& ctx, DNode& x, uint32_t l) {
    const int d = x.depth + 1;
    ASYMNVM_ASSIGN_OR_RETURN(DNode * ap, DLoad(ctx, x.node.children[l], d));
    ASYMNVM_ASSIGN_OR_RETURN(DNode * bp, DLoad(ctx, x.node.children[l + 1], d));
    DNode& a = *ap;
    DNode& b = *bp;
    const uint32_t an = a.node.n, bn = b.node.n;
    auto unlink_right = [&]() {
      b.freed = true;
      ctx.plan->frees.push_back(b.node.addr);
      x.node.keys.erase(x.node.keys.begin() + l);
      x.node.children.erase(x.node.children.begin() + l + 1);
      x.node.n--;
      DTouch(x, l, l + 1);
    };
    if (d == leaf_depth_) {
      const uint32_t total = an + bn;
      ASYMNVM_RETURN_IF_ERROR(DVals(a, total <= MergeFill() ? an : std::min(an, total / 2)));
      ASYMNVM_RETURN_IF_ERROR(DVals(b, 0));
      if (total <= MergeFill()) {
        a.node.keys.insert(a.node.keys.end(), b.node.keys.begin(), b.node.keys.end());
        a.vals.insert(a.vals.end(), b.vals.begin(), b.vals.end());
        a.node.n = total;
        a.node.next = b.node.next;
        DTouch(a, an);
        unlink_right();
        return Status::Ok();
      }
      const uint32_t na = total / 2;
      if (an > na) {  // a's tail moves to the front of b
        b.node.keys.insert(b.node.keys.begin(), a.node.keys.begin() + na, a.node.keys.end());
        b.vals.insert(b.vals.begin(), a.vals.begin() + uint64_t{na - a.vbase} * vstride_,
                      a.vals.end());
        a.node.keys.resize(na);
        a.vals.resize(uint64_t{na - a.vbase} * vstride_);
      } else {  // b's head moves to the end of a
        const uint32_t m = na - an;
        a.node.keys.insert(a.node.keys.end(), b.node.keys.begin(), b.node.keys.begin() + m);
        a.vals.insert(a.vals.end(), b.vals.begin(), b.vals.begin() + uint64_t{m} * vstride_);
        b.node.keys.erase(b.node.keys.begin(), b.node.keys.begin() + m);
        b.vals.erase(b.vals.begin(), b.vals.begin() + uint64_t{m} * vstride_);
      }
      a.node.n = na;
      b.node.n = total - na;
      DTouch(a, std::min(an, na));
      DTouch(b, 0);
      x.node.keys[l] = b.node.keys[0];
      DTouch(x, l);
      return Status::Ok();
    }
    // Internal nodes: the separator comes down between them.
    const uint32_t total = an + bn + 1;  // keys including the separator
    if (total <= MergeFill()) {
      a.node.keys.push_back(x.node.keys[l]);
      a.node.keys.insert(a.node.keys.end(), b.node.keys.begin(), b.node.keys.end());
      a.node.children.insert(a.node.children.end(), b.node.children.begin(), b.node.children.end());
      a.node.n = total;
      DTouch(a, an, an + 1);
      unlink_right();
      return FixChildren(ctx, a);
    }
    std::vector<Key> keys = a.node.keys;
    keys.push_back(x.node.keys[l]);
    keys.insert(keys.end(), b.node.keys.begin(), b.node.keys.end());
    std::vector<uint64_t> ch = a.node.children;
    ch.insert(ch.end(), b.node.children.begin(), b.node.children.end());
    const uint32_t ca = (total + 2) / 2;  // children of a: ceil((total + 1) / 2)
    a.node.keys.assign(keys.begin(), keys.begin() + (ca - 1));
    a.node.children.assign(ch.begin(), ch.begin() + ca);
    b.node.keys.assign(keys.begin() + ca, keys.end());
    b.node.children.assign(ch.begin() + ca, ch.end());
    a.node.n = ca - 1;
    b.node.n = total - ca;
    DTouch(a, std::min(an, ca - 1), std::min(an, ca - 1) + 1);
    DTouch(b, 0, 0);
    x.node.keys[l] = keys[ca - 1];
    DTouch(x, l);
    ASYMNVM_RETURN_IF_ERROR(FixChildren(ctx, a));
    return FixChildren(ctx, b);
  }

  // Plans the removal of the run's keys present in the tree (none: an empty plan). *removed:
  // how many; root/height: the tree's after the plan.
  Status PlanDelete(std::span<const KeyValue> run, VectorPlan* plan, uint64_t* removed,
                    uint64_t* root_out, uint64_t* height_out) {
    *removed = 0;
    *root_out = root_;
    *height_out = height_;
    if (root_ == 0 || run.empty()) return Status::Ok();
    DelCtx ctx;
    ctx.plan = plan;
    leaf_depth_ = static_cast<int>(height_ - 1);
    ASYMNVM_RETURN_IF_ERROR(DelSubtree(ctx, root_, 0, run));
    if (ctx.removed == 0) {
      plan->frees.clear();
      return Status::Ok();
    }
    // The root: an internal node without keys gives way to its only child; an empty leaf
    // empties the tree.
    uint64_t root = root_, height = height_;
    for (int d = 0;; d++) {
      ASYMNVM_ASSIGN_OR_RETURN(DNode * r, DLoad(ctx, root, d));
      if (r->node.n > 0) break;
      r->freed = true;
      plan->frees.push_back(root);
      if (d == leaf_depth_) {
        root = 0;
        height = 0;
        break;
      }
      root = r->node.children[0];
      height--;
    }
    for (auto& [addr, x] : ctx.nodes) {
      if (x.freed) continue;
      const uint32_t n = x.node.n;
      if (x.depth == leaf_depth_) {
        if (x.node.next != x.orig_next) {
          std::vector<uint8_t> h(16);
          PutU64(h.data(), Word0(kLeafTag, n));
          PutU64(h.data() + kNext, x.node.next);
          plan->Add(addr, std::move(h));
        } else if (n != x.orig_n) {
          PlanU64Header(addr, Word0(kLeafTag, n), plan);
        }
        if (x.wfrom < n) {
          plan->Add(addr + KeyOff(x.wfrom), KeyBytes(x.node.keys.data() + x.wfrom, n - x.wfrom));
          const uint64_t off = uint64_t{x.wfrom - x.vbase} * vstride_;
          plan->Add(addr + ValOff(x.wfrom),
                    std::vector<uint8_t>(x.vals.begin() + off,
                                         x.vals.begin() + off + uint64_t{n - x.wfrom} * vstride_));
        }
        continue;
      }
      if (n != x.orig_n) PlanU64Header(addr, Word0(kInternalTag, n), plan);
      if (x.wfrom < n)
        plan->Add(addr + KeyOff(x.wfrom), KeyBytes(x.node.keys.data() + x.wfrom, n - x.wfrom));
      if (x.cfrom < n + 1) {
        plan->Add(addr + ChildOff(x.cfrom),
                  WordBytes(x.node.children.data() + x.cfrom, n + 1 - x.cfrom));
      }
    }
    const uint64_t count = count_ - ctx.removed;
    if (root != root_ || height != height_) {
      uint8_t a[24];
      PutU64(a, root);
      PutU64(a + 8, height);
      PutU64(a + 16, count);
      plan->Add(anchor_ + kRoot, std::vector<uint8_t>(a, a + 24));
    } else {
      plan->AddU64(anchor_ + kCount, count);
    }
    *removed = ctx.removed;
    *root_out = root;
    *height_out = height;
    return Status::Ok();
  }

  // One Delete: the planner on a one-key run, applied as one op log (type 2) and one
  // transaction; a plan beyond one transaction is refused before its op log (nothing written).
  Status DoDelete(const Key& key, bool replay) {
    const KeyValue kv(key, Value{});
    VectorPlan plan;
    uint64_t removed = 0, root = 0, height = 0;
    ASYMNVM_RETURN_IF_ERROR(
        PlanDelete(std::span<const KeyValue>(&kv, 1), &plan, &removed, &root, &height));
    if (removed == 0) {
      if (replay) return Status::Ok();  // the original failed validation: nothing to redo
      return NotFound(key);
    }
    ASYMNVM_RETURN_IF_ERROR(FitsOneTransaction(plan.bytes, "a deletion"));
    ASYMNVM_RETURN_IF_ERROR(Update(kOpDelete, EncodeKeyValue(key, {}), [&]() -> Status {
      for (const auto& [addr, data] : plan.writes) ASYMNVM_RETURN_IF_ERROR(Write(addr, data));
      return Status::Ok();
    }));
    root_ = root;
    height_ = height;
    count_ -= removed;
    for (uint64_t a : plan.frees) ASYMNVM_RETURN_IF_ERROR(s_.Free(a));
    return Status::Ok();
  }

  // A vector delete's gather (Map::DeleteBatch, op type 4): the same planner over the run; keys
  // not found are skipped (a replay of a run applied before a crash finds none of them).
  Status GatherDeleteWalk(std::span<const KeyValue> run, VectorPlan* plan) {
    return levels_.Paused([&]() -> Status {
      uint64_t removed = 0, root = 0, height = 0;
      ASYMNVM_RETURN_IF_ERROR(PlanDelete(run, plan, &removed, &root, &height));
      if (removed == 0) return Status::Ok();
      plan->commit = [this, removed, root, height]() {
        root_ = root;
        height_ = height;
        count_ -= removed;
        deleted_in_batch_ += removed;
      };
      // As a one-pair put vector: a single key's writes are not cut into parts.
      if (run.size() == 1) return FitsOneTransaction(plan->bytes, "a one-key delete vector");
      return Status::Ok();
    });
  }
  // Checks the subtree at `addr` (depth d of a tree of `height`): tag, n, key order and bounds
  // [lo, hi) (null: unbounded); appends its leaves in order and adds its keys.
  Status VerifyNode(uint64_t addr, uint64_t d, uint64_t height, const Key* lo, const Key* hi,
                    std::vector<uint64_t>* leaves, uint64_t* keys, uint64_t count) {
    const std::string what = Describe(kind_, st_.name) + ": node at depth " + std::to_string(d);
    const bool leaf = d + 1 == height;
    Node n;
    Status st = ReadNode(addr, static_cast<int>(d), leaf, &n);
    if (!st.ok())
      return st.code() == StatusCode::kAborted ? Status::Corruption(what + ": " + st.message())
                                               : st;
    for (uint32_t k = 0; k < n.n; k++) {
      if (k > 0 && n.keys[k - 1] >= n.keys[k])
        return Status::Corruption(what + ": keys out of order");
      if ((lo != nullptr && n.keys[k] < *lo) || (hi != nullptr && n.keys[k] >= *hi)) {
        return Status::Corruption(what + ": key " + n.keys[k].ToString() +
                                  " outside its parent's range");
      }
    }
    if (filled_ && ((d > 0 && n.n < MinFill()) || (!leaf && n.n == 0))) {
      return Status::Corruption(what + ": under-full node (" + std::to_string(n.n) + " keys, " +
                                (d > 0 ? "at least " + std::to_string(MinFill()) : "the root 1") +
                                " expected)");
    }
    if (leaf) {
      if (n.n == 0) return Status::Corruption(what + ": empty leaf");
      if (leaves->size() > count) return Status::Corruption(what + ": more leaves than keys");
      leaves->push_back(addr);
      *keys += n.n;
      for (uint32_t k = 0; k < n.n; k++) {
        std::vector<uint8_t> slot;
        Status ss = ReadSlot(n, k, &slot);
        if (ss.ok()) ss = DecodeSlot(slot, vsize(), nullptr);
        if (!ss.ok())
          return Status::Corruption(what + ": key " + n.keys[k].ToString() + ": " + ss.message());
      }
      return Status::Ok();
    }
    for (uint32_t c = 0; c <= n.n; c++) {
      const Key* l = c > 0 ? &n.keys[c - 1] : lo;
      const Key* h = c < n.n ? &n.keys[c] : hi;
      ASYMNVM_RETURN_IF_ERROR(VerifyNode(n.children[c], d + 1, height, l, h, leaves, keys, count));
    }
    return Status::Ok();
  }

 public:
  uint64_t verified_leaves() const { return verified_leaves_; }
  uint64_t verified_height() const { return verified_height_; }

 private:
  uint64_t verified_leaves_ = 0;   // leaves the last Verify walked
  uint64_t verified_height_ = 0;   // and its height
  bool filled_ = false;            // kFlagFilled: Verify rejects under-full nodes
  uint64_t deleted_in_batch_ = 0;  // DeleteBatch: keys its applied runs removed
  uint64_t anchor_ = 0;
  uint32_t f_ = 0, slot_bytes_ = 0, vstride_ = 0;
  uint32_t ks_ = 8;  // key slot bytes (kslot())
  bool ool_ = false;
  uint64_t internal_bytes_ = 0, leaf_bytes_ = 0;
  bool adapt_ = false;
  LevelThreshold levels_;
  int leaf_depth_ = 0;  // of the last descent
  std::vector<uint8_t> buf_;
  // The writer's view of the anchor (it holds the lock).
  uint64_t root_ = 0, height_ = 0, count_ = 0;
};

}  // namespace

Result<uint64_t> BPlusTreeLeafCount(Map* m) {
  auto* t = dynamic_cast<BPlusTree*>(m);
  if (t == nullptr) return Status::InvalidArgument("not a B+tree");
  ASYMNVM_RETURN_IF_ERROR(t->Verify());
  return t->verified_leaves();
}

Result<uint64_t> BPlusTreeHeight(Map* m) {
  auto* t = dynamic_cast<BPlusTree*>(m);
  if (t == nullptr) return Status::InvalidArgument("not a B+tree");
  ASYMNVM_RETURN_IF_ERROR(t->Verify());
  return t->verified_height();
}

Result<std::unique_ptr<Map>> OpenBPlusTree(frontend::Session& s, const std::string& name,
                                           Options o) {
  if (o.param != 0 && (o.param < kMinFanout || o.param > kMaxFanout)) {
    return Status::InvalidArgument("bptree fan-out (Options::param) must be " +
                                   std::to_string(kMinFanout) + ".." + std::to_string(kMaxFanout) +
                                   ", got " + std::to_string(o.param));
  }
  // A node's keys stay within kNodeKeysMax (only long byte keys come near it): the user's fan-out
  // is kept when it fits, refused otherwise.
  auto fits = [](uint64_t f, uint32_t key_size) {
    return f * KeySlotBytes(key_size) <= kNodeKeysMax;
  };
  if (o.param != 0 && o.key_size <= kMaxKeySize && !fits(o.param, o.key_size)) {
    return Status::InvalidArgument("bptree fan-out " + std::to_string(o.param) + " with key_size " +
                                   std::to_string(o.key_size) + " makes nodes of more than " +
                                   std::to_string(kNodeKeysMax / 1024) + " KiB of keys; at most " +
                                   std::to_string(kNodeKeysMax / KeySlotBytes(o.key_size)) +
                                   " for this key_size");
  }
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st,
                           Base::Resolve(s, Kind::kBPlusTree, name, &o, kDefaultFanout));
  if (o.param < kMinFanout || o.param > kMaxFanout || !fits(o.param, o.key_size)) {
    return Status::Corruption(Describe(Kind::kBPlusTree, name) + ": stored fan-out " +
                              std::to_string(o.param) + " with key_size " +
                              std::to_string(o.key_size));
  }
  auto h = std::make_unique<BPlusTree>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
