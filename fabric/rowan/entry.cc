#include "fabric/rowan/entry.h"

#include <cstring>

#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::rowan {
namespace {

// Layout (doc/rowan.md): 0 checksum u32 | 4 type u16 | 6 owner u16 | 8 version u64 |
// 16 payload_len u32 | 20 block_count u16 | 22 block_seq u16 | 24 total_len u32 | 28 zero u32.
constexpr size_t kOffType = 4, kOffOwner = 6, kOffVersion = 8, kOffLen = 16, kOffCount = 20,
                 kOffSeq = 22, kOffTotal = 24, kOffReserved = 28;

}  // namespace

size_t EncodeBlock(const EntryMeta& meta, uint16_t count, uint16_t seq, uint32_t total_len,
                   std::span<const uint8_t> payload, uint8_t* out) {
  PutLe16(out + kOffType, meta.type);
  PutLe16(out + kOffOwner, meta.owner);
  PutLe64(out + kOffVersion, meta.version);
  PutLe32(out + kOffLen, static_cast<uint32_t>(payload.size()));
  PutLe16(out + kOffCount, count);
  PutLe16(out + kOffSeq, seq);
  PutLe32(out + kOffTotal, total_len);
  PutLe32(out + kOffReserved, 0);
  if (!payload.empty()) std::memcpy(out + kBlockHeaderSize, payload.data(), payload.size());
  uint32_t crc = Crc32c(out + 4, kBlockHeaderSize - 4 + payload.size());
  PutLe32(out, crc);
  return kBlockHeaderSize + payload.size();
}

Result<std::vector<std::vector<uint8_t>>> EncodeEntry(const EntryMeta& meta,
                                                      std::span<const uint8_t> payload,
                                                      size_t mtu) {
  if (meta.type == 0) return Status::InvalidArgument("rowan entry: type must be non-zero");
  if (mtu <= kBlockHeaderSize || mtu % kStride != 0) {
    return Status::InvalidArgument("rowan entry: mtu must be a multiple of 64 above the header");
  }
  if (payload.size() > UINT32_MAX) return Status::InvalidArgument("rowan entry: payload too large");
  const size_t per_block = MaxBlockPayload(mtu);
  size_t count = payload.empty() ? 1 : (payload.size() + per_block - 1) / per_block;
  if (count > UINT16_MAX) return Status::InvalidArgument("rowan entry: more than 65535 blocks");
  std::vector<std::vector<uint8_t>> blocks(count);
  for (size_t i = 0; i < count; i++) {
    size_t off = i * per_block;
    size_t len = std::min(per_block, payload.size() - off);
    blocks[i].resize(kBlockHeaderSize + len);
    EncodeBlock(meta, static_cast<uint16_t>(count), static_cast<uint16_t>(i),
                static_cast<uint32_t>(payload.size()), payload.subspan(off, len), blocks[i].data());
  }
  return blocks;
}

Status DecodeBlock(const uint8_t* data, size_t avail, size_t mtu, BlockHeader* h) {
  if (avail < kBlockHeaderSize) return Status::Corruption("rowan block: truncated header");
  if (GetLe64(data) == 0) return Status::NotFound("rowan block: empty slot");
  h->checksum = GetLe32(data);
  h->meta.type = GetLe16(data + kOffType);
  h->meta.owner = GetLe16(data + kOffOwner);
  h->meta.version = GetLe64(data + kOffVersion);
  h->payload_len = GetLe32(data + kOffLen);
  h->block_count = GetLe16(data + kOffCount);
  h->block_seq = GetLe16(data + kOffSeq);
  h->total_len = GetLe32(data + kOffTotal);
  if (h->meta.type == 0 || h->block_count == 0 || h->block_seq >= h->block_count ||
      GetLe32(data + kOffReserved) != 0) {
    return Status::Corruption("rowan block: invalid header fields");
  }
  if (h->payload_len > MaxBlockPayload(mtu) || h->payload_len > h->total_len ||
      kBlockHeaderSize + static_cast<size_t>(h->payload_len) > avail) {
    return Status::Corruption("rowan block: length out of range");
  }
  uint32_t crc = Crc32c(data + 4, kBlockHeaderSize - 4 + h->payload_len);
  if (crc != h->checksum) {
    return Status::Corruption("rowan block: checksum mismatch")
        .WithSubCode(StatusSubCode::kChecksumMismatch);
  }
  return Status::Ok();
}

}  // namespace asymnvm::rowan
