// SlabSource: where a FrontendAllocator gets its slabs and large extents from. In a cluster this is
// the back-end's allocator service reached over the Ordered Queue RPC; LocalSlabSource calls a
// BackendAllocator in the same process (tests, the `symmetric` baseline).
//
// Contract for implementations: AllocSlab returns the address of slab_size() contiguous bytes,
// aligned to slab_size() relative to every other slab of the same source (addresses are congruent
// modulo slab_size(); slab_size() is a power of two); AllocLarge returns the start of at least
// `bytes` contiguous bytes; Free releases either, given the exact start address. Errors are the
// BackendAllocator's (kResourceExhausted, kInvalidArgument, kFailedPrecondition) plus whatever the
// transport adds (kConnectionError, kTimedOut, ...).
//
// Thread safety: implementations must be thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

#include "alloc/backend_allocator.h"
#include "asymnvm/status.h"

namespace asymnvm::alloc {

class SlabSource {
 public:
  virtual ~SlabSource() = default;
  virtual Result<uint64_t> AllocSlab() = 0;
  virtual Result<uint64_t> AllocLarge(uint64_t bytes) = 0;
  virtual Status Free(uint64_t addr) = 0;
  virtual uint32_t slab_size() const = 0;
  // Lowest and one-past-highest address this source can hand out (for foreign-pointer messages
  // and test oracles).
  virtual uint64_t data_begin() const = 0;
  virtual uint64_t data_end() const = 0;
};

// Forwards to a BackendAllocator the caller keeps alive. Counts calls (what would be round trips
// with a remote source).
class LocalSlabSource : public SlabSource {
 public:
  explicit LocalSlabSource(BackendAllocator* backend) : backend_(backend) {}

  Result<uint64_t> AllocSlab() override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    return backend_->AllocSlab();
  }
  Result<uint64_t> AllocLarge(uint64_t bytes) override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    return backend_->AllocLarge(bytes);
  }
  Status Free(uint64_t addr) override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    return backend_->Free(addr);
  }
  uint32_t slab_size() const override { return backend_->block_size(); }
  uint64_t data_begin() const override { return backend_->data_begin(); }
  uint64_t data_end() const override { return backend_->data_end(); }

  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  BackendAllocator* backend_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace asymnvm::alloc
