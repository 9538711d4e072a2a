// Front-end allocator: best fit inside slabs, full/partial/empty lists (doc/alloc.md).
#include "alloc/frontend_allocator.h"

#include <algorithm>
#include <functional>
#include <string>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::alloc {
namespace {
constexpr const char* kLog = "alloc";
bool PowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
}  // namespace

Result<std::unique_ptr<FrontendAllocator>> FrontendAllocator::Open(const FrontendOptions& o) {
  if (o.source == nullptr) return Status::InvalidArgument("alloc frontend: source is required");
  uint32_t s = o.source->slab_size();
  if (!PowerOfTwo(s) || s > (1u << 30)) {
    return Status::InvalidArgument("alloc frontend: slab size " + std::to_string(s) +
                                   " is not a power of two <= 1 GiB");
  }
  if (!PowerOfTwo(o.alignment) || o.alignment < 8 || o.alignment > s) {
    return Status::InvalidArgument("alloc frontend: alignment " + std::to_string(o.alignment) +
                                   " is not a power of two in [8, slab size]");
  }
  return std::unique_ptr<FrontendAllocator>(new FrontendAllocator(o));
}

FrontendAllocator::FrontendAllocator(const FrontendOptions& o)
    : source_(o.source),
      slab_size_(o.source->slab_size()),
      alignment_(o.alignment),
      max_empty_(o.max_empty_slabs),
      origin_(o.source->data_begin()) {
  nbuckets_ = std::min<uint32_t>(slab_size_ / alignment_, kMaxBuckets) + 1;
  buckets_.resize(nbuckets_);
  nonempty_.assign((nbuckets_ + 63) / 64, 0);
}

bool FrontendAllocator::RangeCurrent(uint32_t len, uint64_t addr) const {
  const Slab* s = FindSlab(addr);
  if (s == nullptr || s->list != ListKind::kPartial) return false;
  auto it = s->free.find(static_cast<uint32_t>(addr - s->addr));
  return it != s->free.end() && it->second == len;
}

void FrontendAllocator::IndexAdd(uint32_t len, uint64_t addr) {
  const uint32_t b = len / alignment_;
  if (b >= nbuckets_) {
    big_.emplace(len, addr);
    return;
  }
  Bucket& k = buckets_[b];
  k.heap.push_back(addr);
  std::push_heap(k.heap.begin(), k.heap.end(), std::greater<uint64_t>());
  if (k.live++ == 0) nonempty_[b / 64] |= uint64_t{1} << (b % 64);
}

void FrontendAllocator::IndexRemove(uint32_t len, uint64_t addr) {
  const uint32_t b = len / alignment_;
  if (b >= nbuckets_) {
    big_.erase({len, addr});
    return;
  }
  Bucket& k = buckets_[b];
  ASYMNVM_CHECK(k.live > 0);
  if (--k.live == 0) {
    k.heap.clear();  // no range of this length is current: every entry is stale
    nonempty_[b / 64] &= ~(uint64_t{1} << (b % 64));
  } else if (k.heap.size() > 4 * k.live + 64) {
    CompactBucket(b);
  }
}

void FrontendAllocator::CompactBucket(uint32_t b) {
  Bucket& k = buckets_[b];
  const uint32_t len = b * alignment_;
  std::sort(k.heap.begin(), k.heap.end());
  k.heap.erase(std::unique(k.heap.begin(), k.heap.end()), k.heap.end());
  k.heap.erase(
      std::remove_if(k.heap.begin(), k.heap.end(),
                     [&](uint64_t a) ASYMNVM_REQUIRES(mu_) { return !RangeCurrent(len, a); }),
      k.heap.end());
  std::make_heap(k.heap.begin(), k.heap.end(), std::greater<uint64_t>());
}

bool FrontendAllocator::BestFit(uint32_t len, uint64_t* addr) {
  uint32_t b = len / alignment_;
  if (b < nbuckets_) {
    for (uint32_t w = b / 64; w < nonempty_.size(); w++) {
      uint64_t bits = nonempty_[w];
      if (w == b / 64) bits &= ~uint64_t{0} << (b % 64);
      if (bits != 0) {
        const uint32_t c = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
        Bucket& k = buckets_[c];
        const uint32_t clen = c * alignment_;
        while (!k.heap.empty() && !RangeCurrent(clen, k.heap.front())) {
          std::pop_heap(k.heap.begin(), k.heap.end(), std::greater<uint64_t>());
          k.heap.pop_back();
        }
        // live > 0 guarantees a current entry (every IndexAdd pushed one).
        ASYMNVM_CHECK(!k.heap.empty());
        *addr = k.heap.front();
        return true;
      }
    }
  }
  auto it = big_.lower_bound({len, 0});
  if (it == big_.end()) return false;
  *addr = it->second;
  return true;
}

FrontendAllocator::~FrontendAllocator() = default;

std::list<FrontendAllocator::Slab*>& FrontendAllocator::ListOf(ListKind k) {
  switch (k) {
    case ListKind::kFull:
      return full_;
    case ListKind::kPartial:
      return partial_;
    case ListKind::kEmpty:
      break;
  }
  return empty_;
}

uint64_t FrontendAllocator::SlabKey(uint64_t addr) const {
  return addr - ((addr - origin_) & (slab_size_ - 1));
}

FrontendAllocator::Slab* FrontendAllocator::FindSlab(uint64_t addr) const {
  auto it = slabs_.find(SlabKey(addr));
  return it == slabs_.end() ? nullptr : it->second.get();
}

void FrontendAllocator::IndexRanges(Slab* s, bool add) {
  for (const auto& [off, len] : s->free) {
    if (add) {
      IndexAdd(len, s->addr + off);
    } else {
      IndexRemove(len, s->addr + off);
    }
  }
}

void FrontendAllocator::Relist(Slab* s) {
  ListKind want = s->free_bytes == 0            ? ListKind::kFull
                  : s->free_bytes == slab_size_ ? ListKind::kEmpty
                                                : ListKind::kPartial;
  if (want == s->list) return;
  if (s->list == ListKind::kPartial) IndexRanges(s, false);
  if (want == ListKind::kPartial) IndexRanges(s, true);
  ListOf(s->list).erase(s->pos);
  std::list<Slab*>& to = ListOf(want);
  to.push_front(s);
  s->pos = to.begin();
  s->list = want;
}

Result<FrontendAllocator::Slab*> FrontendAllocator::NewSlab() {
  auto r = source_->AllocSlab();
  if (!r.ok()) return r.status();
  uint64_t addr = r.value();
  if (SlabKey(addr) != addr || slabs_.count(addr) != 0) {
    return Status::Internal("alloc frontend: source handed out slab " + std::to_string(addr) +
                            " that is misaligned or already held");
  }
  auto slab = std::make_unique<Slab>();
  Slab* s = slab.get();
  s->addr = addr;
  s->free_bytes = slab_size_;
  s->free.emplace(0, slab_size_);
  s->list = ListKind::kEmpty;
  empty_.push_front(s);
  s->pos = empty_.begin();
  slabs_.emplace(addr, std::move(slab));
  stats_.slab_requests++;
  return s;
}

void FrontendAllocator::Carve(Slab* s, uint32_t off, uint32_t len) {
  bool indexed = s->list == ListKind::kPartial;
  auto it = s->free.find(off);
  uint32_t flen = it->second;
  s->free.erase(it);
  if (indexed) IndexRemove(flen, s->addr + off);
  if (flen > len) {
    s->free.emplace(off + len, flen - len);
    if (indexed) IndexAdd(flen - len, s->addr + off + len);
  }
  s->used.emplace(off, len);
  s->free_bytes -= len;
  Relist(s);
}

Result<uint64_t> FrontendAllocator::Malloc(uint64_t size) {
  if (size == 0) return Status::InvalidArgument("alloc frontend: Malloc of 0 bytes");
  MutexLock lock(mu_);
  if (size > slab_size_) {
    auto r = source_->AllocLarge(size);
    if (!r.ok()) return r.status();
    large_.emplace(r.value(), size);
    stats_.large_requests++;
    stats_.mallocs++;
    stats_.bytes_live += size;
    return r.value();
  }
  uint32_t len =
      static_cast<uint32_t>((size + alignment_ - 1) & ~static_cast<uint64_t>(alignment_ - 1));
  Slab* s = nullptr;
  uint32_t off = 0;
  if (uint64_t addr = 0; BestFit(len, &addr)) {
    s = FindSlab(addr);
    off = static_cast<uint32_t>(addr - s->addr);
  } else if (!empty_.empty()) {
    s = empty_.front();
  } else {
    auto r = NewSlab();
    if (!r.ok()) return r.status();
    s = r.value();
  }
  Carve(s, off, len);
  stats_.mallocs++;
  stats_.objects_live++;
  stats_.bytes_live += len;
  return s->addr + off;
}

Status FrontendAllocator::CheckObject(uint64_t addr, Slab** slab, uint32_t* len) const {
  Slab* s = FindSlab(addr);
  if (s == nullptr) {
    return Status::InvalidArgument("alloc frontend: foreign pointer " + std::to_string(addr) +
                                   ": not in a slab or large extent of this front-end");
  }
  uint32_t off = static_cast<uint32_t>(addr - s->addr);
  auto it = s->used.find(off);
  if (it == s->used.end()) {
    auto after = s->used.upper_bound(off);
    if (after != s->used.begin()) {
      auto prev = std::prev(after);
      if (prev->first + prev->second > off) {
        return Status::InvalidArgument("alloc frontend: pointer " + std::to_string(addr) +
                                       " is inside the object at " +
                                       std::to_string(s->addr + prev->first));
      }
    }
    return Status::FailedPrecondition("alloc frontend: pointer " + std::to_string(addr) +
                                      " is not allocated (double free?)");
  }
  *slab = s;
  *len = it->second;
  return Status::Ok();
}

Status FrontendAllocator::Free(uint64_t addr) {
  MutexLock lock(mu_);
  auto lit = large_.find(addr);
  if (lit != large_.end()) {
    ASYMNVM_RETURN_IF_ERROR(source_->Free(addr));
    stats_.bytes_live -= lit->second;
    large_.erase(lit);
    stats_.frees++;
    return Status::Ok();
  }
  Slab* s = nullptr;
  uint32_t len = 0;
  ASYMNVM_RETURN_IF_ERROR(CheckObject(addr, &s, &len));
  bool indexed = s->list == ListKind::kPartial;
  uint32_t off = static_cast<uint32_t>(addr - s->addr);
  s->used.erase(off);
  uint32_t start = off, rlen = len;
  auto next = s->free.find(off + len);
  if (next != s->free.end()) {
    rlen += next->second;
    if (indexed) IndexRemove(next->second, s->addr + next->first);
    s->free.erase(next);
  }
  auto after = s->free.lower_bound(off);
  if (after != s->free.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == off) {
      start = prev->first;
      rlen += prev->second;
      if (indexed) IndexRemove(prev->second, s->addr + prev->first);
      s->free.erase(prev);
    }
  }
  s->free.emplace(start, rlen);
  if (indexed) IndexAdd(rlen, s->addr + start);
  s->free_bytes += len;
  Relist(s);
  stats_.frees++;
  stats_.objects_live--;
  stats_.bytes_live -= len;
  if (s->list == ListKind::kEmpty) ReturnSurplus();
  return Status::Ok();
}

Status FrontendAllocator::ReturnSlab(Slab* s) {
  Status st = source_->Free(s->addr);
  if (!st.ok()) {
    stats_.slab_return_failures++;
    LOG_WARN(kLog, "returning idle slab " << s->addr << " failed: " << st.ToString());
    return st;
  }
  empty_.erase(s->pos);
  slabs_.erase(s->addr);
  stats_.slab_returns++;
  return Status::Ok();
}

void FrontendAllocator::ReturnSurplus() {
  while (empty_.size() > max_empty_) {
    if (!ReturnSlab(empty_.back()).ok()) break;
  }
}

Status FrontendAllocator::Trim() {
  MutexLock lock(mu_);
  while (!empty_.empty()) ASYMNVM_RETURN_IF_ERROR(ReturnSlab(empty_.back()));
  return Status::Ok();
}

Result<uint64_t> FrontendAllocator::UsableSize(uint64_t addr) const {
  MutexLock lock(mu_);
  auto lit = large_.find(addr);
  if (lit != large_.end()) {
    return (lit->second + slab_size_ - 1) / slab_size_ * slab_size_;
  }
  Slab* s = nullptr;
  uint32_t len = 0;
  ASYMNVM_RETURN_IF_ERROR(CheckObject(addr, &s, &len));
  return static_cast<uint64_t>(len);
}

Status FrontendAllocator::AdoptSlab(uint64_t slab, std::span<const LiveObject> live) {
  MutexLock lock(mu_);
  if (SlabKey(slab) != slab) {
    return Status::InvalidArgument("alloc frontend: AdoptSlab " + std::to_string(slab) +
                                   " is not a slab address");
  }
  if (slabs_.count(slab) != 0 || large_.count(slab) != 0) {
    return Status::AlreadyExists("alloc frontend: slab " + std::to_string(slab) + " already held");
  }
  std::vector<LiveObject> objs(live.begin(), live.end());
  std::sort(objs.begin(), objs.end(),
            [](const LiveObject& a, const LiveObject& b) { return a.addr < b.addr; });
  auto slab_obj = std::make_unique<Slab>();
  Slab* s = slab_obj.get();
  s->addr = slab;
  uint64_t cursor = 0;
  for (const LiveObject& o : objs) {
    uint64_t len = (o.bytes + alignment_ - 1) / alignment_ * alignment_;
    if (o.bytes == 0 || o.addr < slab || o.addr - slab < cursor || (o.addr - slab) % alignment_ ||
        len > slab_size_ || o.addr - slab > slab_size_ - len) {
      return Status::InvalidArgument("alloc frontend: AdoptSlab object " + std::to_string(o.addr) +
                                     "+" + std::to_string(o.bytes) +
                                     " is outside the slab, misaligned or overlapping");
    }
    uint64_t off = o.addr - slab;
    if (off > cursor) s->free.emplace(cursor, off - cursor);
    s->used.emplace(off, len);
    cursor = off + len;
  }
  if (cursor < slab_size_) s->free.emplace(cursor, slab_size_ - cursor);
  s->free_bytes = 0;
  for (const auto& [off, len] : s->free) s->free_bytes += len;
  s->list = ListKind::kEmpty;
  empty_.push_front(s);
  s->pos = empty_.begin();
  slabs_.emplace(slab, std::move(slab_obj));
  Relist(s);
  stats_.objects_live += s->used.size();
  stats_.bytes_live += slab_size_ - s->free_bytes;
  return Status::Ok();
}

Status FrontendAllocator::AdoptLarge(uint64_t addr, uint64_t bytes) {
  MutexLock lock(mu_);
  if (bytes == 0) return Status::InvalidArgument("alloc frontend: AdoptLarge of 0 bytes");
  if (large_.count(addr) != 0 || FindSlab(addr) != nullptr) {
    return Status::AlreadyExists("alloc frontend: extent " + std::to_string(addr) +
                                 " already held");
  }
  large_.emplace(addr, bytes);
  stats_.bytes_live += bytes;
  return Status::Ok();
}

std::vector<uint64_t> FrontendAllocator::Slabs() const {
  MutexLock lock(mu_);
  std::vector<uint64_t> out;
  out.reserve(slabs_.size());
  for (const auto& kv : slabs_) out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<LiveObject> FrontendAllocator::LargeObjects() const {
  MutexLock lock(mu_);
  std::vector<LiveObject> out;
  for (const auto& [a, b] : large_) out.push_back({a, b});
  std::sort(out.begin(), out.end(),
            [](const LiveObject& x, const LiveObject& y) { return x.addr < y.addr; });
  return out;
}

FrontendStats FrontendAllocator::stats() const {
  MutexLock lock(mu_);
  FrontendStats s = stats_;
  s.slabs_full = full_.size();
  s.slabs_partial = partial_.size();
  s.slabs_empty = empty_.size();
  s.large_live = large_.size();
  return s;
}

}  // namespace asymnvm::alloc
