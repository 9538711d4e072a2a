// Partitioned maps (include/asymnvm/structures/partitioned.h, doc/structures.md §Partitioning).
#include "asymnvm/structures/partitioned.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/checksum.h"
#include "common/logging.h"

namespace asymnvm::structures {
namespace {

constexpr uint64_t kMapMagic = 0x3150414D50595341ULL;  // "ASYPMAP1" little-endian
constexpr uint32_t kMapVersion = 1;
constexpr uint64_t kPartitionSeed = 0x41534E5650415254ULL;  // "TRAPVNSA": not the bucket hash's 0
constexpr size_t kMapHeader = 64;

size_t MapBytes(uint32_t partitions) { return kMapHeader + 16ull * partitions + 4; }

// The partition map block. Layout (little-endian; doc/structures.md §Partitioning):
//   0 u64 magic | 8 u32 version | 12 u32 kind | 16 u32 partitions | 20 u32 value_size |
//   24 u64 param | 32 u64 partition hash seed | 40 u32 key_size (0: integer keys; maps written
//   before byte keys have 0 there) | 44..63 zero | 64 partitions × 16 B pool uuid |
//   crc32c u32 of everything before it.
struct PartitionMap {
  Kind kind{};
  uint32_t value_size = 0;
  uint64_t param = 0;
  uint32_t key_size = 0;
  std::vector<std::array<uint8_t, 16>> uuids;

  std::vector<uint8_t> Encode() const {
    const uint32_t n = static_cast<uint32_t>(uuids.size());
    std::vector<uint8_t> b(MapBytes(n), 0);
    auto put32 = [&](size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); };
    auto put64 = [&](size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); };
    put64(0, kMapMagic);
    put32(8, kMapVersion);
    put32(12, static_cast<uint32_t>(kind));
    put32(16, n);
    put32(20, value_size);
    put64(24, param);
    put64(32, kPartitionSeed);
    put32(40, key_size);
    for (uint32_t i = 0; i < n; i++)
      std::memcpy(b.data() + kMapHeader + 16 * i, uuids[i].data(), 16);
    put32(b.size() - 4, Crc32c(b.data(), b.size() - 4));
    return b;
  }
};

uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Reads and validates the map block at `addr` of `s`.
Result<PartitionMap> ReadMap(frontend::Session& s, uint64_t addr, const std::string& where) {
  uint8_t head[kMapHeader];
  ASYMNVM_RETURN_IF_ERROR(s.ReadRemote(addr, head));
  const uint32_t n = Get32(head + 16);
  if (Get64(head) != kMapMagic || Get32(head + 8) != kMapVersion || n == 0 || n > kMaxPartitions) {
    return Status::Corruption(where + ": partition map at " + std::to_string(addr) +
                              " has a bad header (magic, version or partition count)");
  }
  std::vector<uint8_t> b(MapBytes(n));
  ASYMNVM_RETURN_IF_ERROR(s.ReadRemote(addr, b));
  if (Crc32c(b.data(), b.size() - 4) != Get32(b.data() + b.size() - 4) ||
      Get64(b.data() + 32) != kPartitionSeed) {
    return Status::Corruption(where + ": partition map at " + std::to_string(addr) +
                              " fails its checksum");
  }
  PartitionMap m;
  m.kind = static_cast<Kind>(Get32(b.data() + 12));
  m.value_size = Get32(b.data() + 20);
  m.param = Get64(b.data() + 24);
  m.key_size = Get32(b.data() + 40);
  if (m.key_size > kMaxKeySize) {
    return Status::Corruption(where + ": partition map at " + std::to_string(addr) +
                              " has key size " + std::to_string(m.key_size));
  }
  m.uuids.resize(n);
  for (uint32_t i = 0; i < n; i++)
    std::memcpy(m.uuids[i].data(), b.data() + kMapHeader + 16 * i, 16);
  return m;
}

std::string PartName(const std::string& name, uint32_t i) { return name + "#" + std::to_string(i); }

class PartitionedMap final : public Map, public frontend::Cluster::Member {
 public:
  PartitionedMap(frontend::Cluster& c, std::string name, frontend::Structure entry,
                 PartitionMap map, std::vector<size_t> where, Options o)
      : c_(c),
        name_(std::move(name)),
        entry_(std::move(entry)),
        map_(std::move(map)),
        where_(std::move(where)),
        o_(o),
        parts_(where_.size()) {
    c_.AddMember(this);
  }
  ~PartitionedMap() override {
    parts_.clear();  // each partition syncs and unlocks
    c_.RemoveMember(this);
  }

  // Opens every partition not open yet on back-end `only` (or on all).
  Status OpenParts(std::optional<size_t> only) {
    for (uint32_t i = 0; i < where_.size(); i++) {
      if (parts_[i] || (only && where_[i] != *only)) continue;
      frontend::Session& s = c_.session(where_[i]);
      RegisterReplays(s);
      auto m = OpenMap(s, map_.kind, PartName(name_, i), o_);
      if (!m.ok()) return m.status().WithContext(Where(i));
      if ((*m)->value_size() != map_.value_size) {
        return Status::Corruption(Where(i) + ": value size " + std::to_string((*m)->value_size()) +
                                  " differs from the partition map's " +
                                  std::to_string(map_.value_size));
      }
      parts_[i] = std::move(*m);
    }
    return Status::Ok();
  }

  // Cluster::Member
  void Detach(size_t index) override {
    for (uint32_t i = 0; i < where_.size(); i++) {
      if (where_[i] == index) parts_[i].reset();
    }
  }
  Status Attach(size_t index, frontend::Session&) override { return OpenParts(index); }

  // Handle
  Kind kind() const override { return map_.kind; }
  const frontend::Structure& structure() const override { return entry_; }
  uint32_t value_size() const override { return map_.value_size; }
  Result<uint64_t> Count() override {
    uint64_t n = 0;
    for (uint32_t i = 0; i < parts_.size(); i++) {
      ASYMNVM_ASSIGN_OR_RETURN(Map * p, Part(i));
      auto c = p->Count();
      if (!c.ok()) return c.status().WithContext(Where(i));
      n += *c;
    }
    return n;
  }
  Status Sync() override {
    Status first;
    for (uint32_t i = 0; i < parts_.size(); i++) {
      auto p = Part(i);
      Status s = p.ok() ? (*p)->Sync().WithContext(Where(i)) : p.status();
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }
  Status Verify() override {
    for (uint32_t i = 0; i < parts_.size(); i++) {
      ASYMNVM_ASSIGN_OR_RETURN(Map * p, Part(i));
      ASYMNVM_RETURN_IF_ERROR(p->Verify().WithContext(Where(i)));
      if (!IsOrdered(map_.kind)) continue;  // a hash table cannot be enumerated
      Key from = map_.key_size == 0 ? Key(0) : Key(std::string_view());
      bool more = true;
      while (more) {
        std::vector<KeyValue> kvs;
        ASYMNVM_RETURN_IF_ERROR(p->Scan(from, 1024, &kvs).WithContext(Where(i)));
        for (const auto& kv : kvs) {
          const uint32_t want = PartitionOf(kv.first, Parts());
          if (want != i) {
            return Status::Corruption(Where(i) + ": holds key " + kv.first.ToString() +
                                      ", which belongs to partition " + std::to_string(want));
          }
        }
        more = kvs.size() == 1024 && kvs.back().first != Key(UINT64_MAX);
        if (more) from = Successor(kvs.back().first);
      }
    }
    return Status::Ok();
  }

  // Map
  uint32_t key_size() const override { return map_.key_size; }
  Status Put(const Key& key, std::span<const uint8_t> value) override {
    const uint32_t i = PartitionOf(key, Parts());
    ASYMNVM_ASSIGN_OR_RETURN(Map * p, Part(i));
    return p->Put(key, value).WithContext(Where(i));
  }
  Status Get(const Key& key, Value* value) override {
    const uint32_t i = PartitionOf(key, Parts());
    ASYMNVM_ASSIGN_OR_RETURN(Map * p, Part(i));
    Status s = p->Get(key, value);
    return s.code() == StatusCode::kNotFound ? s : s.WithContext(Where(i));
  }
  Status Delete(const Key& key) override {
    const uint32_t i = PartitionOf(key, Parts());
    ASYMNVM_ASSIGN_OR_RETURN(Map * p, Part(i));
    Status s = p->Delete(key);
    return s.code() == StatusCode::kNotFound ? s : s.WithContext(Where(i));
  }
  // Each partition returns its first `limit` keys >= from; the smallest `limit` of the union are
  // the answer (every partition is ordered, so nothing smaller can be missing).
  Status Scan(const Key& from, size_t limit, std::vector<KeyValue>* out) override {
    out->clear();
    std::vector<KeyValue> all;
    for (uint32_t i = 0; i < parts_.size(); i++) {
      ASYMNVM_ASSIGN_OR_RETURN(Map * p, Part(i));
      std::vector<KeyValue> kvs;
      ASYMNVM_RETURN_IF_ERROR(p->Scan(from, limit, &kvs).WithContext(Where(i)));
      for (auto& kv : kvs) all.push_back(std::move(kv));
    }
    std::sort(all.begin(), all.end(),
              [](const KeyValue& a, const KeyValue& b) { return a.first < b.first; });
    if (all.size() > limit) all.resize(limit);
    *out = std::move(all);
    return Status::Ok();
  }

 private:
  uint32_t Parts() const { return static_cast<uint32_t>(where_.size()); }
  std::string Where(uint32_t i) const {
    return "partition " + std::to_string(i) + " of '" + name_ + "' at " + c_.address(where_[i]);
  }
  Result<Map*> Part(uint32_t i) {
    if (!parts_[i]) {
      return Status::ConnectionError(Where(i) +
                                     " is not open (its back-end failed; "
                                     "Cluster::Reconnect re-opens it)");
    }
    return parts_[i].get();
  }

  frontend::Cluster& c_;
  std::string name_;
  frontend::Structure entry_;
  PartitionMap map_;
  std::vector<size_t> where_;  // partition → cluster index
  Options o_;
  std::vector<std::unique_ptr<Map>> parts_;
};

// Publishes `map` under `name` at session `s` (create-or-open the entry, then CAS the root word
// from 0 to a new block); returns the map that is there afterwards (ours or an earlier one).
Result<std::pair<frontend::Structure, PartitionMap>> Publish(frontend::Session& s,
                                                             const std::string& name,
                                                             const PartitionMap& map,
                                                             const std::string& where) {
  std::array<uint64_t, 4> params{static_cast<uint64_t>(map.kind), map.uuids.size(), map.value_size,
                                 kMapVersion};
  auto e = s.CreateRoot(name, kPartitionMapType, params);
  if (!e.ok()) return e.status().WithContext(where);
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t root, s.ReadWord(e->root_addr));
  if (root != 0) {
    ASYMNVM_ASSIGN_OR_RETURN(PartitionMap there, ReadMap(s, root, where));
    return std::make_pair(*e, std::move(there));
  }
  const std::vector<uint8_t> bytes = map.Encode();
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t block, s.Malloc(bytes.size()));
  ASYMNVM_RETURN_IF_ERROR(s.Write(block, bytes).WithContext(where));
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, s.CompareSwap(e->root_addr, 0, block));
  if (old == 0) return std::make_pair(*e, map);
  (void)s.Free(block);  // lost a creation race: use the winner's
  ASYMNVM_ASSIGN_OR_RETURN(PartitionMap there, ReadMap(s, old, where));
  return std::make_pair(*e, std::move(there));
}

bool SameMap(const PartitionMap& a, const PartitionMap& b) { return a.Encode() == b.Encode(); }

}  // namespace

uint32_t PartitionOf(const Key& key, uint32_t partitions) {
  if (partitions <= 1) return 0;
  if (key.is_int()) {
    const uint64_t k = key.u64();
    return static_cast<uint32_t>(XXH3_64bits_withSeed(&k, sizeof k, kPartitionSeed) % partitions);
  }
  return static_cast<uint32_t>(
      XXH3_64bits_withSeed(key.bytes().data(), key.bytes().size(), kPartitionSeed) % partitions);
}

Key Successor(const Key& key) {
  if (key.is_int()) return Key(key.u64() + 1);
  std::string next(key.bytes());
  next.push_back('\0');  // the smallest byte string greater than `key`
  return Key(next);
}

Result<std::unique_ptr<Map>> OpenPartitioned(frontend::Cluster& c, Kind kind,
                                             const std::string& name, const Options& options,
                                             const PartitionOptions& po) {
  if (IsSequence(kind)) {
    return Status::InvalidArgument(std::string(KindName(kind)) +
                                   " cannot be partitioned (its order spans every element)");
  }
  if (po.partitions > kMaxPartitions) {
    return Status::InvalidArgument("partitions must be <= " + std::to_string(kMaxPartitions));
  }
  const uint32_t want_parts = po.partitions ? po.partitions : static_cast<uint32_t>(c.size());
  const bool writer = options.access == Access::kWriter;

  // 1. Find the map copies the cluster's back-ends hold.
  std::optional<PartitionMap> found;
  std::optional<frontend::Structure> entry;
  size_t found_at = 0;
  for (size_t j = 0; j < c.size(); j++) {
    const std::string where = "partition map '" + name + "' at " + c.address(j);
    frontend::Session& s = c.session(j);
    auto e = s.OpenRoot(name);
    if (!e.ok() && e.status().code() == StatusCode::kNotFound) continue;
    if (!e.ok()) return e.status().WithContext(where);
    if (e->type != kPartitionMapType) {
      const char* what = e->type >= 1 && e->type <= 8 ? KindName(static_cast<Kind>(e->type)) : "?";
      return Status::FailedPrecondition("type mismatch: '" + name + "' is a " + what +
                                        ", not a partitioned " + KindName(kind));
    }
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t root, s.ReadWord(e->root_addr));
    if (root == 0) continue;  // entry created, map not published yet (a creator crashed or races)
    ASYMNVM_ASSIGN_OR_RETURN(PartitionMap m, ReadMap(s, root, where));
    if (found && !SameMap(*found, m)) {
      return Status::Corruption("partition maps of '" + name + "' differ between " +
                                c.address(found_at) + " and " + c.address(j));
    }
    if (!found) {
      found = std::move(m);
      entry = *e;
      found_at = j;
    }
  }

  // 2. None: create (writers), publishing first at the smallest pool uuid.
  if (!found) {
    if (!writer || !options.create)
      return Status::NotFound("no partitioned map named '" + name + "'");
    if (name.empty() || name.size() + 1 + std::to_string(want_parts - 1).size() > 63) {
      return Status::InvalidArgument("partitioned map name must be 1.." +
                                     std::to_string(62 - std::to_string(want_parts - 1).size()) +
                                     " bytes (partitions are named '" + name + "#<i>')");
    }
    if (options.value_size == 0 || options.value_size > kMaxValueSize) {
      return Status::InvalidArgument("value_size must be 1.." + std::to_string(kMaxValueSize));
    }
    if (options.key_size > kMaxKeySize) {
      return Status::InvalidArgument("key_size must be 0 (integer keys) or 1.." +
                                     std::to_string(kMaxKeySize));
    }
    PartitionMap m;
    m.kind = kind;
    m.value_size = options.value_size;
    m.param = options.param;
    m.key_size = options.key_size;
    for (uint32_t i = 0; i < want_parts; i++) m.uuids.push_back(c.pool_uuid(i % c.size()));
    size_t home = 0;
    for (size_t j = 1; j < c.size(); j++) {
      if (c.pool_uuid(j) < c.pool_uuid(home)) home = j;
    }
    ASYMNVM_ASSIGN_OR_RETURN(
        auto pub,
        Publish(c.session(home), name, m, "partition map '" + name + "' at " + c.address(home)));
    entry = pub.first;
    found = std::move(pub.second);
    found_at = home;
  }
  if (found->kind != kind) {
    return Status::FailedPrecondition("type mismatch: '" + name + "' is a partitioned " +
                                      std::string(KindName(found->kind)) + ", not a partitioned " +
                                      KindName(kind));
  }

  // 3. Where each partition lives.
  std::vector<size_t> where;
  for (uint32_t i = 0; i < found->uuids.size(); i++) {
    auto idx = c.IndexOf(found->uuids[i]);
    if (!idx.ok()) {
      return Status::FailedPrecondition("partition " + std::to_string(i) + " of '" + name +
                                        "' lives on pool " + frontend::UuidString(found->uuids[i]) +
                                        ", which none of the cluster's back-ends serves");
    }
    where.push_back(*idx);
  }

  // 4. Writers make sure every involved back-end holds a copy (a creator may have crashed after
  //    publishing at the first one).
  if (writer) {
    std::vector<size_t> involved = where;
    std::sort(involved.begin(), involved.end());
    involved.erase(std::unique(involved.begin(), involved.end()), involved.end());
    for (size_t j : involved) {
      const std::string w = "partition map '" + name + "' at " + c.address(j);
      ASYMNVM_ASSIGN_OR_RETURN(auto pub, Publish(c.session(j), name, *found, w));
      if (!SameMap(pub.second, *found)) {
        return Status::Corruption("partition maps of '" + name + "' differ between " +
                                  c.address(found_at) + " and " + c.address(j));
      }
    }
  }

  // 5. Open the partitions.
  Options o = options;
  o.value_size = found->value_size;
  o.param = found->param;
  o.key_size = found->key_size;
  auto pm = std::make_unique<PartitionedMap>(c, name, *entry, *found, std::move(where), o);
  ASYMNVM_RETURN_IF_ERROR(pm->OpenParts(std::nullopt));
  return std::unique_ptr<Map>(std::move(pm));
}

}  // namespace asymnvm::structures
