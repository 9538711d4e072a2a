// asymnvm-micro: Google Benchmark micro-benchmarks of the write path's hot spots (doc/backend.md).
//
//   BM_OpLogEncode / BM_OpLogDecode   an operation log of N payload bytes (front-end / back-end)
//   BM_TxnFinish / BM_TxnDecode       a memory-log transaction of N 64-byte entries
//   BM_TxnApply                       validate + apply it to a DRAM "pool" (no-op persister)
//   BM_LandingFlush                   the Rowan receiver's per-landing hook (a landing into the
//                                     segment being filled: must cost no syscall)
//   BM_SoftWriteFlush                 one WRITE (64 B inline) + FLUSH round trip over the soft NIC
//                                     on tcp loopback, completion waited for on the send CQ
//   BM_KvPut / BM_KvDecodeEntry       the KV server's t-log group commit and entry validation
//                                     (kv_micro.cc, doc/kv.md §Write path)
//
// Run: build/workloads/asymnvm-micro [--benchmark_filter=RE] [--benchmark_min_time=0.5]
// ctest runs it once with --benchmark_min_time=0.01 (label unit) so it cannot rot; the numbers
// are meaningful only on an idle machine (doc/backend.md §Measurements).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "backend/applier.h"
#include "backend/log_format.h"
#include "fabric/rowan/landing.h"
#include "fabric/soft/soft_fabric.h"

namespace {

using namespace asymnvm;

class NullPersister final : public pm::Persister {
 public:
  void Flush(const void*, size_t) override {}
  void Drain() override {}
};

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = static_cast<uint8_t>(seed + i * 31);
  return v;
}

void BM_OpLogEncode(benchmark::State& state) {
  const auto payload = Bytes(static_cast<size_t>(state.range(0)), 7);
  backend::OpLogRecord r;
  r.frontend_id = 3;
  r.structure_id = 5;
  r.op_type = 2;
  r.payload = payload;
  for (auto _ : state) {
    r.op_seq++;
    auto enc = backend::EncodeOpLog(r);
    benchmark::DoNotOptimize(enc.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_OpLogEncode)->Arg(16)->Arg(256)->Arg(4096);

void BM_OpLogDecode(benchmark::State& state) {
  const auto payload = Bytes(static_cast<size_t>(state.range(0)), 9);
  backend::OpLogRecord r;
  r.frontend_id = 3;
  r.op_seq = 1;
  r.payload = payload;
  const auto enc = backend::EncodeOpLog(r);
  for (auto _ : state) {
    auto d = backend::DecodeOpLog(enc);
    if (!d.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(d);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_OpLogDecode)->Arg(16)->Arg(256)->Arg(4096);

constexpr uint64_t kDataBegin = 4096, kPoolBytes = 1 << 20;

std::vector<uint8_t> MakeTxn(size_t entries) {
  backend::TxnBuilder b;
  const auto data = Bytes(64, 1);
  for (size_t i = 0; i < entries; i++) b.Write(kDataBegin + i * 128, data);
  return b.Finish(3, 1, 1, /*seq_addr=*/64);
}

void BM_TxnFinish(benchmark::State& state) {
  const auto data = Bytes(64, 1);
  backend::TxnBuilder b;
  uint64_t seq = 0;
  for (auto _ : state) {
    for (int64_t i = 0; i < state.range(0); i++)
      b.Write(kDataBegin + static_cast<uint64_t>(i) * 128, data);
    seq++;
    auto enc = b.Finish(3, seq, seq, 64);
    benchmark::DoNotOptimize(enc.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_TxnFinish)->Arg(1)->Arg(8)->Arg(64);

void BM_TxnDecode(benchmark::State& state) {
  const auto enc = MakeTxn(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    auto d = backend::DecodeTxn(enc);
    if (!d.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_TxnDecode)->Arg(1)->Arg(8)->Arg(64);

void BM_TxnApply(benchmark::State& state) {
  const auto enc = MakeTxn(static_cast<size_t>(state.range(0)));
  auto view = backend::DecodeTxn(enc);
  if (!view.ok()) {
    state.SkipWithError("decode failed");
    return;
  }
  std::vector<uint8_t> pool(kPoolBytes, 0);
  NullPersister np;
  backend::ApplyTarget t{pool.data(), pool.size(), kDataBegin, pool.size(), &np};
  for (auto _ : state) {
    auto r = backend::ApplyTxn(*view, t, nullptr);
    if (!r.ok()) state.SkipWithError("apply failed");
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_TxnApply)->Arg(1)->Arg(8)->Arg(64);

// The receiver's landing hook as installed by rowan::Receiver: a relaxed load and a compare for a
// landing into the segment being filled (Arg 0); Arg 1 also counts a wake-up per call (the rare
// case of a landing in the next segment, here without a waiter: an atomic exchange).
void BM_LandingFlush(benchmark::State& state) {
  NullPersister np;
  std::vector<uint8_t> area(1 << 16);
  std::atomic<uint32_t> front{0};
  std::atomic<bool> wake{false};
  const bool other = state.range(0) != 0;
  rowan::LandingPersister lp(&np, nullptr, area.data(), [&](uint64_t off) {
    if (off / 4096 != front.load(std::memory_order_relaxed)) wake.exchange(true);
  });
  const uint8_t* at = area.data() + (other ? 8192 : 64);
  for (auto _ : state) {
    lp.Flush(at, 64);
    wake.store(false, std::memory_order_relaxed);
  }
}
BENCHMARK(BM_LandingFlush)->Arg(0)->Arg(1);

void BM_SoftWriteFlush(benchmark::State& state) {
  fabric::FabricOptions fo;
  fo.cluster_secret = "asymnvm-micro";
  auto tf = fabric::soft::OpenSoftFabric(fo);
  auto inf = fabric::soft::OpenSoftFabric(fo);
  if (!tf.ok() || !inf.ok()) {
    state.SkipWithError("soft fabric");
    return;
  }
  auto tpd = (*tf)->AllocPd();
  auto ipd = (*inf)->AllocPd();
  auto tcq = (*tf)->CreateCq({});
  auto icq = (*inf)->CreateCq({});
  if (!tpd.ok() || !ipd.ok() || !tcq.ok() || !icq.ok()) {
    state.SkipWithError("fabric objects");
    return;
  }
  std::vector<uint8_t> region(4096);
  NullPersister np;
  auto mr = (*tpd)->RegisterMemory(region.data(), region.size(),
                                   {.access = fabric::kAllRemote, .persister = &np});
  auto l = (*tf)->Listen(tpd->get(), "tcp://127.0.0.1:0");
  if (!mr.ok() || !l.ok()) {
    state.SkipWithError("listen");
    return;
  }
  fabric::ConnectionOptions co;
  co.send_cq = tcq->get();
  co.recv_cq = tcq->get();
  Result<std::unique_ptr<fabric::Connection>> accepted = Status::Internal("not run");
  std::thread t([&] { accepted = (*l)->Accept(co); });
  fabric::ConnectionOptions ci;
  ci.send_cq = icq->get();
  ci.recv_cq = icq->get();
  auto c = (*inf)->Connect(ipd->get(), (*l)->address(), ci);
  t.join();
  if (!c.ok() || !accepted.ok()) {
    state.SkipWithError("connect");
    return;
  }
  uint8_t payload[64];
  std::memset(payload, 0x5A, sizeof payload);
  const auto base = reinterpret_cast<uint64_t>(region.data());
  fabric::WorkRequest wrs[2];
  wrs[0].wr_id = 1;
  wrs[0].opcode = fabric::Opcode::kWrite;
  wrs[0].signaled = false;
  wrs[0].inline_data = true;
  wrs[0].local_addr = payload;
  wrs[0].length = 64;
  wrs[0].remote_addr = base;
  wrs[0].rkey = (*mr)->rkey();
  wrs[1].wr_id = 2;
  wrs[1].opcode = fabric::Opcode::kFlush;
  wrs[1].remote_addr = base;
  wrs[1].rkey = (*mr)->rkey();
  fabric::Completion cs[4];
  for (auto _ : state) {
    Status st = (*c)->Post(wrs);
    if (!st.ok()) {
      state.SkipWithError("post");
      break;
    }
    size_t got = 0;
    while (got == 0) {
      auto n = (*icq)->Wait(cs, std::chrono::milliseconds(5000));
      if (!n.ok() || *n == 0) {
        state.SkipWithError("no completion within 5 s");
        return;
      }
      for (size_t i = 0; i < *n; i++) {
        if (cs[i].status != fabric::CompletionStatus::kSuccess) {
          state.SkipWithError("completion error");
          return;
        }
        if (cs[i].wr_id == 2) got++;
      }
    }
  }
  (*c)->Close();
}
BENCHMARK(BM_SoftWriteFlush)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
