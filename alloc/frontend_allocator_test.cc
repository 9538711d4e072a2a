#include "alloc/frontend_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "alloc/alloc_test_util.h"
#include "alloc/slab_source.h"

namespace asymnvm::alloc {
namespace {

using testing::BackendEnv;

constexpr uint64_t kPool = 4u << 20;
constexpr uint32_t kSlab = 1024;

struct FrontEnv {
  explicit FrontEnv(uint32_t max_empty = 2, uint32_t slab = kSlab, uint64_t pool = kPool)
      : env(pool, slab), max_empty(max_empty) {
    EXPECT_TRUE(env.OpenAllocator().ok());
    Connect();
  }
  void Connect() {
    fe.reset();
    source = std::make_unique<LocalSlabSource>(env.alloc());
    FrontendOptions o;
    o.source = source.get();
    o.max_empty_slabs = max_empty;
    auto r = FrontendAllocator::Open(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    fe = std::move(r).value();
  }
  BackendEnv env;
  uint32_t max_empty;
  std::unique_ptr<LocalSlabSource> source;
  std::unique_ptr<FrontendAllocator> fe;
};

// Live objects: address -> usable (rounded) bytes.
class ObjectModel {
 public:
  void Add(uint64_t addr, uint64_t bytes, uint64_t begin, uint64_t end, uint32_t align) {
    ASSERT_EQ(addr % align, 0u) << addr;
    ASSERT_GE(addr, begin);
    ASSERT_LE(addr + bytes, end);
    auto it = live_.lower_bound(addr);
    if (it != live_.end()) {
      ASSERT_LE(addr + bytes, it->first) << "overlap with next object";
    }
    if (it != live_.begin()) {
      auto p = std::prev(it);
      ASSERT_LE(p->first + p->second, addr) << "overlap with previous object";
    }
    live_.emplace(addr, bytes);
  }
  void Remove(uint64_t addr) { live_.erase(addr); }
  // 0 not covered, 1 start of an object, 2 inside an object.
  int Classify(uint64_t addr) const {
    auto it = live_.upper_bound(addr);
    if (it == live_.begin()) return 0;
    auto p = std::prev(it);
    if (p->first == addr) return 1;
    return addr < p->first + p->second ? 2 : 0;
  }
  const std::map<uint64_t, uint64_t>& live() const { return live_; }

 private:
  std::map<uint64_t, uint64_t> live_;
};

TEST(FrontendAllocator, Open_BadOptions_InvalidArgument) {
  FrontEnv f;
  FrontendOptions o;
  EXPECT_EQ(FrontendAllocator::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.source = f.source.get();
  o.alignment = 24;
  EXPECT_EQ(FrontendAllocator::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.alignment = 2 * kSlab;
  EXPECT_EQ(FrontendAllocator::Open(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(FrontendAllocator, Malloc_Small_CarvesOneSlabWithoutTalkingToBackend) {
  FrontEnv f;
  std::vector<uint64_t> objs;
  for (int i = 0; i < 16; i++) {
    auto r = f.fe->Malloc(60);  // rounds to 64: 16 fit in one 1 KiB slab
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value() % 16, 0u);
    EXPECT_EQ(f.fe->UsableSize(r.value()).value(), 64u);
    objs.push_back(r.value());
  }
  EXPECT_EQ(f.source->calls(), 1u) << "one slab request for 16 objects";
  auto st = f.fe->stats();
  EXPECT_EQ(st.slabs_full, 1u);
  EXPECT_EQ(st.objects_live, 16u);
  EXPECT_EQ(st.bytes_live, 16u * 64);
  auto slabs = f.fe->Slabs();
  ASSERT_EQ(slabs.size(), 1u);
  for (uint64_t o : objs) {
    EXPECT_GE(o, slabs[0]);
    EXPECT_LT(o, slabs[0] + kSlab);
  }
  EXPECT_EQ(f.env.alloc()->Extents(), (std::vector<Extent>{{slabs[0], kSlab}}));
  ASSERT_TRUE(f.fe->Free(objs[3]).ok());
  EXPECT_EQ(f.fe->stats().slabs_partial, 1u);
  EXPECT_EQ(f.source->calls(), 1u);
}

TEST(FrontendAllocator, BestFit_PicksSmallestHoleThatFits) {
  FrontEnv f;
  // Layout one slab as: [a 64][b 32][c 128][d 32][e rest...] then free a, c, d -> holes 64, 128,
  // 32 (d coalesces with nothing: e is live).
  uint64_t a = f.fe->Malloc(64).value();
  uint64_t b = f.fe->Malloc(32).value();
  uint64_t c = f.fe->Malloc(128).value();
  uint64_t d = f.fe->Malloc(32).value();
  uint64_t e = f.fe->Malloc(kSlab - 256).value();
  ASSERT_EQ(f.fe->Slabs().size(), 1u);
  (void)b;
  (void)e;
  ASSERT_TRUE(f.fe->Free(a).ok());
  ASSERT_TRUE(f.fe->Free(c).ok());
  ASSERT_TRUE(f.fe->Free(d).ok());  // coalesces with c: hole of 160 at c
  EXPECT_EQ(f.fe->Malloc(40).value(), a) << "64-byte hole is the best fit for 48";
  EXPECT_EQ(f.fe->Malloc(100).value(), c) << "the 160-byte hole is the only fit";
  EXPECT_EQ(f.fe->Malloc(48).value(), c + 112) << "remaining 48 bytes of that hole";
  EXPECT_EQ(f.fe->stats().slabs_partial, 1u) << "16 bytes left after the 48 in the 64 hole";
  EXPECT_EQ(f.fe->Malloc(16).value(), a + 48);
  EXPECT_EQ(f.fe->stats().slabs_full, 1u);
  EXPECT_EQ(f.fe->Slabs().size(), 1u);
}

TEST(FrontendAllocator, IdleSlabs_ReturnedPastThreshold) {
  FrontEnv f(/*max_empty=*/2);
  std::vector<uint64_t> objs;
  for (int i = 0; i < 40; i++) objs.push_back(f.fe->Malloc(kSlab / 4).value());  // 10 slabs
  EXPECT_EQ(f.fe->Slabs().size(), 10u);
  EXPECT_EQ(f.env.alloc()->stats().blocks_used, 10u);
  for (uint64_t o : objs) ASSERT_TRUE(f.fe->Free(o).ok());
  auto st = f.fe->stats();
  EXPECT_EQ(st.slabs_empty, 2u);
  EXPECT_EQ(st.slab_returns, 8u);
  EXPECT_EQ(f.env.alloc()->stats().blocks_used, 2u) << "only the threshold's worth stays held";
  // Reuse of a cached empty slab costs no backend call.
  uint64_t calls = f.source->calls();
  ASSERT_TRUE(f.fe->Malloc(8).ok());
  EXPECT_EQ(f.source->calls(), calls);
  ASSERT_TRUE(f.fe->Trim().ok());
  EXPECT_EQ(f.env.alloc()->stats().blocks_used, 1u);
}

TEST(FrontendAllocator, Large_GoesToBackendAndBack) {
  FrontEnv f;
  auto r = f.fe->Malloc(kSlab + 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(f.env.alloc()->ExtentBytes(r.value()).value(), 2u * kSlab);
  EXPECT_EQ(f.fe->UsableSize(r.value()).value(), 2u * kSlab);
  EXPECT_EQ(f.fe->stats().large_live, 1u);
  auto exact = f.fe->Malloc(kSlab);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(f.fe->stats().large_live, 1u) << "exactly one slab is still a small object";
  ASSERT_TRUE(f.fe->Free(r.value()).ok());
  EXPECT_EQ(f.env.alloc()->ExtentBytes(r.value()).status().code(), StatusCode::kFailedPrecondition);
  Status again = f.fe->Free(r.value());
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument) << again.ToString();
}

TEST(FrontendAllocator, Errors_AreClear) {
  FrontEnv f;
  EXPECT_EQ(f.fe->Malloc(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.fe->Malloc(kPool).status().code(), StatusCode::kInvalidArgument)
      << "larger than the data area";
  EXPECT_EQ(f.fe->Malloc(UINT64_MAX).status().code(), StatusCode::kInvalidArgument);
  uint64_t a = f.fe->Malloc(100).value();
  // Middle of an object.
  EXPECT_EQ(f.fe->Free(a + 16).code(), StatusCode::kInvalidArgument);
  // Double free inside a held slab.
  uint64_t keep = f.fe->Malloc(100).value();
  (void)keep;
  ASSERT_TRUE(f.fe->Free(a).ok());
  Status st = f.fe->Free(a);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  // Foreign: a slab another front-end holds, and addresses outside the data area.
  uint64_t other = f.env.alloc()->AllocSlab().value();
  st = f.fe->Free(other);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("foreign"), std::string::npos);
  EXPECT_EQ(f.fe->Free(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.fe->Free(UINT64_MAX).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.fe->UsableSize(other).status().code(), StatusCode::kInvalidArgument);
}

TEST(FrontendAllocator, Exhaustion_ResourceExhausted) {
  FrontEnv f(2, kSlab, 1u << 20);
  std::vector<uint64_t> objs;
  while (true) {
    auto r = f.fe->Malloc(kSlab / 2);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
      break;
    }
    objs.push_back(r.value());
  }
  EXPECT_EQ(objs.size(), 2 * f.env.alloc()->blocks_total());
  EXPECT_EQ(f.fe->Malloc(3 * kSlab).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(f.fe->Free(objs[5]).ok());
  EXPECT_EQ(f.fe->Malloc(kSlab / 2).value(), objs[5]);
}

// Random Malloc / Free / bad frees against a model of live objects. Every few hundred operations
// the front-end "crashes" (its DRAM state is dropped) and the back-end restarts from the pool file:
// the back-end's extents must be exactly the front-end's slabs and large extents, and a new
// front-end adopts them with the model's live objects and carries on.
TEST(FrontendAllocator, Randomized_MatchesModelAcrossRestarts) {
  for (uint64_t seed : {1, 2, 3, 4}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FrontEnv f(/*max_empty=*/1 + seed % 3);
    std::mt19937_64 rng(seed);
    ObjectModel model;
    std::map<uint64_t, uint64_t> requested;  // addr -> requested size (for adoption)
    std::vector<uint64_t> freed;
    const uint64_t begin = f.env.alloc()->data_begin(), end = f.env.alloc()->data_end();
    for (int op = 0; op < 6000; op++) {
      int r = static_cast<int>(rng() % 100);
      if (r < 50) {
        uint64_t size = rng() % 20 == 0 ? kSlab + 1 + rng() % (4 * kSlab) : 1 + rng() % 300;
        auto m = f.fe->Malloc(size);
        if (!m.ok()) {
          ASSERT_EQ(m.status().code(), StatusCode::kResourceExhausted) << m.status().ToString();
          continue;
        }
        uint64_t usable = f.fe->UsableSize(m.value()).value();
        ASSERT_GE(usable, size);
        model.Add(m.value(), size > kSlab ? usable : (size + 15) / 16 * 16, begin, end, 16);
        requested[m.value()] = size;
      } else if (r < 92) {
        if (model.live().empty()) continue;
        auto it = model.live().begin();
        std::advance(it, rng() % model.live().size());
        uint64_t addr = it->first;
        Status st = f.fe->Free(addr);
        ASSERT_TRUE(st.ok()) << st.ToString();
        model.Remove(addr);
        requested.erase(addr);
        freed.push_back(addr);
      } else if (!freed.empty()) {
        uint64_t addr = freed[rng() % freed.size()];
        int kind = model.Classify(addr);
        if (kind == 1) continue;  // reallocated since
        Status st = f.fe->Free(addr);
        ASSERT_FALSE(st.ok()) << "second free of " << addr << " succeeded";
        auto slabs = f.fe->Slabs();
        uint64_t key = addr - ((addr - begin) % kSlab);
        bool held = std::binary_search(slabs.begin(), slabs.end(), key);
        StatusCode want =
            kind == 2 || !held ? StatusCode::kInvalidArgument : StatusCode::kFailedPrecondition;
        ASSERT_EQ(st.code(), want) << st.ToString();
      }
      if (op % 1500 == 1499) {
        // Front-end crash + back-end restart.
        std::vector<uint64_t> slabs = f.fe->Slabs();
        std::vector<LiveObject> large = f.fe->LargeObjects();
        f.fe.reset();
        f.source.reset();
        ASSERT_TRUE(f.env.Restart().ok());
        std::vector<Extent> want;
        for (uint64_t s : slabs) want.push_back({s, kSlab});
        for (const LiveObject& l : large)
          want.push_back({l.addr, (l.bytes + kSlab - 1) / kSlab * kSlab});
        std::sort(want.begin(), want.end());
        ASSERT_EQ(f.env.alloc()->Extents(), want);
        f.Connect();
        std::map<uint64_t, std::vector<LiveObject>> per_slab;
        for (uint64_t s : slabs) per_slab[s];
        for (const auto& [addr, size] : requested) {
          if (size > kSlab) continue;
          per_slab[addr - ((addr - begin) % kSlab)].push_back({addr, size});
        }
        for (const auto& [s, objs] : per_slab) ASSERT_TRUE(f.fe->AdoptSlab(s, objs).ok());
        for (const LiveObject& l : large) ASSERT_TRUE(f.fe->AdoptLarge(l.addr, l.bytes).ok());
        freed.clear();
      }
    }
    // Everything freed: at most the threshold's worth of empty slabs remains; Trim returns those.
    for (const auto& [addr, size] : std::map<uint64_t, uint64_t>(model.live())) {
      ASSERT_TRUE(f.fe->Free(addr).ok());
    }
    EXPECT_LE(f.env.alloc()->stats().blocks_used, f.max_empty);
    ASSERT_TRUE(f.fe->Trim().ok());
    EXPECT_EQ(f.env.alloc()->stats().blocks_used, 0u);
    EXPECT_EQ(f.fe->stats().objects_live, 0u);
  }
}

TEST(FrontendAllocator, AdoptSlab_BadObjects_Rejected) {
  FrontEnv f;
  uint64_t s = f.env.alloc()->AllocSlab().value();
  std::vector<LiveObject> overlap = {{s, 64}, {s + 32, 64}};
  EXPECT_EQ(f.fe->AdoptSlab(s, overlap).code(), StatusCode::kInvalidArgument);
  std::vector<LiveObject> outside = {{s + kSlab - 16, 64}};
  EXPECT_EQ(f.fe->AdoptSlab(s, outside).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.fe->AdoptSlab(s + 16, {}).code(), StatusCode::kInvalidArgument);
  std::vector<LiveObject> ok = {{s + 64, 100}};
  ASSERT_TRUE(f.fe->AdoptSlab(s, ok).ok());
  EXPECT_EQ(f.fe->AdoptSlab(s, ok).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(f.fe->Malloc(64).value(), s) << "the gap before the adopted object is free";
  EXPECT_EQ(f.fe->Free(s + 64 + 16).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(f.fe->Free(s + 64).ok());
}

TEST(FrontendAllocator, Concurrent_MallocFree_NoOverlap) {
  FrontEnv f;
  constexpr int kThreads = 3;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> kept(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<uint64_t> mine;
      for (int i = 0; i < 3000; i++) {
        if (mine.empty() || rng() % 3 != 0) {
          uint64_t size = 1 + rng() % 200;
          auto r = f.fe->Malloc(size);
          if (!r.ok()) return;
          mine.push_back(r.value());
        } else {
          size_t k = rng() % mine.size();
          if (!f.fe->Free(mine[k]).ok()) return;
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      for (uint64_t a : mine) kept[t].push_back({a, f.fe->UsableSize(a).value()});
    });
  }
  for (auto& th : threads) th.join();
  std::vector<std::pair<uint64_t, uint64_t>> all;
  for (auto& v : kept) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 1; i < all.size(); i++) {
    ASSERT_LE(all[i - 1].first + all[i - 1].second, all[i].first) << "overlap";
  }
  EXPECT_EQ(f.fe->stats().objects_live, all.size());
}

}  // namespace
}  // namespace asymnvm::alloc
