#include "kv/format.h"

#include <cstring>

#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::kv::format {
namespace {
constexpr char kServerMagic[8] = {'A', 'S', 'Y', 'M', 'K', 'V', '0', '1'};
constexpr uint32_t kSegmentMagic = 0x4753564B;  // "KVSG"
// Server header: [magic 8][crc u32 over [12, 4096)][version u32][workers u32][shards u32]
// [segment_size u32][segments u32][oq_buffers u32][oq_buffer_size u32][pad u32]
// [generation_bound u64][applied_floor u64 × kMaxWorkers]
constexpr size_t kFloorOffset = 48;
constexpr size_t kBlogOffset = kFloorOffset + 8 * kMaxWorkers;  // 304
}  // namespace

void EncodeServerHeader(const ServerHeader& h, uint8_t* page) {
  std::memset(page, 0, kHeaderPage);
  std::memcpy(page, kServerMagic, 8);
  PutLe32(page + 12, h.layout_version);
  PutLe32(page + 16, h.workers);
  PutLe32(page + 20, h.shards);
  PutLe32(page + 24, h.segment_size);
  PutLe32(page + 28, h.segments);
  PutLe32(page + 32, h.oq_buffers);
  PutLe32(page + 36, h.oq_buffer_size);
  PutLe64(page + 40, h.generation_bound);
  for (uint32_t w = 0; w < kMaxWorkers; w++)
    PutLe64(page + kFloorOffset + 8 * w, h.applied_floor[w]);
  PutLe64(page + kBlogOffset, h.blog_bytes);
  PutLe32(page + kBlogOffset + 8, h.replication);
  PutLe32(page + 8, Crc32c(page + 12, kHeaderPage - 12));
}

Status DecodeServerHeader(const uint8_t* page, ServerHeader* h) {
  uint64_t first = GetLe64(page);
  if (first == 0) return Status::NotFound("kv header: blank");
  if (std::memcmp(page, kServerMagic, 8) != 0) {
    return Status::Corruption("kv header: bad magic (not an asymnvm-kv pool)");
  }
  if (GetLe32(page + 8) != Crc32c(page + 12, kHeaderPage - 12)) {
    return Status::Corruption("kv header: checksum mismatch");
  }
  ServerHeader r;
  r.layout_version = GetLe32(page + 12);
  r.workers = GetLe32(page + 16);
  r.shards = GetLe32(page + 20);
  r.segment_size = GetLe32(page + 24);
  r.segments = GetLe32(page + 28);
  r.oq_buffers = GetLe32(page + 32);
  r.oq_buffer_size = GetLe32(page + 36);
  r.generation_bound = GetLe64(page + 40);
  for (uint32_t w = 0; w < kMaxWorkers; w++)
    r.applied_floor[w] = GetLe64(page + kFloorOffset + 8 * w);
  r.blog_bytes = GetLe64(page + kBlogOffset);
  r.replication = GetLe32(page + kBlogOffset + 8);
  if (r.layout_version != kLayoutVersion) {
    return Status::Corruption("kv header: layout version " + std::to_string(r.layout_version));
  }
  if (r.workers == 0 || r.workers > kMaxWorkers || r.shards == 0 || r.segments == 0 ||
      r.segment_size < 64 * 1024 || r.segment_size % 4096 != 0) {
    return Status::Corruption("kv header: impossible geometry");
  }
  *h = r;
  return Status::Ok();
}

// Segment header: [crc u32 over [4, 64)][magic u32][generation u64][kind u32][owner u32][zero...]
void EncodeSegmentHeader(const SegmentHeader& h, uint8_t* out) {
  std::memset(out, 0, kSegmentHeaderSize);
  PutLe32(out + 4, kSegmentMagic);
  PutLe64(out + 8, h.generation);
  PutLe32(out + 16, static_cast<uint32_t>(h.kind));
  PutLe32(out + 20, h.owner);
  PutLe32(out, Crc32c(out + 4, kSegmentHeaderSize - 4));
}

Status DecodeSegmentHeader(const uint8_t* in, SegmentHeader* h) {
  if (GetLe64(in + 8) == 0 && GetLe32(in + 4) == 0) return Status::NotFound("segment: free");
  if (GetLe32(in + 4) != kSegmentMagic || GetLe32(in) != Crc32c(in + 4, kSegmentHeaderSize - 4)) {
    return Status::Corruption("segment header: checksum mismatch");
  }
  SegmentHeader r;
  r.generation = GetLe64(in + 8);
  uint32_t kind = GetLe32(in + 16);
  if (r.generation == 0 || kind < 1 || kind > 3) {
    return Status::Corruption("segment header: impossible fields");
  }
  r.kind = static_cast<SegmentKind>(kind);
  r.owner = GetLe32(in + 20);
  *h = r;
  return Status::Ok();
}

// Entry: [crc u32 over [4, 48 + key + value)][type u8][zero u8][key_len u16][value_len u32]
// [shard u32][version u64][generation u64][position u64][batch_count u32][batch_index u32] key
// value. kPutBypass: the crc covers [4, 48 + key) only; bytes 40..44 hold value_crc, 44..48 zero.
namespace {
void EncodeHeaderFields(const EntryHeader& h, std::string_view key, uint8_t* out) {
  out[4] = static_cast<uint8_t>(h.type);
  out[5] = 0;
  PutLe16(out + 6, h.key_len);
  PutLe32(out + 8, h.value_len);
  PutLe32(out + 12, h.shard);
  PutLe64(out + 16, h.version);
  PutLe64(out + 24, h.generation);
  PutLe64(out + 32, h.position);
  if (h.type == EntryType::kPutBypass) {
    PutLe32(out + 40, h.value_crc);
    PutLe32(out + 44, 0);
  } else {
    PutLe32(out + 40, h.batch_count);
    PutLe32(out + 44, h.batch_index);
  }
  std::memcpy(out + kEntryHeaderSize, key.data(), key.size());
}
}  // namespace

void EncodeBypassSlot(const EntryHeader& h, std::string_view key, uint8_t* out) {
  EncodeHeaderFields(h, key, out);
  PutLe32(out, Crc32c(out + 4, kEntryHeaderSize - 4 + key.size()));
  std::memset(out + BypassFlagOffset(key.size(), h.value_len), 0, 16);
}

void EncodeEntry(const EntryHeader& h, std::string_view key, std::string_view value, uint8_t* out) {
  EncodeHeaderFields(h, key, out);
  if (!value.empty()) std::memcpy(out + kEntryHeaderSize + key.size(), value.data(), value.size());
  PutLe32(out, Crc32c(out + 4, kEntryHeaderSize - 4 + key.size() + value.size()));
}

uint64_t PeekEntryVersion(const uint8_t* entry) { return GetLe64(entry + 16); }
uint64_t PeekEntryGeneration(const uint8_t* entry) { return GetLe64(entry + 24); }

Status DecodeEntry(const uint8_t* in, size_t avail, uint64_t generation, EntryHeader* h) {
  if (avail < kEntryHeaderSize) return Status::NotFound("entry: no room");
  EntryHeader r;
  uint8_t type = in[4];
  r.key_len = GetLe16(in + 6);
  r.value_len = GetLe32(in + 8);
  r.shard = GetLe32(in + 12);
  r.version = GetLe64(in + 16);
  r.generation = GetLe64(in + 24);
  r.position = GetLe64(in + 32);
  if (type < 1 || type > 3 || r.generation != generation || r.key_len == 0 || r.version == 0 ||
      size_t{r.key_len} + r.value_len > avail - kEntryHeaderSize) {
    return Status::NotFound("entry: none");
  }
  r.type = static_cast<EntryType>(type);
  if (r.type == EntryType::kPutBypass) {
    const size_t flags = BypassFlagOffset(r.key_len, r.value_len);
    if (flags + 16 > avail || GetLe32(in + 44) != 0 ||
        GetLe32(in) != Crc32c(in + 4, kEntryHeaderSize - 4 + r.key_len)) {
      return Status::NotFound("entry: bypass slot checksum mismatch (torn tail)");
    }
    r.value_crc = GetLe32(in + 40);
    r.persisted = GetLe64(in + flags) == PersistWord(r.version) &&
                  Crc32c(in + kEntryHeaderSize + r.key_len, r.value_len) == r.value_crc;
    *h = r;
    return Status::Ok();
  }
  r.batch_count = GetLe32(in + 40);
  r.batch_index = GetLe32(in + 44);
  if ((r.batch_count == 0 ? r.batch_index != 0
                          : r.batch_count > kMaxBatch || r.batch_index >= r.batch_count) ||
      GetLe32(in) != Crc32c(in + 4, kEntryHeaderSize - 4 + r.key_len + r.value_len)) {
    return Status::NotFound("entry: checksum mismatch (torn tail)");
  }
  *h = r;
  return Status::Ok();
}

}  // namespace asymnvm::kv::format
