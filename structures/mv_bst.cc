// Multi-version binary search tree (AsymNVM paper §6.2; doc/structures.md "MV-BST").
//
// A BST with path copying over the multi-version machinery of mv_common.h (anchor, tagged
// pointers, object header, value blocks, working version, publish, grace-period reclamation,
// validated lock-free readers: see there), kept balanced as a treap whose priorities are a hash
// of the key (no PM field: a node's priority is a function of its key, so the shape is a function
// of the key set, whatever the insertion order — ascending keys included, and a replay rebuilds
// the same shape). An insert rotates the new node up along its path, which the path copy already
// made private; a delete rotates the node down (copying the children it rotates with) until it has
// at most one child, then splices it out. Rotations never touch a published node.
//
// PM layout of a node (48 B): +0 magic u32 "MVBN" | +4 checksum u32 | +8 version u64 | +16 key u64
// | +24 left ptr | +32 right ptr | +40 value ptr (a value block: header + value slot). Values live
// out of line so a path copy copies 48-byte nodes only.
//
// Put/Delete descend once (read-only, through the cache), validate (delete of a missing key →
// kNotFound), write the op log, then copy the path top-down into the working version (nodes
// already private are modified in place) and relink, then rotate (above). One update that would
// copy more than one publish holds (a path longer than ~750 nodes: not reached by a treap of any
// practical size, expected depth ≈ 2.9·log2 n) fails with kResourceExhausted before its op log.
#include "structures/mv_common.h"

namespace asymnvm::structures::internal {
namespace {

using namespace mv;  // NOLINT

constexpr uint32_t kNodeMagic = 0x4e42564du;  // "MVBN"
constexpr uint32_t kNodeBytes = 48;
constexpr uint32_t kKey = 16, kLeft = 24, kRight = 32, kVal = 40;

class MvBst final : public MvBase {
 public:
  MvBst(frontend::Session& s, frontend::Structure st, const Options& o)
      : MvBase(s, std::move(st), Kind::kMvBst, o, kNodeMagic, kNodeBytes) {}

 private:
  struct Step {
    uint64_t ptr = 0;  // as found (published or private)
    std::vector<uint8_t> n;
    uint64_t own = 0;  // its private version after OwnPrefix
  };

  static uint64_t K(const std::vector<uint8_t>& n) { return GetU64(n.data() + kKey); }
  // Treap priority of a key (a 64-bit mixer, splitmix64's finalizer); ties broken by the key, so
  // the order is total and the shape unique.
  static uint64_t Prio(uint64_t k) {
    uint64_t z = k + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  static bool Above(uint64_t a, uint64_t b) {  // key a belongs above key b
    const uint64_t pa = Prio(a), pb = Prio(b);
    return pa > pb || (pa == pb && a < b);
  }
  // Rotates private child `c` above private node `n` (its child on side `left`); `parent` is
  // n's private parent (0: n is the root).
  Status RotateUp(uint64_t parent, uint64_t n, uint64_t c) {
    uint8_t* np = P(n);
    uint8_t* cp = P(c);
    if (GetU64(np + kLeft) == c) {
      PutU64(np + kLeft, GetU64(cp + kRight));
      PutU64(cp + kRight, n);
    } else if (GetU64(np + kRight) == c) {
      PutU64(np + kRight, GetU64(cp + kLeft));
      PutU64(cp + kLeft, n);
    } else {
      return Status::Internal(What() + ": rotate: not a child");
    }
    return Relink(parent, n, c);
  }
  static uint64_t F(const std::vector<uint8_t>& n, uint32_t off) { return GetU64(n.data() + off); }

  Status Descend(uint64_t key, std::vector<Step>* path, bool* found) {
    path->clear();
    *found = false;
    for (uint64_t cur = root_; cur != 0;) {
      if (path->size() > count_ + 64)
        return Status::Corruption(What() + ": path longer than the count");
      Step s;
      s.ptr = cur;
      ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, kNodeBytes, &s.n));
      const uint64_t k = K(s.n);
      path->push_back(std::move(s));
      if (k == key) {
        *found = true;
        return Status::Ok();
      }
      cur = F(path->back().n, key < k ? kLeft : kRight);
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
    if (GetU64(p + kLeft) == from) {
      PutU64(p + kLeft, to);
    } else if (GetU64(p + kRight) == from) {
      PutU64(p + kRight, to);
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
    return nodes * (kNodeBytes + 32) + (value ? val_bytes_ + 32 : 0);
  }

  Status DoPut(const Key& key_in, std::span<const uint8_t> value, bool replay) override {
    const uint64_t key = key_in.u64();  // TODO(byte keys): shim until bkbst converts mv_bst.cc
    std::vector<Step> path;
    bool found;
    ASYMNVM_RETURN_IF_ERROR(Descend(key, &path, &found));
    ASYMNVM_RETURN_IF_ERROR(Begin(kOpPut, key, value, Estimate(path.size() + 1, true)));
    // Begin may have published: nodes private at Descend may now be published (same bytes).
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t vb, NewValue(value));
    ASYMNVM_RETURN_IF_ERROR(OwnPrefix(path, path.size()));
    if (found) {
      uint8_t* n = P(path.back().own);
      const uint64_t old = GetU64(n + kVal);
      PutU64(n + kVal, vb);
      ASYMNVM_RETURN_IF_ERROR(Retire(old));
    } else {
      std::vector<uint8_t> b(kNodeBytes, 0);
      PutU32(b.data(), kNodeMagic);
      PutU64(b.data() + kKey, key);
      PutU64(b.data() + kVal, vb);
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t nn, NewObject(std::move(b)));
      if (path.empty()) {
        root_ = nn;
      } else {
        uint8_t* p = P(path.back().own);
        PutU64(p + (key < GetU64(p + kKey) ? kLeft : kRight), nn);
      }
      // Up while it belongs above its parent (every node on the path is private).
      for (size_t i = path.size(); i-- > 0 && Above(key, K(path[i].n));) {
        ASYMNVM_RETURN_IF_ERROR(RotateUp(i == 0 ? 0 : path[i - 1].own, path[i].own, nn));
      }
      count_++;
    }
    return End(replay);
  }

  Status DoDelete(const Key& key_in, bool replay) override {
    const uint64_t key = key_in.u64();  // TODO(byte keys): shim until bkbst converts mv_bst.cc
    std::vector<Step> path;
    bool found;
    ASYMNVM_RETURN_IF_ERROR(Descend(key, &path, &found));
    if (!found) {
      if (replay) return Status::Ok();  // validated before its op log: cannot happen
      return Status::NotFound(What() + ": key " + std::to_string(key) + " not found");
    }
    // Rotating it down copies at most one child per level below it: budget its subtree's
    // expected depth with a wide margin.
    ASYMNVM_RETURN_IF_ERROR(Begin(kOpDelete, key, {}, Estimate(path.size() + 64, false)));
    ASYMNVM_RETURN_IF_ERROR(OwnPrefix(path, path.size()));
    const uint64_t t = path.back().own;
    uint64_t parent = path.size() >= 2 ? path[path.size() - 2].own : 0;
    // Down: rotate the child that belongs higher above it until it has at most one child.
    std::vector<uint8_t> ln, rn;
    for (size_t steps = 0;; steps++) {
      if (steps > count_ + 64)
        return Status::Corruption(What() + ": delete: subtree deeper than the count");
      const uint64_t l = GetU64(P(t) + kLeft), r = GetU64(P(t) + kRight);
      if (l == 0 || r == 0) {
        ASYMNVM_RETURN_IF_ERROR(Relink(parent, t, l != 0 ? l : r));
        break;
      }
      ASYMNVM_RETURN_IF_ERROR(Fetch(l, kNodeMagic, kNodeBytes, &ln));
      ASYMNVM_RETURN_IF_ERROR(Fetch(r, kNodeMagic, kNodeBytes, &rn));
      const bool left = Above(K(ln), K(rn));
      const uint64_t c = left ? l : r;
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t own, Own(c, left ? ln : rn));
      if (own != c) ASYMNVM_RETURN_IF_ERROR(Relink(t, c, own));
      ASYMNVM_RETURN_IF_ERROR(RotateUp(parent, t, own));
      parent = own;
    }
    ASYMNVM_RETURN_IF_ERROR(Retire(GetU64(P(t) + kVal)));
    ASYMNVM_RETURN_IF_ERROR(Retire(t));
    count_--;
    return End(replay);
  }

  Status GetIn(uint64_t root, uint64_t count, const Key& key_in, Value* value) override {
    const uint64_t key = key_in.u64();  // TODO(byte keys): shim until bkbst converts mv_bst.cc
    std::vector<uint8_t> n;
    uint64_t steps = 0;
    for (uint64_t cur = root; cur != 0;) {
      if (++steps > count + 64)
        return writer() ? Status::Corruption(What() + ": cycle") : Restart("cycle");
      ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, kNodeBytes, &n));
      const uint64_t k = K(n);
      if (k == key) return ReadValue(F(n, kVal), value);
      cur = F(n, key < k ? kLeft : kRight);
    }
    return Status::NotFound(What() + ": key " + std::to_string(key) + " not found");
  }

  Status ScanIn(uint64_t root, uint64_t count, const Key& from_in, size_t limit,
                std::vector<KeyValue>* out) override {
    const uint64_t from = from_in.u64();  // TODO(byte keys): shim until bkbst converts mv_bst.cc
    if (limit == 0) return Status::Ok();
    std::vector<std::vector<uint8_t>> stack;
    uint64_t steps = 0;
    uint64_t cur = root;
    while (cur != 0 || !stack.empty()) {
      while (cur != 0) {
        if (++steps > 2 * count + 64)
          return writer() ? Status::Corruption(What() + ": cycle") : Restart("cycle");
        std::vector<uint8_t> n;
        ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, kNodeBytes, &n));
        if (K(n) < from) {
          cur = F(n, kRight);  // the whole left subtree is below `from`
        } else {
          cur = F(n, kLeft);
          stack.push_back(std::move(n));
        }
      }
      if (stack.empty()) break;
      std::vector<uint8_t> n = std::move(stack.back());
      stack.pop_back();
      Value v;
      ASYMNVM_RETURN_IF_ERROR(ReadValue(F(n, kVal), &v));
      out->emplace_back(K(n), std::move(v));
      if (out->size() >= limit) break;
      cur = F(n, kRight);
    }
    return Status::Ok();
  }

  Status VerifyIn(uint64_t root, uint64_t count) override {
    struct Item {
      uint64_t ptr;
      bool has_lo, has_hi;
      uint64_t lo, hi;  // lo < key < hi
    };
    std::vector<Item> stack;
    if (root != 0) stack.push_back({root, false, false, 0, 0});
    uint64_t nodes = 0;
    std::vector<uint8_t> n;
    while (!stack.empty()) {
      Item it = stack.back();
      stack.pop_back();
      if (++nodes > count) {
        return Status::Corruption(What() + ": more nodes than the count " + std::to_string(count));
      }
      ASYMNVM_RETURN_IF_ERROR(Fetch(it.ptr, kNodeMagic, kNodeBytes, &n));
      const uint64_t k = K(n);
      if ((it.has_lo && k <= it.lo) || (it.has_hi && k >= it.hi)) {
        return Status::Corruption(What() + ": key " + std::to_string(k) + " out of order");
      }
      ASYMNVM_RETURN_IF_ERROR(ReadValue(F(n, kVal), nullptr));
      if (F(n, kLeft) != 0) stack.push_back({F(n, kLeft), it.has_lo, true, it.lo, k});
      if (F(n, kRight) != 0) stack.push_back({F(n, kRight), true, it.has_hi, k, it.hi});
    }
    if (nodes != count) {
      return Status::Corruption(What() + ": " + std::to_string(nodes) + " nodes, count says " +
                                std::to_string(count));
    }
    return Status::Ok();
  }
};

}  // namespace

Result<std::unique_ptr<Map>> OpenMvBst(frontend::Session& s, const std::string& name, Options o) {
  if (o.key_size != 0 && o.access == Access::kWriter) {  // TODO(byte keys): being converted
    return Status::NotSupported(Describe(Kind::kMvBst, name) + ": byte-string keys not built yet");
  }
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st, Base::Resolve(s, Kind::kMvBst, name, &o, 0));
  auto h = std::make_unique<MvBst>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
