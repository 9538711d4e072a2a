// asymnvm-micro, KV server hot spots (doc/kv.md §Write path):
//
//   BM_KvPut/<group>         Store::Put of a 100-byte value on an msync pool in /tmp; group 1:
//                            every put synced (the old path), group N: one SyncDeferred per N
//                            puts (group commit: one sync per batch of executed requests)
//   BM_KvDecodeEntry/<bytes> validating one t-log entry (CRC32C over header, key and value), what
//                            every GET and the recovery scan do per entry
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "asymnvm/pm.h"
#include "kv/format.h"
#include "kv/store.h"

namespace {

using namespace asymnvm;

void BM_KvPut(benchmark::State& state) {
  const int group = static_cast<int>(state.range(0));
  const std::string path = "/tmp/asymnvm-micro-kv-" + std::to_string(getpid()) + ".pool";
  std::remove(path.c_str());
  pm::PoolOptions po;
  po.mode = pm::PersistMode::kMsync;
  po.layout = "asymnvm-micro";
  auto pool = pm::Pool::Create(path, 64ull << 20, po);
  if (!pool.ok()) {
    state.SkipWithError(pool.status().ToString().c_str());
    return;
  }
  kv::StoreOptions so;
  so.header_page = (*pool)->user_base();
  so.log_base = (*pool)->user_base() + kv::format::kHeaderPage;
  so.persister = (*pool)->persister();
  so.geometry.workers = 1;
  so.geometry.shards = 1;
  so.geometry.segment_size = 1u << 20;
  so.geometry.segments = 48;
  so.group_commit = group > 1;
  auto store = kv::Store::Open(so);
  if (!store.ok()) {
    state.SkipWithError(store.status().ToString().c_str());
    return;
  }
  const std::string value(100, 'v');
  uint64_t i = 0;
  for (auto _ : state) {
    const std::string key = "key" + std::to_string(i % 1000);
    auto v = (*store)->Put(0, 0, key, value, 0, false);
    if (!v.ok()) {
      state.SkipWithError(v.status().ToString().c_str());
      break;
    }
    if (group > 1 && ++i % group == 0) (*store)->SyncDeferred(0);
    if (group <= 1) i++;
    if ((*store)->NeedsCleaning()) {
      state.PauseTiming();
      (void)(*store)->CleanOnce();
      state.ResumeTiming();
    }
  }
  (*store)->SyncDeferred(0);
  state.counters["syncs_per_put"] = benchmark::Counter(
      static_cast<double>((*pool)->sync_stats().syncs) / static_cast<double>(state.iterations()));
  store->reset();
  pool->reset();
  std::remove(path.c_str());
}
BENCHMARK(BM_KvPut)->Arg(1)->Arg(16)->Arg(64)->UseRealTime();

void BM_KvDecodeEntry(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const std::string key = "some-key", value(n, 'x');
  std::vector<uint8_t> e(kv::format::EntryFootprint(key.size(), value.size()));
  kv::format::EntryHeader h;
  h.key_len = static_cast<uint16_t>(key.size());
  h.value_len = static_cast<uint32_t>(value.size());
  h.version = 1;
  h.generation = 7;
  kv::format::EncodeEntry(h, key, value, e.data());
  for (auto _ : state) {
    kv::format::EntryHeader out;
    benchmark::DoNotOptimize(kv::format::DecodeEntry(e.data(), e.size(), 7, &out));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * e.size()));
}
BENCHMARK(BM_KvDecodeEntry)->Arg(64)->Arg(4096)->Arg(65536);

}  // namespace
