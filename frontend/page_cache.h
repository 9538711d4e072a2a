// The front-end page cache (AsymNVM paper §4.4; doc/architecture.md): a hash map
// from (page size, page-aligned pool offset) to a DRAM copy of the page, bounded in bytes.
// Replacement samples up to 32 cached pages at random and evicts the least used one. Writes the
// front-end generates (memory logs) update every cached page they overlap, whatever its size.
//
// Thread safety: none (owned by one Session, used by one thread at a time).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

namespace asymnvm::frontend {

class PageCache {
 public:
  static constexpr uint32_t kSample = 32;

  PageCache(uint64_t capacity_bytes, uint64_t seed) : capacity_(capacity_bytes), rng_(seed) {}

  // The cached page or null; a hit bumps the page's use count.
  uint8_t* Lookup(uint32_t page_size, uint64_t page_addr);
  // Caches a copy of `bytes` (a whole page, or its prefix when the page is clipped by the end of
  // the area), evicting as needed. Returns the cached copy, or null when the page alone is larger
  // than the capacity.
  uint8_t* Insert(uint32_t page_size, uint64_t page_addr, std::span<const uint8_t> bytes);
  // Applies a write to every cached page it overlaps.
  void Update(uint64_t addr, std::span<const uint8_t> data);
  void Clear();

  uint64_t bytes() const { return bytes_; }
  size_t pages() const { return slots_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Key {
    uint32_t size;
    uint64_t addr;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.addr * 31 + k.size); }
  };
  struct Page {
    Key key;
    std::vector<uint8_t> data;
    uint64_t uses = 0;
    size_t slot = 0;  // index in slots_
  };
  void EvictOne();

  uint64_t capacity_;
  uint64_t bytes_ = 0;
  std::mt19937_64 rng_;
  std::unordered_map<Key, std::unique_ptr<Page>, KeyHash> map_;
  std::vector<Page*> slots_;  // for random sampling
  // page size → cached pages of that size (for Update: a handful of distinct sizes, walked per
  // write — a multiset with an element per page made every memory log walk the whole cache).
  std::map<uint32_t, size_t> sizes_;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace asymnvm::frontend
