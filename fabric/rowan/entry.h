// Rowan b-log entries: self-validating records that many senders land back to back in one PM log
// (Rowan paper §4.2.2; byte layout in doc/rowan.md).
//
// An entry is one or more blocks. Each block = a 32-byte header + payload, at most `mtu` bytes,
// placed by the receiver's NIC at a stride-aligned (64 B) offset. Every block repeats the entry's
// metadata (type, owner, version) plus its block count and sequence, and carries its own CRC32C,
// so a scanner can validate blocks independently and reassemble entries whose blocks are not
// adjacent. The first 8 bytes of a valid block are never zero (type != 0), which is how the
// receiver's control thread detects that the NIC started filling a segment.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::rowan {

inline constexpr size_t kBlockHeaderSize = 32;
inline constexpr size_t kStride = 64;
inline constexpr size_t kDefaultMtu = 4096;

struct EntryMeta {
  uint16_t type = 0;     // non-zero; meaning belongs to the consumer (op log, memory log, put...)
  uint16_t owner = 0;    // sender / shard id
  uint64_t version = 0;  // monotonic per owner; (owner, version) identifies an entry
};

struct BlockHeader {
  uint32_t checksum = 0;  // CRC32C over bytes [4, kBlockHeaderSize + payload_len)
  EntryMeta meta;
  uint32_t payload_len = 0;  // payload bytes in this block
  uint16_t block_count = 1;
  uint16_t block_seq = 0;
  uint32_t total_len = 0;  // payload bytes of the whole entry
};

// Largest payload one block can carry for a given MTU.
inline size_t MaxBlockPayload(size_t mtu) { return mtu - kBlockHeaderSize; }

// Splits `payload` into blocks no larger than `mtu` and encodes each (header + payload bytes,
// unpadded). Errors: kInvalidArgument (type 0, mtu not above the header, more than 65535 blocks).
Result<std::vector<std::vector<uint8_t>>> EncodeEntry(const EntryMeta& meta,
                                                      std::span<const uint8_t> payload,
                                                      size_t mtu = kDefaultMtu);

// Encodes one block in place into `out` (capacity >= kBlockHeaderSize + payload.size()).
// Returns bytes written.
size_t EncodeBlock(const EntryMeta& meta, uint16_t count, uint16_t seq, uint32_t total_len,
                   std::span<const uint8_t> payload, uint8_t* out);

// Validates the block starting at `data` (`avail` readable bytes). kNotFound when the first 8 bytes
// are zero (nothing landed here); kCorruption for a bad checksum, impossible lengths or a block
// that would run past `avail` — never reads beyond `avail`. The checksum is checked last: its
// failure (sub-code kChecksumMismatch) means every header field passed the other checks.
Status DecodeBlock(const uint8_t* data, size_t avail, size_t mtu, BlockHeader* header);

// Bytes a block of `payload_len` occupies in the log, stride padding included.
inline size_t BlockFootprint(size_t payload_len) {
  return (kBlockHeaderSize + payload_len + kStride - 1) / kStride * kStride;
}

}  // namespace asymnvm::rowan
