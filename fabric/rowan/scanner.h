// Rowan b-log scanner: walks segments in landing order and yields every valid entry exactly once,
// with no persistent tail pointer (Rowan paper §4.2.2, doc/rowan.md §Scanning).
//
// Rules: at each 64 B stride offset, a block whose first 8 bytes are zero is an empty slot (skip
// one stride); a valid block (DecodeBlock OK) is consumed (advance by its footprint); anything else
// is a torn or corrupt landing: it is reported (one report per contiguous run of bad strides) and
// never yielded, and scanning resynchronizes at the next stride. Single-block entries are yielded
// where they land; multi-block entries are reassembled by (owner, version) across strides and
// segments and yielded when their last missing block is found; entries still incomplete at
// Finish() are reported, never yielded. Duplicate blocks or entries (a retried landing) are counted
// and ignored: (owner, version) must identify an entry uniquely.
//
// Thread safety: one Scanner per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fabric/rowan/entry.h"

namespace asymnvm::rowan {

struct ScannedEntry {
  EntryMeta meta;
  std::span<const uint8_t> payload;  // valid only during the callback
  uint64_t segment_id = 0;           // where the completing block landed
  uint64_t offset = 0;
};

struct ScanReport {
  uint64_t entries = 0;
  uint64_t blocks = 0;
  uint64_t corrupt_runs = 0;  // torn/corrupt regions found (each reported once)
  uint64_t incomplete_entries = 0;
  uint64_t duplicate_blocks = 0;
  std::vector<std::string> problems;  // human-readable, first 64 kept
};

// One bad landing: the first stride of a run of strides that hold bytes but no valid block, or a
// block whose checksum holds but that contradicts its entry (checksum_ok).
struct BadBlock {
  uint64_t segment_id = 0;
  uint64_t offset = 0;  // within the segment
  std::string what;
  bool header_read = false;  // only the checksum failed: `meta` holds the (unverified) fields
  bool checksum_ok = false;  // a block that validates but disagrees with its entry's other blocks
  EntryMeta meta;
};

class Scanner {
 public:
  using Sink = std::function<void(const ScannedEntry&)>;
  using BadSink = std::function<void(const BadBlock&)>;
  explicit Scanner(size_t mtu = kDefaultMtu) : mtu_(mtu) {}

  void ScanSegment(std::span<const uint8_t> segment, uint64_t segment_id, const Sink& sink);
  // Reports multi-block entries that never completed.
  void Finish();
  const ScanReport& report() const { return report_; }
  // Optional: told about every bad landing as it is found (read-only checkers, e.g.
  // rowan::CheckArea; the problems strings of report() keep only text).
  void set_bad_sink(BadSink s) { bad_sink_ = std::move(s); }
  // Optional: told about every valid block as it is found, including blocks of multi-block
  // entries that complete in a later segment (a b-log consumer must keep such a segment until
  // that entry is no longer needed: the entry is yielded only where its last block lands).
  using BlockSink = std::function<void(const BlockHeader&)>;
  void set_block_sink(BlockSink s) { block_sink_ = std::move(s); }
  // End offset of the last valid block of the most recent ScanSegment (0: none): a bad landing
  // before it was followed by a completed one.
  uint64_t last_block_end() const { return last_block_end_; }

 private:
  struct Partial {
    uint16_t count = 0;
    uint32_t total_len = 0;
    std::vector<bool> have;
    std::vector<uint8_t> data;
    uint16_t found = 0;
  };
  void Problem(std::string text);

  void Bad(uint64_t segment_id, uint64_t offset, std::string what, const BlockHeader* h,
           bool checksum_ok);

  size_t mtu_;
  BadSink bad_sink_;
  BlockSink block_sink_;
  uint64_t last_block_end_ = 0;
  ScanReport report_;
  std::map<std::pair<uint16_t, uint64_t>, Partial> partial_;
  std::set<std::pair<uint16_t, uint64_t>> seen_;  // entries already yielded
};

}  // namespace asymnvm::rowan
