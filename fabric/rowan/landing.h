// LandingPersister: a pm::Persister that reports every range it flushes to a pm::PersistObserver
// (offset relative to a base address) before forwarding it to the real persister. The Rowan
// receiver and the baseline log targets register their data regions with it, so the XPLine model
// (pm::XPLineModel) sees exactly the bytes the NIC landed and persisted, in that order, and none of
// the receiver's own bookkeeping writes (meta words, zeroing of recycled segments).
//
// Thread safety: as the wrapped persister; the observer must be thread-safe (XPLineModel is).
#pragma once

#include <cstdint>

#include "asymnvm/pm.h"

namespace asymnvm::rowan {

class LandingPersister final : public pm::Persister {
 public:
  // `inner` is required; `observer` may be null (then this only forwards).
  LandingPersister(pm::Persister* inner, pm::PersistObserver* observer, const uint8_t* base)
      : inner_(inner), observer_(observer), base_(base) {}
  void Flush(const void* addr, size_t length) override {
    if (observer_ != nullptr && length > 0) {
      observer_->OnPersist(
          static_cast<uint64_t>(static_cast<const uint8_t*>(addr) - base_), length);
    }
    inner_->Flush(addr, length);
  }
  void Drain() override { inner_->Drain(); }

 private:
  pm::Persister* inner_;
  pm::PersistObserver* observer_;
  const uint8_t* base_;
};

}  // namespace asymnvm::rowan
