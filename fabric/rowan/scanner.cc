#include "fabric/rowan/scanner.h"

#include <cstring>

namespace asymnvm::rowan {

void Scanner::Problem(std::string text) {
  if (report_.problems.size() < 64) report_.problems.push_back(std::move(text));
}

void Scanner::Bad(uint64_t segment_id, uint64_t offset, std::string what, const BlockHeader* h,
                  bool checksum_ok) {
  report_.corrupt_runs++;
  Problem("segment " + std::to_string(segment_id) + " offset " + std::to_string(offset) + ": " +
          what);
  if (!bad_sink_) return;
  BadBlock b;
  b.segment_id = segment_id;
  b.offset = offset;
  b.what = std::move(what);
  b.checksum_ok = checksum_ok;
  if (h != nullptr) {
    b.header_read = true;
    b.meta = h->meta;
  }
  bad_sink_(b);
}

void Scanner::ScanSegment(std::span<const uint8_t> seg, uint64_t segment_id, const Sink& sink) {
  const size_t per_block = MaxBlockPayload(mtu_);
  size_t off = 0;
  last_block_end_ = 0;
  bool in_bad_run = false;
  while (off + kBlockHeaderSize <= seg.size()) {
    BlockHeader h;
    Status st = DecodeBlock(seg.data() + off, seg.size() - off, mtu_, &h);
    if (st.code() == StatusCode::kNotFound) {
      in_bad_run = false;
      off += kStride;
      continue;
    }
    if (!st.ok()) {
      if (!in_bad_run) {
        // DecodeBlock checks the checksum last: when that is what failed, the header fields it
        // read passed every other check and are worth naming (unverified).
        const bool header_read = st.subcode() == StatusSubCode::kChecksumMismatch;
        Bad(segment_id, off, st.message(), header_read ? &h : nullptr, false);
      }
      in_bad_run = true;
      off += kStride;
      continue;
    }
    in_bad_run = false;
    report_.blocks++;
    if (block_sink_) block_sink_(h);
    last_block_end_ = off + BlockFootprint(h.payload_len);
    const uint8_t* payload = seg.data() + off + kBlockHeaderSize;
    auto key = std::make_pair(h.meta.owner, h.meta.version);
    if (seen_.count(key) != 0) {
      report_.duplicate_blocks++;
      off += BlockFootprint(h.payload_len);
      continue;
    }
    if (h.block_count == 1) {
      if (h.payload_len != h.total_len) {
        Bad(segment_id, off, "single block with inconsistent total length", &h, true);
      } else {
        report_.entries++;
        seen_.insert(key);
        sink(ScannedEntry{h.meta, {payload, h.payload_len}, segment_id, off});
      }
      off += BlockFootprint(h.payload_len);
      continue;
    }
    // An entry of n > 1 blocks carries more than n - 1 and at most n full blocks: a block that
    // claims otherwise (checksum valid, so a broken or hostile writer) is refused before its
    // total length sizes a reassembly buffer (found by rowan_entry_fuzz: a 3 GB allocation).
    const uint64_t total = h.total_len;
    if (total <= uint64_t{h.block_count - 1u} * per_block ||
        total > uint64_t{h.block_count} * per_block) {
      Bad(segment_id, off,
          "block count " + std::to_string(h.block_count) + " does not match the entry length " +
              std::to_string(total) + " (owner " + std::to_string(h.meta.owner) + " version " +
              std::to_string(h.meta.version) + ")",
          &h, true);
      off += BlockFootprint(h.payload_len);
      continue;
    }
    Partial& p = partial_[key];
    if (p.count == 0) {
      p.count = h.block_count;
      p.total_len = h.total_len;
      p.have.assign(h.block_count, false);
      p.data.assign(h.total_len, 0);
    }
    size_t expect_len = std::min<size_t>(
        per_block, p.total_len - std::min<size_t>(p.total_len, size_t{h.block_seq} * per_block));
    if (p.count != h.block_count || p.total_len != h.total_len || h.payload_len != expect_len) {
      Bad(segment_id, off,
          "block disagrees with its entry's other blocks (owner " + std::to_string(h.meta.owner) +
              " version " + std::to_string(h.meta.version) + ")",
          &h, true);
    } else if (p.have[h.block_seq]) {
      report_.duplicate_blocks++;
    } else {
      p.have[h.block_seq] = true;
      p.found++;
      // A multi-block entry of total length 0 has empty blocks and no buffer (found by
      // rowan_entry_fuzz under UBSan: memcpy of a null pointer).
      if (h.payload_len > 0) {
        std::memcpy(p.data.data() + size_t{h.block_seq} * per_block, payload, h.payload_len);
      }
      if (p.found == p.count) {
        report_.entries++;
        seen_.insert(key);
        sink(ScannedEntry{h.meta, {p.data.data(), p.data.size()}, segment_id, off});
        partial_.erase(key);
      }
    }
    off += BlockFootprint(h.payload_len);
  }
}

void Scanner::Finish() {
  for (const auto& [key, p] : partial_) {
    report_.incomplete_entries++;
    Problem("entry owner " + std::to_string(key.first) + " version " + std::to_string(key.second) +
            ": " + std::to_string(p.found) + " of " + std::to_string(p.count) + " blocks found");
  }
  partial_.clear();
}

}  // namespace asymnvm::rowan
