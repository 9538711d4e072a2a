// Hash table (AsymNVM paper §8.2; doc/structures.md "Hash table").
//
// PM layout (little-endian):
//   Anchor (32 B, the root word points at it): magic u64 @0 | buckets u64 @8 (address of the
//     bucket array) | nbuckets u64 @16 (a power of two: Options::param, default 65536) |
//     count u64 @24.
//   Bucket array (nbuckets × u64, one Malloc at creation, zeroed before the anchor is
//     published): word b = address of the first node of chain b, 0 = empty chain.
//   Node (K + 8 + SlotBytes(value_size) B, K = KeySlotBytes(key_size): 8 for integer keys):
//     key slot @0 (u64, or u16 length | bytes padded to 8) | next u64 @K | value slot @K+8 (u32
//     length | bytes, padded to 8).
//   Key k lives in chain KeyHash(k) & (nbuckets − 1) (XXH3 64-bit of the 8 key bytes or of the
//   byte key, seed 0, common/checksum.h).
//
// Updates (one op log + one transaction each): a new key is pushed at the head of its chain (the
// node written whole, then the bucket word and the count); an update rewrites the value slot; a
// delete relinks the predecessor's next (or the bucket word), writes the count, and frees the node
// at once (the unlink is already in the batch; a reuse of the address is written after it).
//
// PutBatch is atomic: the sorted, de-duplicated pairs (the last of equal keys wins) are ONE op log
// of type 3 (the vector format of base.h) and ONE memory-log transaction — every new node, each
// touched bucket word once (its final head), every updated slot, then the count once — so a crash
// leaves all of the batch or none of it after Session::Replay. A batch whose writes exceed one
// transaction (Session::max_transaction_bytes) keeps its one op log and sends the writes in
// parts (Session::TxWritePart) that leave the op log uncovered by the OPN until the last one; a
// crash in between replays the whole batch, and the replay is idempotent over any applied prefix
// (keys found are rewritten in place, the count is written last). Readers may see such a large
// batch part by part; a batch within one transaction they see whole or not at all.
//
// §8.2 hot items cached per item: with Options::optimize the bucket words are read through 64-byte
// cache pages and nodes through pages of the node size rounded up to a power of two (64 B ..
// 4 KiB), so the rc/rcb cache holds the hot key-value items instead of whole 4 KiB pages of
// unrelated neighbours. Off: Structure::page_size pages (the session default). Scan is
// kNotSupported (unordered).
#include <algorithm>
#include <map>
#include <set>

#include "common/checksum.h"
#include "structures/base.h"
#include "structures/kinds.h"

namespace asymnvm::structures::internal {
namespace {

constexpr uint64_t kMagic = 0x485341484d564e41ull;  // "ANVMHASH"
constexpr uint64_t kBuckets = 8, kNBuckets = 16, kCount = 24, kAnchorBytes = 32;
constexpr uint64_t kDefaultBuckets = 65536, kMaxBuckets = 1ull << 26;
constexpr size_t kZeroChunk = 16 * 1024;  // bucket-array zeroing: bytes per transaction
constexpr uint32_t kBucketPage = 64;
constexpr uint32_t kWholeNodeRead = 512;  // Get reads the whole node when it is at most this

uint32_t ItemPage(uint64_t bytes) {
  uint32_t p = 64;
  while (p < bytes && p < 4096) p <<= 1;
  return p;
}

class HashTable final : public Map, public Base {
 public:
  HashTable(frontend::Session& s, frontend::Structure st, const Options& o)
      : Base(s, std::move(st), Kind::kHashTable, o) {
    next_off_ = kslot();
    slot_off_ = header_bytes_ = kslot() + 8;
    slot_bytes_ = SlotBytes(vsize());
    node_bytes_ = slot_off_ + slot_bytes_;
    node_page_ = ItemPage(node_bytes_);
  }

  Status Init() {
    ASYMNVM_RETURN_IF_ERROR(AcquireWriterLock());
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t root, s_.ReadWord(st_.root_addr));
    uint64_t mine = 0;
    if (root == 0 && writer()) {
      const uint64_t nb = opt_.param;
      ASYMNVM_ASSIGN_OR_RETURN(mine, s_.Malloc(nb * 8));
      std::vector<uint8_t> zero(std::min<uint64_t>(kZeroChunk, nb * 8), 0);
      size_t chunk = zero.size();
      for (uint64_t off = 0; off < nb * 8;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, nb * 8 - off));
        Status st = s_.Write(mine + off, std::span<const uint8_t>(zero.data(), n), &st_);
        if (st.code() == StatusCode::kResourceExhausted && chunk > 512) {
          chunk /= 2;  // the back-end takes smaller transactions
          continue;
        }
        ASYMNVM_RETURN_IF_ERROR(st);
        off += n;
      }
      uint8_t init[kAnchorBytes] = {};
      PutU64(init, kMagic);
      PutU64(init + kBuckets, mine);
      PutU64(init + kNBuckets, nb);
      ASYMNVM_ASSIGN_OR_RETURN(anchor_, EnsureAnchor(init));
    } else {
      ASYMNVM_ASSIGN_OR_RETURN(anchor_, EnsureAnchor({}));
    }
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status { return Read(anchor_, a); }));
    const std::string what = Describe(kind_, st_.name);
    if (GetU64(a) != kMagic) return Status::Corruption(what + ": anchor has a bad magic");
    buckets_ = GetU64(a + kBuckets);
    nbuckets_ = GetU64(a + kNBuckets);
    count_ = GetU64(a + kCount);
    if (mine != 0 && mine != buckets_) (void)s_.Free(mine);  // lost the creation race
    if (nbuckets_ == 0 || (nbuckets_ & (nbuckets_ - 1)) != 0 || nbuckets_ > kMaxBuckets ||
        !ValidAddr(buckets_, nbuckets_ * 8)) {
      return Status::Corruption(what + ": anchor has a bad bucket array (" +
                                std::to_string(nbuckets_) + " buckets at " +
                                std::to_string(buckets_) + ")");
    }
    return Status::Ok();
  }

  Status Refresh() override {
    ASYMNVM_ASSIGN_OR_RETURN(count_, ReadU64(anchor_ + kCount));
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
      uint64_t bound = count_;
      if (!writer()) {
        ASYMNVM_ASSIGN_OR_RETURN(bound, ReadU64(anchor_ + kCount));
      }
      Found f;
      ASYMNVM_RETURN_IF_ERROR(Find(key, bound, &f, value));
      if (f.node == 0) return NotFound(key);
      return Status::Ok();
    });
  }

  Status Delete(const Key& key) override {
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    return DoDelete(key, /*replay=*/false);
  }

  Status PutBatch(std::span<const KeyValue> kvs) override {
    return PutVectorAtomic(
        kvs,
        [this](std::span<const KeyValue> run, VectorPlan* plan) { return GatherBatch(run, plan); },
        [this](const KeyValue& kv) { return DoPut(kv.first, kv.second); });
  }

  Status Scan(const Key&, size_t, std::vector<KeyValue>*) override {
    return Status::NotSupported(Describe(kind_, st_.name) +
                                ": a hash table is unordered (no Scan)");
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
      uint8_t a[kAnchorBytes];
      ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a, /*cached=*/false));
      if (GetU64(a) != kMagic) return Status::Corruption(what + ": anchor magic");
      if (GetU64(a + kBuckets) != buckets_ || GetU64(a + kNBuckets) != nbuckets_) {
        return Status::Corruption(what + ": anchor bucket array changed");
      }
      const uint64_t count = GetU64(a + kCount);
      if (writer() && count != count_) {
        return Status::Corruption(what + ": anchor count " + std::to_string(count) +
                                  " differs from the writer's " + std::to_string(count_));
      }
      std::set<Key> keys;
      std::vector<uint8_t> words;
      std::vector<uint8_t> node(node_bytes_);
      uint64_t n = 0;
      constexpr uint64_t kChunkWords = 4096;
      for (uint64_t first = 0; first < nbuckets_; first += kChunkWords) {
        const uint64_t nw = std::min(kChunkWords, nbuckets_ - first);
        words.resize(nw * 8);
        ASYMNVM_RETURN_IF_ERROR(Read(buckets_ + first * 8, words, /*cached=*/false));
        for (uint64_t w = 0; w < nw; w++) {
          const uint64_t b = first + w;
          for (uint64_t at = GetU64(words.data() + w * 8); at != 0;
               at = GetU64(node.data() + next_off_)) {
            const std::string where =
                what + ": bucket " + std::to_string(b) + ": node " + std::to_string(at);
            if (++n > count) {
              return Status::Corruption(what + ": more nodes than the count " +
                                        std::to_string(count) + " (or a cycle)");
            }
            if (!ValidAddr(at, node_bytes_))
              return Status::Corruption(where + ": address outside the data area");
            ASYMNVM_RETURN_IF_ERROR(Read(at, node, /*cached=*/false));
            Key key;
            Status ks = LoadKey(node.data(), &key);
            if (!ks.ok()) return Status::Corruption(where + ": " + ks.message());
            if (Bucket(key) != b) {
              return Status::Corruption(where + ": key " + key.ToString() + " hashes to bucket " +
                                        std::to_string(Bucket(key)));
            }
            if (!keys.insert(key).second) {
              return Status::Corruption(where + ": duplicate key " + key.ToString());
            }
            Status st =
                DecodeSlot(std::span<const uint8_t>(node).subspan(slot_off_), vsize(), nullptr);
            if (!st.ok()) return Status::Corruption(where + ": " + st.message());
          }
        }
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
        [this](std::span<const KeyValue> run, VectorPlan* plan) { return GatherBatch(run, plan); },
        VectorGather{},
        [this](const Key& key, std::span<const uint8_t> value) { return DoPut(key, value); },
        [this](const Key& key) { return DoDelete(key, /*replay=*/true); });
  }

 private:
  // A chain position: the node holding the key (0: absent), its predecessor (0: the bucket word)
  // and successor, and the chain's first node.
  struct Found {
    uint64_t bucket = 0, head = 0, node = 0, prev = 0, next = 0;
  };

  uint64_t Bucket(const Key& key) const { return KeyHash(key) & (nbuckets_ - 1); }
  uint64_t BucketAddr(uint64_t b) const { return buckets_ + b * 8; }

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

  // §8.2: item-granularity cache pages when optimizing.
  Status ReadItem(uint64_t addr, std::span<uint8_t> out, uint32_t page) {
    if (opt_.optimize) return s_.Read(addr, out, page);
    return Read(addr, out);
  }

  // Walks the key's chain (at most `bound` + 64 nodes). With `value`, decodes the matching
  // node's value.
  Status Find(const Key& key, uint64_t bound, Found* f, Value* value) {
    f->bucket = Bucket(key);
    uint8_t w[8];
    ASYMNVM_RETURN_IF_ERROR(ReadItem(BucketAddr(f->bucket), w, kBucketPage));
    f->head = GetU64(w);
    const bool whole = value != nullptr && node_bytes_ <= kWholeNodeRead;
    std::vector<uint8_t> buf(whole ? node_bytes_ : header_bytes_);
    uint64_t steps = 0, prev = 0;
    for (uint64_t at = f->head; at != 0;) {
      if (++steps > bound + 64)
        return Torn("chain of bucket " + std::to_string(f->bucket) + " longer than the count");
      if (!ValidAddr(at, node_bytes_))
        return Torn("node address " + std::to_string(at) + " outside the data area");
      ASYMNVM_RETURN_IF_ERROR(ReadItem(at, buf, node_page_));
      Key k;
      Status ks = LoadKey(buf.data(), &k);
      if (!ks.ok()) return Torn("node " + std::to_string(at) + ": " + ks.message());
      const uint64_t next = GetU64(buf.data() + next_off_);
      if (k == key) {
        f->node = at;
        f->prev = prev;
        f->next = next;
        if (value != nullptr) {
          if (whole) {
            Status st =
                DecodeSlot(std::span<const uint8_t>(buf).subspan(slot_off_), vsize(), value);
            if (!st.ok()) return Torn(st.message());
          } else {
            std::vector<uint8_t> slot(slot_bytes_);
            ASYMNVM_RETURN_IF_ERROR(ReadItem(at + slot_off_, slot, node_page_));
            Status st = DecodeSlot(slot, vsize(), value);
            if (!st.ok()) return Torn(st.message());
          }
        }
        return Status::Ok();
      }
      if (Bucket(k) != f->bucket) return Torn("key " + k.ToString() + " in the wrong chain");
      prev = at;
      at = next;
    }
    f->node = 0;
    return Status::Ok();
  }

  Status DoPut(const Key& key, std::span<const uint8_t> value) {
    Found f;
    ASYMNVM_RETURN_IF_ERROR(Find(key, count_, &f, nullptr));
    const auto params = EncodeKeyValue(key, value);
    if (f.node != 0) {
      // Update in place: the value slot only (the whole slot).
      std::vector<uint8_t> slot(slot_bytes_);
      EncodeSlot(value, slot);
      return Update(
          kOpPut, params, [&]() -> Status { return Write(f.node + slot_off_, slot); },
          KeyValueValueOffset(key));
    }
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t node, s_.Malloc(node_bytes_));
    std::vector<uint8_t> buf(node_bytes_);
    StoreKey(key, buf.data());
    PutU64(buf.data() + next_off_, f.head);
    EncodeSlot(value, std::span<uint8_t>(buf).subspan(slot_off_));
    ASYMNVM_RETURN_IF_ERROR(Update(
        kOpPut, params,
        [&]() -> Status {
          ASYMNVM_RETURN_IF_ERROR(Write(node, buf));
          ASYMNVM_RETURN_IF_ERROR(WriteU64(BucketAddr(f.bucket), node));
          return WriteU64(anchor_ + kCount, count_ + 1);
        },
        KeyValueValueOffset(key)));
    count_++;
    return Status::Ok();
  }

  // The writes of a batch of distinct keys (reads only; new nodes allocated into plan->allocs):
  // an existing key's slot; a new key's node, chained in front of the bucket's head as it stands
  // after the batch's earlier new keys; then each touched bucket word and the count once.
  Status GatherBatch(std::span<const KeyValue> run, VectorPlan* plan) {
    std::map<uint64_t, uint64_t> heads;  // bucket -> its head after the batch
    uint64_t added = 0;
    // Replaying a batch whose first parts were applied: the chains may hold up to run.size()
    // nodes more than the (not yet written) count.
    const uint64_t bound = count_ + run.size();
    for (const auto& [key, value] : run) {
      Found f;
      ASYMNVM_RETURN_IF_ERROR(Find(key, bound, &f, nullptr));
      if (f.node != 0) {
        std::vector<uint8_t> slot(slot_bytes_);
        EncodeSlot(value, slot);
        plan->Add(f.node + slot_off_, std::move(slot));
        continue;
      }
      auto it = heads.emplace(f.bucket, f.head).first;
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t node, s_.Malloc(node_bytes_));
      plan->allocs.push_back(node);
      std::vector<uint8_t> buf(node_bytes_);
      StoreKey(key, buf.data());
      PutU64(buf.data() + next_off_, it->second);
      EncodeSlot(value, std::span<uint8_t>(buf).subspan(slot_off_));
      plan->Add(node, std::move(buf));
      it->second = node;
      added++;
    }
    for (const auto& [bucket, head] : heads) plan->AddU64(BucketAddr(bucket), head);
    if (added > 0) plan->AddU64(anchor_ + kCount, count_ + added);
    plan->commit = [this, added]() { count_ += added; };
    return Status::Ok();
  }

  Status DoDelete(const Key& key, bool replay) {
    Found f;
    ASYMNVM_RETURN_IF_ERROR(Find(key, count_, &f, nullptr));
    if (f.node == 0) return replay ? Status::Ok() : NotFound(key);
    ASYMNVM_RETURN_IF_ERROR(Update(kOpDelete, EncodeKeyValue(key, {}), [&]() -> Status {
      ASYMNVM_RETURN_IF_ERROR(
          WriteU64(f.prev == 0 ? BucketAddr(f.bucket) : f.prev + next_off_, f.next));
      return WriteU64(anchor_ + kCount, count_ - 1);
    }));
    count_--;
    return s_.Free(f.node);  // its unlink is already in the batch, ahead of any reuse
  }

  uint64_t next_off_ = 8, slot_off_ = 16,
           header_bytes_ = 16;  // node offsets (by the key slot's size)
  uint64_t anchor_ = 0, buckets_ = 0, nbuckets_ = 0;
  uint32_t slot_bytes_ = 0, node_bytes_ = 0, node_page_ = 0;
  uint64_t count_ = 0;  // the writer's view (it holds the lock); readers read the anchor
};

}  // namespace

Result<std::unique_ptr<Map>> OpenHashTable(frontend::Session& s, const std::string& name,
                                           Options o) {
  if (o.param != 0 && ((o.param & (o.param - 1)) != 0 || o.param > kMaxBuckets)) {
    return Status::InvalidArgument("hash table bucket count must be a power of two up to " +
                                   std::to_string(kMaxBuckets) + ", got " +
                                   std::to_string(o.param));
  }
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st,
                           Base::Resolve(s, Kind::kHashTable, name, &o, kDefaultBuckets));
  auto h = std::make_unique<HashTable>(s, std::move(st), o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Map>(std::move(h));
}

}  // namespace asymnvm::structures::internal
