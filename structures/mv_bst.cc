// Multi-version binary search tree (AsymNVM paper §6.2; doc/structures.md "MV-BST").
//
// A BST with path copying over the multi-version machinery of mv_common.h (anchor, tagged
// pointers, object header, value blocks, working version, publish, grace-period reclamation,
// validated lock-free readers: see there), kept balanced as a treap whose priorities are a hash
// of the key (of the integer, or of KeyHash of a byte key; no PM field: a node's priority is a
// function of its key, so the shape is a function of the key set, whatever the insertion order —
// ascending keys included, and a replay rebuilds the same shape). An insert rotates the new node up
// along its path, which the path copy already made private; a delete rotates the node down (copying
// the children it rotates with) until it has at most one child, then splices it out. Rotations
// never touch a published node.
//
// PM layout of a node (40 + K B, K = KeySlotBytes(key_size)): +0 magic u32 "MVBN" | +4 checksum
// u32 | +8 version u64 | +16 key slot (u64, or u16 length | bytes zero-padded to 8) | +16+K left
// ptr | +24+K right ptr | +32+K value ptr (a value block: header + value slot). An integer-key
// node is the layout from before byte keys (K = 8: 48 B). Byte keys are ordered bytewise (Key's
// operator<=>). Values live out of line so a path copy copies nodes of key slot + 40 bytes only.
//
// Put/Delete descend once (read-only, through the cache), validate (delete of a missing key →
// kNotFound), write the op log, then copy the path top-down into the working version (nodes
// already private are modified in place) and relink, then rotate (above). One update that would
// copy more than one publish holds (a path longer than ~750 nodes with integer keys, ~150 with
// 256-byte keys: not reached by a treap of any practical size, expected depth ≈ 2.9·log2 n)
// fails with kResourceExhausted before its op log. DeleteBatch: each run of the sorted keys is
// one new version (the deletes above in DRAM, sharing path copies), one op log (type 4), one
// publish (doc/structures.md "Vector deletes"). Verify counts nodes out of treap order
// (MvStats::treap_violations) without failing: trees written before the treap are valid BSTs.
#include "structures/mv_common.h"

namespace asymnvm::structures::internal {
namespace {

using namespace mv;  // NOLINT

constexpr uint32_t kNodeMagic = 0x4e42564du;  // "MVBN"
constexpr uint32_t kKey = 16;                 // the key slot; the links and value ptr follow it

class MvBst final : public MvBase {
 public:
  MvBst(frontend::Session& s, frontend::Structure st, const Options& o)
      : MvBase(s, std::move(st), Kind::kMvBst, o, kNodeMagic, 40 + KeySlotBytes(o.key_size)),
        left_(kKey + kslot()),
        right_(kKey + kslot() + 8),
        val_(kKey + kslot() + 16) {}

  // A vector delete (doc/structures.md "Vector deletes"): each run of the sorted keys is deleted
  // in ONE new working version (DoDelete per key present, in key order: the path copies and the
  // rotations of neighbouring keys share private nodes), then one op log (type 4) and one publish.
  Status DeleteBatch(std::span<const Key> keys, uint64_t* deleted) override {
    return DeleteVectorRuns(keys, deleted);
  }

 private:
  struct Step {
    uint64_t ptr = 0;  // as found (published or private)
    std::vector<uint8_t> n;
    Key key;           // n's key
    uint64_t own = 0;  // its private version after OwnPrefix
  };

  // The key of node bytes `n` (already validated by Fetch). A bad key slot is corruption for the
  // writer; a reader restarts (a checksum-valid object with a bad key is not expected either).
  Status K(const std::vector<uint8_t>& n, Key* key) {
    if (ksize() == 0) {  // the integer fast path: nothing to validate
      *key = Key(GetU64(n.data() + kKey));
      return Status::Ok();
    }
    Status st = LoadKey(n.data() + kKey, key);
    if (st.ok()) return st;
    return writer() ? Status::Corruption(What() + ": node key: " + st.message())
                    : Restart("node key: " + st.message());
  }
  // Treap priority of a key (a 64-bit mixer, splitmix64's finalizer, of the integer or of the
  // byte key's KeyHash); ties broken by the key, so the order is total and the shape unique.
  static uint64_t Prio(const Key& key) {
    uint64_t z = (key.is_int() ? key.u64() : KeyHash(key)) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  static bool Above(const Key& a, const Key& b) {  // key a belongs above key b
    const uint64_t pa = Prio(a), pb = Prio(b);
    return pa > pb || (pa == pb && a < b);
  }
  // Rotates private child `c` above private node `n` (its child on side `left`); `parent` is
  // n's private parent (0: n is the root).
  Status RotateUp(uint64_t parent, uint64_t n, uint64_t c) {
    uint8_t* np = P(n);
    uint8_t* cp = P(c);
    if (GetU64(np + left_) == c) {
      PutU64(np + left_, GetU64(cp + right_));
      PutU64(cp + right_, n);
    } else if (GetU64(np + right_) == c) {
      PutU64(np + right_, GetU64(cp + left_));
      PutU64(cp + left_, n);
    } else {
      return Status::Internal(What() + ": rotate: not a child");
    }
    return Relink(parent, n, c);
  }
  static uint64_t F(const std::vector<uint8_t>& n, uint32_t off) { return GetU64(n.data() + off); }

  Status Descend(const Key& key, std::vector<Step>* path, bool* found) {
    path->clear();
    *found = false;
    for (uint64_t cur = root_; cur != 0;) {
      if (path->size() > count_ + 64)
        return Status::Corruption(What() + ": path longer than the count");
      Step s;
      s.ptr = cur;
      ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, node_bytes_, &s.n));
      ASYMNVM_RETURN_IF_ERROR(K(s.n, &s.key));
      path->push_back(std::move(s));
      const Step& b = path->back();
      if (b.key == key) {
        *found = true;
        return Status::Ok();
      }
      cur = F(b.n, key < b.key ? left_ : right_);
    }
    return Status::Ok();
  }

  // Replaces the child pointer `from` of private node `parent` (or the root) by `to`.
  Status Relink(uint64_t parent, uint64_t from, uint64_t to) {
    if (parent == 0) {
      root_ = to;
      return Status::Ok();
    }
    uint8_t* p = P(parent);
    if (GetU64(p + left_) == from) {
      PutU64(p + left_, to);
    } else if (GetU64(p + right_) == from) {
      PutU64(p + right_, to);
    } else {
      return Status::Internal(What() + ": relink: child not found in its parent");
    }
    return Status::Ok();
  }

  // Makes path[0..m) private, top-down, relinking each copy into its (private) parent.
  Status OwnPrefix(std::vector<Step>& path, size_t m) {
    for (size_t i = 0; i < m; i++) {
      ASYMNVM_ASSIGN_OR_RETURN(path[i].own, Own(path[i].ptr, path[i].n));
      if (path[i].own != path[i].ptr) {
        ASYMNVM_RETURN_IF_ERROR(Relink(i == 0 ? 0 : path[i - 1].own, path[i].ptr, path[i].own));
      }
    }
    return Status::Ok();
  }

  size_t Estimate(size_t nodes, bool value) const {
    return nodes * (node_bytes_ + 32) + (value ? val_bytes_ + 32 : 0);
  }

  Status DoPut(const Key& key, std::span<const uint8_t> value, bool replay) override {
    std::vector<Step> path;
    bool found;
    ASYMNVM_RETURN_IF_ERROR(Descend(key, &path, &found));
    ASYMNVM_RETURN_IF_ERROR(Begin(kOpPut, key, value, Estimate(path.size() + 1, true)));
    // Begin may have published: nodes private at Descend may now be published (same bytes).
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t vb, NewValue(value));
    ASYMNVM_RETURN_IF_ERROR(OwnPrefix(path, path.size()));
    if (found) {
      uint8_t* n = P(path.back().own);
      const uint64_t old = GetU64(n + val_);
      PutU64(n + val_, vb);
      ASYMNVM_RETURN_IF_ERROR(Retire(old));
    } else {
      std::vector<uint8_t> b(node_bytes_, 0);
      PutU32(b.data(), kNodeMagic);
      StoreKey(key, b.data() + kKey);
      PutU64(b.data() + val_, vb);
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t nn, NewObject(std::move(b)));
      if (path.empty()) {
        root_ = nn;
      } else {
        uint8_t* p = P(path.back().own);
        PutU64(p + (key < path.back().key ? left_ : right_), nn);
      }
      // Up while it belongs above its parent (every node on the path is private).
      for (size_t i = path.size(); i-- > 0 && Above(key, path[i].key);) {
        ASYMNVM_RETURN_IF_ERROR(RotateUp(i == 0 ? 0 : path[i - 1].own, path[i].own, nn));
      }
      count_++;
    }
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
    // Rotating it down copies at most one child per level below it: budget its subtree's
    // expected depth with a wide margin.
    ASYMNVM_RETURN_IF_ERROR(Begin(kOpDelete, key, {}, Estimate(path.size() + 64, false)));
    ASYMNVM_RETURN_IF_ERROR(OwnPrefix(path, path.size()));
    const uint64_t t = path.back().own;
    uint64_t parent = path.size() >= 2 ? path[path.size() - 2].own : 0;
    // Down: rotate the child that belongs higher above it until it has at most one child.
    std::vector<uint8_t> ln, rn;
    Key lk, rk;
    for (size_t steps = 0;; steps++) {
      if (steps > count_ + 64)
        return Status::Corruption(What() + ": delete: subtree deeper than the count");
      const uint64_t l = GetU64(P(t) + left_), r = GetU64(P(t) + right_);
      if (l == 0 || r == 0) {
        ASYMNVM_RETURN_IF_ERROR(Relink(parent, t, l != 0 ? l : r));
        break;
      }
      ASYMNVM_RETURN_IF_ERROR(Fetch(l, kNodeMagic, node_bytes_, &ln));
      ASYMNVM_RETURN_IF_ERROR(Fetch(r, kNodeMagic, node_bytes_, &rn));
      ASYMNVM_RETURN_IF_ERROR(K(ln, &lk));
      ASYMNVM_RETURN_IF_ERROR(K(rn, &rk));
      const bool left = Above(lk, rk);
      const uint64_t c = left ? l : r;
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t own, Own(c, left ? ln : rn));
      if (own != c) ASYMNVM_RETURN_IF_ERROR(Relink(t, c, own));
      ASYMNVM_RETURN_IF_ERROR(RotateUp(parent, t, own));
      parent = own;
    }
    ASYMNVM_RETURN_IF_ERROR(Retire(GetU64(P(t) + val_)));
    ASYMNVM_RETURN_IF_ERROR(Retire(t));
    count_--;
    return End(replay);
  }

  Status GetIn(uint64_t root, uint64_t count, const Key& key, Value* value) override {
    std::vector<uint8_t> n;
    Key k;
    uint64_t steps = 0;
    for (uint64_t cur = root; cur != 0;) {
      if (++steps > count + 64)
        return writer() ? Status::Corruption(What() + ": cycle") : Restart("cycle");
      ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, node_bytes_, &n));
      ASYMNVM_RETURN_IF_ERROR(K(n, &k));
      if (k == key) return ReadValue(F(n, val_), value);
      cur = F(n, key < k ? left_ : right_);
    }
    return Status::NotFound(What() + ": key " + key.ToString() + " not found");
  }

  Status ScanIn(uint64_t root, uint64_t count, const Key& from, size_t limit,
                std::vector<KeyValue>* out) override {
    if (limit == 0) return Status::Ok();
    std::vector<std::pair<std::vector<uint8_t>, Key>> stack;  // node bytes, key >= from
    uint64_t steps = 0;
    uint64_t cur = root;
    while (cur != 0 || !stack.empty()) {
      while (cur != 0) {
        if (++steps > 2 * count + 64)
          return writer() ? Status::Corruption(What() + ": cycle") : Restart("cycle");
        std::vector<uint8_t> n;
        Key k;
        ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, node_bytes_, &n));
        ASYMNVM_RETURN_IF_ERROR(K(n, &k));
        if (k < from) {
          cur = F(n, right_);  // the whole left subtree is below `from`
        } else {
          cur = F(n, left_);
          stack.emplace_back(std::move(n), std::move(k));
        }
      }
      if (stack.empty()) break;
      auto [n, k] = std::move(stack.back());
      stack.pop_back();
      Value v;
      ASYMNVM_RETURN_IF_ERROR(ReadValue(F(n, val_), &v));
      out->emplace_back(std::move(k), std::move(v));
      if (out->size() >= limit) break;
      cur = F(n, right_);
    }
    return Status::Ok();
  }

  Status VerifyIn(uint64_t root, uint64_t count) override {
    struct Item {
      uint64_t ptr;
      bool has_lo, has_hi;
      Key lo, hi;  // lo < key < hi
      Key parent;  // the parent's key (has_parent): the node must not belong above it
      bool has_parent;
    };
    std::vector<Item> stack;
    if (root != 0) stack.push_back({root, false, false, Key(), Key(), Key(), false});
    stats_.treap_violations = 0;
    uint64_t nodes = 0;
    std::vector<uint8_t> n;
    Key k;
    while (!stack.empty()) {
      Item it = std::move(stack.back());
      stack.pop_back();
      if (++nodes > count) {
        return Status::Corruption(What() + ": more nodes than the count " + std::to_string(count));
      }
      ASYMNVM_RETURN_IF_ERROR(Fetch(it.ptr, kNodeMagic, node_bytes_, &n));
      ASYMNVM_RETURN_IF_ERROR(K(n, &k));
      if ((it.has_lo && k <= it.lo) || (it.has_hi && k >= it.hi)) {
        return Status::Corruption(What() + ": key " + k.ToString() + " out of order");
      }
      // The treap's heap order (the shape is the one function of the key set): counted.
      if (it.has_parent && Above(k, it.parent)) stats_.treap_violations++;
      ASYMNVM_RETURN_IF_ERROR(ReadValue(F(n, val_), nullptr));
      if (F(n, left_) != 0) stack.push_back({F(n, left_), it.has_lo, true, it.lo, k, k, true});
      if (F(n, right_) != 0) stack.push_back({F(n, right_), true, it.has_hi, k, it.hi, k, true});
    }
    if (nodes != count) {
      return Status::Corruption(What() + ": " + std::to_string(nodes) + " nodes, count says " +
                                std::to_string(count));
    }
    return Status::Ok();
  }

  // Node offsets after the key slot (24, 32, 40 with integer keys).
  const uint32_t left_, right_, val_;
};

}  // namespace

Result<std::unique_ptr<Map>> OpenMvBst(frontend::Session& s, const std::string& name, Options o) {
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st, Base::Resolve(s, Kind::kMvBst, name, &o, 0));
  auto h = std::make_unique<MvBst>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
