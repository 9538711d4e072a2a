#include "kv/store.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "common/checksum.h"
#include "common/coding.h"
#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::kv {

using format::EntryHeader;
using format::EntryType;

uint64_t KeyHash(std::string_view key) { return Hash64(key.data(), key.size(), 0x6b76); }

uint64_t RouteHash(std::string_view key) {
  if (!IsRoutedKey(key)) return KeyHash(HashTag(key));  // Redis Cluster's {tag} rule
  uint64_t r = 0;
  for (size_t i = 0; i < 8; i++) {
    r |= static_cast<uint64_t>(static_cast<uint8_t>(key[kRoutedKeyMagic.size() + i])) << (8 * i);
  }
  return r;
}

uint32_t ShardOf(std::string_view key, uint32_t shards) {
  return shards == 0 ? 0 : static_cast<uint32_t>(RouteHash(key) % shards);
}

uint32_t Store::WorkerOf(uint32_t shard, uint32_t workers) {
  return workers == 0 ? 0 : shard % workers;
}

bool ParseCounter(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  if (s[0] == '+') return false;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return false;
  if (s.size() > 1 && (s[0] == '0' || (s[0] == '-' && s[1] == '0'))) return false;  // canonical
  if (s == "-0") return false;
  *out = v;
  return true;
}

Store::Store(const StoreOptions& o) : o_(o), log_base_(o.log_base), persister_(o.persister) {}

Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& o) {
  if (o.header_page == nullptr || o.log_base == nullptr || o.persister == nullptr) {
    return Status::InvalidArgument("kv store: header_page, log_base and persister are required");
  }
  if (!(o.gc_threshold > 0 && o.gc_threshold <= 1)) {
    return Status::InvalidArgument("kv store: gc_threshold must be in (0, 1]");
  }
  std::unique_ptr<Store> s(new Store(o));
  Status st = format::DecodeServerHeader(o.header_page, &s->geo_);
  if (st.code() == StatusCode::kNotFound) {
    s->geo_ = o.geometry;
    const auto& g = s->geo_;
    if (g.workers == 0 || g.workers > format::kMaxWorkers || g.shards == 0 ||
        g.segment_size < 64 * 1024 || g.segment_size % 4096 != 0 || g.segments < g.workers + 3) {
      return Status::InvalidArgument(
          "kv store: geometry needs 1..32 workers, >= 1 shard, segments of >= 64 KiB (multiple of "
          "4 KiB) and at least workers + 3 segments");
    }
    ASYMNVM_RETURN_IF_ERROR(s->Format());
  } else if (!st.ok()) {
    return st;
  }
  ASYMNVM_RETURN_IF_ERROR(s->Recover());
  return s;
}

Status Store::Format() {
  // Segment headers first (blank = free), then the header page that makes the pool ours.
  for (uint32_t i = 0; i < geo_.segments; i++) {
    std::memset(SegmentBase(i), 0, format::kSegmentHeaderSize);
    persister_->Flush(SegmentBase(i), format::kSegmentHeaderSize);
  }
  persister_->Drain();
  geo_.generation_bound = 1;
  std::vector<uint8_t> page(format::kHeaderPage);
  format::EncodeServerHeader(geo_, page.data());
  std::memcpy(o_.header_page, page.data(), page.size());
  persister_->Persist(o_.header_page, page.size());
  return Status::Ok();
}

Status Store::PersistHeader() {
  std::vector<uint8_t> page(format::kHeaderPage);
  format::EncodeServerHeader(geo_, page.data());
  std::memcpy(o_.header_page, page.data(), page.size());
  persister_->Persist(o_.header_page, page.size());
  return Status::Ok();
}

Status Store::Recover() {
  parts_.clear();
  for (uint32_t i = 0; i < geo_.workers + 2; i++) parts_.push_back(std::make_unique<Partition>());
  shard_version_.reset(new std::atomic<uint64_t>[geo_.shards]);
  for (uint32_t i = 0; i < geo_.shards; i++) shard_version_[i] = 0;
  applied_.reset(new std::atomic<uint64_t>[geo_.workers]);
  deferred_.reset(new uint64_t[geo_.workers]);
  dirty_.assign(geo_.workers, 0);
  floor_at_open_.assign(geo_.applied_floor, geo_.applied_floor + geo_.workers);
  recovered_positions_.clear();
  for (uint32_t w = 0; w < geo_.workers; w++) {
    applied_[w] = geo_.applied_floor[w];
    deferred_[w] = 0;
  }
  segs_.reset(new SegmentMeta[geo_.segments]);
  next_generation_ = geo_.generation_bound;
  const size_t seg_size = geo_.segment_size;
  for (uint32_t i = 0; i < geo_.segments; i++) {
    format::SegmentHeader sh;
    Status st = format::DecodeSegmentHeader(SegmentBase(i), &sh);
    if (st.code() == StatusCode::kNotFound) {
      free_.push_back(i);
      continue;
    }
    if (!st.ok()) return st.WithContext("kv store: segment " + std::to_string(i));
    segs_[i].generation = sh.generation;
    segs_[i].owner = sh.owner;
    next_generation_ = std::max(next_generation_, sh.generation + 1);
    size_t off = format::kSegmentHeaderSize;
    const uint8_t* base = SegmentBase(i);
    uint32_t vouched = 0;  // members of the current batch already checked whole
    while (off + format::kEntryHeaderSize <= seg_size) {
      EntryHeader h;
      if (!format::DecodeEntry(base + off, seg_size - off, sh.generation, &h).ok()) break;
      if (h.batch_count > 0) {
        // A batch counts only whole: member 0 here and every other one right behind it.
        if (vouched > 0) {
          vouched--;
        } else {
          size_t bytes = 0;
          if (h.batch_index != 0 ||
              !WholeBatch(base + off, seg_size - off, sh.generation, h, &bytes)) {
            break;  // a torn batch ends the segment's contents, as a torn entry does
          }
          vouched = h.batch_count - 1;
        }
      }
      const uint32_t fp = static_cast<uint32_t>(format::Footprint(h));
      std::string_view key = format::EntryKey(base + off, h);
      if (h.shard < geo_.shards) {
        uint64_t prev = shard_version_[h.shard];
        if (h.version > prev) shard_version_[h.shard] = h.version;  // reserved versions too
        if (!h.persisted) {  // an RDMP slot whose value never became durable: garbage
          off += fp;
          continue;
        }
        recovered_entries_++;
        if (h.type == EntryType::kPutBypass) {  // valid flag (volatile): the value is readable
          uint64_t vf = format::ValidWord(h.version);
          std::memcpy(SegmentBase(i) + off + format::BypassFlagOffset(h.key_len, h.value_len) + 8,
                      &vf, 8);
        }
        const uint32_t worker = WorkerOf(h.shard, geo_.workers);
        if (h.position != 0) {
          uint32_t pw = static_cast<uint32_t>(h.position >> 56);
          if (pw < geo_.workers && h.position > applied_[pw]) applied_[pw] = h.position;
          if (pw < geo_.workers && h.position > floor_at_open_[pw]) {
            recovered_positions_.insert(h.position);
          }
        }
        Partition& p = *parts_[worker];
        auto it = FindLocked(p, h.shard, KeyHash(key), key);
        Loc loc{h.shard, i,         static_cast<uint32_t>(off),
                fp,      h.version, h.type == EntryType::kDelete};
        if (it == p.index.end()) {
          p.index.emplace(IndexKey{h.shard, KeyHash(key)}, loc);
        } else if (h.version > it->second.version) {
          it->second = loc;
        }
      } else {
        LOG_WARN("kv", "segment " << i << " offset " << off << ": entry of shard " << h.shard
                                  << " beyond the pool's " << geo_.shards << " shards; ignored");
      }
      off += fp;
    }
  }
  // Live bytes from the rebuilt index.
  for (auto& p : parts_) {
    for (auto& [k, loc] : p->index) segs_[loc.seg].live += loc.footprint;
  }
  // Every recovered segment is sealed; logs open fresh segments. Free list: lowest index last.
  std::sort(free_.begin(), free_.end(), std::greater<uint32_t>());
  if (next_generation_ >= geo_.generation_bound) {
    geo_.generation_bound = next_generation_;  // re-reserved on the first allocation
  }
  return Status::Ok();
}

Result<uint32_t> Store::AllocateSegment(uint32_t owner, format::SegmentKind kind) {
  uint32_t seg;
  uint64_t gen;
  {
    MutexLock l(alloc_mu_);
    // One segment is kept for the cleaner so it can always make progress.
    const size_t reserve = kind == format::SegmentKind::kGc ? 0 : 1;
    if (free_.size() <= reserve) {
      return Status::ResourceExhausted("kv store: no free log segment (" +
                                       std::to_string(geo_.segments) + " segments, all in use)");
    }
    seg = free_.back();
    free_.pop_back();
    gen = next_generation_++;
    // Claimed under alloc_mu_: CleanOnce picks its victims under it (a segment off the free list
    // with a generation and not open is sealed), so it must never see this one half set up.
    segs_[seg].generation = gen;
    segs_[seg].owner = owner;
    segs_[seg].open = true;
    segs_[seg].live = 0;
  }
  {
    MutexLock l(header_mu_);
    if (gen >= geo_.generation_bound) {
      geo_.generation_bound = gen + format::kGenerationBlock;
      ASYMNVM_RETURN_IF_ERROR(PersistHeader());
    }
  }
  uint8_t hdr[format::kSegmentHeaderSize];
  format::EncodeSegmentHeader({gen, kind, owner}, hdr);
  std::memcpy(SegmentBase(seg), hdr, sizeof hdr);
  persister_->Persist(SegmentBase(seg), sizeof hdr);
  return seg;
}

Result<Store::Loc> Store::Place(Partition& p, uint32_t owner, size_t fp) {
  if (fp + format::kSegmentHeaderSize > geo_.segment_size) {
    return Status::InvalidArgument("kv store: entry of " + std::to_string(fp) +
                                   " bytes does not fit a segment");
  }
  if (p.seg == UINT32_MAX || p.off + fp > geo_.segment_size) {
    const auto kind = &p == &gc_part()        ? format::SegmentKind::kGc
                      : &p == &replica_part() ? format::SegmentKind::kReplica
                                              : format::SegmentKind::kTlog;
    auto seg = AllocateSegment(owner, kind);
    if (!seg.ok()) return seg.status();
    if (p.seg != UINT32_MAX) {
      MutexLock l(alloc_mu_);  // CleanOnce reads `open` under it
      segs_[p.seg].open = false;
    }
    p.seg = *seg;
    p.off = format::kSegmentHeaderSize;
  }
  Loc loc;
  loc.seg = p.seg;
  loc.off = p.off;
  loc.footprint = static_cast<uint32_t>(fp);
  p.off += static_cast<uint32_t>(fp);
  appended_ += fp;
  return loc;
}

Result<Store::Loc> Store::PlaceWaiting(Partition& p, uint32_t owner, size_t fp) {
  auto loc = Place(p, owner, fp);
  // No free segment: wait for the cleaner (other logs may take a freed segment first; keep
  // waiting) up to 10 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!loc.ok() && loc.status().code() == StatusCode::kResourceExhausted &&
         std::chrono::steady_clock::now() < deadline && WaitForFreeSegment(deadline)) {
    loc = Place(p, owner, fp);
  }
  return loc;
}

Result<Store::Loc> Store::Append(Partition& p, uint32_t owner, const EntryHeader& hin,
                                 std::string_view key, std::string_view value, bool sync) {
  ASYMNVM_ASSIGN_OR_RETURN(Loc loc,
                           Place(p, owner, format::EntryFootprint(key.size(), value.size())));
  EntryHeader h = hin;
  h.generation = segs_[loc.seg].generation;
  uint8_t* at = SegmentBase(loc.seg) + loc.off;
  format::EncodeEntry(h, key, value, at);
  if (sync) {
    persister_->Persist(at, format::kEntryHeaderSize + key.size() + value.size());
  } else {
    persister_->Flush(at, format::kEntryHeaderSize + key.size() + value.size());
  }
  loc.shard = h.shard;
  loc.version = h.version;
  loc.tombstone = h.type == EntryType::kDelete;
  return loc;
}

std::vector<uint8_t> Store::Canonical(const uint8_t* e, const EntryHeader& h) const {
  if (h.type != EntryType::kPutBypass && h.batch_count == 0) {
    return std::vector<uint8_t>(e, e + format::kEntryHeaderSize + h.key_len + h.value_len);
  }
  EntryHeader c = h;
  if (c.type == EntryType::kPutBypass) c.type = EntryType::kPut;
  c.value_crc = 0;
  c.batch_count = c.batch_index = 0;
  std::vector<uint8_t> out(format::kEntryHeaderSize + h.key_len + h.value_len);
  format::EncodeEntry(c, format::EntryKey(e, h), format::EntryValue(e, h), out.data());
  return out;
}

std::multimap<Store::IndexKey, Store::Loc>::iterator Store::FindLocked(Partition& p, uint32_t shard,
                                                                       uint64_t tag,
                                                                       std::string_view key) const {
  auto [lo, hi] = p.index.equal_range(IndexKey{shard, tag});
  for (auto it = lo; it != hi; ++it) {
    const uint8_t* e = SegmentBase(it->second.seg) + it->second.off;
    const uint16_t klen = static_cast<uint16_t>(e[6] | (e[7] << 8));
    if (klen == key.size() &&
        std::memcmp(e + format::kEntryHeaderSize, key.data(), key.size()) == 0) {
      return it;
    }
  }
  return p.index.end();
}

void Store::NotePosition(uint32_t worker, uint64_t position) {
  if (position != 0 && worker < geo_.workers && position > applied_[worker]) {
    applied_[worker] = position;
  }
}

void Store::Synced(uint32_t worker) {
  if (worker >= geo_.workers || deferred_[worker] == 0) return;
  NotePosition(worker, deferred_[worker]);
  deferred_[worker] = 0;
}

void Store::AfterWrite(uint32_t worker, uint64_t position) {
  if (o_.group_commit) {
    dirty_[worker] = 1;
    if (position > deferred_[worker]) deferred_[worker] = position;
    return;
  }
  persister_->Drain();
  Synced(worker);
  NotePosition(worker, position);
}

void Store::SyncDeferred(uint32_t worker) {
  if (worker >= geo_.workers || !dirty_[worker]) return;
  persister_->Drain();
  dirty_[worker] = 0;
  Synced(worker);
}

void Store::EndRecovery() {
  recovered_positions_.clear();
  recovered_positions_.rehash(0);
}

Status Store::CheckShard(uint32_t shard) const {
  if (shard >= geo_.shards) {
    return Status::InvalidArgument("kv: shard " + std::to_string(shard) + " out of range (" +
                                   std::to_string(geo_.shards) + " shards)");
  }
  return Status::Ok();
}

Result<uint64_t> Store::WriteLocked(uint32_t worker, EntryType type, uint32_t shard,
                                    std::string_view key, std::string_view value,
                                    uint64_t position) {
  Partition& p = *parts_[worker];
  EntryHeader h;
  h.type = type;
  h.key_len = static_cast<uint16_t>(key.size());
  h.value_len = static_cast<uint32_t>(value.size());
  h.shard = shard;
  h.version = shard_version_[shard].fetch_add(1) + 1;
  h.position = position;
  // The entry goes to the worker's own t-log, or to the shared one a caller holding every
  // worker chose (SetSharedLog); the index stays the worker's partition either way.
  const uint32_t log_worker = shared_log_ < geo_.workers ? shared_log_ : worker;
  Partition& log = *parts_[log_worker];
  auto loc = Append(log, log_worker, h, key, value, /*sync=*/false);
  // No free segment: wait for the cleaner (other logs may take a freed segment first; keep
  // waiting) up to 10 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!loc.ok() && loc.status().code() == StatusCode::kResourceExhausted &&
         std::chrono::steady_clock::now() < deadline && WaitForFreeSegment(deadline)) {
    loc = Append(log, log_worker, h, key, value, /*sync=*/false);
  }
  if (!loc.ok()) return loc.status();
  AfterWrite(worker, position);  // durable now, or with the worker's next SyncDeferred
  if (o_.replicate) {
    const uint8_t* e = SegmentBase(loc->seg) + loc->off;
    Status rs =
        o_.replicate(worker, shard, {e, format::kEntryHeaderSize + key.size() + value.size()});
    if (!rs.ok()) return rs;
  }
  segs_[loc->seg].live += loc->footprint;
  const uint64_t tag = KeyHash(key);
  {
    MutexLock l(p.mu);
    auto it = FindLocked(p, shard, tag, key);
    if (it == p.index.end()) {
      p.index.emplace(IndexKey{shard, tag}, *loc);
    } else {
      segs_[it->second.seg].live -= it->second.footprint;
      it->second = *loc;
    }
  }
  return h.version;
}

Result<uint64_t> Store::Put(uint32_t worker, uint32_t shard, std::string_view key,
                            std::string_view value, uint64_t position, bool recovering) {
  ASYMNVM_RETURN_IF_ERROR(CheckShard(shard));
  if (worker >= geo_.workers) return Status::InvalidArgument("kv: worker out of range");
  if (recovering && position != 0 &&
      (position <= floor_at_open_[std::min<uint64_t>(position >> 56, geo_.workers - 1)] ||
       recovered_positions_.count(position) > 0)) {
    skipped_++;
    return uint64_t{0};
  }
  return WriteLocked(worker, EntryType::kPut, shard, key, value, position);
}

ReadResult Store::Get(uint32_t worker, uint32_t shard, std::string_view key, uint64_t offset,
                      size_t max_bytes, uint64_t locate_from) const {
  ReadResult r;
  if (shard >= geo_.shards || worker >= geo_.workers) return r;
  Partition& p = *parts_[worker];
  MutexLock l(p.mu);
  auto it = FindLocked(p, shard, KeyHash(key), key);
  if (it == p.index.end() || it->second.tombstone) return r;
  const Loc& loc = it->second;
  const uint8_t* e = SegmentBase(loc.seg) + loc.off;
  const uint32_t value_len = GetLe32(e + 8);
  if (value_len >= locate_from) {
    r.found = r.located = true;
    r.version = loc.version;
    r.total_len = value_len;
    r.log_offset = size_t{loc.seg} * geo_.segment_size + loc.off;
    r.generation = segs_[loc.seg].generation;
    r.footprint = loc.footprint;
    return r;
  }
  EntryHeader h;
  Status st = format::DecodeEntry(e, geo_.segment_size - loc.off, segs_[loc.seg].generation, &h);
  if (!st.ok()) {
    LOG_ERROR("kv", "index points at an invalid entry (segment " << loc.seg << " offset " << loc.off
                                                                 << ")");
    return r;
  }
  r.found = true;
  r.version = h.version;
  r.total_len = h.value_len;
  std::string_view v = format::EntryValue(e, h);
  if (offset < v.size()) r.bytes.assign(v.substr(offset, max_bytes));
  return r;
}

Result<DeleteReply> Store::Delete(uint32_t worker, uint32_t shard, std::string_view key,
                                  uint64_t position) {
  ASYMNVM_RETURN_IF_ERROR(CheckShard(shard));
  if (worker >= geo_.workers) return Status::InvalidArgument("kv: worker out of range");
  DeleteReply d;
  {
    Partition& p = *parts_[worker];
    MutexLock l(p.mu);
    auto it = FindLocked(p, shard, KeyHash(key), key);
    if (it == p.index.end() || it->second.tombstone) return d;  // nothing to delete
    d.existed = true;
    d.version = it->second.version;
  }
  auto v = WriteLocked(worker, EntryType::kDelete, shard, key, {}, position);
  if (!v.ok()) return v.status();
  return d;
}

Result<PutIfReply> Store::PutIf(uint32_t worker, uint32_t shard, std::string_view key,
                                std::string_view value, uint64_t expected_version,
                                uint64_t position) {
  ASYMNVM_RETURN_IF_ERROR(CheckShard(shard));
  if (worker >= geo_.workers) return Status::InvalidArgument("kv: worker out of range");
  uint64_t current = 0;
  {
    Partition& p = *parts_[worker];
    MutexLock l(p.mu);
    auto it = FindLocked(p, shard, KeyHash(key), key);
    if (it != p.index.end() && !it->second.tombstone) current = it->second.version;
  }
  PutIfReply r;
  if (current != expected_version) {
    r.version = current;
    return r;
  }
  auto v = WriteLocked(worker, EntryType::kPut, shard, key, value, position);
  if (!v.ok()) return v.status();
  r.applied = true;
  r.version = *v;
  return r;
}

Result<IncrReply> Store::Incr(uint32_t worker, uint32_t shard, std::string_view key, int64_t delta,
                              uint64_t position) {
  ASYMNVM_RETURN_IF_ERROR(CheckShard(shard));
  ReadResult cur = Get(worker, shard, key, 0, 64);
  int64_t v = 0;
  if (cur.found) {
    if (cur.total_len > 20 || !ParseCounter(cur.bytes, &v)) {
      return Status::InvalidArgument("kv incr: the value of the key is not a decimal int64");
    }
  }
  int64_t n;
  if (__builtin_add_overflow(v, delta, &n)) {
    return Status::InvalidArgument("kv incr: " + std::to_string(v) + " + " + std::to_string(delta) +
                                   " overflows int64");
  }
  std::string text = std::to_string(n);
  auto ver = WriteLocked(worker, EntryType::kPut, shard, key, text, position);
  if (!ver.ok()) return ver.status();
  return IncrReply{n, *ver};
}

ScanOut Store::Scan(uint32_t shard, uint64_t cursor, uint32_t count, size_t max_bytes,
                    size_t max_value) const {
  ScanOut out;
  if (shard >= geo_.shards || count == 0) {
    out.done = true;
    return out;
  }
  std::vector<ScanOut::Item> all;
  bool more = false;
  for (uint32_t w = 0; w < geo_.workers; w++) {
    Partition& p = *parts_[w];
    MutexLock l(p.mu);
    uint32_t taken = 0;
    uint64_t last_tag = 0;
    for (auto it = p.index.lower_bound(IndexKey{shard, cursor});
         it != p.index.end() && it->first.first == shard; ++it) {
      if (it->second.tombstone) continue;
      if (taken >= count && it->first.second != last_tag) {
        more = true;
        break;
      }
      const uint8_t* e = SegmentBase(it->second.seg) + it->second.off;
      EntryHeader h;
      if (!format::DecodeEntry(e, geo_.segment_size - it->second.off,
                               segs_[it->second.seg].generation, &h)
               .ok()) {
        continue;
      }
      ScanOut::Item item;
      item.tag = it->first.second;
      item.key.assign(format::EntryKey(e, h));
      item.version = h.version;
      item.value_len = h.value_len;
      if (h.value_len > max_value) {
        item.truncated = true;
      } else {
        item.value.assign(format::EntryValue(e, h));
      }
      all.push_back(std::move(item));
      taken++;
      last_tag = it->first.second;
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const ScanOut::Item& a, const ScanOut::Item& b) { return a.tag < b.tag; });
  size_t bytes = 0;
  size_t i = 0;
  while (i < all.size()) {
    // One tag group at a time: a cursor cannot split keys that share a tag.
    size_t j = i;
    size_t group_bytes = 0;
    while (j < all.size() && all[j].tag == all[i].tag) {
      group_bytes += 16 + all[j].key.size() + all[j].value.size();
      j++;
    }
    if (!out.items.empty() && (out.items.size() >= count || bytes + group_bytes > max_bytes)) break;
    for (size_t k = i; k < j; k++) out.items.push_back(std::move(all[k]));
    bytes += group_bytes;
    i = j;
  }
  if (i < all.size()) more = true;
  if (out.items.empty()) {
    out.done = !more;
    return out;
  }
  const uint64_t last = out.items.back().tag;
  if (last == UINT64_MAX) {
    out.done = true;
  } else {
    out.next_cursor = last + 1;
    out.done = !more;
  }
  return out;
}

Status Store::ApplyReplica(std::span<const uint8_t> entry) {
  EntryHeader h;
  if (entry.size() < format::kEntryHeaderSize) return Status::Corruption("kv replica: short entry");
  // Validate against the generation the entry carries (the primary's segment).
  const uint64_t gen = format::PeekEntryGeneration(entry.data());
  if (!format::DecodeEntry(entry.data(), entry.size(), gen, &h).ok() ||
      h.type == EntryType::kPutBypass) {
    return Status::Corruption("kv replica: entry fails its checksum or lengths");
  }
  // The members (one, or a whole batch back to back) and where each starts.
  std::vector<std::pair<EntryHeader, size_t>> members;
  size_t bytes = format::kEntryHeaderSize + h.key_len + h.value_len;
  if (h.batch_count > 0 && !WholeBatch(entry.data(), entry.size(), gen, h, &bytes)) {
    return Status::Corruption("kv replica: a batch that is not whole");
  }
  if (bytes != entry.size()) return Status::Corruption("kv replica: entry lengths do not add up");
  for (size_t off = 0; off < entry.size();) {
    EntryHeader m;
    if (!format::DecodeEntry(entry.data() + off, entry.size() - off, gen, &m).ok() ||
        m.shard >= geo_.shards) {
      return Status::Corruption(
          "kv replica: entry fails its checksum or its shard is out of range");
    }
    if (m.shard != h.shard) {  // multi-shard batches are never replicated (BatchAcrossShards)
      return Status::Corruption("kv replica: a batch whose members are in different shards");
    }
    members.push_back({m, off});
    off += format::EntryFootprint(m.key_len, m.value_len);
  }
  const uint32_t shard = h.shard;
  Partition& p = *parts_[WorkerOf(shard, geo_.workers)];
  if (members.size() == 1) {  // skip what the index already has (a batch is applied whole)
    std::string_view key = format::EntryKey(entry.data(), h);
    MutexLock l(p.mu);
    auto it = FindLocked(p, shard, KeyHash(key), key);
    if (it != p.index.end() && it->second.version >= h.version) return Status::Ok();
  }
  size_t total = 0;
  for (const auto& [m, off] : members) total += format::EntryFootprint(m.key_len, m.value_len);
  MutexLock rl(replica_mu_);
  // A full store waits for the cleaner like a worker's write (the digest thread is not on any
  // request's path); still full after that, the caller learns kResourceExhausted.
  ASYMNVM_ASSIGN_OR_RETURN(Loc first, PlaceWaiting(replica_part(), 0, total));
  uint8_t* at = SegmentBase(first.seg) + first.off;
  std::vector<Loc> locs;
  size_t off = 0, end = 0;
  uint64_t top = 0;
  for (const auto& [m, src] : members) {
    EntryHeader local = m;
    local.position = 0;  // positions belong to the primary's OQ
    local.generation = segs_[first.seg].generation;
    const uint8_t* e = entry.data() + src;
    format::EncodeEntry(local, format::EntryKey(e, m), format::EntryValue(e, m), at + off);
    const uint32_t fp = static_cast<uint32_t>(format::EntryFootprint(m.key_len, m.value_len));
    locs.push_back(Loc{shard, first.seg, static_cast<uint32_t>(first.off + off), fp, m.version,
                       m.type == EntryType::kDelete});
    end = off + format::kEntryHeaderSize + m.key_len + m.value_len;
    off += fp;
    top = std::max(top, m.version);
  }
  persister_->Persist(at, end);
  uint64_t cur = shard_version_[shard];
  while (top > cur && !shard_version_[shard].compare_exchange_weak(cur, top)) {
  }
  MutexLock l(p.mu);
  for (size_t i = 0; i < members.size(); i++) {
    IndexLocked(p, format::EntryKey(entry.data() + members[i].second, members[i].first), locs[i]);
  }
  return Status::Ok();
}

void Store::RaiseVersionFloor(uint32_t shard, uint64_t floor) {
  if (shard >= geo_.shards) return;
  uint64_t cur = shard_version_[shard];
  while (floor > cur && !shard_version_[shard].compare_exchange_weak(cur, floor)) {
  }
}

bool Store::WholeBatch(const uint8_t* e, size_t avail, uint64_t generation, const EntryHeader& h,
                       size_t* bytes) {
  if (h.batch_count == 0 || h.batch_index != 0) return false;
  size_t off = 0;
  EntryHeader m = h;
  for (uint32_t i = 0;; i++) {
    if (i > 0) {
      if (off >= avail || !format::DecodeEntry(e + off, avail - off, generation, &m).ok() ||
          m.batch_count != h.batch_count || m.batch_index != i || m.position != h.position) {
        return false;
      }
    }
    if (i + 1 == h.batch_count) {
      *bytes = off + format::kEntryHeaderSize + m.key_len + m.value_len;
      return true;
    }
    off += format::EntryFootprint(m.key_len, m.value_len);
  }
}

void Store::IndexLocked(Partition& p, std::string_view key, const Loc& loc) {
  auto it = FindLocked(p, loc.shard, KeyHash(key), key);
  if (it == p.index.end()) {
    p.index.emplace(IndexKey{loc.shard, KeyHash(key)}, loc);
    segs_[loc.seg].live += loc.footprint;
  } else if (it->second.version < loc.version) {
    segs_[it->second.seg].live -= it->second.footprint;
    it->second = loc;
    segs_[loc.seg].live += loc.footprint;
  }
}

Result<BatchResult> Store::Batch(uint32_t worker, uint32_t shard, std::span<const WriteOp> ops,
                                 uint64_t position) {
  ASYMNVM_RETURN_IF_ERROR(CheckShard(shard));
  if (worker != WorkerOf(shard, geo_.workers)) {
    return Status::InvalidArgument("kv batch: shard " + std::to_string(shard) +
                                   " is not served by worker " + std::to_string(worker));
  }
  for (const auto& op : ops) {
    if (!op.key.empty() && ShardOf(op.key, geo_.shards) != shard) {
      return Status::InvalidArgument("kv batch: every key must be in shard " +
                                     std::to_string(shard));
    }
  }
  // Only this worker writes the shard's keys, so the versions it reads stay current until the
  // batch is indexed.
  return BatchLocked(worker, ops, position, /*replicate=*/true);
}

Result<BatchResult> Store::BatchAcrossShards(std::span<const WriteOp> ops) {
  uint32_t first = 0;
  if (!ops.empty() && !ops[0].key.empty()) first = ShardOf(ops[0].key, geo_.shards);
  // The caller holds every worker (Server::BeginLocal), so no other thread writes these keys until
  // the batch is indexed, whichever partitions they are in.
  return BatchLocked(WorkerOf(first, geo_.workers), ops, 0, /*replicate=*/false);
}

Result<BatchResult> Store::BatchLocked(uint32_t worker, std::span<const WriteOp> ops,
                                       uint64_t position, bool replicate) {
  if (ops.empty() || ops.size() > format::kMaxBatch) {
    return Status::InvalidArgument("kv batch: 1.." + std::to_string(format::kMaxBatch) +
                                   " operations");
  }
  size_t total = 0;
  std::vector<uint32_t> shards(ops.size());
  for (size_t i = 0; i < ops.size(); i++) {
    const auto& op = ops[i];
    if (op.key.empty() || op.key.size() > kMaxKeySize) {
      return Status::InvalidArgument("kv batch: key of " + std::to_string(op.key.size()) +
                                     " bytes (keys are 1.." + std::to_string(kMaxKeySize) + ")");
    }
    shards[i] = ShardOf(op.key, geo_.shards);
    for (size_t j = 0; j < i; j++) {
      if (ops[j].key == op.key) return Status::InvalidArgument("kv batch: a key appears twice");
    }
    if (op.check_only && !op.conditional) {
      return Status::InvalidArgument("kv batch: a check needs an expected version");
    }
    if (!op.check_only) {
      total += format::EntryFootprint(op.key.size(), op.value ? op.value->size() : 0);
    }
  }
  auto part_of = [&](size_t i) -> Partition& { return *parts_[WorkerOf(shards[i], geo_.workers)]; };
  BatchResult r;
  r.versions.resize(ops.size());
  bool ok = true;
  for (size_t i = 0; i < ops.size(); i++) {
    Partition& p = part_of(i);
    MutexLock l(p.mu);
    auto it = FindLocked(p, shards[i], KeyHash(ops[i].key), ops[i].key);
    r.versions[i] = it == p.index.end() || it->second.tombstone ? 0 : it->second.version;
    if (ops[i].conditional && r.versions[i] != ops[i].expected_version) ok = false;
  }
  if (!ok) return r;
  std::vector<size_t> writes;  // indexes of the ops that write
  for (size_t i = 0; i < ops.size(); i++) {
    if (!ops[i].check_only) writes.push_back(i);
  }
  r.applied = true;
  if (writes.empty()) return r;  // checks only: they hold
  // The members go to the worker's own t-log, or to the shared one a caller holding every worker
  // chose (SetSharedLog), as WriteLocked's entries do.
  const uint32_t log_worker = shared_log_ < geo_.workers ? shared_log_ : worker;
  ASYMNVM_ASSIGN_OR_RETURN(Loc first, PlaceWaiting(*parts_[log_worker], log_worker, total));
  uint8_t* at = SegmentBase(first.seg) + first.off;
  std::vector<Loc> locs(writes.size());
  size_t off = 0, end = 0;
  for (size_t w = 0; w < writes.size(); w++) {
    const size_t i = writes[w];
    EntryHeader h;
    h.type = ops[i].value ? EntryType::kPut : EntryType::kDelete;
    h.key_len = static_cast<uint16_t>(ops[i].key.size());
    h.value_len = ops[i].value ? static_cast<uint32_t>(ops[i].value->size()) : 0;
    h.shard = shards[i];
    h.version = shard_version_[shards[i]].fetch_add(1) + 1;
    h.generation = segs_[first.seg].generation;
    h.position = position;
    h.batch_count = static_cast<uint32_t>(writes.size());
    h.batch_index = static_cast<uint32_t>(w);
    format::EncodeEntry(h, ops[i].key, ops[i].value.value_or(std::string_view()), at + off);
    const uint32_t fp = static_cast<uint32_t>(format::EntryFootprint(h.key_len, h.value_len));
    locs[w] = Loc{shards[i], first.seg, static_cast<uint32_t>(first.off + off),
                  fp,        h.version, h.type == EntryType::kDelete};
    end = off + format::kEntryHeaderSize + h.key_len + h.value_len;
    off += fp;
  }
  persister_->Flush(at, end);  // one range: the members become durable together
  AfterWrite(worker, position);
  if (replicate && o_.replicate) {
    ASYMNVM_RETURN_IF_ERROR(o_.replicate(worker, shards[writes[0]], {at, end}));
  }
  for (size_t w = 0; w < writes.size(); w++) {
    Partition& p = part_of(writes[w]);
    MutexLock l(p.mu);
    IndexLocked(p, ops[writes[w]].key, locs[w]);
    r.versions[writes[w]] = locs[w].version;
  }
  return r;
}

Result<BypassSlot> Store::Reserve(uint32_t worker, uint32_t shard, std::string_view key,
                                  uint32_t value_len, uint32_t value_crc) {
  ASYMNVM_RETURN_IF_ERROR(CheckShard(shard));
  if (worker >= geo_.workers) return Status::InvalidArgument("kv: worker out of range");
  if (value_len > kMaxValueSize) {
    return Status::InvalidArgument("kv put: value of " + std::to_string(value_len) +
                                   " bytes is over the limit of " + std::to_string(kMaxValueSize));
  }
  Partition& p = *parts_[worker];
  const size_t fp = format::BypassFootprint(key.size(), value_len);
  ASYMNVM_ASSIGN_OR_RETURN(Loc loc, PlaceWaiting(p, worker, fp));
  EntryHeader h;
  h.type = EntryType::kPutBypass;
  h.key_len = static_cast<uint16_t>(key.size());
  h.value_len = value_len;
  h.shard = shard;
  h.version = shard_version_[shard].fetch_add(1) + 1;
  h.generation = segs_[loc.seg].generation;
  h.value_crc = value_crc;
  uint8_t* at = SegmentBase(loc.seg) + loc.off;
  segs_[loc.seg].pending++;  // before the slot exists: the cleaner never sees it unpinned
  format::EncodeBypassSlot(h, key, at);
  persister_->Flush(at, format::kEntryHeaderSize + key.size());
  persister_->Flush(at + format::BypassFlagOffset(key.size(), value_len), 16);
  AfterWrite(worker, 0);  // durable before the reply gives the client the slot
  BypassSlot slot;
  slot.log_offset = size_t{loc.seg} * geo_.segment_size + loc.off;
  slot.version = h.version;
  slot.footprint = static_cast<uint32_t>(fp);
  MutexLock l(pending_mu_);
  pending_[slot.log_offset] = worker;
  return slot;
}

Result<uint64_t> Store::Publish(uint32_t worker, uint32_t shard, std::string_view key,
                                uint64_t log_offset, uint64_t version) {
  ASYMNVM_RETURN_IF_ERROR(CheckShard(shard));
  if (worker >= geo_.workers) return Status::InvalidArgument("kv: worker out of range");
  const uint64_t seg = log_offset / geo_.segment_size;
  const uint32_t off = static_cast<uint32_t>(log_offset % geo_.segment_size);
  const auto no_slot = [&](const std::string& why) {
    return Status::FailedPrecondition("kv publish: no reservation of this key at version " +
                                      std::to_string(version) + " at log offset " +
                                      std::to_string(log_offset) + " (" + why + ")");
  };
  if (seg >= geo_.segments || off < format::kSegmentHeaderSize || off % format::kAlign != 0) {
    return no_slot("offset outside the log");
  }
  const uint64_t gen = segs_[seg].generation;
  const uint8_t* e = SegmentBase(static_cast<uint32_t>(seg)) + off;
  EntryHeader h;
  if (gen == 0 || !format::DecodeEntry(e, geo_.segment_size - off, gen, &h).ok() ||
      h.type != EntryType::kPutBypass || h.version != version || h.shard != shard ||
      format::EntryKey(e, h) != key) {
    return no_slot("the slot was abandoned and reclaimed, or never existed");
  }
  if (!h.persisted) {
    return Status::FailedPrecondition(
        "kv publish: the persist flag of the slot is not set, or the value does not match the "
        "checksum given at reservation");
  }
  Partition& p = *parts_[worker];
  const uint64_t tag = KeyHash(key);
  bool newer;
  uint64_t current = version;
  {
    MutexLock l(p.mu);
    auto it = FindLocked(p, shard, tag, key);
    newer = it == p.index.end() || it->second.version < version;
    if (!newer) current = it->second.version;
  }
  if (newer && o_.replicate) {
    std::vector<uint8_t> canon = Canonical(e, h);
    Status rs = o_.replicate(worker, shard, canon);
    if (!rs.ok()) return rs;
  }
  const uint64_t vf = format::ValidWord(version);
  std::memcpy(const_cast<uint8_t*>(e) + format::BypassFlagOffset(h.key_len, h.value_len) + 8, &vf,
              8);
  if (newer) {
    Loc loc{shard,   static_cast<uint32_t>(seg),
            off,     static_cast<uint32_t>(format::Footprint(h)),
            version, false};
    MutexLock l(p.mu);
    auto it = FindLocked(p, shard, tag, key);
    if (it == p.index.end()) {
      p.index.emplace(IndexKey{shard, tag}, loc);
      segs_[seg].live += loc.footprint;
    } else if (it->second.version < version) {
      segs_[it->second.seg].live -= it->second.footprint;
      it->second = loc;
      segs_[seg].live += loc.footprint;
    } else {
      current = it->second.version;
    }
  }
  MutexLock l(pending_mu_);
  if (pending_.erase(log_offset) > 0) segs_[seg].pending--;
  return current;
}

void Store::Settle(uint64_t log_offset) {
  uint32_t worker;
  {
    MutexLock l(pending_mu_);
    auto it = pending_.find(log_offset);
    if (it == pending_.end()) return;
    worker = it->second;
  }
  const uint32_t seg = static_cast<uint32_t>(log_offset / geo_.segment_size);
  const uint32_t off = static_cast<uint32_t>(log_offset % geo_.segment_size);
  const uint8_t* e = SegmentBase(seg) + off;
  EntryHeader h;
  if (format::DecodeEntry(e, geo_.segment_size - off, segs_[seg].generation, &h).ok() &&
      h.type == EntryType::kPutBypass && h.persisted) {
    // Durable but never published: publish it, as a restart would.
    auto r = Publish(worker, h.shard, format::EntryKey(e, h), log_offset, h.version);
    if (r.ok()) return;
    LOG_WARN("kv", "settling an RDMP slot at " << log_offset << ": " << r.status().ToString());
  }
  MutexLock l(pending_mu_);
  if (pending_.erase(log_offset) > 0) segs_[seg].pending--;
}

Located Store::Locate(uint32_t worker, uint32_t shard, std::string_view key) const {
  const ReadResult g = Get(worker, shard, key, 0, 0, /*locate_from=*/0);
  Located r;
  if (!g.located) return r;
  r.found = true;
  r.version = g.version;
  r.value_len = static_cast<uint32_t>(g.total_len);
  r.log_offset = g.log_offset;
  r.generation = g.generation;
  r.footprint = g.footprint;
  return r;
}

uint64_t Store::pending_slots() const {
  MutexLock l(pending_mu_);
  return pending_.size();
}

Status Store::ForEachEntry(uint32_t shard,
                           const std::function<Status(std::span<const uint8_t>)>& fn) const {
  if (shard >= geo_.shards) return Status::InvalidArgument("kv: shard out of range");
  for (uint32_t w = 0; w < geo_.workers; w++) {
    Partition& p = *parts_[w];
    uint64_t cursor = 0;
    bool more = true;
    while (more) {
      std::vector<std::vector<uint8_t>> batch;
      {
        MutexLock l(p.mu);
        auto it = p.index.lower_bound(IndexKey{shard, cursor});
        uint64_t last = cursor;
        for (; it != p.index.end() && it->first.first == shard; ++it) {
          if (batch.size() >= 256 && it->first.second != last) break;
          const uint8_t* e = SegmentBase(it->second.seg) + it->second.off;
          EntryHeader h;
          if (!format::DecodeEntry(e, geo_.segment_size - it->second.off,
                                   segs_[it->second.seg].generation, &h)
                   .ok()) {
            return Status::Corruption("kv: index points at an invalid entry");
          }
          batch.push_back(Canonical(e, h));
          last = it->first.second;
        }
        more = it != p.index.end() && it->first.first == shard;
        if (more) cursor = it->first.second;
      }
      for (auto& b : batch) ASYMNVM_RETURN_IF_ERROR(fn(b));
    }
  }
  return Status::Ok();
}

bool Store::NeedsCleaning() const {
  MutexLock l(alloc_mu_);
  const size_t watermark = std::max<size_t>(geo_.workers + 2, geo_.segments / 4);
  return free_.size() < watermark;
}

bool Store::WaitForFreeSegment(std::chrono::steady_clock::time_point deadline) {
  MutexLock l(alloc_mu_);
  return free_cv_.wait_until(l.native(), deadline,
                             [&]() ASYMNVM_REQUIRES(alloc_mu_) { return free_.size() > 1; });
}

Result<uint32_t> Store::CleanOnce() {
  MutexLock cl(clean_mu_);
  const uint64_t limit = static_cast<uint64_t>(o_.gc_threshold * geo_.segment_size);
  // Victims: sealed segments below the threshold, emptiest first; a few per pass.
  std::vector<std::pair<uint64_t, uint32_t>> cand;
  {
    MutexLock l(alloc_mu_);
    std::vector<bool> is_free(geo_.segments, false);
    for (uint32_t f : free_) is_free[f] = true;
    for (uint32_t i = 0; i < geo_.segments; i++) {
      if (is_free[i] || segs_[i].open || segs_[i].generation == 0 || segs_[i].pending > 0) continue;
      const uint64_t live = segs_[i].live;
      if (live < limit) cand.push_back({live, i});
    }
  }
  std::sort(cand.begin(), cand.end());
  if (cand.size() > 4) cand.resize(4);
  uint32_t freed = 0;
  Partition& gc = gc_part();
  std::vector<uint32_t> victims;
  for (auto [live, seg] : cand) {
    const uint8_t* base = SegmentBase(seg);
    const uint64_t gen = segs_[seg].generation;
    size_t off = format::kSegmentHeaderSize;
    bool ok = true;
    while (off + format::kEntryHeaderSize <= geo_.segment_size) {
      EntryHeader h;
      if (!format::DecodeEntry(base + off, geo_.segment_size - off, gen, &h).ok()) break;
      const size_t fp = format::Footprint(h);
      std::string_view key = format::EntryKey(base + off, h);
      if (h.shard < geo_.shards) {
        Partition& p = *parts_[WorkerOf(h.shard, geo_.workers)];
        MutexLock l(p.mu);
        auto it = FindLocked(p, h.shard, KeyHash(key), key);
        if (it != p.index.end() && it->second.seg == seg && it->second.off == off) {
          EntryHeader copy = h;  // an RDMP entry or a batch member is copied as a plain entry
          if (copy.type == EntryType::kPutBypass) copy.type = EntryType::kPut;
          copy.batch_count = copy.batch_index = 0;
          auto loc = Append(gc, 0, copy, key, format::EntryValue(base + off, h));
          if (!loc.ok()) {
            LOG_WARN("kv", "cleaner: " << loc.status().ToString());
            ok = false;
            break;
          }
          segs_[loc->seg].live += loc->footprint;
          segs_[seg].live -= it->second.footprint;
          it->second = *loc;
          gc_copied_ += fp;
        }
      }
      off += fp;
    }
    if (!ok) break;
    victims.push_back(seg);
  }
  if (victims.empty()) return 0u;
  // The largest applied OQ positions must outlive the entries that carried them.
  {
    MutexLock l(header_mu_);
    for (uint32_t w = 0; w < geo_.workers; w++) geo_.applied_floor[w] = applied_[w];
    ASYMNVM_RETURN_IF_ERROR(PersistHeader());
  }
  for (uint32_t seg : victims) {
    std::memset(SegmentBase(seg), 0, format::kSegmentHeaderSize);
    persister_->Persist(SegmentBase(seg), format::kSegmentHeaderSize);
    segs_[seg].generation = 0;
    segs_[seg].live = 0;
    MutexLock l(alloc_mu_);
    free_.push_back(seg);
    std::sort(free_.begin(), free_.end(), std::greater<uint32_t>());
    freed++;
  }
  gc_freed_ += freed;
  free_cv_.notify_all();
  return freed;
}

StoreStats Store::stats() const {
  StoreStats s;
  for (uint32_t w = 0; w < geo_.workers; w++) {
    Partition& p = *parts_[w];
    MutexLock l(p.mu);
    for (auto& [k, loc] : p.index) {
      if (loc.tombstone) {
        s.tombstones++;
      } else {
        s.keys++;
      }
      s.live_bytes += loc.footprint;
    }
  }
  s.segments = geo_.segments;
  {
    MutexLock l(alloc_mu_);
    s.free_segments = free_.size();
  }
  s.appended_bytes = appended_;
  s.gc_copied_bytes = gc_copied_;
  s.gc_segments_freed = gc_freed_;
  s.recovery_skipped = skipped_;
  s.recovered_entries = recovered_entries_;
  return s;
}

}  // namespace asymnvm::kv
