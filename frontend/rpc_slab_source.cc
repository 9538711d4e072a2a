#include "frontend/rpc_slab_source.h"

#include "backend/rpc.h"

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

Result<uint64_t> RpcSlabSource::AllocSlab() { return CallAddr(backend::kAllocSlab, {}); }

Result<uint64_t> RpcSlabSource::AllocLarge(uint64_t bytes) {
  backend::PayloadWriter w;
  w.U64(bytes);
  return CallAddr(backend::kAllocLarge, w.bytes());
}

Status RpcSlabSource::Free(uint64_t addr) {
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
