#include "frontend/page_cache.h"

#include <algorithm>
#include <cstring>

namespace asymnvm::frontend {

uint8_t* PageCache::Lookup(uint32_t page_size, uint64_t page_addr) {
  auto it = map_.find(Key{page_size, page_addr});
  if (it == map_.end()) {
    misses_++;
    return nullptr;
  }
  hits_++;
  it->second->uses++;
  return it->second->data.data();
}

uint8_t* PageCache::Insert(uint32_t page_size, uint64_t page_addr, std::span<const uint8_t> bytes) {
  if (bytes.size() > capacity_) return nullptr;
  const Key key{page_size, page_addr};
  if (auto it = map_.find(key); it != map_.end()) {
    Page* p = it->second.get();
    bytes_ -= p->data.size();
    p->data.assign(bytes.begin(), bytes.end());
    bytes_ += p->data.size();
    return p->data.data();
  }
  while (!slots_.empty() && bytes_ + bytes.size() > capacity_) EvictOne();
  auto page = std::make_unique<Page>();
  page->key = key;
  page->data.assign(bytes.begin(), bytes.end());
  page->uses = 1;
  page->slot = slots_.size();
  Page* raw = page.get();
  slots_.push_back(raw);
  map_.emplace(key, std::move(page));
  sizes_[page_size]++;
  bytes_ += bytes.size();
  return raw->data.data();
}

void PageCache::EvictOne() {
  // Sample up to kSample distinct-ish slots at random; evict the least used (ties: first seen).
  Page* victim = nullptr;
  const size_t n = slots_.size();
  const size_t samples = std::min<size_t>(kSample, n);
  for (size_t i = 0; i < samples; i++) {
    Page* p = n <= kSample ? slots_[i] : slots_[rng_() % n];
    if (victim == nullptr || p->uses < victim->uses) victim = p;
  }
  const size_t slot = victim->slot;
  slots_[slot] = slots_.back();
  slots_[slot]->slot = slot;
  slots_.pop_back();
  bytes_ -= victim->data.size();
  if (auto s = sizes_.find(victim->key.size); --s->second == 0) sizes_.erase(s);
  evictions_++;
  map_.erase(victim->key);
}

void PageCache::Update(uint64_t addr, std::span<const uint8_t> data) {
  if (map_.empty() || data.empty()) return;
  const uint64_t end = addr + data.size();
  for (const auto& [size, count] : sizes_) {
    for (uint64_t page = addr / size * size; page < end; page += size) {
      auto it = map_.find(Key{size, page});
      if (it == map_.end()) continue;
      std::vector<uint8_t>& d = it->second->data;
      const uint64_t lo = std::max(addr, page);
      const uint64_t hi = std::min(end, page + d.size());
      if (lo < hi) std::memcpy(d.data() + (lo - page), data.data() + (lo - addr), hi - lo);
    }
  }
}

void PageCache::Clear() {
  map_.clear();
  slots_.clear();
  sizes_.clear();
  bytes_ = 0;
}

}  // namespace asymnvm::frontend
