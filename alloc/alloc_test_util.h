// Test helpers for the alloc suites: a pool laid out as [superblock][bitmap][data area] with a
// BackendAllocator on it, reopenable from the file, and a model of the slab-level state.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "alloc/backend_allocator.h"
#include "asymnvm/pm.h"
#include "pm/pm_test_util.h"

namespace asymnvm::alloc::testing {

// Persists through `inner` until `budget` Flush calls have been made; at that Flush the "power
// fails": the bitmap area is snapshotted (the stores done so far) and from then on nothing is
// flushed or drained. Restore() puts the snapshot back so that stores made after the cut (which a
// dead process would never have made) are undone before the simulated crash.
class CutPersister : public pm::Persister {
 public:
  CutPersister(pm::Persister* inner, uint8_t* area, size_t len)
      : inner_(inner), area_(area), len_(len) {}
  void set_budget(int64_t flushes) { budget_ = flushes; }
  bool cut() const { return cut_; }
  void Flush(const void* addr, size_t length) override {
    if (cut_) return;
    if (budget_ >= 0 && budget_-- == 0) {
      cut_ = true;
      snapshot_.assign(area_, area_ + len_);
      return;
    }
    inner_->Flush(addr, length);
  }
  void Drain() override {
    if (!cut_) inner_->Drain();
  }
  void Restore() {
    if (cut_) std::memcpy(area_, snapshot_.data(), len_);
  }

 private:
  pm::Persister* inner_;
  uint8_t* area_;
  size_t len_;
  int64_t budget_ = -1;  // < 0: unlimited
  bool cut_ = false;
  std::vector<uint8_t> snapshot_;
};

struct Geometry {
  uint64_t bitmap_offset = pm::kSuperblockSize;
  uint64_t bitmap_bytes = 0;
  uint64_t data_begin = 0;
  uint64_t data_size = 0;
};

inline Geometry MakeGeometry(uint64_t pool_size, uint32_t block_size) {
  Geometry g;
  g.bitmap_bytes = (BackendAllocator::BitmapBytes(pool_size, block_size) + 4095) / 4096 * 4096;
  uint64_t align = block_size > 4096 ? block_size : 4096;
  g.data_begin = (g.bitmap_offset + g.bitmap_bytes + align - 1) / align * align;
  g.data_size = pool_size - g.data_begin;
  return g;
}

class BackendEnv {
 public:
  BackendEnv(uint64_t pool_size, uint32_t block_size, bool crash_sim = false)
      : path_(dir_.File("alloc.pool")),
        block_size_(block_size),
        crash_sim_(crash_sim),
        geo_(MakeGeometry(pool_size, block_size)) {
    auto p = pm::Pool::Create(path_, pool_size, PoolOpts());
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (p.ok()) pool_ = std::move(p).value();
  }

  pm::PoolOptions PoolOpts() const {
    pm::PoolOptions o;
    o.mode = pm::PersistMode::kFlushOnly;
    o.crash_sim = crash_sim_;
    o.layout = "asymnvm-alloc-test";
    return o;
  }

  BackendOptions Options(pm::Persister* persister = nullptr) const {
    BackendOptions o;
    o.data_begin = geo_.data_begin;
    o.data_size = geo_.data_size;
    o.block_size = block_size_;
    o.bitmap = pool_->base() + geo_.bitmap_offset;
    o.bitmap_size = geo_.bitmap_bytes;
    o.persister = persister != nullptr ? persister : pool_->persister();
    return o;
  }

  Status OpenAllocator(pm::Persister* persister = nullptr) {
    alloc_.reset();
    auto a = BackendAllocator::Open(Options(persister));
    if (!a.ok()) return a.status();
    alloc_ = std::move(a).value();
    return Status::Ok();
  }

  // Closes the allocator and the pool (clean shutdown), reopens both from the file.
  Status Restart() {
    alloc_.reset();
    pool_.reset();
    auto p = pm::Pool::Open(path_, PoolOpts());
    if (!p.ok()) return p.status();
    pool_ = std::move(p).value();
    return OpenAllocator();
  }

  void CloseAll() {
    alloc_.reset();
    pool_.reset();
  }

  uint8_t* bitmap() const { return pool_->base() + geo_.bitmap_offset; }
  const Geometry& geometry() const { return geo_; }
  const std::string& path() const { return path_; }
  pm::Pool* pool() const { return pool_.get(); }
  BackendAllocator* alloc() const { return alloc_.get(); }
  uint32_t block_size() const { return block_size_; }

 private:
  pm::testing::TempDir dir_;
  std::string path_;
  uint32_t block_size_;
  bool crash_sim_;
  Geometry geo_;
  std::unique_ptr<pm::Pool> pool_;
  std::unique_ptr<BackendAllocator> alloc_;
};

// Slab-level model: live extents by address.
class ExtentModel {
 public:
  ExtentModel(uint64_t begin, uint64_t nblocks, uint32_t block_size)
      : begin_(begin), nblocks_(nblocks), bs_(block_size) {}

  // Checks a fresh allocation: aligned, inside the area, no overlap; then records it.
  void Add(uint64_t addr, uint64_t bytes) {
    ASSERT_GE(addr, begin_);
    ASSERT_EQ((addr - begin_) % bs_, 0u);
    ASSERT_LE(addr + bytes, begin_ + nblocks_ * bs_);
    auto it = live_.lower_bound(addr);
    if (it != live_.end()) {
      ASSERT_LE(addr + bytes, it->first) << "overlaps the next extent";
    }
    if (it != live_.begin()) {
      auto p = std::prev(it);
      ASSERT_LE(p->first + p->second, addr) << "overlaps the previous extent";
    }
    live_.emplace(addr, bytes);
  }
  void Remove(uint64_t addr) { live_.erase(addr); }
  bool Contains(uint64_t addr) const { return live_.count(addr) != 0; }
  // 0 free, 1 head, 2 inside an extent.
  int Classify(uint64_t addr) const {
    auto it = live_.upper_bound(addr);
    if (it == live_.begin()) return 0;
    auto p = std::prev(it);
    if (p->first == addr) return 1;
    return addr < p->first + p->second ? 2 : 0;
  }
  uint64_t UsedBlocks() const {
    uint64_t n = 0;
    for (const auto& [a, b] : live_) n += b / bs_;
    return n;
  }
  uint64_t LongestFreeRun() const {
    uint64_t best = 0, cursor = begin_;
    for (const auto& [a, b] : live_) {
      best = std::max(best, (a - cursor) / bs_);
      cursor = a + b;
    }
    return std::max(best, (begin_ + nblocks_ * bs_ - cursor) / bs_);
  }
  std::vector<Extent> Extents() const {
    std::vector<Extent> v;
    for (const auto& [a, b] : live_) v.push_back({a, b});
    return v;
  }
  const std::map<uint64_t, uint64_t>& live() const { return live_; }

 private:
  uint64_t begin_, nblocks_;
  uint32_t bs_;
  std::map<uint64_t, uint64_t> live_;
};

}  // namespace asymnvm::alloc::testing
