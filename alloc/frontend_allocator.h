// The front-end tier of AsymNVM's two-tier allocator (AsymNVM paper §5.2): carves
// objects out of slabs obtained from a SlabSource, entirely in front-end DRAM. Malloc/Free touch
// neither the network nor PM unless a new slab is needed, an idle slab is returned, or the request
// is larger than a slab (then it goes straight to SlabSource::AllocLarge / Free).
//
// Inside a slab, free space is a set of variable-size ranges (coalesced on free). Sizes are rounded
// up to `alignment`. Malloc picks the smallest free range that fits among the partial slabs (best
// fit, ties broken by lower address); if none fits it takes an empty slab, or asks the source for a
// new one. Slabs sit on one of three lists — full (no free range), partial, empty (no object) — and
// when more than `max_empty_slabs` slabs are empty, the surplus is returned to the source at once.
//
// Crash semantics: object-level state lives only here, in DRAM; the back-end's bitmap knows slabs
// and large extents, not objects. If the front-end crashes its slabs and large extents stay
// allocated at the back-end. A recovering front-end that can enumerate its live objects (by walking
// its data structures from their roots in the naming space) and knows its slab list hands them back
// with AdoptSlab / AdoptLarge and continues; slabs that nobody adopts stay allocated until someone
// frees them through the back-end (there is no owner tag in the bitmap: the SDK's source records
// them in the front-end id's ownership journal, and the session that recovers the id frees the
// unreached ones; frontend/alloc_journal.h). See doc/alloc.md.
//
// Thread safety: all methods are thread-safe (one internal mutex). Calls to the SlabSource are made
// while holding it, so a slow source delays other threads' Malloc/Free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "alloc/slab_source.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"

namespace asymnvm::alloc {

struct FrontendOptions {
  SlabSource* source = nullptr;  // required; must outlive the allocator
  uint32_t alignment = 16;       // power of two in [8, slab size]; every size is rounded up to it
  uint32_t max_empty_slabs = 2;  // empty slabs kept for reuse; more are returned to the source
};

struct FrontendStats {
  uint64_t slabs_full = 0, slabs_partial = 0, slabs_empty = 0;
  uint64_t large_live = 0;    // large extents held
  uint64_t objects_live = 0;  // small objects (in slabs)
  uint64_t bytes_live = 0;    // rounded bytes of small objects + requested bytes of large ones
  uint64_t mallocs = 0, frees = 0;  // successful calls
  uint64_t slab_requests = 0;       // successful SlabSource::AllocSlab calls
  uint64_t slab_returns = 0;        // idle slabs given back (SlabSource::Free)
  uint64_t slab_return_failures = 0;
  uint64_t large_requests = 0;  // successful SlabSource::AllocLarge calls
};

struct LiveObject {
  uint64_t addr = 0;
  uint64_t bytes = 0;
};

class FrontendAllocator {
 public:
  // Errors: kInvalidArgument (no source, bad alignment, slab size not a power of two).
  static Result<std::unique_ptr<FrontendAllocator>> Open(const FrontendOptions& options);
  // Gives nothing back to the source: slabs and large extents stay allocated there (call Trim
  // first to return empty slabs).
  ~FrontendAllocator();

  FrontendAllocator(const FrontendAllocator&) = delete;
  FrontendAllocator& operator=(const FrontendAllocator&) = delete;

  // The address of at least `size` bytes, aligned to `alignment`. Errors: kInvalidArgument (size 0,
  // or a large size the source rejects — e.g. more than the whole data area), kResourceExhausted
  // (the source has no slab / no run long enough), any transport error of the source.
  Result<uint64_t> Malloc(uint64_t size);
  // Frees an object returned by Malloc. Errors: kInvalidArgument (foreign pointer: not in one of
  // this front-end's slabs nor the start of one of its large extents; or a pointer into the middle
  // of an object), kFailedPrecondition (inside one of its slabs but not allocated: double free).
  // A large extent that was already freed is no longer known, so freeing it again is reported as
  // a foreign pointer (kInvalidArgument). Source errors of a large Free are returned and the extent
  // stays tracked.
  Status Free(uint64_t addr);
  // Usable bytes of the object at `addr` (rounded size, or the source's extent rounded to slabs for
  // large ones). Errors as Free.
  Result<uint64_t> UsableSize(uint64_t addr) const;
  // Returns every empty slab to the source. The first source error is returned (the slab is kept).
  Status Trim();

  // Recovery after a front-end restart (see the header comment). AdoptSlab takes over `slab` (an
  // address the source handed out as a slab) with the given live objects, which must lie inside it,
  // be aligned and not overlap; the gaps become free ranges. AdoptLarge takes over a large extent.
  // Errors: kInvalidArgument (misaligned slab, object outside the slab / overlapping / misaligned /
  // size 0), kAlreadyExists (the slab or extent is already held).
  Status AdoptSlab(uint64_t slab, std::span<const LiveObject> live);
  Status AdoptLarge(uint64_t addr, uint64_t bytes);

  // Slabs held (any list), in address order, and large extents held (requested sizes).
  std::vector<uint64_t> Slabs() const;
  std::vector<LiveObject> LargeObjects() const;
  FrontendStats stats() const;
  uint32_t slab_size() const { return slab_size_; }
  uint32_t alignment() const { return alignment_; }

 private:
  enum class ListKind : uint8_t { kFull, kPartial, kEmpty };
  // offset -> length, as a sorted flat vector: no heap allocation per insert/erase once grown,
  // cache-friendly lookups. Insert/erase move the tail (O(n) in the entries of one slab), which for
  // slabs of a few KiB is far cheaper than a tree node allocation.
  class OffsetMap {
   public:
    using Entry = std::pair<uint32_t, uint32_t>;
    using iterator = std::vector<Entry>::iterator;
    using const_iterator = std::vector<Entry>::const_iterator;
    iterator begin() { return v_.begin(); }
    iterator end() { return v_.end(); }
    const_iterator begin() const { return v_.begin(); }
    const_iterator end() const { return v_.end(); }
    size_t size() const { return v_.size(); }
    iterator lower_bound(uint32_t k) {
      return std::lower_bound(v_.begin(), v_.end(), k,
                              [](const Entry& e, uint32_t key) { return e.first < key; });
    }
    const_iterator lower_bound(uint32_t k) const {
      return std::lower_bound(v_.begin(), v_.end(), k,
                              [](const Entry& e, uint32_t key) { return e.first < key; });
    }
    const_iterator upper_bound(uint32_t k) const {
      return std::upper_bound(v_.begin(), v_.end(), k,
                              [](uint32_t key, const Entry& e) { return key < e.first; });
    }
    iterator find(uint32_t k) {
      auto it = lower_bound(k);
      return it != v_.end() && it->first == k ? it : v_.end();
    }
    const_iterator find(uint32_t k) const {
      auto it = lower_bound(k);
      return it != v_.end() && it->first == k ? it : v_.end();
    }
    // Precondition (as the callers guarantee): `k` is not present.
    void emplace(uint32_t k, uint32_t len) { v_.insert(lower_bound(k), Entry{k, len}); }
    void erase(iterator it) { v_.erase(it); }
    void erase(uint32_t k) {
      auto it = find(k);
      if (it != v_.end()) v_.erase(it);
    }

   private:
    std::vector<Entry> v_;
  };
  struct Slab {
    uint64_t addr = 0;
    uint32_t free_bytes = 0;
    OffsetMap free;  // offset -> length (coalesced)
    OffsetMap used;  // offset -> rounded length
    ListKind list = ListKind::kEmpty;
    std::list<Slab*>::iterator pos;
  };

  explicit FrontendAllocator(const FrontendOptions& o);
  uint64_t SlabKey(uint64_t addr) const;
  Slab* FindSlab(uint64_t addr) const ASYMNVM_REQUIRES(mu_);
  Result<Slab*> NewSlab() ASYMNVM_REQUIRES(mu_);
  // Moves `s` to the list its free_bytes says, keeping the best-fit index consistent.
  void Relist(Slab* s) ASYMNVM_REQUIRES(mu_);
  void IndexRanges(Slab* s, bool add) ASYMNVM_REQUIRES(mu_);
  void Carve(Slab* s, uint32_t off, uint32_t len) ASYMNVM_REQUIRES(mu_);
  void ReturnSurplus() ASYMNVM_REQUIRES(mu_);
  Status ReturnSlab(Slab* s) ASYMNVM_REQUIRES(mu_);
  Status CheckObject(uint64_t addr, Slab** slab, uint32_t* len) const ASYMNVM_REQUIRES(mu_);
  std::list<Slab*>& ListOf(ListKind k) ASYMNVM_REQUIRES(mu_);

  SlabSource* const source_;
  const uint32_t slab_size_;
  const uint32_t alignment_;
  const uint32_t max_empty_;
  const uint64_t origin_;

  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Slab>> slabs_
      ASYMNVM_GUARDED_BY(mu_);  // by slab address
  std::list<Slab*> full_ ASYMNVM_GUARDED_BY(mu_), partial_ ASYMNVM_GUARDED_BY(mu_),
      empty_ ASYMNVM_GUARDED_BY(mu_);
  // Best-fit index over the free ranges of partial slabs. Lengths are multiples of alignment_;
  // a range of b granules (b <= kMaxBuckets) lives in bucket b: a min-heap of addresses with lazy
  // deletion (an entry is current iff its slab is partial and has a free range of exactly that
  // length at that address; stale entries are dropped when they reach the top or when the heap
  // outgrows its live count). `nonempty_` has one bit per bucket with live > 0, so the smallest
  // fitting length is a bit scan. Longer ranges (slabs of more than kMaxBuckets granules) go to
  // `big_` ordered by (length, address). Lookup picks the smallest length, then the lowest address.
  static constexpr uint32_t kMaxBuckets = 4096;
  struct Bucket {
    std::vector<uint64_t> heap;  // std::push_heap with std::greater: front() is the lowest
    uint64_t live = 0;
  };
  void IndexAdd(uint32_t len, uint64_t addr) ASYMNVM_REQUIRES(mu_);
  void IndexRemove(uint32_t len, uint64_t addr) ASYMNVM_REQUIRES(mu_);
  bool RangeCurrent(uint32_t len, uint64_t addr) const ASYMNVM_REQUIRES(mu_);
  void CompactBucket(uint32_t b) ASYMNVM_REQUIRES(mu_);
  // Start of the best-fit free range of at least `len` bytes in *addr; false when none.
  bool BestFit(uint32_t len, uint64_t* addr) ASYMNVM_REQUIRES(mu_);
  uint32_t nbuckets_ = 0;  // set by the constructor; exact buckets are 1 .. nbuckets_ - 1
  std::vector<Bucket> buckets_ ASYMNVM_GUARDED_BY(mu_);
  std::vector<uint64_t> nonempty_ ASYMNVM_GUARDED_BY(mu_);
  std::set<std::pair<uint32_t, uint64_t>> big_ ASYMNVM_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, uint64_t> large_
      ASYMNVM_GUARDED_BY(mu_);  // address -> requested bytes
  FrontendStats stats_ ASYMNVM_GUARDED_BY(mu_);
};

}  // namespace asymnvm::alloc
