// Rowan b-log scanner: walks segments in landing order and yields every valid entry exactly once,
// with no persistent tail pointer (papers/rowan-osdi23.txt §4.2.2, doc/rowan.md §Scanning).
//
// Rules: at each 64 B stride offset, a block whose first 8 bytes are zero is an empty slot (skip
// one stride); a valid block (DecodeBlock OK) is consumed (advance by its footprint); anything else
// is a torn or corrupt landing: it is reported (one report per contiguous run of bad strides) and
// never yielded, and scanning resynchronizes at the next stride. Single-block entries are yielded
// where they land; multi-block entries are reassembled by (owner, version) across strides and
// segments and yielded when their last missing block is found; entries still incomplete at
// Finish() are reported, never yielded. Duplicate blocks or entries (a retried landing) are counted and ignored:
// (owner, version) must identify an entry uniquely.
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
  uint64_t corrupt_runs = 0;      // torn/corrupt regions found (each reported once)
  uint64_t incomplete_entries = 0;
  uint64_t duplicate_blocks = 0;
  std::vector<std::string> problems;  // human-readable, first 64 kept
};

class Scanner {
 public:
  using Sink = std::function<void(const ScannedEntry&)>;
  explicit Scanner(size_t mtu = kDefaultMtu) : mtu_(mtu) {}

  void ScanSegment(std::span<const uint8_t> segment, uint64_t segment_id, const Sink& sink);
  // Reports multi-block entries that never completed.
  void Finish();
  const ScanReport& report() const { return report_; }

 private:
  struct Partial {
    uint16_t count = 0;
    uint32_t total_len = 0;
    std::vector<bool> have;
    std::vector<uint8_t> data;
    uint16_t found = 0;
  };
  void Problem(std::string text);

  size_t mtu_;
  ScanReport report_;
  std::map<std::pair<uint16_t, uint64_t>, Partial> partial_;
  std::set<std::pair<uint16_t, uint64_t>> seen_;  // entries already yielded
};

}  // namespace asymnvm::rowan
