// An alloc::SlabSource over the back-end's allocation requests (doc/backend.md, OQ request types
// kAllocSlab / kAllocLarge / kFree): the back-end tier of the two-tier allocator, reached by RPC.
//
// Thread safety: thread-safe (oq::Client is).
#pragma once

#include <atomic>

#include "alloc/slab_source.h"
#include "fabric/oq/oq.h"

namespace asymnvm::frontend {

class RpcSlabSource : public alloc::SlabSource {
 public:
  // `client` must outlive this object.
  RpcSlabSource(oq::Client* client, uint32_t slab_size, uint64_t data_begin, uint64_t data_end)
      : client_(client), slab_size_(slab_size), begin_(data_begin), end_(data_end) {}

  // Errors: whatever the back-end returns (kResourceExhausted, kInvalidArgument,
  // kFailedPrecondition) plus transport errors; kProtocolError on a malformed reply.
  Result<uint64_t> AllocSlab() override;
  Result<uint64_t> AllocLarge(uint64_t bytes) override;
  Status Free(uint64_t addr) override;
  // The live back-end allocation holding `addr`: {start, bytes}, {0, 0} when there is none.
  Result<std::pair<uint64_t, uint64_t>> ExtentOf(uint64_t addr);
  uint32_t slab_size() const override { return slab_size_; }
  uint64_t data_begin() const override { return begin_; }
  uint64_t data_end() const override { return end_; }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  Result<uint64_t> CallAddr(uint16_t type, std::span<const uint8_t> payload);
  oq::Client* client_;
  uint32_t slab_size_;
  uint64_t begin_, end_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace asymnvm::frontend
