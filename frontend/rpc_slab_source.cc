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

bool RpcSlabSource::Overlaps(uint64_t addr, uint64_t bytes) const {
  auto it = reclaimed_.lower_bound(addr + bytes);
  return it != reclaimed_.begin() && std::prev(it)->second > addr;
}

Result<uint64_t> RpcSlabSource::Fresh(uint16_t type, uint64_t bytes) {
  backend::PayloadWriter w;
  if (type == backend::kAllocLarge) w.U64(bytes);
  const uint64_t span = (std::max<uint64_t>(bytes, 1) + slab_size_ - 1) / slab_size_ * slab_size_;
  for (;;) {
    // With a journal: allocated and recorded by the back-end in one request (the trailer).
    Result<uint64_t> r = journal_ == nullptr ? CallAddr(type, w.bytes())
                                             : journal_->Add([&](uint64_t entry, uint64_t tag) {
                                                 backend::PayloadWriter jw;
                                                 jw.Bytes(w.bytes());
                                                 jw.U64(entry);
                                                 jw.U64(tag);
                                                 return CallAddr(type, jw.bytes());
                                               });
    if (r.ok() && journal_ != nullptr) {
      ASYMNVM_CRASH_POINT("frontend.slab.journaled");  // recorded, not yet used
    }
    ASYMNVM_RETURN_IF_ERROR(r.status().WithContext(journal_ ? "journaled allocation" : ""));
    const uint64_t a = *r;
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
  if (gate_) {
    const uint64_t stamp = gate_();
    if (stamp > applied_ || !queued_.empty()) {
      queued_.emplace_back(stamp, addr);
      return Status::Ok();
    }
  }
  return FreeNow(addr);
}

Status RpcSlabSource::IssueFrees(uint64_t upto) {
  applied_ = std::max(applied_, upto);
  Status first;
  while (!queued_.empty() && queued_.front().first <= upto) {
    const uint64_t addr = queued_.front().second;
    queued_.pop_front();
    Status st = FreeNow(addr);
    if (!st.ok() && first.ok()) first = st.WithContext("free of " + std::to_string(addr));
  }
  return first;
}

Status RpcSlabSource::FreeNow(uint64_t addr) {
  if (journal_ != nullptr && journal_->recorded(addr)) {
    // The entry cleared and the extent freed by the back-end in one request.
    Status st = journal_->Remove(
        addr, [&](uint64_t entry, uint64_t expected) { return RawFree(addr, entry, expected); });
    if (st.ok()) ASYMNVM_CRASH_POINT("frontend.slab.returned");  // unrecorded and freed
    return st;
  }
  return RawFree(addr);
}

Status RpcSlabSource::RawFree(uint64_t addr, uint64_t entry, uint64_t expected) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  backend::PayloadWriter w;
  w.U64(addr);
  if (entry != 0) {
    w.U64(entry);
    w.U64(expected);
  }
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
