// Rowan-KV PM layout: the server's header page, t-log segments and their self-validating entries
// (byte layouts in doc/kv.md §PM layout).
//
// A segment starts with a 64-byte header carrying a generation (> 0; unique over the pool's life,
// never reused) and its owner; entries follow at 64-byte-aligned offsets and repeat the
// generation, so entries left from an earlier use of the segment never validate. An entry is a
// 48-byte header (CRC32C over everything after the checksum field) + key + value, padded to 64 B.
// The first entry that fails to validate ends the segment's contents (a torn tail).
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "asymnvm/status.h"

namespace asymnvm::kv::format {

inline constexpr size_t kHeaderPage = 4096;
inline constexpr size_t kAlign = 64;
inline constexpr size_t kSegmentHeaderSize = 64;
inline constexpr size_t kEntryHeaderSize = 48;
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr uint32_t kMaxWorkers = 32;
// Generations are reserved in blocks: the header page persists the first generation not yet
// handed out (a bound), so a restart never reissues one.
inline constexpr uint64_t kGenerationBlock = 1024;

enum class EntryType : uint8_t { kPut = 1, kDelete = 2 };
enum class SegmentKind : uint32_t { kTlog = 1, kGc = 2, kReplica = 3 };

// The header page at the start of the pool's user area.
struct ServerHeader {
  uint32_t layout_version = kLayoutVersion;
  uint32_t workers = 0;
  uint32_t shards = 0;
  uint32_t segment_size = 0;
  uint32_t segments = 0;
  uint32_t oq_buffers = 0;
  uint32_t oq_buffer_size = 0;
  uint64_t generation_bound = 0;               // every issued generation is below this
  uint64_t applied_floor[kMaxWorkers] = {};    // per worker: OQ position applied, at least
  uint64_t blog_bytes = 0;                     // Rowan b-log area (replication target)
};
void EncodeServerHeader(const ServerHeader& h, uint8_t* page);  // kHeaderPage bytes
// kNotFound: blank page (first 8 bytes zero); kCorruption: bad magic/checksum/fields.
Status DecodeServerHeader(const uint8_t* page, ServerHeader* h);

struct SegmentHeader {
  uint64_t generation = 0;
  SegmentKind kind = SegmentKind::kTlog;
  uint32_t owner = 0;  // worker index (t-log), 0 for GC
};
void EncodeSegmentHeader(const SegmentHeader& h, uint8_t* out);  // kSegmentHeaderSize bytes
// kNotFound: free (zero generation or blank); kCorruption: checksum/fields.
Status DecodeSegmentHeader(const uint8_t* in, SegmentHeader* h);

struct EntryHeader {
  EntryType type = EntryType::kPut;
  uint16_t key_len = 0;
  uint32_t value_len = 0;
  uint32_t shard = 0;
  uint64_t version = 0;
  uint64_t generation = 0;
  uint64_t position = 0;  // worker << 56 | OQ queue position of the request; 0: none
};

inline size_t EntryFootprint(size_t key_len, size_t value_len) {
  return (kEntryHeaderSize + key_len + value_len + kAlign - 1) / kAlign * kAlign;
}
// Writes header + key + value at `out` (EntryFootprint bytes available; padding not written).
void EncodeEntry(const EntryHeader& h, std::string_view key, std::string_view value, uint8_t* out);
// Validates the entry at `in` with `avail` readable bytes and `generation` expected.
// kNotFound: nothing valid here (blank, other generation, checksum, impossible lengths).
Status DecodeEntry(const uint8_t* in, size_t avail, uint64_t generation, EntryHeader* h);
inline std::string_view EntryKey(const uint8_t* entry, const EntryHeader& h) {
  return {reinterpret_cast<const char*>(entry + kEntryHeaderSize), h.key_len};
}
inline std::string_view EntryValue(const uint8_t* entry, const EntryHeader& h) {
  return {reinterpret_cast<const char*>(entry + kEntryHeaderSize + h.key_len), h.value_len};
}

}  // namespace asymnvm::kv::format
