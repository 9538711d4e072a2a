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
inline constexpr uint32_t kMaxBatch = 64;  // members of one atomic batch

// kPutBypass: an RDMP server-bypass PUT (doc/kv.md §RDMP). The server writes the header and the
// key when it reserves the slot; the client writes the value and then the persist flag into PM
// one-sidedly. Its checksum covers the header and the key only; the value is covered by
// `value_crc` (CRC32C, computed by the client) and counts only once the persist flag is set.
enum class EntryType : uint8_t { kPut = 1, kDelete = 2, kPutBypass = 3 };
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
  uint64_t generation_bound = 0;             // every issued generation is below this
  uint64_t applied_floor[kMaxWorkers] = {};  // per worker: OQ position applied, at least
  uint64_t blog_bytes = 0;                   // Rowan b-log area (replication target)
  // How backups are written (kv/replication.h ReplicationMode; 0 = rowan). Not rowan: the b-log
  // area is split into a Rowan b-log (catch-up) and the remote-log area (doc/kv.md §Baselines).
  uint32_t replication = 0;
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
  uint64_t position = 0;   // worker << 56 | OQ queue position of the request; 0: none
  uint32_t value_crc = 0;  // kPutBypass: CRC32C of the value (0 for other types)
  // kPut/kDelete members of an atomic batch (doc/kv.md §Batches): `batch_count` consecutive
  // entries of one log, member `batch_index` of them; 0/0 for a single write. Recovery counts a
  // batch only when every member validates.
  uint32_t batch_count = 0;
  uint32_t batch_index = 0;
  // Decode output for kPutBypass: the persist flag is set and the value matches value_crc (the
  // entry holds a durable value). Always true for the other types (their checksum covers all).
  bool persisted = true;
};

inline constexpr size_t EntryFootprint(size_t key_len, size_t value_len) {
  return (kEntryHeaderSize + key_len + value_len + kAlign - 1) / kAlign * kAlign;
}
// kPutBypass slots: header, key, value, then at the next 8-byte boundary the persist-flag word
// (written by the client after the value is durable) and the valid-flag word (set by the server
// when it publishes; never persisted explicitly), padded to 64 bytes.
inline constexpr size_t BypassFlagOffset(size_t key_len, size_t value_len) {
  return (kEntryHeaderSize + key_len + value_len + 7) / 8 * 8;
}
inline constexpr size_t BypassFootprint(size_t key_len, size_t value_len) {
  return (BypassFlagOffset(key_len, value_len) + 16 + kAlign - 1) / kAlign * kAlign;
}
inline size_t Footprint(const EntryHeader& h) {
  return h.type == EntryType::kPutBypass ? BypassFootprint(h.key_len, h.value_len)
                                         : EntryFootprint(h.key_len, h.value_len);
}
// The flag words of the slot holding `version` (a word left from anything else never matches).
inline constexpr uint64_t PersistWord(uint64_t version) {
  return 0x50455253495354ull ^ (version << 8);
}
inline constexpr uint64_t ValidWord(uint64_t version) {
  return 0x56414c49440000ull ^ (version << 8);
}
// Writes a kPutBypass slot's header and key at `out` and zeroes its flag words (the value bytes
// are not touched). h.type must be kPutBypass.
void EncodeBypassSlot(const EntryHeader& h, std::string_view key, uint8_t* out);
// Writes header + key + value at `out` (EntryFootprint bytes available; padding not written).
void EncodeEntry(const EntryHeader& h, std::string_view key, std::string_view value, uint8_t* out);
// Validates the entry at `in` with `avail` readable bytes and `generation` expected.
// kNotFound: nothing valid here (blank, other generation, checksum, impossible lengths). A
// kPutBypass entry whose header and key validate is OK (its footprint is known) with
// h->persisted saying whether its value counts.
Status DecodeEntry(const uint8_t* in, size_t avail, uint64_t generation, EntryHeader* h);
// Single fields of an entry header, unchecked: for an entry already decoded, or one whose
// generation is needed to decode it (a replica carries its primary's segment generation).
uint64_t PeekEntryVersion(const uint8_t* entry);
uint64_t PeekEntryGeneration(const uint8_t* entry);
inline std::string_view EntryKey(const uint8_t* entry, const EntryHeader& h) {
  return {reinterpret_cast<const char*>(entry + kEntryHeaderSize), h.key_len};
}
inline std::string_view EntryValue(const uint8_t* entry, const EntryHeader& h) {
  return {reinterpret_cast<const char*>(entry + kEntryHeaderSize + h.key_len), h.value_len};
}

}  // namespace asymnvm::kv::format
