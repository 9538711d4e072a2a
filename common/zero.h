// ZeroPages: zero a range of a file mapping, writing only the 4 KiB pieces that are not zero
// already. On a freshly created (sparse) pool file every page reads as zero, so formatting dirties
// nothing and the persist that follows (msync: only dirty pages are written) costs no disk write;
// before, a fresh back-end wrote its whole b-log, OQ and naming areas of zeros. A range
// that holds bytes of an interrupted earlier format is still zeroed where needed, and the
// caller's persist still makes any zeros dirtied-but-unsynced by a crashed run durable.
// Thread safety: as memset on the same range.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace asymnvm {

inline bool IsZero(const uint8_t* p, size_t n) {
  static constexpr uint8_t kZero[256] = {};
  while (n > 0) {
    const size_t k = std::min(n, sizeof kZero);
    if (std::memcmp(p, kZero, k) != 0) return false;
    p += k;
    n -= k;
  }
  return true;
}

// Returns the bytes actually written.
inline size_t ZeroPages(uint8_t* p, size_t n) {
  constexpr size_t kPiece = 4096;
  size_t written = 0;
  for (size_t off = 0; off < n; off += kPiece) {
    const size_t k = std::min(kPiece, n - off);
    if (!IsZero(p + off, k)) {
      std::memset(p + off, 0, k);
      written += k;
    }
  }
  return written;
}

}  // namespace asymnvm
