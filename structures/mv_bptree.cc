// Multi-version B+tree (AsymNVM paper §6.2; doc/structures.md "MV-B+tree").
//
// Copy-on-write B+tree over the multi-version machinery of mv_common.h (anchor, tagged pointers,
// object header, value blocks, working version, publish, grace-period reclamation, validated
// lock-free readers: see there). Fan-out F = Options::param (3..256; default 32 for integer
// keys, see below for byte keys).
//
// PM layout of a node (24 + (K+8)F bytes, K = KeySlotBytes(key_size): 24 + 16F with integer
// keys): +0 magic u32 "MVBT" | +4 checksum u32 | +8 version u64 | +16 leaf u32 (1 leaf, 0
// internal) | +20 n u32 (1..F; 0 only for an empty root leaf, which is never stored: an empty
// tree has root 0) | +24 keys[F] key slots of K B (the u64 of an integer key; u16 length | bytes
// zero-padded to 8 of a byte key) | +24+KF ptrs[F] u64.
// Leaf: n sorted keys, ptrs = value blocks. Internal: n children; keys[i] (i ≥ 1) is the lower
// bound of child i's keys, keys[0] is not compared (it holds a key once first in child 0); every
// key of child i is < keys[i+1]. Keys order numerically / bytewise (Key's operator<=>).
//
// Node size: one update copies into the working version the path nodes that are not private yet,
// plus one new node per split (the full nodes from the leaf up) and a new root when the root
// splits, and its private objects must fit one publish (48 KiB, or less with small OQ buffers):
// that count (Estimate, no extra read) is checked before the op log, kResourceExhausted when one
// update alone cannot fit. Nodes are therefore capped at 4120 B (the integer-key node at F = 256):
// a byte-key tree whose 24 + F·(K+8) exceeds it is refused at creation (kInvalidArgument; at
// key_size 256, F <= 15). The default fan-out of a byte-key tree is 32 or less so that a node
// stays within 2 KiB (F = 7 at key_size 256, F = 32 up to key_size 46): an update of a tree of
// height h copies at most 2h + 1 such nodes, which fit a publish up to h = 12 even when every
// node on the path splits.
//
// Updates copy the root-to-leaf path into the working version (nodes already private are modified
// in place). Insert splits an overflowing node in halves (the separator is the right half's first
// key) up to the root. Delete removes the key; a node left empty is removed from its parent, and a
// root with a single child is replaced by that child; underfull nodes are not merged (all leaves
// stay at the same depth). Leaf sibling links cannot be maintained under path copying (a copied
// leaf would need its left neighbour copied too, and so on): Scan walks down from the root and
// continues through the parents (a DFS bounded by the height, ≤ 64).
//
// DeleteBatch (op type 4): the sorted keys in runs, each run's Deletes applied in one working
// version (a node on the paths of several keys is copied once; emptied nodes removed, the root
// collapsed, as above), then one op log and one publish; absent keys are skipped, also at replay.
// A run whose private objects would exceed one publish is cut before the key that overflows it.
#include <algorithm>

#include "structures/mv_common.h"

namespace asymnvm::structures::internal {
namespace {

using namespace mv;  // NOLINT

constexpr uint32_t kNodeMagic = 0x5442564du;  // "MVBT"
constexpr uint64_t kDefaultFanout = 32, kMinFanout = 3, kMaxFanout = 256;
constexpr uint64_t kMaxNodeBytes = 24 + 16 * kMaxFanout;  // the largest integer-key node
constexpr uint64_t kDefaultNodeBytes = 2048;              // byte keys: default fan-out target
constexpr int kMaxHeight = 64;

uint64_t NodeBytes(uint64_t fanout, uint32_t key_size) {
  return 24 + fanout * (KeySlotBytes(key_size) + 8);
}
uint64_t DefaultFanout(uint32_t key_size) {
  if (key_size == 0) return kDefaultFanout;
  return std::clamp<uint64_t>((kDefaultNodeBytes - 24) / (KeySlotBytes(key_size) + 8), kMinFanout,
                              kDefaultFanout);
}

struct Node {
  bool leaf = true;
  std::vector<Key> keys;
  std::vector<uint64_t> ptrs;
  size_t n() const { return keys.size(); }
};

class MvBPlusTree final : public MvBase {
 public:
  MvBPlusTree(frontend::Session& s, frontend::Structure st, const Options& o)
      : MvBase(s, std::move(st), Kind::kMvBPlusTree, o, kNodeMagic,
               static_cast<uint32_t>(NodeBytes(o.param, o.key_size))),
        fan_(static_cast<uint32_t>(o.param)),
        ks_(KeySlotBytes(o.key_size)) {}

  // A vector delete (doc/structures.md "Vector deletes"): runs of sorted keys, each DoDelete'd in
  // one working version — every touched node copied once, emptied nodes removed and the root
  // collapsed as by Delete — then one op log (type 4) and one publish per run
  // (MvBase::DeleteVectorRuns).
  Status DeleteBatch(std::span<const Key> keys, uint64_t* deleted) override {
    return DeleteVectorRuns(keys, deleted);
  }

 private:
  struct Step {
    uint64_t ptr = 0;  // as found
    std::vector<uint8_t> bytes;
    Node node;
    size_t idx = 0;  // child taken (internal) / position (leaf)
    uint64_t own = 0;
  };

  Status Decode(const std::vector<uint8_t>& b, Node* out) {
    const uint32_t leaf = GetU32(b.data() + 16), n = GetU32(b.data() + 20);
    if (leaf > 1 || n == 0 || n > fan_) {
      return writer()
                 ? Status::Corruption(What() + ": node with leaf flag " + std::to_string(leaf) +
                                      " and " + std::to_string(n) + " entries")
                 : Restart("malformed node");
    }
    out->leaf = leaf == 1;
    out->keys.resize(n);
    out->ptrs.resize(n);
    for (uint32_t i = 0; i < n; i++) {
      Status st = LoadKey(b.data() + KeyOff(i), &out->keys[i]);
      if (!st.ok()) {
        return writer() ? Status::Corruption(What() + ": node key " + std::to_string(i) + ": " +
                                             st.message())
                        : Restart("malformed key slot");
      }
      out->ptrs[i] = GetU64(b.data() + PtrOff(i));
    }
    return Status::Ok();
  }
  std::vector<uint8_t> Encode(const Node& nd) const {
    std::vector<uint8_t> b(node_bytes_, 0);
    PutU32(b.data(), kNodeMagic);
    PutU32(b.data() + 16, nd.leaf ? 1 : 0);
    PutU32(b.data() + 20, static_cast<uint32_t>(nd.n()));
    for (size_t i = 0; i < nd.n(); i++) {
      StoreKey(nd.keys[i], b.data() + KeyOff(i));
      PutU64(b.data() + PtrOff(i), nd.ptrs[i]);
    }
    return b;
  }
  uint64_t KeyOff(size_t i) const { return 24 + uint64_t{ks_} * i; }
  uint64_t PtrOff(size_t i) const { return KeyOff(fan_) + 8 * i; }
  // Rewrites private node `ptr` (keeps its version).
  void Store(uint64_t ptr, const Node& nd) {
    std::vector<uint8_t> b = Encode(nd);
    uint8_t* p = P(ptr);
    std::memcpy(b.data() + 8, p + 8, 8);
    std::memcpy(p, b.data(), b.size());
  }
  Status Load(uint64_t ptr, std::vector<uint8_t>* bytes, Node* nd) {
    ASYMNVM_RETURN_IF_ERROR(Fetch(ptr, kNodeMagic, node_bytes_, bytes));
    return Decode(*bytes, nd);
  }

  static size_t ChildIndex(const Node& nd, const Key& key) {
    // The last child whose lower bound is <= key (keys[0] is unused).
    auto it = std::upper_bound(nd.keys.begin() + 1, nd.keys.end(), key);
    return static_cast<size_t>(it - nd.keys.begin()) - 1;
  }

  // Root-to-leaf path for `key`; the leaf's idx is the lower_bound position.
  Status Descend(const Key& key, std::vector<Step>* path, bool* found) {
    path->clear();
    *found = false;
    for (uint64_t cur = root_; cur != 0;) {
      if (path->size() >= static_cast<size_t>(kMaxHeight))
        return Status::Corruption(What() + ": tree too high");
      Step s;
      s.ptr = cur;
      ASYMNVM_RETURN_IF_ERROR(Load(cur, &s.bytes, &s.node));
      if (s.node.leaf) {
        auto it = std::lower_bound(s.node.keys.begin(), s.node.keys.end(), key);
        s.idx = static_cast<size_t>(it - s.node.keys.begin());
        *found = it != s.node.keys.end() && *it == key;
        path->push_back(std::move(s));
        return Status::Ok();
      }
      s.idx = ChildIndex(s.node, key);
      cur = s.node.ptrs[s.idx];
      path->push_back(std::move(s));
    }
    return Status::Ok();
  }

  // Makes the whole path private, top-down; each parent's child pointer follows its copy.
  Status OwnPath(std::vector<Step>& path) {
    for (size_t i = 0; i < path.size(); i++) {
      ASYMNVM_ASSIGN_OR_RETURN(path[i].own, Own(path[i].ptr, path[i].bytes));
      if (i == 0) {
        root_ = path[i].own;
      } else {
        path[i - 1].node.ptrs[path[i - 1].idx] = path[i].own;
      }
    }
    return Status::Ok();
  }

  // The private bytes an update may add (as NewObject counts them): a copy of every path node not
  // yet private, and for an insertion one new node per split — the full nodes from the leaf up —
  // plus a new root when the root splits.
  size_t Estimate(const std::vector<Step>& path, bool insert) const {
    size_t nodes = 0;
    for (const Step& s : path) nodes += IsPrivate(s.ptr) ? 0 : 1;
    if (insert) {
      size_t i = path.size();
      while (i > 0 && path[i - 1].node.n() == fan_) i--;
      nodes += path.size() - i + (i == 0 && !path.empty() ? 1 : 0);
      if (path.empty()) nodes = 1;  // the root leaf
    }
    return nodes * (node_bytes_ + 32);
  }

  Status DoPut(const Key& key, std::span<const uint8_t> value, bool replay) override {
    std::vector<Step> path;
    bool found;
    ASYMNVM_RETURN_IF_ERROR(Descend(key, &path, &found));
    ASYMNVM_RETURN_IF_ERROR(Begin(kOpPut, key, value, Estimate(path, !found) + val_bytes_ + 32));
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t vb, NewValue(value));
    if (path.empty()) {
      Node leaf;
      leaf.keys = {key};
      leaf.ptrs = {vb};
      ASYMNVM_ASSIGN_OR_RETURN(root_, NewObject(Encode(leaf)));
      count_++;
      return End(replay);
    }
    ASYMNVM_RETURN_IF_ERROR(OwnPath(path));
    Step& lf = path.back();
    if (found) {
      ASYMNVM_RETURN_IF_ERROR(Retire(lf.node.ptrs[lf.idx]));
      lf.node.ptrs[lf.idx] = vb;
    } else {
      lf.node.keys.insert(lf.node.keys.begin() + lf.idx, key);
      lf.node.ptrs.insert(lf.node.ptrs.begin() + lf.idx, vb);
      count_++;
    }
    // Split upward.
    for (size_t i = path.size(); i-- > 0;) {
      Node& nd = path[i].node;
      if (nd.n() <= fan_) break;
      const size_t mid = nd.n() / 2;
      Node right;
      right.leaf = nd.leaf;
      right.keys.assign(nd.keys.begin() + mid, nd.keys.end());
      right.ptrs.assign(nd.ptrs.begin() + mid, nd.ptrs.end());
      nd.keys.resize(mid);
      nd.ptrs.resize(mid);
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t rp, NewObject(Encode(right)));
      const Key sep = right.keys[0];
      if (i == 0) {
        Node nr;
        nr.leaf = false;
        nr.keys = {nd.keys[0], sep};
        nr.ptrs = {path[0].own, rp};
        ASYMNVM_ASSIGN_OR_RETURN(root_, NewObject(Encode(nr)));
      } else {
        Node& parent = path[i - 1].node;
        const size_t at = path[i - 1].idx + 1;
        parent.keys.insert(parent.keys.begin() + at, sep);
        parent.ptrs.insert(parent.ptrs.begin() + at, rp);
      }
    }
    for (Step& s : path) Store(s.own, s.node);
    return End(replay);
  }

  Status DoDelete(const Key& key, bool replay) override {
    std::vector<Step> path;
    bool found;
    ASYMNVM_RETURN_IF_ERROR(Descend(key, &path, &found));
    if (!found) {
      if (replay) return Status::Ok();  // validated before its op log: cannot happen
      return Status::NotFound(What() + ": key " + key.ToString() + " not found");
    }
    ASYMNVM_RETURN_IF_ERROR(Begin(kOpDelete, key, {}, Estimate(path, false)));
    ASYMNVM_RETURN_IF_ERROR(OwnPath(path));
    Step& lf = path.back();
    ASYMNVM_RETURN_IF_ERROR(Retire(lf.node.ptrs[lf.idx]));
    lf.node.keys.erase(lf.node.keys.begin() + lf.idx);
    lf.node.ptrs.erase(lf.node.ptrs.begin() + lf.idx);
    count_--;
    // Remove emptied nodes upward.
    size_t keep = path.size();  // path[0..keep) survive
    for (size_t i = path.size(); i-- > 0;) {
      if (path[i].node.n() != 0) break;
      ASYMNVM_RETURN_IF_ERROR(Retire(path[i].own));
      keep = i;
      if (i == 0) {
        root_ = 0;
      } else {
        Node& parent = path[i - 1].node;
        parent.keys.erase(parent.keys.begin() + path[i - 1].idx);
        parent.ptrs.erase(parent.ptrs.begin() + path[i - 1].idx);
      }
    }
    for (size_t i = 0; i < keep; i++) Store(path[i].own, path[i].node);
    // Collapse a root with a single child.
    while (root_ != 0 && keep > 0) {
      Node& r = path[0].node;
      if (r.leaf || r.n() != 1) break;
      const uint64_t old = root_;
      root_ = r.ptrs[0];
      ASYMNVM_RETURN_IF_ERROR(Retire(old));
      path.erase(path.begin());
      keep--;
    }
    return End(replay);
  }

  Status GetIn(uint64_t root, uint64_t count, const Key& key, Value* value) override {
    std::vector<uint8_t> b;
    Node nd;
    uint64_t cur = root;
    for (int depth = 0; cur != 0; depth++) {
      if (depth >= kMaxHeight)
        return writer() ? Status::Corruption(What() + ": tree too high") : Restart("too high");
      ASYMNVM_RETURN_IF_ERROR(Load(cur, &b, &nd));
      if (nd.leaf) {
        auto it = std::lower_bound(nd.keys.begin(), nd.keys.end(), key);
        if (it == nd.keys.end() || *it != key) break;
        return ReadValue(nd.ptrs[it - nd.keys.begin()], value);
      }
      cur = nd.ptrs[ChildIndex(nd, key)];
    }
    return Status::NotFound(What() + ": key " + key.ToString() + " not found");
  }

  Status ScanNode(uint64_t ptr, int depth, const Key& from, size_t limit,
                  std::vector<KeyValue>* out) {
    if (depth >= kMaxHeight)
      return writer() ? Status::Corruption(What() + ": tree too high") : Restart("too high");
    std::vector<uint8_t> b;
    Node nd;
    ASYMNVM_RETURN_IF_ERROR(Load(ptr, &b, &nd));
    if (nd.leaf) {
      for (size_t i = 0; i < nd.n() && out->size() < limit; i++) {
        if (nd.keys[i] < from) continue;
        Value v;
        ASYMNVM_RETURN_IF_ERROR(ReadValue(nd.ptrs[i], &v));
        out->emplace_back(nd.keys[i], std::move(v));
      }
      return Status::Ok();
    }
    for (size_t i = ChildIndex(nd, from); i < nd.n() && out->size() < limit; i++) {
      ASYMNVM_RETURN_IF_ERROR(ScanNode(nd.ptrs[i], depth + 1, from, limit, out));
    }
    return Status::Ok();
  }

  Status ScanIn(uint64_t root, uint64_t, const Key& from, size_t limit,
                std::vector<KeyValue>* out) override {
    if (root == 0 || limit == 0) return Status::Ok();
    return ScanNode(root, 0, from, limit, out);
  }

  struct VerifyState {
    uint64_t keys = 0;
    int leaf_depth = -1;
  };
  // Keys within [lo, hi) (null: unbounded).
  Status VerifyNode(uint64_t ptr, int depth, const Key* lo, const Key* hi, VerifyState* vs) {
    if (depth >= kMaxHeight) return Status::Corruption(What() + ": tree too high");
    std::vector<uint8_t> b;
    Node nd;
    ASYMNVM_RETURN_IF_ERROR(Load(ptr, &b, &nd));
    const size_t first = nd.leaf ? 0 : 1;
    for (size_t i = first; i < nd.n(); i++) {
      const Key& k = nd.keys[i];
      if ((lo != nullptr && k < *lo) || (hi != nullptr && k >= *hi) ||
          (i > first && k <= nd.keys[i - 1])) {
        return Status::Corruption(What() + ": key " + k.ToString() + " out of order at depth " +
                                  std::to_string(depth));
      }
    }
    if (nd.leaf) {
      if (vs->leaf_depth >= 0 && vs->leaf_depth != depth) {
        return Status::Corruption(What() + ": leaves at depths " + std::to_string(vs->leaf_depth) +
                                  " and " + std::to_string(depth));
      }
      vs->leaf_depth = depth;
      vs->keys += nd.n();
      for (uint64_t p : nd.ptrs) ASYMNVM_RETURN_IF_ERROR(ReadValue(p, nullptr));
      return Status::Ok();
    }
    for (size_t i = 0; i < nd.n(); i++) {
      const Key* clo = i > 0 ? &nd.keys[i] : lo;
      const Key* chi = i + 1 < nd.n() ? &nd.keys[i + 1] : hi;
      ASYMNVM_RETURN_IF_ERROR(VerifyNode(nd.ptrs[i], depth + 1, clo, chi, vs));
    }
    return Status::Ok();
  }

  Status VerifyIn(uint64_t root, uint64_t count) override {
    VerifyState vs;
    if (root != 0) ASYMNVM_RETURN_IF_ERROR(VerifyNode(root, 0, nullptr, nullptr, &vs));
    if (vs.keys != count) {
      return Status::Corruption(What() + ": " + std::to_string(vs.keys) + " keys, count says " +
                                std::to_string(count));
    }
    return Status::Ok();
  }

  const uint32_t fan_;
  const uint32_t ks_;  // key slot bytes
};

}  // namespace

Result<std::unique_ptr<Map>> OpenMvBPlusTree(frontend::Session& s, const std::string& name,
                                             Options o) {
  if (o.param != 0 && (o.param < kMinFanout || o.param > kMaxFanout)) {
    return Status::InvalidArgument("mvbptree fan-out must be 3..256, got " +
                                   std::to_string(o.param));
  }
  // Nodes within kMaxNodeBytes (only long byte keys come near it; see the top of the file).
  if (o.param != 0 && o.key_size <= kMaxKeySize && NodeBytes(o.param, o.key_size) > kMaxNodeBytes) {
    return Status::InvalidArgument(
        "mvbptree fan-out " + std::to_string(o.param) + " with key_size " +
        std::to_string(o.key_size) + " makes nodes of " +
        std::to_string(NodeBytes(o.param, o.key_size)) + " bytes, more than " +
        std::to_string(kMaxNodeBytes) + "; at most " +
        std::to_string((kMaxNodeBytes - 24) / (KeySlotBytes(o.key_size) + 8)) +
        " for this key_size");
  }
  const uint64_t default_fanout = DefaultFanout(o.key_size <= kMaxKeySize ? o.key_size : 0);
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st,
                           Base::Resolve(s, Kind::kMvBPlusTree, name, &o, default_fanout));
  if (o.param < kMinFanout || o.param > kMaxFanout ||
      NodeBytes(o.param, o.key_size) > kMaxNodeBytes) {
    return Status::Corruption(Describe(Kind::kMvBPlusTree, name) + ": stored fan-out " +
                              std::to_string(o.param) + " with key_size " +
                              std::to_string(o.key_size));
  }
  auto h = std::make_unique<MvBPlusTree>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
