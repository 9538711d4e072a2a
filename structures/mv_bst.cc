// Multi-version binary search tree (papers/asymnvm-asplos20.txt §6.2; doc/structures.md "MV-BST").
//
// An unbalanced BST with path copying over the multi-version machinery of mv_common.h (anchor,
// tagged pointers, object header, value blocks, working version, publish, grace-period
// reclamation, validated lock-free readers: see there).
//
// PM layout of a node (48 B): +0 magic u32 "MVBN" | +4 checksum u32 | +8 version u64 | +16 key u64
// | +24 left ptr | +32 right ptr | +40 value ptr (a value block: header + value slot). Values live
// out of line so a path copy copies 48-byte nodes only.
//
// Put/Delete descend once (read-only, through the cache), validate (delete of a missing key →
// kNotFound), write the op log, then copy the path top-down into the working version (nodes
// already private are modified in place) and relink. Delete of a node with two children moves its
// successor's key and value into (the copy of) it and unlinks the successor. One update that would
// copy more than one publish holds (a degenerate path longer than ~750 nodes) fails with
// kResourceExhausted before its op log.
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
  static uint64_t F(const std::vector<uint8_t>& n, uint32_t off) { return GetU64(n.data() + off); }

  Status Descend(uint64_t key, std::vector<Step>* path, bool* found) {
    path->clear();
    *found = false;
    for (uint64_t cur = root_; cur != 0;) {
      if (path->size() > count_ + 64) return Status::Corruption(What() + ": path longer than the count");
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

  Status DoPut(uint64_t key, std::span<const uint8_t> value, bool replay) override {
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
      count_++;
    }
    return End(replay);
  }

  Status DoDelete(uint64_t key, bool replay) override {
    std::vector<Step> path;
    bool found;
    ASYMNVM_RETURN_IF_ERROR(Descend(key, &path, &found));
    if (!found) {
      if (replay) return Status::Ok();  // validated before its op log: cannot happen
      return Status::NotFound(What() + ": key " + std::to_string(key) + " not found");
    }
    const size_t t = path.size() - 1;
    const uint64_t l = F(path[t].n, kLeft), r = F(path[t].n, kRight);
    if (l != 0 && r != 0) {  // extend to the successor
      for (uint64_t cur = r; cur != 0;) {
        if (path.size() > count_ + 64) return Status::Corruption(What() + ": path longer than the count");
        Step s;
        s.ptr = cur;
        ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, kNodeBytes, &s.n));
        path.push_back(std::move(s));
        cur = F(path.back().n, kLeft);
      }
    }
    ASYMNVM_RETURN_IF_ERROR(Begin(kOpDelete, key, {}, Estimate(path.size(), false)));
    if (l == 0 || r == 0) {
      ASYMNVM_RETURN_IF_ERROR(OwnPrefix(path, t));
      ASYMNVM_RETURN_IF_ERROR(Relink(t == 0 ? 0 : path[t - 1].own, path[t].ptr, l != 0 ? l : r));
      ASYMNVM_RETURN_IF_ERROR(Retire(F(path[t].n, kVal)));
      ASYMNVM_RETURN_IF_ERROR(Retire(path[t].ptr));
    } else {
      const size_t s = path.size() - 1;
      ASYMNVM_RETURN_IF_ERROR(OwnPrefix(path, s));  // includes the target (t < s)
      uint8_t* tn = P(path[t].own);
      ASYMNVM_RETURN_IF_ERROR(Retire(GetU64(tn + kVal)));
      PutU64(tn + kKey, K(path[s].n));
      PutU64(tn + kVal, F(path[s].n, kVal));
      ASYMNVM_RETURN_IF_ERROR(Relink(path[s - 1].own, path[s].ptr, F(path[s].n, kRight)));
      ASYMNVM_RETURN_IF_ERROR(Retire(path[s].ptr));
    }
    count_--;
    return End(replay);
  }

  Status GetIn(uint64_t root, uint64_t count, uint64_t key, Value* value) override {
    std::vector<uint8_t> n;
    uint64_t steps = 0;
    for (uint64_t cur = root; cur != 0;) {
      if (++steps > count + 64) return writer() ? Status::Corruption(What() + ": cycle") : Restart("cycle");
      ASYMNVM_RETURN_IF_ERROR(Fetch(cur, kNodeMagic, kNodeBytes, &n));
      const uint64_t k = K(n);
      if (k == key) return ReadValue(F(n, kVal), value);
      cur = F(n, key < k ? kLeft : kRight);
    }
    return Status::NotFound(What() + ": key " + std::to_string(key) + " not found");
  }

  Status ScanIn(uint64_t root, uint64_t count, uint64_t from, size_t limit,
                std::vector<KeyValue>* out) override {
    if (limit == 0) return Status::Ok();
    std::vector<std::vector<uint8_t>> stack;
    uint64_t steps = 0;
    uint64_t cur = root;
    while (cur != 0 || !stack.empty()) {
      while (cur != 0) {
        if (++steps > 2 * count + 64) return writer() ? Status::Corruption(What() + ": cycle") : Restart("cycle");
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
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st, Base::Resolve(s, Kind::kMvBst, name, &o, 0));
  auto h = std::make_unique<MvBst>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
