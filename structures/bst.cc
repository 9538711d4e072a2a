// Binary search tree (AsymNVM paper §4.3–4.4, §6, §8; doc/structures.md "BST").
//
// The paper's plain (unbalanced) BST under the writer lock; readers use the seqlock.
//
// PM layout (little-endian):
//   Anchor (24 B, the root word points at it): magic u64 "AYNVMBST" @0 | root u64 @8 |
//     count u64 @16.
//   Node (K + 16 + SlotBytes(value_size) B, K = KeySlotBytes(key_size): 8 for integer keys):
//     key slot @0 (u64, or u16 length | bytes zero-padded to 8) | left u64 @K | right u64 @K+8 |
//     value slot @K+16 (u32 length | bytes, padded to 8; only the 4 + length bytes are written).
//     An integer-key node is the layout from before byte keys (K = 8: 24-byte head). Byte keys
//     are ordered bytewise (Key's operator<=>); a node's head (key slot + links) is one read.
//
// Put: descend; an existing key gets its slot rewritten (4 + length bytes, one memory log); a new
// key gets a new node (one memory log) linked into its parent's left/right word, plus the anchor's
// count (and root when the tree was empty). Delete: a node with at most one child is replaced by
// that child in its parent; a node with two children takes its in-order successor's key slot
// (whole) and value (successor copy) and the successor is unlinked instead. The unlinked node is
// freed after the operation's tx_write.
// DeleteBatch (doc/structures.md "Vector deletes"): each run of the sorted keys is one walk
// over DRAM views of the nodes it reads (the deletes above, chained through the views), one
// op log (type 4) and one transaction; the unlinked nodes are freed after it.
//
// §8 tree optimization (Options::optimize, writer at rc/rcb): nodes at depth < N (root = depth 0)
// are read through the page cache, deeper ones with one-sided READs that bypass it. Every 1024
// node reads the session's cache hit/miss counters are compared with the previous window: a miss
// ratio above 50% makes N smaller by one (not below 1), below 25% larger by one (not above 64).
// N starts at 16. With optimize off every read goes through the cache (plain LRU-like policy).
//
// Readers (Access::kReader) run every read-only operation under the seqlock; a traversal longer
// than count + 64 nodes, a zero/unaligned address, a bad key length or a bad slot length is
// reported as kAborted("torn ...") so the seqlock retries it (the writer: kCorruption).
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "structures/base.h"
#include "structures/kinds.h"
#include "structures/level_threshold.h"

namespace asymnvm::structures::internal {
namespace {

constexpr uint64_t kMagic = 0x5453424d564e5941ull;  // "AYNVMBST"
constexpr uint64_t kRoot = 8, kCount = 16, kAnchorBytes = 24;

struct NodeHead {
  Key key;
  uint64_t left = 0, right = 0;
};

class Bst final : public Map, public Base {
 public:
  Bst(frontend::Session& s, frontend::Structure st, const Options& o)
      : Base(s, std::move(st), Kind::kBst, o), levels_(16, 64) {
    slot_bytes_ = SlotBytes(vsize());
    left_ = kslot();
    right_ = kslot() + 8;
    slot_ = kslot() + 16;
    node_bytes_ = slot_ + slot_bytes_;
    if (opt_.optimize) st_.page_size = NodePageSize(node_bytes_);  // node-granular cache pages
    adapt_ = writer() && opt_.optimize &&
             (level() == frontend::Level::kRc || level() == frontend::Level::kRcb);
  }

  Status Init() {
    ASYMNVM_RETURN_IF_ERROR(AcquireWriterLock());
    uint8_t init[kAnchorBytes] = {};
    PutU64(init, kMagic);
    ASYMNVM_ASSIGN_OR_RETURN(anchor_, EnsureAnchor(init));
    return Refresh();
  }

  Status Refresh() override {
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status { return Read(anchor_, a); }));
    if (GetU64(a) != kMagic)
      return Status::Corruption(Describe(kind_, st_.name) + ": anchor has a bad magic");
    root_ = GetU64(a + kRoot);
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
    // Per pair at most a new node written whole and one link word (an update: its slot).
    const size_t bound = 16 + slot_ + slot_bytes_ + 24;
    return PutVector(
        kvs,
        [this](std::span<const KeyValue> run, VectorPlan* plan) { return GatherWalk(run, plan); },
        [bound](const KeyValue&) { return bound; });
  }

  Status DeleteBatch(std::span<const Key> keys, uint64_t* deleted) override {
    // Per key at most one node's key, links and value written whole (a two-child delete moves
    // its successor into it) and one link word.
    const size_t bound = 16 + slot_ + slot_bytes_ + 24;
    deleted_in_batch_ = 0;
    Status st = DeleteVector(
        keys,
        [this](std::span<const KeyValue> run, VectorPlan* plan) {
          return GatherDeleteWalk(run, plan);
        },
        [bound](const KeyValue&) { return bound; });
    if (deleted) *deleted = deleted_in_batch_;
    return st;
  }

  Status Get(const Key& key, Value* value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    return Query([&]() -> Status {
      uint64_t root = 0, count = 0;
      ASYMNVM_RETURN_IF_ERROR(LoadRoot(&root, &count));
      uint64_t at = root;
      for (uint64_t depth = 0; at != 0; depth++) {
        if (depth > count + 64) return Torn("path longer than the count");
        NodeHead h;
        ASYMNVM_RETURN_IF_ERROR(
            ReadHead(at, static_cast<int>(std::min<uint64_t>(depth, 1 << 20)), &h));
        if (h.key == key)
          return ReadValue(at, static_cast<int>(std::min<uint64_t>(depth, 1 << 20)), value);
        at = key < h.key ? h.left : h.right;
      }
      return NotFound(key);
    });
  }

  Status Scan(const Key& from, size_t limit, std::vector<KeyValue>* out) override {
    ASYMNVM_RETURN_IF_ERROR(CheckScanFrom(from));
    if (out) out->clear();
    return Query([&]() -> Status {
      if (out) out->clear();
      uint64_t root = 0, count = 0;
      ASYMNVM_RETURN_IF_ERROR(LoadRoot(&root, &count));
      const uint64_t bound = count + 64;
      std::vector<std::pair<uint64_t, int>> stack;  // (node, depth) whose key >= from
      uint64_t steps = 0;
      // Left spine of the keys >= from.
      uint64_t at = root;
      int depth = 0;
      auto push_left = [&](uint64_t node, int d, bool filter) -> Status {
        while (node != 0) {
          if (++steps > bound * 2 || stack.size() > bound)
            return Torn("scan longer than the count");
          NodeHead h;
          ASYMNVM_RETURN_IF_ERROR(ReadHead(node, d, &h));
          if (filter && h.key < from) {
            node = h.right;
          } else {
            stack.emplace_back(node, d);
            node = h.left;
          }
          d++;
        }
        return Status::Ok();
      };
      ASYMNVM_RETURN_IF_ERROR(push_left(at, depth, true));
      while (!stack.empty() && (out == nullptr || out->size() < limit)) {
        auto [node, d] = stack.back();
        stack.pop_back();
        NodeHead h;
        ASYMNVM_RETURN_IF_ERROR(ReadHead(node, d, &h));
        Value v;
        ASYMNVM_RETURN_IF_ERROR(ReadValue(node, d, &v));
        if (out) {
          if (!out->empty() && out->back().first >= h.key) return Torn("scan out of order");
          out->emplace_back(h.key, std::move(v));
        }
        ASYMNVM_RETURN_IF_ERROR(push_left(h.right, d + 1, false));
      }
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
      const uint64_t root = GetU64(a + kRoot), count = GetU64(a + kCount);
      if (writer() && (root != root_ || count != count_)) {
        return Status::Corruption(what + ": anchor does not match the writer's view");
      }
      // In-order walk: strictly increasing keys <=> the BST property.
      std::vector<uint64_t> stack;
      uint64_t n = 0, at = root;
      bool have_prev = false;
      Key prev;
      while (at != 0 || !stack.empty()) {
        while (at != 0) {
          if (stack.size() > count + 1)
            return Status::Corruption(what + ": path longer than the count (cycle?)");
          if (!Plausible(at))
            return Status::Corruption(what + ": bad node address " + std::to_string(at));
          stack.push_back(at);
          NodeHead h;
          ASYMNVM_RETURN_IF_ERROR(ReadHead(at, 0, &h));
          at = h.left;
        }
        const uint64_t node = stack.back();
        stack.pop_back();
        if (++n > count)
          return Status::Corruption(what + ": more nodes than the count " + std::to_string(count));
        NodeHead h;
        ASYMNVM_RETURN_IF_ERROR(ReadHead(node, 0, &h));
        if (have_prev && h.key <= prev) {
          return Status::Corruption(what + ": keys out of order (" + prev.ToString() + " then " +
                                    h.key.ToString() + ")");
        }
        std::vector<uint8_t> slot(slot_bytes_);
        ASYMNVM_RETURN_IF_ERROR(Read(node + slot_, slot));
        Status st = DecodeSlot(slot, vsize(), nullptr);
        if (!st.ok())
          return Status::Corruption(what + ": key " + h.key.ToString() + ": " + st.message());
        prev = std::move(h.key);
        have_prev = true;
        at = h.right;
      }
      if (n != count) {
        return Status::Corruption(what + ": " + std::to_string(n) + " nodes, count says " +
                                  std::to_string(count));
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

  int threshold() const { return levels_.n(); }

 private:
  Status Torn(const std::string& why) const {
    return Status::Aborted(Describe(kind_, st_.name) + ": torn read: " + why);
  }
  Status NotFound(const Key& key) const {
    return Status::NotFound(Describe(kind_, st_.name) + ": key " + key.ToString() + " not found");
  }
  bool Plausible(uint64_t addr) const {
    return addr % 8 == 0 && addr >= s_.data_begin() && addr + node_bytes_ <= s_.data_end();
  }

  // The root and count: the writer's DRAM copy, or the anchor (readers, inside Query).
  Status LoadRoot(uint64_t* root, uint64_t* count) {
    if (writer()) {
      *root = root_;
      *count = count_;
      return Status::Ok();
    }
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a));
    if (GetU64(a) != kMagic) return Torn("anchor magic");
    *root = GetU64(a + kRoot);
    *count = GetU64(a + kCount);
    return Status::Ok();
  }

  Status ReadHead(uint64_t addr, int depth, NodeHead* h) {
    if (!Plausible(addr)) return Torn("node address " + std::to_string(addr));
    uint8_t b[kMaxKeySlot + 16];
    ASYMNVM_RETURN_IF_ERROR(
        Read(addr, std::span<uint8_t>(b, slot_), levels_.Cached(adapt_, depth)));
    if (adapt_) levels_.Tick(s_);
    h->left = GetU64(b + left_);
    h->right = GetU64(b + right_);
    if ((h->left | h->right) % 8 != 0) return Torn("misaligned child");
    if (ksize() == 0) {  // the integer fast path: no length to validate
      h->key = Key(GetU64(b));
      return Status::Ok();
    }
    Status st = LoadKey(b, &h->key);
    if (!st.ok()) {
      // A reader may have read a node being rewritten (the seqlock retries); the writer's own
      // view is never torn.
      const std::string why = "node " + std::to_string(addr) + ": " + st.message();
      return writer() ? Status::Corruption(Describe(kind_, st_.name) + ": " + why) : Torn(why);
    }
    return Status::Ok();
  }

  Status ReadValue(uint64_t addr, int depth, Value* value) {
    std::vector<uint8_t> slot(slot_bytes_);
    ASYMNVM_RETURN_IF_ERROR(Read(addr + slot_, slot, levels_.Cached(adapt_, depth)));
    Status st = DecodeSlot(slot, vsize(), value);
    if (!st.ok()) return Torn(st.message());
    return Status::Ok();
  }

  // The slot bytes that matter for `value`: 4 + length, padded to 8.
  static std::vector<uint8_t> SlotPrefix(std::span<const uint8_t> value) {
    std::vector<uint8_t> b((4 + value.size() + 7) / 8 * 8);
    EncodeSlot(value, b);
    return b;
  }

  // Writer: finds `key`; *found = its node or 0, *parent / *link = the word that points (or
  // would point) at it (the anchor's root word when the tree is empty or it is the root).
  Status Locate(const Key& key, uint64_t* found, uint64_t* parent, uint64_t* link,
                int* found_depth) {
    *found = 0;
    *parent = 0;
    *link = anchor_ + kRoot;
    uint64_t at = root_;
    int depth = 0;
    while (at != 0) {
      if (static_cast<uint64_t>(depth) > count_ + 64)
        return Status::Corruption(Describe(kind_, st_.name) + ": cycle");
      NodeHead h;
      ASYMNVM_RETURN_IF_ERROR(ReadHead(at, depth, &h));
      if (h.key == key) {
        *found = at;
        *found_depth = depth;
        return Status::Ok();
      }
      *parent = at;
      *link = at + (key < h.key ? left_ : right_);
      at = key < h.key ? h.left : h.right;
      depth++;
    }
    *found_depth = depth;
    return Status::Ok();
  }

  Status DoPut(const Key& key, std::span<const uint8_t> value) {
    uint64_t found = 0, parent = 0, link = 0;
    int depth = 0;
    ASYMNVM_RETURN_IF_ERROR(Locate(key, &found, &parent, &link, &depth));
    const auto params = EncodeKeyValue(key, value);
    const std::vector<uint8_t> prefix = SlotPrefix(value);
    if (found != 0) {
      return Update(
          kOpPut, params, [&]() -> Status { return Write(found + slot_, prefix); },
          KeyValueValueOffset(key));
    }
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t node, s_.Malloc(node_bytes_));
    std::vector<uint8_t> b(slot_ + prefix.size(), 0);
    StoreKey(key, b.data());
    std::memcpy(b.data() + slot_, prefix.data(), prefix.size());
    Status st = Update(
        kOpPut, params,
        [&]() -> Status {
          ASYMNVM_RETURN_IF_ERROR(Write(node, b));
          if (parent == 0) {
            uint8_t a[16];
            PutU64(a, node);
            PutU64(a + 8, count_ + 1);
            return Write(anchor_ + kRoot, a);
          }
          ASYMNVM_RETURN_IF_ERROR(WriteU64(link, node));
          return WriteU64(anchor_ + kCount, count_ + 1);
        },
        KeyValueValueOffset(key));
    if (!st.ok()) {
      (void)s_.Free(node);
      return st;
    }
    if (parent == 0) root_ = node;
    count_++;
    return Status::Ok();
  }

  // ---- vector put (Algorithm 3; doc/structures.md "Vector operations") ----
  // From the root down, each node is read once for the whole run: the run is split at the
  // node's key (an equal key rewrites its slot), and each part goes to the child on its side;
  // a part that meets an empty child becomes a balanced subtree of new nodes hung there by one
  // link write.

  // A balanced subtree of new nodes for `run` (each node written whole, once); its root.
  Result<uint64_t> PlanSubtree(std::span<const KeyValue> run, VectorPlan* plan) {
    if (run.empty()) return uint64_t{0};
    const size_t mid = run.size() / 2;
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t node, s_.Malloc(node_bytes_));
    plan->allocs.push_back(node);
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t left, PlanSubtree(run.first(mid), plan));
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t right, PlanSubtree(run.subspan(mid + 1), plan));
    const std::vector<uint8_t> prefix = SlotPrefix(run[mid].second);
    std::vector<uint8_t> b(slot_ + prefix.size(), 0);
    StoreKey(run[mid].first, b.data());
    PutU64(b.data() + left_, left);
    PutU64(b.data() + right_, right);
    std::memcpy(b.data() + slot_, prefix.data(), prefix.size());
    plan->Add(node, std::move(b));
    return node;
  }

  // A vector walk reads under the current N without adapting it (LevelThreshold::Paused).
  Status GatherWalk(std::span<const KeyValue> run, VectorPlan* plan) {
    return levels_.Paused([&] { return GatherVector(run, plan); });
  }

  Status GatherVector(std::span<const KeyValue> run, VectorPlan* plan) {
    uint64_t root = root_, added = 0;
    if (root_ == 0) {
      ASYMNVM_ASSIGN_OR_RETURN(root, PlanSubtree(run, plan));
      added = run.size();
    } else {
      struct Part {
        uint64_t node;
        int depth;
        std::span<const KeyValue> run;
      };
      std::vector<Part> queue{{root_, 0, run}};  // explicit: an unbalanced tree may be deep
      while (!queue.empty()) {
        const Part part = queue.back();
        queue.pop_back();
        if (static_cast<uint64_t>(part.depth) > count_ + 64)
          return Status::Corruption(Describe(kind_, st_.name) + ": cycle");
        NodeHead h;
        ASYMNVM_RETURN_IF_ERROR(ReadHead(part.node, part.depth, &h));
        const auto lo =
            std::lower_bound(part.run.begin(), part.run.end(), h.key,
                             [](const KeyValue& kv, const Key& k) { return kv.first < k; });
        const size_t mid = static_cast<size_t>(lo - part.run.begin());
        size_t right_begin = mid;
        if (lo != part.run.end() && lo->first == h.key) {
          plan->Add(part.node + slot_, SlotPrefix(lo->second));
          right_begin = mid + 1;
        }
        const std::span<const KeyValue> sides[2] = {part.run.first(mid),
                                                    part.run.subspan(right_begin)};
        const uint64_t child[2] = {h.left, h.right};
        uint64_t hung[2] = {0, 0};
        for (int c = 0; c < 2; c++) {
          if (sides[c].empty()) continue;
          if (child[c] != 0) {
            queue.push_back({child[c], part.depth + 1, sides[c]});
            continue;
          }
          ASYMNVM_ASSIGN_OR_RETURN(hung[c], PlanSubtree(sides[c], plan));
          added += sides[c].size();
        }
        if (hung[0] != 0 && hung[1] != 0) {
          std::vector<uint8_t> b(16);
          PutU64(b.data(), hung[0]);
          PutU64(b.data() + 8, hung[1]);
          plan->Add(part.node + left_, std::move(b));
        } else if (hung[0] != 0) {
          plan->AddU64(part.node + left_, hung[0]);
        } else if (hung[1] != 0) {
          plan->AddU64(part.node + right_, hung[1]);
        }
      }
    }
    if (root != root_) {
      uint8_t a[16];
      PutU64(a, root);
      PutU64(a + 8, count_ + added);
      plan->Add(anchor_ + kRoot, std::vector<uint8_t>(a, a + 16));
    } else if (added > 0) {
      plan->AddU64(anchor_ + kCount, count_ + added);
    }
    plan->commit = [this, root, added]() {
      root_ = root;
      count_ += added;
    };
    return Status::Ok();
  }

  // ---- vector delete (doc/structures.md "Vector deletes") ----
  // Each key of the sorted run is looked up from the root through DRAM views of the nodes the run
  // has read (each node is read once per run, its head when first met, its value slot only when
  // it becomes a successor) and removed in those views as Delete does: a node with at most one
  // child is replaced by it in its parent's view; a node with two children takes its in-order
  // successor's key and value and the successor is unlinked instead. Later keys see the earlier
  // ones' changes (a successor moved up is found, and may be deleted, where it now is). At the
  // end every surviving node whose key changed is written whole once (key, links, value), every
  // other changed node's link word(s) once, then the anchor's root and count; the unlinked nodes
  // are freed after the transaction. Keys not found are skipped (a replay of a run applied
  // before the crash finds none of them).
  struct DelView {
    Key key;
    uint64_t left = 0, right = 0;
    std::vector<uint8_t> slot;  // the value slot prefix, once read or moved in
    bool moved = false;         // took a successor's key and value
    bool left_changed = false, right_changed = false;
  };

  // A vector walk reads under the current N without adapting it (LevelThreshold::Paused).
  Status GatherDeleteWalk(std::span<const KeyValue> run, VectorPlan* plan) {
    return levels_.Paused([&] { return GatherDeleteVector(run, plan); });
  }

  Status GatherDeleteVector(std::span<const KeyValue> run, VectorPlan* plan) {
    std::map<uint64_t, DelView> nodes;  // by address: the writes go out in address order
    auto view = [&](uint64_t at, uint64_t depth) -> Result<DelView*> {
      if (depth > count_ + 64) return Status::Corruption(Describe(kind_, st_.name) + ": cycle");
      if (auto it = nodes.find(at); it != nodes.end()) return &it->second;
      NodeHead h;
      ASYMNVM_RETURN_IF_ERROR(ReadHead(at, static_cast<int>(depth), &h));
      DelView v;
      v.key = std::move(h.key);
      v.left = h.left;
      v.right = h.right;
      return &nodes.emplace(at, std::move(v)).first->second;
    };
    uint64_t root = root_, removed = 0;
    // Replaces the child `is_left` of `parent` (0: the root word) by `to`.
    auto relink = [&](uint64_t parent, bool is_left, uint64_t to) {
      if (parent == 0) {
        root = to;
        return;
      }
      DelView& p = nodes.at(parent);
      (is_left ? p.left : p.right) = to;
      (is_left ? p.left_changed : p.right_changed) = true;
    };
    for (const KeyValue& kv : run) {
      const Key& key = kv.first;
      uint64_t at = root, parent = 0, depth = 0;
      bool is_left = false;
      DelView* z = nullptr;
      while (at != 0) {
        ASYMNVM_ASSIGN_OR_RETURN(z, view(at, depth));
        if (z->key == key) break;
        parent = at;
        is_left = key < z->key;
        at = is_left ? z->left : z->right;
        z = nullptr;
        depth++;
      }
      if (z == nullptr) continue;
      uint64_t victim = at;
      if (z->left == 0 || z->right == 0) {
        relink(parent, is_left, z->left != 0 ? z->left : z->right);
      } else {
        // The in-order successor s (leftmost of the right subtree) and its parent sp.
        uint64_t sp = at, s = z->right, d = depth + 1;
        DelView* sv = nullptr;
        ASYMNVM_ASSIGN_OR_RETURN(sv, view(s, d));
        while (sv->left != 0) {
          sp = s;
          s = sv->left;
          ASYMNVM_ASSIGN_OR_RETURN(sv, view(s, ++d));
        }
        if (sv->slot.empty()) {
          std::vector<uint8_t> slot(slot_bytes_);
          ASYMNVM_RETURN_IF_ERROR(
              Read(s + slot_, slot, levels_.Cached(adapt_, static_cast<int>(d))));
          const uint32_t len = GetU32(slot.data());
          if (len > vsize())
            return Status::Corruption(Describe(kind_, st_.name) + ": bad value slot");
          slot.resize((4 + len + 7) / 8 * 8);
          sv->slot = std::move(slot);
        }
        z->key = sv->key;
        z->slot = sv->slot;
        z->moved = true;
        relink(sp, sp != at, sv->right);
        victim = s;
      }
      nodes.erase(victim);  // unreachable now; nothing of it is written
      plan->frees.push_back(victim);
      removed++;
    }
    if (removed == 0) return Status::Ok();
    for (const auto& [addr, v] : nodes) {
      if (v.moved) {
        std::vector<uint8_t> b(slot_ + v.slot.size(), 0);
        StoreKey(v.key, b.data());
        PutU64(b.data() + left_, v.left);
        PutU64(b.data() + right_, v.right);
        std::memcpy(b.data() + slot_, v.slot.data(), v.slot.size());
        plan->Add(addr, std::move(b));
      } else if (v.left_changed && v.right_changed) {
        std::vector<uint8_t> b(16);
        PutU64(b.data(), v.left);
        PutU64(b.data() + 8, v.right);
        plan->Add(addr + left_, std::move(b));
      } else if (v.left_changed) {
        plan->AddU64(addr + left_, v.left);
      } else if (v.right_changed) {
        plan->AddU64(addr + right_, v.right);
      }
    }
    if (root != root_) {
      uint8_t a[16];
      PutU64(a, root);
      PutU64(a + 8, count_ - removed);
      plan->Add(anchor_ + kRoot, std::vector<uint8_t>(a, a + 16));
    } else {
      plan->AddU64(anchor_ + kCount, count_ - removed);
    }
    plan->commit = [this, root, removed]() {
      root_ = root;
      count_ -= removed;
      deleted_in_batch_ += removed;
    };
    return Status::Ok();
  }

  Status DoDelete(const Key& key, bool replay) {
    uint64_t z = 0, parent = 0, link = 0;
    int depth = 0;
    ASYMNVM_RETURN_IF_ERROR(Locate(key, &z, &parent, &link, &depth));
    if (z == 0) {
      if (replay) return Status::Ok();  // the original failed validation: nothing to redo
      return NotFound(key);
    }
    NodeHead zh;
    ASYMNVM_RETURN_IF_ERROR(ReadHead(z, depth, &zh));
    uint64_t victim = z;
    // Two children: the in-order successor s (leftmost of the right subtree), its parent sp.
    uint64_t s = 0, sp = z;
    NodeHead sh;
    std::vector<uint8_t> s_slot;
    if (zh.left != 0 && zh.right != 0) {
      s = zh.right;
      int d = depth + 1;
      ASYMNVM_RETURN_IF_ERROR(ReadHead(s, d, &sh));
      while (sh.left != 0) {
        if (static_cast<uint64_t>(d) > count_ + 64)
          return Status::Corruption(Describe(kind_, st_.name) + ": cycle");
        sp = s;
        s = sh.left;
        ASYMNVM_RETURN_IF_ERROR(ReadHead(s, ++d, &sh));
      }
      s_slot.resize(slot_bytes_);
      ASYMNVM_RETURN_IF_ERROR(Read(s + slot_, s_slot, levels_.Cached(adapt_, d)));
      const uint32_t len = GetU32(s_slot.data());
      if (len > vsize()) return Status::Corruption(Describe(kind_, st_.name) + ": bad value slot");
      s_slot.resize((4 + len + 7) / 8 * 8);
      victim = s;
    }
    const uint64_t new_child = zh.left != 0 ? zh.left : zh.right;
    const auto params = EncodeKeyValue(key, {});
    // The successor's key slot, whole (8 bytes for an integer key, as before byte keys).
    std::vector<uint8_t> s_key(kslot());
    if (s != 0) StoreKey(sh.key, s_key.data());
    ASYMNVM_RETURN_IF_ERROR(Update(kOpDelete, params, [&]() -> Status {
      if (s != 0) {
        ASYMNVM_RETURN_IF_ERROR(Write(z, s_key));
        ASYMNVM_RETURN_IF_ERROR(Write(z + slot_, s_slot));
        ASYMNVM_RETURN_IF_ERROR(WriteU64(sp == z ? z + right_ : sp + left_, sh.right));
        return WriteU64(anchor_ + kCount, count_ - 1);
      }
      if (parent == 0) {
        uint8_t a[16];
        PutU64(a, new_child);
        PutU64(a + 8, count_ - 1);
        return Write(anchor_ + kRoot, a);
      }
      ASYMNVM_RETURN_IF_ERROR(WriteU64(link, new_child));
      return WriteU64(anchor_ + kCount, count_ - 1);
    }));
    if (s == 0 && parent == 0) root_ = new_child;
    count_--;
    return s_.Free(victim);
  }

  uint64_t anchor_ = 0;
  uint32_t slot_bytes_ = 0, node_bytes_ = 0;
  uint32_t left_ = 0, right_ = 0, slot_ = 0;  // node offsets (after the key slot)
  bool adapt_ = false;
  LevelThreshold levels_;
  // The writer's view of the anchor (it holds the lock).
  uint64_t root_ = 0, count_ = 0;
  uint64_t deleted_in_batch_ = 0;  // DeleteBatch: keys its applied runs removed
};

}  // namespace

Result<std::unique_ptr<Map>> OpenBst(frontend::Session& s, const std::string& name, Options o) {
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st, Base::Resolve(s, Kind::kBst, name, &o, 0));
  auto h = std::make_unique<Bst>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
