// An alloc::SlabSource over the back-end's allocation requests (doc/backend.md, OQ request types
// kAllocSlab / kAllocLarge / kFree): the back-end tier of the two-tier allocator, reached by RPC.
// With an ownership journal (SetJournal; frontend/alloc_journal.h), every slab and large extent
// obtained is recorded durably before it is handed to the allocator, and removed durably before
// it is given back (doc/alloc.md §Leaks across crashes).
//
// Frees wait for the writes before them (SetFreeGate; doc/alloc.md §Frees after the unlink): a
// structure frees a value's large extent, or the allocator returns an emptied slab, right after
// logging the write that unlinks it — a write still in the session's unsent batch. Sent at
// once, the free reached the back-end first; a crash then left the durable structure pointing
// at a free extent that another front-end could be handed (a replay found "free of A: not in
// any live allocation", or a key in the wrong chain). With a gate, Free queues the address with
// the gate's stamp (the session's count of writes logged so far), and IssueFrees(upto) sends the
// ones stamped at or below `upto` once a fence has shown those writes applied. A session that
// breaks drops its queue: those extents stay journaled and allocated (the recovery's reclaim or
// gc frees them), never freed under a live link.
//
// Thread safety: thread-safe (oq::Client is) without a journal; with one, calls must not overlap
// (the FrontendAllocator makes them under its mutex).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <utility>
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
  // journal does not hold is freed all the same. With a gate: queued (see above), returns OK.
  Status Free(uint64_t addr) override;
  // `stamp` (may be empty: frees are sent at once) is read by each Free; a free stamped at or
  // below the last IssueFrees watermark is sent at once (every write before it is applied).
  void SetFreeGate(std::function<uint64_t()> stamp) { gate_ = std::move(stamp); }
  // Writes stamped <= upto are applied: sends the queued frees stamped <= upto, in order; the
  // first error is returned (the rest are still sent). Not concurrent with other calls.
  Status IssueFrees(uint64_t upto);
  size_t queued_frees() const { return queued_.size(); }
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
  Status FreeNow(uint64_t addr);
  // AllocSlab/AllocLarge past the quarantine (see AddReclaimed).
  Result<uint64_t> Fresh(uint16_t type, uint64_t bytes);
  oq::Client* client_;
  OwnershipJournal* journal_ = nullptr;
  std::map<uint64_t, uint64_t> reclaimed_;  // start → end
  std::vector<uint64_t> quarantine_;
  std::function<uint64_t()> gate_;
  std::deque<std::pair<uint64_t, uint64_t>> queued_;  // (stamp, address), stamps ascending
  uint64_t applied_ = 0;                              // the last IssueFrees watermark
  uint32_t slab_size_;
  uint64_t begin_, end_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace asymnvm::frontend
