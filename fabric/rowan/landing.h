// LandingPersister: a pm::Persister that reports every range it flushes to a pm::PersistObserver
// (offset relative to a base address) before forwarding it to the real persister. The Rowan
// receiver and the baseline log targets register their data regions with it, so the XPLine model
// (pm::XPLineModel) sees exactly the bytes the NIC landed and persisted, in that order, and none of
// the receiver's own bookkeeping writes (meta words, zeroing of recycled segments).
//
// Thread safety: as the wrapped persister; the observer must be thread-safe (XPLineModel is).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "asymnvm/pm.h"

namespace asymnvm::rowan {

class LandingPersister final : public pm::Persister {
 public:
  // `inner` is required; `observer` may be null (then this only forwards). `on_landing`, if set,
  // is called with the same offset after the range was flushed (the Rowan receiver wakes its
  // control thread with it instead of polling the segments).
  LandingPersister(pm::Persister* inner, pm::PersistObserver* observer, const uint8_t* base,
                   std::function<void(uint64_t offset)> on_landing = {})
      : inner_(inner), observer_(observer), base_(base), on_landing_(std::move(on_landing)) {}
  void Flush(const void* addr, size_t length) override {
    const auto off = static_cast<uint64_t>(static_cast<const uint8_t*>(addr) - base_);
    if (observer_ != nullptr && length > 0) observer_->OnPersist(off, length);
    inner_->Flush(addr, length);
    if (on_landing_ && length > 0) on_landing_(off);
  }
  void Drain() override { inner_->Drain(); }

 private:
  pm::Persister* inner_;
  pm::PersistObserver* observer_;
  const uint8_t* base_;
  std::function<void(uint64_t)> on_landing_;
};

}  // namespace asymnvm::rowan
