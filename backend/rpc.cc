#include "backend/rpc.h"

namespace asymnvm::backend {

std::vector<uint8_t> EncodeRegisterReply(const RegisterReply& r) {
  uint8_t regions[2 * fabric::RegionDescriptor::kEncodedSize];
  r.naming_region.EncodeTo(regions);
  r.data_region.EncodeTo(regions + fabric::RegionDescriptor::kEncodedSize);
  PayloadWriter w;
  w.U64(r.lpn).U64(r.opn).U64(r.rejected);
  w.U64(r.lpn_addr).U64(r.opn_addr).U64(r.rejected_addr);
  w.U64(r.naming_begin).U64(r.data_begin).U64(r.data_end);
  w.U32(r.block_size).U32(r.incarnation).Bytes(regions);
  w.U32(static_cast<uint32_t>(r.log_address.size())).Str(r.log_address);
  w.Bytes(r.pool_uuid);
  return std::move(w.bytes());
}

Result<RegisterReply> DecodeRegisterReply(std::span<const uint8_t> bytes) {
  PayloadReader in(bytes, "register reply");
  RegisterReply r;
  r.lpn = in.U64();
  r.opn = in.U64();
  r.rejected = in.U64();
  r.lpn_addr = in.U64();
  r.opn_addr = in.U64();
  r.rejected_addr = in.U64();
  r.naming_begin = in.U64();
  r.data_begin = in.U64();
  r.data_end = in.U64();
  r.block_size = in.U32();
  r.incarnation = in.U32();
  auto regions = in.Bytes(2 * fabric::RegionDescriptor::kEncodedSize);
  auto log = in.Bytes(in.U32());
  auto uuid = in.Bytes(r.pool_uuid.size());
  ASYMNVM_RETURN_IF_ERROR(in.status());
  std::copy(uuid.begin(), uuid.end(), r.pool_uuid.begin());
  constexpr size_t kSize = fabric::RegionDescriptor::kEncodedSize;
  ASYMNVM_ASSIGN_OR_RETURN(r.naming_region,
                           fabric::RegionDescriptor::Decode(regions.data(), kSize));
  ASYMNVM_ASSIGN_OR_RETURN(r.data_region,
                           fabric::RegionDescriptor::Decode(regions.data() + kSize, kSize));
  r.log_address.assign(log.begin(), log.end());
  return r;
}

void EncodeNamingEntry(const NamingEntry& e, PayloadWriter* w) {
  w->U32(e.slot).U32(e.type);
  for (uint64_t p : e.params) w->U64(p);
  w->U64(e.root_addr).U64(e.lock_addr).U64(e.seq_addr).U64(e.aux_addr);
  w->U32(static_cast<uint32_t>(e.name.size())).Str(e.name);
}

Result<NamingEntry> DecodeNamingEntry(std::span<const uint8_t> bytes) {
  PayloadReader in(bytes, "naming entry");
  NamingEntry e;
  e.slot = in.U32();
  e.type = in.U32();
  for (auto& p : e.params) p = in.U64();
  e.root_addr = in.U64();
  e.lock_addr = in.U64();
  e.seq_addr = in.U64();
  e.aux_addr = in.U64();
  auto name = in.Bytes(in.U32());
  ASYMNVM_RETURN_IF_ERROR(in.status());
  e.name.assign(name.begin(), name.end());
  return e;
}

std::vector<uint8_t> EncodeNamingCreate(const std::string& name, uint32_t type,
                                        const std::array<uint64_t, kNamingParams>& params) {
  PayloadWriter w;
  w.U32(type).U32(static_cast<uint32_t>(name.size()));
  for (uint64_t p : params) w.U64(p);
  w.Str(name);
  return std::move(w.bytes());
}

Result<NamingCreateRequest> DecodeNamingCreate(std::span<const uint8_t> bytes) {
  PayloadReader r(bytes, "naming create");
  NamingCreateRequest q;
  q.type = r.U32();
  const uint32_t len = r.U32();
  for (auto& p : q.params) p = r.U64();
  auto name = r.Bytes(len);
  ASYMNVM_RETURN_IF_ERROR(r.status());
  q.name.assign(name.begin(), name.end());
  return q;
}

std::vector<uint8_t> EncodeFetchedOps(const std::vector<FetchedOp>& ops, bool more) {
  PayloadWriter w;
  w.U32(more ? 1 : 0);
  w.U32(static_cast<uint32_t>(ops.size()));
  for (const FetchedOp& op : ops) {
    w.U64(op.op_seq);
    w.U32(op.structure_id);
    w.U32(op.op_type);
    w.U32(static_cast<uint32_t>(op.payload.size()));
    w.Bytes(op.payload);
  }
  return w.bytes();
}

Result<std::vector<FetchedOp>> DecodeFetchedOps(std::span<const uint8_t> bytes, bool* more) {
  PayloadReader r(bytes, "fetched op logs");
  *more = r.U32() != 0;
  const uint32_t n = r.U32();
  std::vector<FetchedOp> ops;
  for (uint32_t i = 0; i < n && r.status().ok(); i++) {
    FetchedOp op;
    op.op_seq = r.U64();
    op.structure_id = r.U32();
    const uint32_t type = r.U32();
    const uint32_t len = r.U32();
    if (type > 0xFFFF || len > r.remaining()) {
      return Status::ProtocolError("fetched op logs: entry " + std::to_string(i) + " is malformed");
    }
    op.op_type = static_cast<uint16_t>(type);
    auto p = r.Bytes(len);
    op.payload.assign(p.begin(), p.end());
    ops.push_back(std::move(op));
  }
  if (!r.status().ok() || r.remaining() != 0) {
    return Status::ProtocolError("fetched op logs: reply of " + std::to_string(bytes.size()) +
                                 " bytes is malformed");
  }
  return ops;
}

}  // namespace asymnvm::backend
