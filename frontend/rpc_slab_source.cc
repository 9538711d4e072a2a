#include "frontend/rpc_slab_source.h"

#include <algorithm>

#include "backend/rpc.h"
#include "common/crash_point.h"
#include "common/logging.h"

namespace asymnvm::frontend {

Result<uint64_t> RpcSlabSource::CallAddr(uint16_t type, std::span<const uint8_t> payload) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  std::vector<uint8_t> response;
  ASYMNVM_RETURN_IF_ERROR(client_->Call(0, type, payload, &response));
  if (response.size() != 8) {
    return Status::ProtocolError("allocation reply of " + std::to_string(response.size()) +
                                 " bytes, expected 8");
  }
  return GetLe64(response.data());
}

Result<uint64_t> RpcSlabSource::Journaled(Result<uint64_t> r) {
  if (!r.ok() || journal_ == nullptr) return r;
  // Allocated, not yet recorded: a crash here leaks the extent (gc finds it), never frees wrongly.
  ASYMNVM_CRASH_POINT("frontend.slab.before_journal");
  Status st = journal_->Add(*r);
  if (!st.ok()) {
    Status f = RawFree(*r);
    if (!f.ok()) LOG_WARN("frontend", "freeing an extent not journaled: " << f.ToString());
    return st.WithContext("ownership journal");
  }
  // Recorded, not yet used: a recovery frees it (no structure reaches it).
  ASYMNVM_CRASH_POINT("frontend.slab.journaled");
  return r;
}

bool RpcSlabSource::Overlaps(uint64_t addr, uint64_t bytes) const {
  auto it = reclaimed_.lower_bound(addr + bytes);
  return it != reclaimed_.begin() && std::prev(it)->second > addr;
}

Result<uint64_t> RpcSlabSource::Fresh(uint16_t type, uint64_t bytes) {
  backend::PayloadWriter w;
  if (type == backend::kAllocLarge) w.U64(bytes);
  const uint64_t span = (std::max<uint64_t>(bytes, 1) + slab_size_ - 1) / slab_size_ * slab_size_;
  for (;;) {
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, Journaled(CallAddr(type, w.bytes())));
    if (reclaimed_.empty() || !Overlaps(a, span)) return a;
    quarantine_.push_back(a);  // journaled: a crash leaves it to the next recovery
  }
}

Result<uint64_t> RpcSlabSource::AllocSlab() { return Fresh(backend::kAllocSlab, slab_size_); }

Result<uint64_t> RpcSlabSource::AllocLarge(uint64_t bytes) {
  return Fresh(backend::kAllocLarge, bytes);
}

Status RpcSlabSource::ReleaseQuarantine() {
  Status first;
  for (uint64_t a : quarantine_) {
    Status st = Free(a);
    if (!st.ok() && first.ok()) first = st;
  }
  quarantine_.clear();
  return first;
}

Result<uint64_t> RpcSlabSource::RawAlloc(uint64_t bytes) {
  if (bytes <= slab_size_) return CallAddr(backend::kAllocSlab, {});
  backend::PayloadWriter w;
  w.U64(bytes);
  return CallAddr(backend::kAllocLarge, w.bytes());
}

Status RpcSlabSource::Free(uint64_t addr) {
  if (journal_ != nullptr) {
    Status st = journal_->Remove(addr);
    if (!st.ok() && st.code() != StatusCode::kNotFound) return st.WithContext("ownership journal");
    // Unrecorded, not yet returned: a crash here leaks the extent (gc finds it).
    ASYMNVM_CRASH_POINT("frontend.slab.unjournaled");
  }
  return RawFree(addr);
}

Status RpcSlabSource::RawFree(uint64_t addr) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  backend::PayloadWriter w;
  w.U64(addr);
  std::vector<uint8_t> response;
  return client_->Call(0, backend::kFree, w.bytes(), &response);
}

Result<std::pair<uint64_t, uint64_t>> RpcSlabSource::ExtentOf(uint64_t addr) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  backend::PayloadWriter w;
  w.U64(addr);
  std::vector<uint8_t> response;
  ASYMNVM_RETURN_IF_ERROR(client_->Call(0, backend::kExtentOf, w.bytes(), &response));
  if (response.size() != 16) {
    return Status::ProtocolError("extent reply of " + std::to_string(response.size()) +
                                 " bytes, expected 16");
  }
  return std::make_pair(GetLe64(response.data()), GetLe64(response.data() + 8));
}

}  // namespace asymnvm::frontend
