// Skip list (AsymNVM paper §8.4; doc/structures.md "Skip list").
//
// PM layout (little-endian):
//   Anchor (32 + 8·max_level B, the root word points at it): magic u64 @0 | max_level u64 @8
//     (Options::param, default 20, 1..64) | count u64 @16 | level u64 @24 (number of non-empty
//     head lists, 0..max_level) | head next[max_level] u64 @32 (the head node lives in the anchor).
//   Node (K + 8 + 8·height + SlotBytes(value_size) B, K = KeySlotBytes(key_size): 8 for integer
//     keys): key slot @0 (u64, or u16 length | bytes padded to 8) | height u32 @K (1..max_level) |
//     magic u32 @K+4 | next[height] u64 @K+8 | value slot @K+8 + 8·height (u32 length | bytes,
//     padded to 8). The tower comes before the value so a traversal reads key and links in one
//     read.
//   Heights: p = 0.5, height = 1 + trailing one bits of splitmix64(k ^ seed), capped at
//   max_level, where k is the integer key or KeyHash of a byte key: deterministic per key, so a
//   replayed insert rebuilds the same tower.
//
// Updates (one op log + one transaction each): an insert Mallocs the node, writes it whole (its
// next pointers set), then links it bottom-up (level 0 first) and writes count + level once; an
// update rewrites the value slot; a delete unlinks at every level of its tower, writes count +
// level (shrunk while the top head list is empty), and frees the node at once (the unlink is
// already in the batch; a reuse of the address is written after it).
//
// §8.4 "cache nodes of higher levels" (the §8.3 threshold rule): with Options::optimize, nodes of
// height ≥ T are read through the cache and lower ones with one-sided READs that bypass it, so
// the rc/rcb cache holds the upper levels every search goes through. T starts at 2 (height-1
// nodes, half of all nodes, stay remote) and the writer adapts it every kAdaptOps searches from
// the session's cache miss ratio α over that window: α > 50% → T + 1 (cache less), α < 25% →
// T − 1 (cache more, down to 1 = everything). A search knows a node's height before reading it:
// a node first met at level i (0-based, below the top) has height exactly i + 1 (a taller one
// would have been met, and remembered, one level up). The anchor (head tower) is always cached.
// Off: everything through the cache.
#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <map>
#include <unordered_map>

#include "structures/base.h"
#include "structures/kinds.h"

namespace asymnvm::structures::internal {
namespace {

constexpr uint64_t kMagic = 0x4b534c534d564e41ull;  // "ANVMSLSK"
constexpr uint32_t kNodeMagic = 0x4c4b5350;         // "PSKL"
constexpr uint64_t kMaxLevel = 8, kCount = 16, kLevel = 24, kHead = 32;
constexpr uint64_t kDefaultMaxLevel = 20, kLevelCap = 64;
constexpr uint32_t kCachedHeight = 2;  // initial T
constexpr uint64_t kAdaptOps = 512;
constexpr uint64_t kHeightSeed = 0x9e3779b97f4a7c15ull;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class SkipList final : public Map, public Base {
 public:
  SkipList(frontend::Session& s, frontend::Structure st, const Options& o)
      : Base(s, std::move(st), Kind::kSkipList, o) {
    slot_bytes_ = SlotBytes(vsize());
    height_off_ = kslot();
    next_off_ = kslot() + 8;
    max_level_ = static_cast<uint32_t>(opt_.param);
    anchor_bytes_ = kHead + 8ull * max_level_;
    // Node-granular cache pages (a node of height 2, the common tall one, fits one page).
    if (opt_.optimize) st_.page_size = NodePageSize(next_off_ + 16 + slot_bytes_);
  }

  Status Init() {
    ASYMNVM_RETURN_IF_ERROR(AcquireWriterLock());
    std::vector<uint8_t> init(anchor_bytes_, 0);
    PutU64(init.data(), kMagic);
    PutU64(init.data() + kMaxLevel, max_level_);
    ASYMNVM_ASSIGN_OR_RETURN(anchor_, EnsureAnchor(init));
    std::vector<uint8_t> a(anchor_bytes_);
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status { return Read(anchor_, a); }));
    const std::string what = Describe(kind_, st_.name);
    if (GetU64(a.data()) != kMagic) return Status::Corruption(what + ": anchor has a bad magic");
    if (GetU64(a.data() + kMaxLevel) != max_level_) {
      return Status::Corruption(what + ": anchor max level " +
                                std::to_string(GetU64(a.data() + kMaxLevel)) +
                                " differs from the naming entry's " + std::to_string(max_level_));
    }
    count_ = GetU64(a.data() + kCount);
    level_ = GetU64(a.data() + kLevel);
    const frontend::Counters c = s_.counters();
    last_hits_ = c.cache_hits;
    last_misses_ = c.cache_misses;
    if (level_ > max_level_) return Status::Corruption(what + ": anchor level above max level");
    return Status::Ok();
  }

  Status Refresh() override {
    uint8_t a[kHead];
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status { return Read(anchor_, a); }));
    if (GetU64(a) != kMagic)
      return Status::Corruption(Describe(kind_, st_.name) + ": anchor has a bad magic");
    const uint64_t level = GetU64(a + kLevel);
    if (level > max_level_)
      return Status::Corruption(Describe(kind_, st_.name) + ": anchor level above max level");
    count_ = GetU64(a + kCount);
    level_ = level;
    return Status::Ok();
  }

  Kind kind() const override { return kind_; }
  const frontend::Structure& structure() const override { return st_; }
  uint32_t value_size() const override { return vsize(); }

  uint32_t key_size() const override { return ksize(); }

  Status Put(const Key& key, std::span<const uint8_t> value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    ASYMNVM_RETURN_IF_ERROR(CheckValue(value));
    return DoPut(key, value);
  }

  Status Get(const Key& key, Value* value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    return Query([&]() -> Status {
      Path p;
      ASYMNVM_RETURN_IF_ERROR(Search(key, &p));
      if (!p.found) return NotFound(key);
      return ReadValue(p.succ[0], p.found_height, value);
    });
  }

  Status Delete(const Key& key) override {
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    return DoDelete(key, /*replay=*/false);
  }

  Status PutBatch(std::span<const KeyValue> kvs) override {
    // Per pair at most its node written whole and one link word per level of its tower.
    return PutVector(
        kvs,
        [this](std::span<const KeyValue> run, VectorPlan* plan) { return GatherWalk(run, plan); },
        [this](const KeyValue& kv) -> size_t {
          const uint32_t h = Height(kv.first);
          return 16 + next_off_ + 8ull * h + slot_bytes_ + 24ull * h;
        });
  }

  Status DeleteBatch(std::span<const Key> keys, uint64_t* deleted) override {
    // Per key at most one link word per level of its tower (24 B each in the memory log).
    deleted_in_batch_ = 0;
    Status st = DeleteVector(
        keys,
        [this](std::span<const KeyValue> run, VectorPlan* plan) {
          return GatherDeleteWalk(run, plan);
        },
        [this](const KeyValue& kv) -> size_t { return 24ull * Height(kv.first) + 8; });
    if (deleted) *deleted = deleted_in_batch_;
    return st;
  }

  Status Scan(const Key& from, size_t limit, std::vector<KeyValue>* out) override {
    ASYMNVM_RETURN_IF_ERROR(CheckScanFrom(from));
    return Query([&]() -> Status {
      out->clear();
      if (limit == 0) return Status::Ok();
      Path p;
      ASYMNVM_RETURN_IF_ERROR(Search(from, &p));
      uint64_t at = p.succ[0], steps = 0;
      bool have_prev = false;
      Key prev_key;
      uint8_t hb[kMaxKeySlot + 16];
      const std::span<uint8_t> h(hb, next_off_ + 8);
      while (at != 0 && out->size() < limit) {
        if (++steps > p.count + 64) return Torn("level-0 list longer than the count");
        if (!ValidAddr(at, next_off_ + 8))
          return Torn("node address " + std::to_string(at) + " outside the data area");
        ASYMNVM_RETURN_IF_ERROR(Read(at, h, Cached(1)));
        Key k;
        const uint32_t height = GetU32(hb + height_off_);
        if (GetU32(hb + height_off_ + 4) != kNodeMagic || height == 0 || height > max_level_ ||
            !LoadKey(hb, &k).ok()) {
          return Torn("node " + std::to_string(at) + " has a bad header");
        }
        if (k < from || (have_prev && k <= prev_key)) return Torn("keys out of order");
        Value v;
        ASYMNVM_RETURN_IF_ERROR(ReadValue(at, height, &v));
        out->emplace_back(k, std::move(v));
        have_prev = true;
        prev_key = std::move(k);
        at = GetU64(hb + next_off_);
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

  Status Sync() override {
    if (!writer()) return Status::Ok();
    return SyncBase();
  }

  Status Verify() override {
    return Query([&]() -> Status {
      const std::string what = Describe(kind_, st_.name);
      std::vector<uint8_t> a(anchor_bytes_);
      ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a, /*cached=*/false));
      if (GetU64(a.data()) != kMagic) return Status::Corruption(what + ": anchor magic");
      if (GetU64(a.data() + kMaxLevel) != max_level_)
        return Status::Corruption(what + ": anchor max level");
      const uint64_t count = GetU64(a.data() + kCount), level = GetU64(a.data() + kLevel);
      if (writer() && (count != count_ || level != level_)) {
        return Status::Corruption(what + ": anchor count/level " + std::to_string(count) + "/" +
                                  std::to_string(level) + " differ from the writer's " +
                                  std::to_string(count_) + "/" + std::to_string(level_));
      }
      if (level > max_level_) return Status::Corruption(what + ": level above max level");
      auto head = [&](uint64_t i) { return GetU64(a.data() + kHead + 8 * i); };
      for (uint64_t i = level; i < max_level_; i++) {
        if (head(i) != 0)
          return Status::Corruption(what + ": head list " + std::to_string(i) +
                                    " above the level is not empty");
      }
      if (level > 0 && head(level - 1) == 0)
        return Status::Corruption(what + ": top head list is empty");
      // Level 0: every node, in key order.
      struct NodeInfo {
        Key key;
        uint32_t height;
        std::vector<uint64_t> next;
      };
      std::unordered_map<uint64_t, NodeInfo> nodes;
      std::vector<uint64_t> per_level(max_level_, 0);
      uint64_t n = 0;
      Key prev_key;
      for (uint64_t at = head(0); at != 0; n++) {
        const std::string where =
            what + ": node " + std::to_string(n) + " at " + std::to_string(at);
        if (n >= count)
          return Status::Corruption(what + ": more nodes than the count " + std::to_string(count) +
                                    " (or a cycle)");
        if (!ValidAddr(at, next_off_ + 8))
          return Status::Corruption(where + ": address outside the data area");
        uint8_t h[kMaxKeySlot + 8];
        ASYMNVM_RETURN_IF_ERROR(Read(at, std::span<uint8_t>(h, next_off_), false));
        const uint32_t height = GetU32(h + height_off_);
        if (GetU32(h + height_off_ + 4) != kNodeMagic)
          return Status::Corruption(where + ": node magic");
        if (height == 0 || height > level) {
          return Status::Corruption(where + ": height " + std::to_string(height) + " outside 1.." +
                                    std::to_string(level));
        }
        Key key;
        Status ks = LoadKey(h, &key);
        if (!ks.ok()) return Status::Corruption(where + ": " + ks.message());
        if (height != Height(key)) {
          return Status::Corruption(where + ": height " + std::to_string(height) +
                                    " is not the key's " + std::to_string(Height(key)));
        }
        if (n > 0 && key <= prev_key)
          return Status::Corruption(where + ": key " + key.ToString() + " out of order");
        std::vector<uint8_t> rest(8ull * height + slot_bytes_);
        ASYMNVM_RETURN_IF_ERROR(Read(at + next_off_, rest, false));
        Status st =
            DecodeSlot(std::span<const uint8_t>(rest).subspan(8ull * height), vsize(), nullptr);
        if (!st.ok()) return Status::Corruption(where + ": " + st.message());
        NodeInfo info{key, height, std::vector<uint64_t>(height)};
        for (uint32_t i = 0; i < height; i++) info.next[i] = GetU64(rest.data() + 8 * i);
        for (uint32_t i = 0; i < height; i++) per_level[i]++;
        prev_key = key;
        const uint64_t next = info.next[0];
        if (!nodes.emplace(at, std::move(info)).second)
          return Status::Corruption(where + ": visited twice");
        at = next;
      }
      if (n != count) {
        return Status::Corruption(what + ": " + std::to_string(n) + " nodes, count says " +
                                  std::to_string(count));
      }
      // Every upper list links exactly the nodes of at least that height, in order.
      for (uint32_t i = 1; i < level; i++) {
        uint64_t m = 0;
        for (uint64_t at = head(i); at != 0; m++) {
          auto it = nodes.find(at);
          if (it == nodes.end()) {
            return Status::Corruption(what + ": list " + std::to_string(i) + " links " +
                                      std::to_string(at) + ", not a level-0 node");
          }
          if (it->second.height <= i || m >= per_level[i]) {
            return Status::Corruption(what + ": list " + std::to_string(i) + " links node " +
                                      it->second.key.ToString() + " of height " +
                                      std::to_string(it->second.height) + " (or too many nodes)");
          }
          const uint64_t next = it->second.next[i];
          if (next != 0) {
            auto nx = nodes.find(next);
            if (nx == nodes.end() || nx->second.key <= it->second.key) {
              return Status::Corruption(what + ": list " + std::to_string(i) +
                                        " out of order after key " + it->second.key.ToString());
            }
          }
          at = next;
        }
        if (m != per_level[i]) {
          return Status::Corruption(what + ": list " + std::to_string(i) + " has " +
                                    std::to_string(m) + " nodes, " + std::to_string(per_level[i]) +
                                    " are that tall");
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
  // A search result: at each level i, the last node with key < target (0 = the head) and its
  // successor; the head tower as read; whether succ[0] holds the key.
  struct Path {
    std::array<uint64_t, kLevelCap> pred{}, succ{}, head{};
    uint64_t count = 0, level = 0;
    bool found = false;
    uint32_t found_height = 0;
  };

  uint32_t Height(const Key& key) const {
    const uint64_t k = key.is_int() ? key.u64() : KeyHash(key);
    const uint32_t h = 1 + static_cast<uint32_t>(std::countr_one(SplitMix64(k ^ kHeightSeed)));
    return std::min(h, max_level_);
  }
  // §8.4: a node of this height is read through the cache.
  bool Cached(uint32_t height) const { return !opt_.optimize || height >= cache_height_; }

  // The §8.3 rule for T, on the writer's cache miss ratio over the last kAdaptOps searches.
  void Adapt() {
    if (!writer() || !opt_.optimize || ++searches_ % kAdaptOps != 0) return;
    const frontend::Counters c = s_.counters();
    const uint64_t hits = c.cache_hits - last_hits_, misses = c.cache_misses - last_misses_;
    last_hits_ = c.cache_hits;
    last_misses_ = c.cache_misses;
    if (hits + misses == 0) return;  // no cache at this level
    if (misses * 2 > hits + misses) {
      cache_height_ = std::min(cache_height_ + 1, max_level_ + 1);
    } else if (misses * 4 < hits + misses && cache_height_ > 1) {
      cache_height_--;
    }
  }

  uint64_t NextAddr(uint64_t node, uint32_t i) const {
    return node == 0 ? anchor_ + kHead + 8ull * i : node + next_off_ + 8ull * i;
  }

  bool ValidAddr(uint64_t addr, uint64_t len) const {
    return addr != 0 && addr % 8 == 0 && addr >= s_.data_begin() && addr + len <= s_.data_end() &&
           addr + len > addr;
  }

  Status Torn(const std::string& msg) const {
    const std::string what = Describe(kind_, st_.name) + ": " + msg;
    if (writer()) return Status::Corruption(what);
    return Status::Aborted(what + " (torn read)");
  }

  Status NotFound(const Key& key) const {
    return Status::NotFound(Describe(kind_, st_.name) + ": key " + key.ToString() + " not found");
  }

  Status ReadValue(uint64_t node, uint32_t height, Value* value) {
    std::vector<uint8_t> slot(slot_bytes_);
    ASYMNVM_RETURN_IF_ERROR(Read(node + next_off_ + 8ull * height, slot, Cached(height)));
    Status st = DecodeSlot(slot, vsize(), value);
    if (!st.ok()) return Torn(st.message());
    return Status::Ok();
  }

  // Top-down search for `key`. Reads the anchor (count, level, head tower) first; every node is
  // read once (16 + 8·(i+1) bytes when first met at level i).
  Status Search(const Key& key, Path* p) {
    Adapt();
    std::vector<uint8_t> a(anchor_bytes_ - kCount);
    ASYMNVM_RETURN_IF_ERROR(Read(anchor_ + kCount, a));
    p->count = GetU64(a.data());
    p->level = GetU64(a.data() + (kLevel - kCount));
    if (p->level > max_level_) return Torn("anchor level above max level");
    for (uint32_t i = 0; i < max_level_; i++)
      p->head[i] = GetU64(a.data() + (kHead - kCount) + 8ull * i);
    const uint64_t bound = p->count + 64;
    // The current node x (0 = head) and its links; the node the previous level stopped at (brk:
    // usually the successor at this level too, so it is not read again).
    struct View {
      uint64_t addr = 0;
      Key key;
      uint32_t height = 0;
      std::array<uint64_t, kLevelCap> next{};
    };
    View x, brk, cur;
    x.next = p->head;
    uint8_t buf[kMaxKeySlot + 8 + 8 * kLevelCap];
    uint64_t steps = 0;
    p->found = false;
    for (int i = static_cast<int>(p->level) - 1; i >= 0; i--) {
      uint64_t y = 0;
      for (;;) {
        y = x.next[i];
        if (y == 0) break;
        if (y == brk.addr) {
          cur = brk;
        } else {
          if (++steps > bound) return Torn("search longer than the count");
          const uint64_t len = next_off_ + 8ull * (i + 1);
          if (!ValidAddr(y, len))
            return Torn("node address " + std::to_string(y) + " outside the data area");
          // First met at level i: its height is i + 1, unless at the top level (or torn).
          const bool top = i + 1 == static_cast<int>(p->level);
          ASYMNVM_RETURN_IF_ERROR(Read(y, std::span<uint8_t>(buf, len), top || Cached(i + 1)));
          cur.addr = y;
          cur.height = GetU32(buf + height_off_);
          if (GetU32(buf + height_off_ + 4) != kNodeMagic ||
              cur.height <= static_cast<uint32_t>(i) || cur.height > max_level_ ||
              !LoadKey(buf, &cur.key).ok()) {
            return Torn("node " + std::to_string(y) + " has a bad header");
          }
          for (int j = 0; j <= i; j++) cur.next[j] = GetU64(buf + next_off_ + 8 * j);
        }
        if (x.addr != 0 && cur.key <= x.key) return Torn("keys out of order");
        if (cur.key >= key) {
          brk = cur;
          break;
        }
        x = cur;
      }
      p->pred[i] = x.addr;
      p->succ[i] = y;
    }
    if (p->level > 0 && p->succ[0] != 0 && p->succ[0] == brk.addr && brk.key == key) {
      p->found = true;
      p->found_height = brk.height;
    }
    return Status::Ok();
  }

  Status DoPut(const Key& key, std::span<const uint8_t> value) {
    Path p;
    ASYMNVM_RETURN_IF_ERROR(Search(key, &p));
    const auto params = EncodeKeyValue(key, value);
    std::vector<uint8_t> slot(slot_bytes_);
    EncodeSlot(value, slot);
    if (p.found) {
      // The whole slot: a batch coalesces same-(addr, len) writes at the first one's position.
      const uint64_t at = p.succ[0] + next_off_ + 8ull * p.found_height;
      return Update(
          kOpPut, params, [&]() -> Status { return Write(at, slot); }, KeyValueValueOffset(key));
    }
    const uint32_t height = Height(key);
    const uint64_t node_bytes = next_off_ + 8ull * height + slot_bytes_;
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t node, s_.Malloc(node_bytes));
    std::vector<uint8_t> buf(node_bytes);
    StoreKey(key, buf.data());
    PutU32(buf.data() + height_off_, height);
    PutU32(buf.data() + height_off_ + 4, kNodeMagic);
    for (uint32_t i = 0; i < height; i++) {
      PutU64(buf.data() + next_off_ + 8 * i, i < p.level ? p.succ[i] : 0);
    }
    std::memcpy(buf.data() + next_off_ + 8ull * height, slot.data(), slot_bytes_);
    const uint64_t new_level = std::max<uint64_t>(level_, height);
    ASYMNVM_RETURN_IF_ERROR(Update(
        kOpPut, params,
        [&]() -> Status {
          // The node is complete before anything points at it; then link bottom-up.
          ASYMNVM_RETURN_IF_ERROR(Write(node, buf));
          for (uint32_t i = 0; i < height; i++) {
            ASYMNVM_RETURN_IF_ERROR(WriteU64(NextAddr(i < p.level ? p.pred[i] : 0, i), node));
          }
          return WriteCountLevel(count_ + 1, new_level);
        },
        KeyValueValueOffset(key)));
    count_++;
    level_ = new_level;
    return Status::Ok();
  }

  Status DoDelete(const Key& key, bool replay) {
    Path p;
    ASYMNVM_RETURN_IF_ERROR(Search(key, &p));
    if (!p.found) return replay ? Status::Ok() : NotFound(key);
    const uint64_t node = p.succ[0];
    const uint32_t height = p.found_height;
    std::vector<uint8_t> links(8ull * height);
    ASYMNVM_RETURN_IF_ERROR(Read(node + next_off_, links, Cached(height)));
    std::array<uint64_t, kLevelCap> head = p.head;
    for (uint32_t i = 0; i < height; i++) {
      if (p.succ[i] != node) {
        return Status::Corruption(Describe(kind_, st_.name) + ": node of key " + key.ToString() +
                                  " is not linked at level " + std::to_string(i));
      }
      if (p.pred[i] == 0) head[i] = GetU64(links.data() + 8 * i);
    }
    uint64_t new_level = level_;
    while (new_level > 0 && head[new_level - 1] == 0) new_level--;
    ASYMNVM_RETURN_IF_ERROR(Update(kOpDelete, EncodeKeyValue(key, {}), [&]() -> Status {
      for (int i = static_cast<int>(height) - 1; i >= 0; i--) {
        ASYMNVM_RETURN_IF_ERROR(WriteU64(NextAddr(p.pred[i], i), GetU64(links.data() + 8 * i)));
      }
      return WriteCountLevel(count_ - 1, new_level);
    }));
    count_--;
    level_ = new_level;
    return s_.Free(node);  // its unlink is already in the batch, ahead of any reuse
  }

  // ---- vector put (doc/structures.md "Vector operations") ----
  // One walk over the sorted run: the predecessor array of a key is the start of the next key's
  // search (at each level the further of the previous predecessor and the node the level above
  // stopped at), so every node is read at most once per vector. Links are kept in DRAM (a new
  // node becomes the predecessor at each level of its tower); at the end every new node is
  // written whole and every changed link word once (last value).
  // The walk reads each node once for many keys, so its cache hits and misses are kept out of
  // the §8.4 window that tunes T for per-key searches.
  Status GatherWalk(std::span<const KeyValue> run, VectorPlan* plan) {
    return OutsideAdaptWindow([&] { return GatherVector(run, plan); });
  }
  // Runs a vector walk with its cache hits and misses kept out of the §8.4 window.
  Status OutsideAdaptWindow(const std::function<Status()>& walk) {
    const frontend::Counters before = s_.counters();
    Status st = walk();
    const frontend::Counters after = s_.counters();
    last_hits_ += after.cache_hits - before.cache_hits;
    last_misses_ += after.cache_misses - before.cache_misses;
    return st;
  }

  Status GatherVector(std::span<const KeyValue> run, VectorPlan* plan) {
    struct View {
      Key key;
      uint32_t height = 0;
      uint32_t known = 0;  // next[0..known) read (or, for new nodes, all of height)
      std::array<uint64_t, kLevelCap> next{};
      bool fresh = false;
      const Value* value = nullptr;
    };
    std::unordered_map<uint64_t, View> nodes;  // 0 = the head
    std::vector<uint8_t> a(anchor_bytes_ - kHead);
    ASYMNVM_RETURN_IF_ERROR(Read(anchor_ + kHead, a));
    View& head = nodes[0];
    head.height = head.known = max_level_;
    for (uint32_t i = 0; i < max_level_; i++) head.next[i] = GetU64(a.data() + 8ull * i);
    std::map<std::pair<uint64_t, uint32_t>, uint64_t>
        links;  // changed words of existing nodes / head
    std::vector<uint64_t> fresh_order;
    std::array<uint64_t, kLevelCap> pred{};  // all head
    uint64_t level = level_, added = 0, steps = 0;
    const uint64_t bound = (count_ + 64) * 4 + run.size();
    // The node y met at level i (read when not known yet: first met at level i, height i + 1
    // unless at the top).
    auto view = [&](uint64_t y, int i) -> Result<View*> {
      auto it = nodes.find(y);
      if (it != nodes.end()) {
        if (static_cast<int>(it->second.known) <= i)
          return Torn("node " + std::to_string(y) + " met above its tower");
        return &it->second;
      }
      if (++steps > bound) return Torn("vector walk longer than the count");
      const uint64_t len = next_off_ + 8ull * (i + 1);
      if (!ValidAddr(y, len))
        return Torn("node address " + std::to_string(y) + " outside the data area");
      uint8_t buf[kMaxKeySlot + 8 + 8 * kLevelCap];
      const bool top = i + 1 == static_cast<int>(level);
      ASYMNVM_RETURN_IF_ERROR(Read(y, std::span<uint8_t>(buf, len), top || Cached(i + 1)));
      View v;
      v.height = GetU32(buf + height_off_);
      if (GetU32(buf + height_off_ + 4) != kNodeMagic || v.height <= static_cast<uint32_t>(i) ||
          v.height > max_level_ || !LoadKey(buf, &v.key).ok()) {
        return Torn("node " + std::to_string(y) + " has a bad header");
      }
      v.known = static_cast<uint32_t>(i + 1);
      for (int j = 0; j <= i; j++) v.next[j] = GetU64(buf + next_off_ + 8 * j);
      return &nodes.emplace(y, v).first->second;
    };
    for (const KeyValue& kv : run) {
      const uint32_t h = Height(kv.first);
      uint64_t x = 0;  // the node the level above stopped at
      uint64_t found = 0;
      for (int i = static_cast<int>(std::max<uint64_t>(level, h)) - 1; i >= 0; i--) {
        if (pred[i] != 0 && (x == 0 || nodes.at(pred[i]).key > nodes.at(x).key)) x = pred[i];
        for (;;) {
          const uint64_t y = nodes.at(x).next[i];
          if (y == 0) break;
          ASYMNVM_ASSIGN_OR_RETURN(View * vy, view(y, i));
          if (x != 0 && vy->key <= nodes.at(x).key) return Torn("keys out of order");
          if (vy->key >= kv.first) {
            if (i == 0 && vy->key == kv.first) found = y;
            break;
          }
          x = y;
        }
        pred[i] = x;
      }
      if (found != 0) {  // the whole slot, like Put
        const View& f = nodes.at(found);
        std::vector<uint8_t> slot(slot_bytes_);
        EncodeSlot(kv.second, slot);
        plan->Add(found + next_off_ + 8ull * f.height, std::move(slot));
        continue;
      }
      const uint64_t node_bytes = next_off_ + 8ull * h + slot_bytes_;
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t node, s_.Malloc(node_bytes));
      plan->allocs.push_back(node);
      View nv;
      nv.key = kv.first;
      nv.height = nv.known = h;
      nv.fresh = true;
      nv.value = &kv.second;
      for (uint32_t i = 0; i < h; i++) {
        View& p = nodes.at(pred[i]);
        nv.next[i] = p.next[i];
        p.next[i] = node;
        if (!p.fresh) links[{pred[i], i}] = node;
        pred[i] = node;
      }
      nodes.emplace(node, nv);
      fresh_order.push_back(node);
      level = std::max<uint64_t>(level, h);
      added++;
    }
    for (uint64_t node : fresh_order) {
      const View& v = nodes.at(node);
      std::vector<uint8_t> buf(next_off_ + 8ull * v.height + slot_bytes_);
      StoreKey(v.key, buf.data());
      PutU32(buf.data() + height_off_, v.height);
      PutU32(buf.data() + height_off_ + 4, kNodeMagic);
      for (uint32_t i = 0; i < v.height; i++) PutU64(buf.data() + next_off_ + 8 * i, v.next[i]);
      EncodeSlot(*v.value, std::span<uint8_t>(buf).subspan(next_off_ + 8ull * v.height));
      plan->Add(node, std::move(buf));
    }
    for (const auto& [word, to] : links) plan->AddU64(NextAddr(word.first, word.second), to);
    if (added > 0) {
      std::vector<uint8_t> w(16);
      PutU64(w.data(), count_ + added);
      PutU64(w.data() + 8, level);
      plan->Add(anchor_ + kCount, std::move(w));
    }
    plan->commit = [this, added, level]() {
      count_ += added;
      level_ = level;
    };
    return Status::Ok();
  }

  // A vector delete: one walk over the sorted keys, as GatherVector's. A found node's whole tower
  // is read (the walk may have met it below its top); at each of its levels its predecessor's link
  // (in DRAM, so a run of adjacent deletions chains through) skips it. At the end every changed
  // link word is written once, then count and level (shrunk while the top head list is empty);
  // the nodes are freed after the transaction. Keys not found are skipped (a replay of a run
  // applied before the crash finds none of them).
  Status GatherDeleteWalk(std::span<const KeyValue> run, VectorPlan* plan) {
    return OutsideAdaptWindow([&] { return GatherDeleteVector(run, plan); });
  }

  Status GatherDeleteVector(std::span<const KeyValue> run, VectorPlan* plan) {
    struct View {
      Key key;
      uint32_t height = 0;
      uint32_t known = 0;  // next[0..known) read
      std::array<uint64_t, kLevelCap> next{};
    };
    std::unordered_map<uint64_t, View> nodes;  // 0 = the head
    std::vector<uint8_t> a(anchor_bytes_ - kHead);
    ASYMNVM_RETURN_IF_ERROR(Read(anchor_ + kHead, a));
    View& head = nodes[0];
    head.height = head.known = max_level_;
    for (uint32_t i = 0; i < max_level_; i++) head.next[i] = GetU64(a.data() + 8ull * i);
    std::map<std::pair<uint64_t, uint32_t>, uint64_t> links;  // changed words -> new target
    std::array<uint64_t, kLevelCap> pred{};                   // all head
    uint64_t removed = 0, steps = 0;
    const uint64_t bound = (count_ + 64) * 4 + run.size();
    // Reads node y met at level i when not known yet, at least up to level `upto` (exclusive).
    auto view = [&](uint64_t y, uint32_t upto) -> Result<View*> {
      auto it = nodes.find(y);
      if (it != nodes.end() && it->second.known >= upto) return &it->second;
      if (++steps > bound) return Torn("vector walk longer than the count");
      const uint64_t len = next_off_ + 8ull * upto;
      if (!ValidAddr(y, len))
        return Torn("node address " + std::to_string(y) + " outside the data area");
      uint8_t buf[kMaxKeySlot + 8 + 8 * kLevelCap];
      ASYMNVM_RETURN_IF_ERROR(Read(y, std::span<uint8_t>(buf, len), Cached(upto)));
      View v;
      v.height = GetU32(buf + height_off_);
      if (GetU32(buf + height_off_ + 4) != kNodeMagic || v.height < upto || v.height > max_level_ ||
          !LoadKey(buf, &v.key).ok()) {
        return Torn("node " + std::to_string(y) + " has a bad header");
      }
      v.known = upto;
      for (uint32_t j = 0; j < upto; j++) v.next[j] = GetU64(buf + next_off_ + 8 * j);
      if (it != nodes.end()) {  // keep links already rewritten in DRAM
        for (uint32_t j = 0; j < it->second.known; j++) v.next[j] = it->second.next[j];
        it->second = v;
        return &it->second;
      }
      return &nodes.emplace(y, v).first->second;
    };
    for (const KeyValue& kv : run) {
      uint64_t found = 0;
      for (int i = static_cast<int>(level_) - 1; i >= 0; i--) {
        uint64_t x = pred[i];
        for (;;) {
          const uint64_t y = nodes.at(x).next[i];
          if (y == 0) break;
          ASYMNVM_ASSIGN_OR_RETURN(View * vy, view(y, static_cast<uint32_t>(i) + 1));
          if (x != 0 && vy->key <= nodes.at(x).key) return Torn("keys out of order");
          if (vy->key >= kv.first) {
            if (i == 0 && vy->key == kv.first) found = y;
            break;
          }
          x = y;
        }
        pred[i] = x;
        // The next key's search starts no earlier at the levels below.
        for (int j = i - 1; j >= 0; j--) {
          if (pred[j] == 0 || (x != 0 && nodes.at(x).key > nodes.at(pred[j]).key)) pred[j] = x;
        }
      }
      if (found == 0) continue;
      ASYMNVM_ASSIGN_OR_RETURN(View * f, view(found, nodes.at(found).height));
      const uint32_t h = f->height;
      for (uint32_t i = 0; i < h; i++) {
        View& p = nodes.at(pred[i]);
        if (p.next[i] != found) {
          return Torn("node of key " + kv.first.ToString() + " is not linked at level " +
                      std::to_string(i));
        }
        p.next[i] = f->next[i];
        links[{pred[i], i}] = f->next[i];
      }
      plan->frees.push_back(found);
      removed++;
    }
    if (removed == 0) return Status::Ok();
    for (const auto& [word, to] : links) plan->AddU64(NextAddr(word.first, word.second), to);
    uint64_t level = level_;
    while (level > 0 && nodes.at(0).next[level - 1] == 0) level--;
    std::vector<uint8_t> w(16);
    PutU64(w.data(), count_ - removed);
    PutU64(w.data() + 8, level);
    plan->Add(anchor_ + kCount, std::move(w));
    plan->commit = [this, removed, level]() {
      count_ -= removed;
      level_ = level;
      deleted_in_batch_ += removed;
    };
    return Status::Ok();
  }

  Status WriteCountLevel(uint64_t count, uint64_t level) {
    uint8_t w[16];
    PutU64(w, count);
    PutU64(w + 8, level);
    return Write(anchor_ + kCount, w);
  }

  uint64_t anchor_ = 0, anchor_bytes_ = 0;
  uint32_t max_level_ = 0, slot_bytes_ = 0;
  uint64_t height_off_ = 8, next_off_ = 16;  // node offsets (by the key slot's size)
  uint64_t deleted_in_batch_ = 0;            // DeleteBatch: keys its applied runs removed
  // The writer's view of the anchor (it holds the lock); readers read it in each query.
  uint64_t count_ = 0, level_ = 0;
  // §8.4 caching threshold T and its adaptation window.
  uint32_t cache_height_ = kCachedHeight;
  uint64_t searches_ = 0, last_hits_ = 0, last_misses_ = 0;
};

}  // namespace

Result<std::unique_ptr<Map>> OpenSkipList(frontend::Session& s, const std::string& name,
                                          Options o) {
  if (o.param > kLevelCap) {
    return Status::InvalidArgument("skip list max level must be 1.." + std::to_string(kLevelCap) +
                                   ", got " + std::to_string(o.param));
  }
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st,
                           Base::Resolve(s, Kind::kSkipList, name, &o, kDefaultMaxLevel));
  if (o.param == 0 || o.param > kLevelCap) {
    return Status::Corruption(Describe(Kind::kSkipList, name) + ": naming entry has max level " +
                              std::to_string(o.param));
  }
  auto h = std::make_unique<SkipList>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
