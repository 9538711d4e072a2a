// An alloc::SlabSource over the back-end's allocation requests (doc/backend.md, OQ request types
// kAllocSlab / kAllocLarge / kFree): the back-end tier of the two-tier allocator, reached by RPC.
// With an ownership journal (SetJournal; frontend/alloc_journal.h), every slab and large extent
// obtained is recorded durably before it is handed to the allocator, and removed durably before
// it is given back (doc/alloc.md §Leaks across crashes).
//
// Thread safety: thread-safe (oq::Client is) without a journal; with one, calls must not overlap
// (the FrontendAllocator makes them under its mutex).
#pragma once

#include <atomic>
#include <iterator>
#include <map>
#include <vector>

#include "alloc/slab_source.h"
#include "fabric/oq/oq.h"
#include "frontend/alloc_journal.h"

namespace asymnvm::frontend {

class RpcSlabSource : public alloc::SlabSource {
 public:
  // `client` must outlive this object.
  RpcSlabSource(oq::Client* client, uint32_t slab_size, uint64_t data_begin, uint64_t data_end)
      : client_(client), slab_size_(slab_size), begin_(data_begin), end_(data_end) {}

  // Errors: whatever the back-end returns (kResourceExhausted, kInvalidArgument,
  // kFailedPrecondition) plus transport errors; kProtocolError on a malformed reply.
  // With a journal: the back-end records the address in it with the allocation (one request).
  Result<uint64_t> AllocSlab() override;
  Result<uint64_t> AllocLarge(uint64_t bytes) override;
  // With a journal: the back-end clears the entry with the free (one request); an address the
  // journal does not hold is freed all the same.
  Status Free(uint64_t addr) override;
  // Back-end requests that bypass the journal (the journal's own extents).
  Result<uint64_t> RawAlloc(uint64_t bytes);
  // entry != 0: the journal entry (and its value) the back-end clears with the free.
  Status RawFree(uint64_t addr, uint64_t entry = 0, uint64_t expected = 0);
  // `journal` (may be null) must outlive this object.
  void SetJournal(OwnershipJournal* journal) { journal_ = journal; }

  // Blocks this session freed by an online reclaim (doc/alloc.md §Reclaim at recovery): its
  // structures may still hold stale frees of objects in them (a multi-version node retired during
  // the replay, waiting for its grace period). The session never carves in such a block again:
  // one handed out again by AllocSlab / AllocLarge is kept aside (journaled, unused; returned by
  // ReleaseQuarantine) and another one asked for; so a free of an address in a reclaimed block is
  // always stale and is dropped (Session::Free).
  void AddReclaimed(uint64_t addr, uint64_t bytes) { reclaimed_[addr] = addr + bytes; }
  bool Reclaimed(uint64_t addr) const {
    auto it = reclaimed_.upper_bound(addr);
    return it != reclaimed_.begin() && addr < std::prev(it)->second;
  }
  Status ReleaseQuarantine();
  const std::map<uint64_t, uint64_t>& reclaimed() const { return reclaimed_; }
  // The live back-end allocation holding `addr`: {start, bytes}, {0, 0} when there is none.
  Result<std::pair<uint64_t, uint64_t>> ExtentOf(uint64_t addr);
  uint32_t slab_size() const override { return slab_size_; }
  uint64_t data_begin() const override { return begin_; }
  uint64_t data_end() const override { return end_; }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  Result<uint64_t> CallAddr(uint16_t type, std::span<const uint8_t> payload);
  bool Overlaps(uint64_t addr, uint64_t bytes) const;
  // AllocSlab/AllocLarge past the quarantine (see AddReclaimed).
  Result<uint64_t> Fresh(uint16_t type, uint64_t bytes);
  oq::Client* client_;
  OwnershipJournal* journal_ = nullptr;
  std::map<uint64_t, uint64_t> reclaimed_;  // start → end
  std::vector<uint64_t> quarantine_;
  uint32_t slab_size_;
  uint64_t begin_, end_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace asymnvm::frontend
