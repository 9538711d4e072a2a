#include "fabric/oq/kv_store.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "common/coding.h"
#include "common/thread_annotations.h"

namespace asymnvm::oq {
namespace {

constexpr char kMagic[8] = {'O', 'Q', 'K', 'V', 'T', 'A', 'B', '1'};
constexpr size_t kHeader = 4096;
constexpr size_t kEntry = 64;    // two 32-byte versions
constexpr size_t kVersion = 32;  // key u64 | value u64 | pos u64 | applied u32 | crc32c u32

bool DecodeVersion(const uint8_t* p, uint64_t* key, uint64_t* value, uint64_t* pos,
                   uint32_t* applied) {
  if (GetLe32(p + 28) != Crc32c(p, 28)) return false;
  *key = GetLe64(p);
  *value = GetLe64(p + 8);
  *pos = GetLe64(p + 16);
  *applied = GetLe32(p + 24);
  return *applied > 0;
}

}  // namespace

std::unique_ptr<KvStore> KvStore::OpenDram() { return std::unique_ptr<KvStore>(new KvStore()); }

Result<std::unique_ptr<KvStore>> KvStore::OpenDurable(uint8_t* area, size_t size,
                                                      pm::Persister* persister) {
  if (area == nullptr || persister == nullptr || size < kHeader + kEntry ||
      reinterpret_cast<uintptr_t>(area) % 64 != 0) {
    return Status::InvalidArgument("oq kv: durable table needs an aligned area of >= 4160 bytes");
  }
  std::unique_ptr<KvStore> kv(new KvStore());
  kv->persister_ = persister;
  kv->capacity_ = (size - kHeader) / kEntry;
  kv->table_ = area + kHeader;
  bool blank = std::all_of(area, area + 24, [](uint8_t b) { return b == 0; });
  bool valid = std::memcmp(area, kMagic, 8) == 0 && GetLe32(area + 16) == Crc32c(area, 16);
  if (!blank && !valid) return Status::Corruption("oq kv: table header is corrupt");
  if (valid && GetLe64(area + 8) != kv->capacity_) {
    return Status::InvalidArgument("oq kv: table was formatted with another capacity");
  }
  if (!valid) {
    std::memset(kv->table_, 0, kv->capacity_ * kEntry);
    persister->Persist(kv->table_, kv->capacity_ * kEntry);
    std::memcpy(area, kMagic, 8);
    PutLe64(area + 8, kv->capacity_);
    PutLe32(area + 16, Crc32c(area, 16));
    persister->Persist(area, 24);
  }
  MutexLock lock(kv->mu_);  // uncontended: kv is not returned yet
  for (size_t i = 0; i < kv->capacity_; i++) {
    uint64_t key;
    Entry e;
    int newest;
    const uint8_t* p = kv->table_ + i * kEntry;
    bool zero = std::all_of(p, p + kEntry, [](uint8_t b) { return b == 0; });
    if (kv->ReadSlot(i, &key, &e, &newest)) {
      kv->used_++;
    } else if (!zero) {
      return Status::Corruption("oq kv: entry " + std::to_string(i) + " fails its checksum");
    }
  }
  return kv;
}

bool KvStore::ReadSlot(size_t i, uint64_t* key, Entry* e, int* newest) const {
  const uint8_t* p = table_ + i * kEntry;
  bool found = false;
  uint32_t best = 0;
  for (int v = 0; v < 2; v++) {
    uint64_t k, value, pos;
    uint32_t applied;
    if (DecodeVersion(p + v * kVersion, &k, &value, &pos, &applied) && applied > best) {
      best = applied;
      *key = k;
      e->value = value;
      e->pos = pos;
      e->applied = applied;
      *newest = v;
      found = true;
    }
  }
  return found;
}

size_t KvStore::Probe(uint64_t key, bool* found) const {
  size_t i = Hash64(&key, 8) % capacity_;
  for (size_t n = 0; n < capacity_; n++, i = (i + 1) % capacity_) {
    uint64_t k;
    Entry e;
    int newest;
    if (!ReadSlot(i, &k, &e, &newest)) {
      *found = false;
      return i;
    }
    if (k == key) {
      *found = true;
      return i;
    }
  }
  *found = false;
  return SIZE_MAX;
}

Status KvStore::Set(uint64_t key, uint64_t value, uint32_t worker, uint64_t position,
                    bool recovering) {
  MutexLock lock(mu_);
  return SetLocked(key, value, (uint64_t{worker} << 56) | position, recovering);
}

Status KvStore::SetLocked(uint64_t key, uint64_t value, uint64_t pos, bool recovering) {
  auto skip = [&](const Entry& e) {
    return recovering && (e.pos >> 56) == (pos >> 56) && pos <= e.pos;
  };
  if (table_ == nullptr) {
    Entry& e = map_[key];
    if (e.applied > 0 && skip(e)) {
      skipped_++;
      return Status::Ok();
    }
    e.value = value;
    e.pos = pos;
    e.applied++;
    return Status::Ok();
  }
  bool found;
  size_t i = Probe(key, &found);
  if (i == SIZE_MAX) return Status::ResourceExhausted("oq kv: table full", false);
  Entry e;
  int newest = 1;
  uint64_t k;
  if (found) {
    ReadSlot(i, &k, &e, &newest);
    if (skip(e)) {
      skipped_++;
      return Status::Ok();
    }
  } else {
    used_++;
  }
  // Write the older version slot, so the newest valid one survives a torn write.
  uint8_t* p = table_ + i * kEntry + (newest == 0 ? 1 : 0) * kVersion;
  uint8_t v[kVersion];
  PutLe64(v, key);
  PutLe64(v + 8, value);
  PutLe64(v + 16, pos);
  PutLe32(v + 24, static_cast<uint32_t>(e.applied + 1));
  PutLe32(v + 28, Crc32c(v, 28));
  std::memcpy(p, v, kVersion);
  persister_->Persist(p, kVersion);
  return Status::Ok();
}

KvInfo KvStore::Get(uint64_t key) const {
  MutexLock lock(mu_);
  if (table_ == nullptr) {
    auto it = map_.find(key);
    return it == map_.end() ? KvInfo{} : KvInfo{it->second.value, it->second.applied};
  }
  bool found;
  size_t i = Probe(key, &found);
  if (!found) return {};
  uint64_t k;
  Entry e;
  int newest;
  ReadSlot(i, &k, &e, &newest);
  return {e.value, e.applied};
}

uint64_t KvStore::skipped_reexecutions() const {
  MutexLock lock(mu_);
  return skipped_;
}

uint64_t KvStore::size() const {
  MutexLock lock(mu_);
  return table_ == nullptr ? map_.size() : used_;
}

Handler KvStore::handler() {
  return [this](const RequestContext& ctx, std::span<const uint8_t> payload,
                std::vector<uint8_t>* response) -> Status {
    switch (ctx.type) {
      case kKvSet:
        if (payload.size() != 16)
          return Status::InvalidArgument("kv set: payload must be 16 bytes");
        return Set(GetLe64(payload.data()), GetLe64(payload.data() + 8), ctx.worker, ctx.position,
                   ctx.recovering);
      case kKvGet:
      case kKvInfo: {
        if (payload.size() != 8) return Status::InvalidArgument("kv get: payload must be 8 bytes");
        KvInfo info = Get(GetLe64(payload.data()));
        response->resize(ctx.type == kKvGet ? 8 : 16);
        PutLe64(response->data(), info.value);
        if (ctx.type == kKvInfo) PutLe64(response->data() + 8, info.applied_sets);
        return Status::Ok();
      }
      default:
        return Status::InvalidArgument("kv: unknown request type " + std::to_string(ctx.type));
    }
  };
}

uint32_t KvStore::WorkerFor(uint64_t key, uint32_t workers) {
  return static_cast<uint32_t>(Hash64(&key, 8) % workers);
}

std::vector<uint8_t> KvStore::SetPayload(uint64_t key, uint64_t value) {
  std::vector<uint8_t> b(16);
  PutLe64(b.data(), key);
  PutLe64(b.data() + 8, value);
  return b;
}

std::vector<uint8_t> KvStore::KeyPayload(uint64_t key) {
  std::vector<uint8_t> b(8);
  PutLe64(b.data(), key);
  return b;
}

}  // namespace asymnvm::oq
