// asymnvm-micro, front-end hot spots:
//
//   BM_PageCacheUpdate/<pages>  one memory log applied to the page cache (PageCache::Update, every
//                               MemLog does it) with <pages> pages of 256 B and 4 KiB cached: it
//                               walks the distinct page sizes, so the cost must not grow with the
//                               cache (it walked a multiset with an element per page before)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "frontend/page_cache.h"

namespace {

using asymnvm::frontend::PageCache;

void BM_PageCacheUpdate(benchmark::State& state) {
  const auto pages = static_cast<uint64_t>(state.range(0));
  PageCache cache(pages * 8192, 1);
  std::vector<uint8_t> small(256, 1), big(4096, 2);
  for (uint64_t i = 0; i < pages; i++) {
    cache.Insert(256, i * 256, small);
    cache.Insert(4096, (pages + i) * 4096, big);
  }
  const std::vector<uint8_t> write(64, 3);
  uint64_t i = 0;
  for (auto _ : state) {
    cache.Update((i++ % pages) * 256 + 64, write);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PageCacheUpdate)->Arg(16)->Arg(1024)->Arg(16384);

}  // namespace
