#include "fabric/soft/soft_fabric.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "asymnvm/pm.h"
#include "fabric/bootstrap.h"
#include "fabric/soft/packet.h"

namespace asymnvm::fabric::soft {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Records every flushed range and how many drains happened.
class RecordingPersister : public pm::Persister {
 public:
  void Flush(const void* addr, size_t length) override {
    std::lock_guard<std::mutex> lock(mu);
    flushed.emplace_back(static_cast<const uint8_t*>(addr), length);
  }
  void Drain() override { drains++; }
  std::mutex mu;
  std::vector<std::pair<const uint8_t*, size_t>> flushed;
  std::atomic<int> drains{0};
};

std::unique_ptr<Fabric> MakeFabric(const std::string& secret = "asymnvm") {
  FabricOptions o;
  o.cluster_secret = secret;
  auto f = OpenSoftFabric(o);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

std::atomic<int> g_name_counter{0};

std::string ListenAddress(const std::string& transport) {
  int n = g_name_counter++;
  if (transport == "tcp") return "tcp://127.0.0.1:0";
  if (transport == "unix") {
    return "unix:///tmp/asymnvm-soft-" + std::to_string(::getpid()) + "-" + std::to_string(n) +
           ".sock";
  }
  return "inproc://soft-test-" + std::to_string(n);
}

// One endpoint: PD, CQs, optional SRQ.
struct Side {
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> scq, rcq;
  explicit Side(std::unique_ptr<Fabric> f, CompletionQueueOptions cqo = {}) : fabric(std::move(f)) {
    pd = std::move(fabric->AllocPd()).value();
    scq = std::move(fabric->CreateCq(cqo)).value();
    rcq = std::move(fabric->CreateCq(cqo)).value();
  }
  ConnectionOptions Options(SharedReceiveQueue* srq = nullptr) {
    ConnectionOptions o;
    o.send_cq = scq.get();
    o.recv_cq = rcq.get();
    o.srq = srq;
    o.timeout = milliseconds(3000);
    return o;
  }
  std::unique_ptr<MemoryRegion> Reg(void* p, size_t n, uint32_t access,
                                    pm::Persister* pers = nullptr) {
    MemoryRegionOptions o;
    o.access = access;
    o.persister = pers;
    auto r = pd->RegisterMemory(p, n, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }
};

Completion WaitOne(CompletionQueue* cq) {
  Completion c[1];
  for (int i = 0; i < 100; i++) {
    auto r = cq->Wait(c, milliseconds(100));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok() && *r == 1) return c[0];
  }
  ADD_FAILURE() << "no completion within 10 s";
  return Completion{9999, Opcode::kWrite, CompletionStatus::kGeneralError};
}

class SoftFabricTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    target_ = std::make_unique<Side>(MakeFabric());
    init_ = std::make_unique<Side>(MakeFabric());
    auto l = target_->fabric->Listen(target_->pd.get(), ListenAddress(GetParam()));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
  }
  void TearDown() override {
    conns_.clear();
    listener_.reset();
  }

  // Connects init_ → target_; returns {initiator conn, target conn}.
  std::pair<Connection*, Connection*> ConnectPair(ConnectionOptions ic, ConnectionOptions tc) {
    Result<std::unique_ptr<Connection>> accepted = Status::Internal("not run");
    std::thread t([&] { accepted = listener_->Accept(tc); });
    auto c = init_->fabric->Connect(init_->pd.get(), listener_->address(), ic);
    t.join();
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(accepted.ok()) << accepted.status().ToString();
    if (!c.ok() || !accepted.ok()) return {nullptr, nullptr};
    conns_.push_back(std::move(c).value());
    conns_.push_back(std::move(accepted).value());
    return {conns_[conns_.size() - 2].get(), conns_.back().get()};
  }
  std::pair<Connection*, Connection*> ConnectPair() {
    return ConnectPair(init_->Options(), target_->Options());
  }

  // Target memory with guard bytes around the registered part.
  static constexpr size_t kGuard = 64, kRegion = 4096;
  void MakeTargetRegion(uint32_t access, pm::Persister* pers = nullptr) {
    tmem_.assign(kGuard + kRegion + kGuard, 0xEE);
    std::memset(tmem_.data() + kGuard, 0, kRegion);
    tmr_ = target_->Reg(tmem_.data() + kGuard, kRegion, access, pers);
  }
  void ExpectGuardsIntact() {
    for (size_t i = 0; i < kGuard; i++) {
      ASSERT_EQ(tmem_[i], 0xEE) << "guard byte before the region changed at " << i;
      ASSERT_EQ(tmem_[kGuard + kRegion + i], 0xEE) << "guard byte after the region changed";
    }
  }
  uint8_t* T(size_t off) { return tmem_.data() + kGuard + off; }
  uint64_t TA(size_t off) { return reinterpret_cast<uint64_t>(T(off)); }

  WorkRequest Wr(Opcode op, uint64_t wr_id, void* local, uint32_t len, uint64_t raddr) {
    WorkRequest w;
    w.wr_id = wr_id;
    w.opcode = op;
    w.local_addr = local;
    w.length = len;
    w.local_mr = lmr_.get();
    w.remote_addr = raddr;
    w.rkey = tmr_ ? tmr_->rkey() : 0;
    return w;
  }
  void MakeLocal() {
    lmem_.assign(kRegion, 0);
    lmr_ = init_->Reg(lmem_.data(), lmem_.size(), kLocalWrite);
  }

  std::unique_ptr<Side> target_, init_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::vector<uint8_t> tmem_, lmem_;
  std::unique_ptr<MemoryRegion> tmr_, lmr_;
};

TEST_P(SoftFabricTest, WriteThenRead_DataRoundTrips) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  for (int i = 0; i < 100; i++) lmem_[i] = static_cast<uint8_t>(i + 1);
  WorkRequest w = Wr(Opcode::kWrite, 1, lmem_.data(), 100, TA(200));
  ASSERT_TRUE(ic->Post({&w, 1}).ok());
  Completion c = WaitOne(init_->scq.get());
  EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(std::memcmp(T(200), lmem_.data(), 100), 0);
  WorkRequest r = Wr(Opcode::kRead, 2, lmem_.data() + 1000, 100, TA(200));
  ASSERT_TRUE(ic->Post({&r, 1}).ok());
  c = WaitOne(init_->scq.get());
  EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(c.opcode, Opcode::kRead);
  EXPECT_EQ(c.byte_len, 100u);
  EXPECT_EQ(std::memcmp(lmem_.data() + 1000, lmem_.data(), 100), 0);
  Counters tc_counters = tc->counters();
  EXPECT_EQ(tc_counters.remote_ops_served, 2u);
  Counters icc = ic->counters();
  EXPECT_EQ(icc.writes, 1u);
  EXPECT_EQ(icc.reads, 1u);
  EXPECT_EQ(icc.round_trips, 2u);
  EXPECT_GT(icc.bytes_out, 100u);
  ExpectGuardsIntact();
}

TEST_P(SoftFabricTest, PipelinedList_OneRoundTripInOrderCompletions) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  std::vector<WorkRequest> wrs;
  for (int i = 0; i < 64; i++) {
    lmem_[i * 8] = static_cast<uint8_t>(i);
    WorkRequest w = Wr(Opcode::kWrite, 100 + i, nullptr, 8, TA(i * 8));
    w.inline_data = true;
    w.local_addr = lmem_.data() + i * 8;
    w.signaled = (i % 2 == 0);
    wrs.push_back(w);
  }
  ASSERT_TRUE(ic->Post(wrs).ok());
  for (int i = 0; i < 64; i += 2) {
    Completion c = WaitOne(init_->scq.get());
    EXPECT_EQ(c.wr_id, 100u + i);
    EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  }
  for (int i = 0; i < 64; i++) EXPECT_EQ(*T(i * 8), i);
  EXPECT_EQ(ic->counters().round_trips, 1u);
  EXPECT_EQ(ic->counters().writes, 64u);
}

TEST_P(SoftFabricTest, CompareSwapAndFetchAdd_ReturnOriginal) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  uint64_t v = 5;
  std::memcpy(T(64), &v, 8);
  WorkRequest cas = Wr(Opcode::kCompareSwap, 1, lmem_.data(), 8, TA(64));
  cas.compare_add = 5;
  cas.swap = 77;
  WorkRequest cas_fail = Wr(Opcode::kCompareSwap, 2, lmem_.data() + 8, 8, TA(64));
  cas_fail.compare_add = 5;
  cas_fail.swap = 99;
  WorkRequest faa = Wr(Opcode::kFetchAdd, 3, lmem_.data() + 16, 8, TA(64));
  faa.compare_add = 3;
  std::vector<WorkRequest> wrs = {cas, cas_fail, faa};
  ASSERT_TRUE(ic->Post(wrs).ok());
  for (int i = 0; i < 3; i++)
    EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);
  uint64_t r0, r1, r2, now;
  std::memcpy(&r0, lmem_.data(), 8);
  std::memcpy(&r1, lmem_.data() + 8, 8);
  std::memcpy(&r2, lmem_.data() + 16, 8);
  std::memcpy(&now, T(64), 8);
  EXPECT_EQ(r0, 5u);
  EXPECT_EQ(r1, 77u);
  EXPECT_EQ(r2, 77u);
  EXPECT_EQ(now, 80u);
}

TEST_P(SoftFabricTest, ConcurrentFetchAdd_ManyConnections_Atomic) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  constexpr int kConns = 3, kOps = 300;
  std::vector<Connection*> ics;
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  for (int i = 0; i < kConns; i++) {
    cqs.push_back(std::move(init_->fabric->CreateCq({})).value());
    ConnectionOptions o = init_->Options();
    o.send_cq = cqs.back().get();
    ics.push_back(ConnectPair(o, target_->Options()).first);
    ASSERT_NE(ics.back(), nullptr);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kConns; i++) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < kOps; k++) {
        WorkRequest w = Wr(Opcode::kFetchAdd, k, nullptr, 8, TA(0));
        w.compare_add = 1;
        ASSERT_TRUE(ics[i]->Post({&w, 1}).ok());
        ASSERT_EQ(WaitOne(cqs[i].get()).status, CompletionStatus::kSuccess);
      }
    });
  }
  for (auto& t : threads) t.join();
  uint64_t v;
  std::memcpy(&v, T(0), 8);
  EXPECT_EQ(v, uint64_t{kConns * kOps});
  conns_.clear();
}

TEST_P(SoftFabricTest, SendRecv_OwnReceiveQueue) {
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  std::vector<uint8_t> rbuf(256, 0);
  auto rmr = target_->Reg(rbuf.data(), rbuf.size(), kLocalWrite);
  RecvRequest rr{42, rbuf.data(), 256, rmr.get()};
  ASSERT_TRUE(tc->PostRecv({&rr, 1}).ok());
  std::memcpy(lmem_.data(), "hello", 5);
  WorkRequest s = Wr(Opcode::kSend, 7, lmem_.data(), 5, 0);
  ASSERT_TRUE(ic->Post({&s, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);
  Completion c = WaitOne(target_->rcq.get());
  EXPECT_EQ(c.wr_id, 42u);
  EXPECT_EQ(c.opcode, Opcode::kRecv);
  EXPECT_EQ(c.byte_len, 5u);
  EXPECT_EQ(c.connection_id, tc->id());
  EXPECT_TRUE(c.buffer_done);
  EXPECT_EQ(std::memcmp(rbuf.data(), "hello", 5), 0);
  EXPECT_EQ(tc->counters().recvs, 1u);
}

TEST_P(SoftFabricTest, MultiPacketSrq_PlacesAtStridesAndRollsOver) {
  MakeLocal();
  SrqOptions so;
  so.multi_packet = true;
  so.stride = 64;
  auto srq = std::move(target_->fabric->CreateSrq(target_->pd.get(), so)).value();
  EXPECT_TRUE(srq->multi_packet_native());
  auto [ic1, tc1] = ConnectPair(init_->Options(), target_->Options(srq.get()));
  auto [ic2, tc2] = ConnectPair(init_->Options(), target_->Options(srq.get()));
  ASSERT_NE(ic2, nullptr);
  std::vector<uint8_t> bufs(2 * 256, 0);
  auto rmr = target_->Reg(bufs.data(), bufs.size(), kLocalWrite);
  RecvRequest rr[2] = {{1, bufs.data(), 256, rmr.get()}, {2, bufs.data() + 256, 256, rmr.get()}};
  ASSERT_TRUE(srq->PostRecv(rr).ok());
  EXPECT_EQ(tc1->PostRecv(rr).code(), StatusCode::kFailedPrecondition);
  // Messages of 100, 10 (from conn 2), 100: offsets 0, 128; the third does not fit → buffer 2.
  std::memset(lmem_.data(), 'a', 100);
  WorkRequest s = Wr(Opcode::kSend, 1, lmem_.data(), 100, 0);
  ASSERT_TRUE(ic1->Post({&s, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);
  WorkRequest s2 = Wr(Opcode::kSend, 2, lmem_.data(), 10, 0);
  ASSERT_TRUE(ic2->Post({&s2, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);
  ASSERT_TRUE(ic1->Post({&s, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);

  Completion c = WaitOne(target_->rcq.get());
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(c.byte_len, 100u);
  EXPECT_EQ(c.connection_id, tc1->id());
  EXPECT_FALSE(c.buffer_done);
  c = WaitOne(target_->rcq.get());
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.offset, 128u);
  EXPECT_EQ(c.byte_len, 10u);
  EXPECT_EQ(c.connection_id, tc2->id());
  c = WaitOne(target_->rcq.get());  // retirement of buffer 1
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.byte_len, 0u);
  EXPECT_TRUE(c.buffer_done);
  c = WaitOne(target_->rcq.get());
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(c.byte_len, 100u);
  EXPECT_EQ(bufs[256], 'a');
  EXPECT_EQ(srq->posted(), 1u);
}

TEST_P(SoftFabricTest, SendTooLong_ReceiverLengthErrorSenderInvalidRequest) {
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  std::vector<uint8_t> rbuf(16, 0);
  auto rmr = target_->Reg(rbuf.data(), rbuf.size(), kLocalWrite);
  RecvRequest rr{5, rbuf.data(), 16, rmr.get()};
  ASSERT_TRUE(tc->PostRecv({&rr, 1}).ok());
  WorkRequest s = Wr(Opcode::kSend, 1, lmem_.data(), 100, 0);
  ASSERT_TRUE(ic->Post({&s, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kRemoteInvalidRequest);
  Completion c = WaitOne(target_->rcq.get());
  EXPECT_EQ(c.status, CompletionStatus::kLocalLengthError);
  EXPECT_EQ(c.wr_id, 5u);
  EXPECT_EQ(ic->state(), ConnectionState::kError);
}

TEST_P(SoftFabricTest, RnrNoBuffer_RetriesThenFailsInOrder) {
  MakeLocal();
  ConnectionOptions o = init_->Options();
  o.rnr_retry = 3;
  o.rnr_backoff = microseconds(20);
  auto [ic, tc] = ConnectPair(o, target_->Options());
  ASSERT_NE(ic, nullptr);
  WorkRequest s = Wr(Opcode::kSend, 1, lmem_.data(), 8, 0);
  WorkRequest s2 = Wr(Opcode::kSend, 2, lmem_.data(), 8, 0);
  std::vector<WorkRequest> wrs = {s, s2};
  ASSERT_TRUE(ic->Post(wrs).ok());
  Completion c = WaitOne(init_->scq.get());
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, CompletionStatus::kRnrRetryExceeded);
  c = WaitOne(init_->scq.get());
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, CompletionStatus::kFlushed);
  EXPECT_EQ(ic->counters().rnr_events, 3u);
  EXPECT_EQ(tc->counters().rnr_events, 4u);
  EXPECT_EQ(ic->state(), ConnectionState::kError);
  EXPECT_EQ(ic->Post({&s, 1}).code(), StatusCode::kConnectionError);
}

TEST_P(SoftFabricTest, RnrThenBufferPosted_Delivered) {
  MakeLocal();
  ConnectionOptions o = init_->Options();
  o.rnr_retry = 1000;
  o.rnr_backoff = microseconds(100);
  auto [ic, tc] = ConnectPair(o, target_->Options());
  ASSERT_NE(ic, nullptr);
  WorkRequest s = Wr(Opcode::kSend, 1, lmem_.data(), 8, 0);
  ASSERT_TRUE(ic->Post({&s, 1}).ok());
  while (tc->counters().rnr_events == 0) std::this_thread::yield();
  std::vector<uint8_t> rbuf(64, 0);
  auto rmr = target_->Reg(rbuf.data(), rbuf.size(), kLocalWrite);
  RecvRequest rr{9, rbuf.data(), 64, rmr.get()};
  ASSERT_TRUE(tc->PostRecv({&rr, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);
  EXPECT_EQ(WaitOne(target_->rcq.get()).wr_id, 9u);
}

TEST_P(SoftFabricTest, FlushPm_PersistsExactlyLandedRanges) {
  RecordingPersister pers;
  MakeTargetRegion(kAllRemote, &pers);
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  WorkRequest w1 = Wr(Opcode::kWrite, 1, lmem_.data(), 100, TA(0));
  w1.signaled = false;
  WorkRequest w2 = Wr(Opcode::kWrite, 2, lmem_.data(), 50, TA(1000));
  w2.signaled = false;
  WorkRequest f = Wr(Opcode::kFlush, 3, nullptr, 0, TA(0));
  std::vector<WorkRequest> wrs = {w1, w2, f};
  ASSERT_TRUE(ic->Post(wrs).ok());
  Completion c = WaitOne(init_->scq.get());
  EXPECT_EQ(c.wr_id, 3u);
  EXPECT_EQ(c.opcode, Opcode::kFlush);
  EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  {
    std::lock_guard<std::mutex> lock(pers.mu);
    ASSERT_EQ(pers.flushed.size(), 2u);
    EXPECT_EQ(pers.flushed[0].first, T(0));
    EXPECT_EQ(pers.flushed[0].second, 100u);
    EXPECT_EQ(pers.flushed[1].first, T(1000));
    EXPECT_EQ(pers.flushed[1].second, 50u);
  }
  EXPECT_GE(pers.drains.load(), 1);
  // A second flush with nothing landed persists nothing more.
  ASSERT_TRUE(ic->Post({&f, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);
  std::lock_guard<std::mutex> lock(pers.mu);
  EXPECT_EQ(pers.flushed.size(), 2u);
}

TEST_P(SoftFabricTest, FlushDram_OrdersAndAcks) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  WorkRequest w = Wr(Opcode::kWrite, 1, lmem_.data(), 8, TA(0));
  w.signaled = false;
  WorkRequest f = Wr(Opcode::kFlush, 2, nullptr, 0, 0);
  f.rkey = 0;
  std::vector<WorkRequest> wrs = {w, f};
  ASSERT_TRUE(ic->Post(wrs).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).wr_id, 2u);
}

struct BadCase {
  const char* name;
  Opcode op;
  int64_t offset;  // relative to the region start
  uint32_t len;
  uint32_t access;  // region access
  bool bad_rkey;
  CompletionStatus expect;
};

TEST_P(SoftFabricTest, InvalidRemoteAccess_RejectedNothingOutsideTouchedOthersServed) {
  const BadCase cases[] = {
      {"bad rkey", Opcode::kWrite, 0, 8, kAllRemote, true, CompletionStatus::kRemoteAccessError},
      {"write past end", Opcode::kWrite, kRegion - 4, 8, kAllRemote, false,
       CompletionStatus::kRemoteAccessError},
      {"write before start", Opcode::kWrite, -8, 8, kAllRemote, false,
       CompletionStatus::kRemoteAccessError},
      {"read past end", Opcode::kRead, 1, kRegion, kAllRemote, false,
       CompletionStatus::kRemoteAccessError},
      {"no write right", Opcode::kWrite, 0, 8, kRemoteRead | kLocalWrite, false,
       CompletionStatus::kRemoteAccessError},
      {"no read right", Opcode::kRead, 0, 8, kRemoteWrite | kLocalWrite, false,
       CompletionStatus::kRemoteAccessError},
      {"no atomic right", Opcode::kFetchAdd, 0, 8, kRemoteRead | kRemoteWrite, false,
       CompletionStatus::kRemoteAccessError},
      {"misaligned atomic", Opcode::kCompareSwap, 4, 8, kAllRemote, false,
       CompletionStatus::kRemoteInvalidRequest},
      {"atomic len 4", Opcode::kFetchAdd, 0, 4, kAllRemote, false,
       CompletionStatus::kRemoteInvalidRequest},
      {"atomic past end", Opcode::kFetchAdd, kRegion, 8, kAllRemote, false,
       CompletionStatus::kRemoteAccessError},
  };
  MakeLocal();
  for (const auto& bc : cases) {
    SCOPED_TRACE(bc.name);
    tmr_.reset();
    MakeTargetRegion(bc.access);
    auto [ic, tc] = ConnectPair();
    auto [ic2, tc2] = ConnectPair();
    ASSERT_NE(ic2, nullptr);
    std::memset(lmem_.data(), 0xAB, kRegion);
    WorkRequest bad = Wr(bc.op, 1, lmem_.data(), bc.len, TA(0) + bc.offset);
    if (bc.bad_rkey) bad.rkey = tmr_->rkey() ^ 0x5A5A5A5A;
    WorkRequest after = Wr(Opcode::kWrite, 2, lmem_.data(), 8, TA(0));
    std::vector<WorkRequest> wrs = {bad, after};
    ASSERT_TRUE(ic->Post(wrs).ok());
    Completion c = WaitOne(init_->scq.get());
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, bc.expect) << CompletionStatusName(c.status);
    c = WaitOne(init_->scq.get());
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.status, CompletionStatus::kFlushed);
    EXPECT_EQ(ic->state(), ConnectionState::kError);
    ExpectGuardsIntact();
    for (size_t i = 0; i < kRegion; i++) ASSERT_EQ(*T(i), 0) << "region byte " << i;
    // The other connection to the same target still works (if it has the right).
    WorkRequest ok = Wr(Opcode::kFlush, 3, nullptr, 0, 0);
    ok.rkey = 0;
    ASSERT_TRUE(ic2->Post({&ok, 1}).ok());
    EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kSuccess);
    EXPECT_EQ(ic2->state(), ConnectionState::kConnected);
    conns_.clear();
  }
}

TEST_P(SoftFabricTest, DeregisteredRegion_RemoteAccessError) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  auto [ic, tc] = ConnectPair();
  ASSERT_NE(ic, nullptr);
  uint32_t rkey = tmr_->rkey();
  tmr_.reset();
  WorkRequest w = Wr(Opcode::kWrite, 1, lmem_.data(), 8, TA(0));
  w.rkey = rkey;
  ASSERT_TRUE(ic->Post({&w, 1}).ok());
  EXPECT_EQ(WaitOne(init_->scq.get()).status, CompletionStatus::kRemoteAccessError);
  ExpectGuardsIntact();
}

TEST_P(SoftFabricTest, LocalValidation_RejectsWholeListBeforePosting) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  ConnectionOptions o = init_->Options();
  o.max_send_wr = 4;
  o.max_inline = 16;
  auto [ic, tc] = ConnectPair(o, target_->Options());
  ASSERT_NE(ic, nullptr);
  WorkRequest good = Wr(Opcode::kWrite, 1, lmem_.data(), 8, TA(0));
  WorkRequest outside = Wr(Opcode::kWrite, 2, lmem_.data() + kRegion - 4, 8, TA(0));
  std::vector<WorkRequest> wrs = {good, outside};
  EXPECT_EQ(ic->Post(wrs).code(), StatusCode::kInvalidArgument);
  WorkRequest big_inline = good;
  big_inline.inline_data = true;
  big_inline.length = 17;
  EXPECT_EQ(ic->Post({&big_inline, 1}).code(), StatusCode::kInvalidArgument);
  auto ro = init_->Reg(lmem_.data(), 64, 0);
  WorkRequest read_ro = Wr(Opcode::kRead, 3, lmem_.data(), 8, TA(0));
  read_ro.local_mr = ro.get();
  EXPECT_EQ(ic->Post({&read_ro, 1}).code(), StatusCode::kInvalidArgument);
  std::vector<WorkRequest> five(5, good);
  EXPECT_EQ(ic->Post(five).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ic->counters().round_trips, 0u);
  Completion c[4];
  auto polled = init_->scq->Poll(c);
  ASSERT_TRUE(polled.ok());
  EXPECT_EQ(polled.value(), 0u);
  EXPECT_EQ(ic->state(), ConnectionState::kConnected);
}

TEST_P(SoftFabricTest, RingCq_OverwritesOldestNeverBlocks) {
  MakeTargetRegion(kAllRemote);
  MakeLocal();
  CompletionQueueOptions ro;
  ro.capacity = 4;
  ro.ring = true;
  auto ring = std::move(init_->fabric->CreateCq(ro)).value();
  ConnectionOptions o = init_->Options();
  o.send_cq = ring.get();
  auto [ic, tc] = ConnectPair(o, target_->Options());
  ASSERT_NE(ic, nullptr);
  std::vector<WorkRequest> wrs;
  for (int i = 0; i < 10; i++) wrs.push_back(Wr(Opcode::kWrite, i, lmem_.data(), 8, TA(0)));
  wrs.push_back(Wr(Opcode::kFlush, 10, nullptr, 0, TA(0)));
  ASSERT_TRUE(ic->Post(wrs).ok());
  while (ring->overwritten() < 7) std::this_thread::yield();
  Completion c[8];
  auto n = ring->Poll(c);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 4u);
  EXPECT_EQ(c[0].wr_id, 7u);
  EXPECT_EQ(c[3].wr_id, 10u);
  EXPECT_EQ(ic->state(), ConnectionState::kConnected);
  conns_.clear();
}

TEST_P(SoftFabricTest, PeerClosesMidOperation_OutstandingTransportError) {
  MakeLocal();
  ConnectionOptions o = init_->Options();
  o.rnr_retry = 1000000;
  o.rnr_backoff = microseconds(1000);
  auto [ic, tc] = ConnectPair(o, target_->Options());
  ASSERT_NE(ic, nullptr);
  WorkRequest s = Wr(Opcode::kSend, 1, lmem_.data(), 8, 0);
  ASSERT_TRUE(ic->Post({&s, 1}).ok());
  while (tc->counters().rnr_events == 0) std::this_thread::yield();
  tc->Close();
  Completion c = WaitOne(init_->scq.get());
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, CompletionStatus::kTransportError);
  EXPECT_EQ(ic->state(), ConnectionState::kError);
}

TEST_P(SoftFabricTest, CloseWithOutstanding_Flushed) {
  MakeLocal();
  ConnectionOptions o = init_->Options();
  o.rnr_retry = 1000000;
  o.rnr_backoff = microseconds(1000);
  auto [ic, tc] = ConnectPair(o, target_->Options());
  ASSERT_NE(ic, nullptr);
  WorkRequest s = Wr(Opcode::kSend, 1, lmem_.data(), 8, 0);
  ASSERT_TRUE(ic->Post({&s, 1}).ok());
  while (tc->counters().rnr_events == 0) std::this_thread::yield();
  ic->Close();
  Completion c = WaitOne(init_->scq.get());
  EXPECT_EQ(c.status, CompletionStatus::kFlushed);
  EXPECT_EQ(ic->state(), ConnectionState::kClosed);
  Counters before = init_->fabric->counters();
  EXPECT_GE(before.sends, 1u);
  conns_.clear();
  EXPECT_EQ(init_->fabric->counters().sends, before.sends);  // closed connections still count
}

TEST_P(SoftFabricTest, PrivateData_ReachesPeer) {
  ConnectionOptions o = init_->Options();
  o.private_data = {1, 2, 3, 4};
  ConnectionOptions t = target_->Options();
  t.private_data = {9};
  auto [ic, tc] = ConnectPair(o, t);
  ASSERT_NE(ic, nullptr);
  EXPECT_EQ(tc->peer_private_data(), o.private_data);
  EXPECT_EQ(ic->peer_private_data(), t.private_data);
  EXPECT_NE(ic->id(), 0u);
}

TEST_P(SoftFabricTest, WrongSecret_ConnectRefused) {
  auto bad = std::make_unique<Side>(MakeFabric("not-the-secret"));
  ConnectionOptions to = target_->Options();
  to.timeout = milliseconds(300);
  Result<std::unique_ptr<Connection>> accepted = Status::Internal("not run");
  std::thread t([&] { accepted = listener_->Accept(to); });
  auto c = bad->fabric->Connect(bad->pd.get(), listener_->address(), bad->Options());
  t.join();
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status().ToString();
  EXPECT_EQ(accepted.status().code(), StatusCode::kTimedOut);
}

INSTANTIATE_TEST_SUITE_P(Transports, SoftFabricTest, ::testing::Values("tcp", "unix", "inproc"),
                         [](const auto& info) { return info.param; });

// A raw socket peer that speaks the handshake and then sends hand-made packets.
TEST(SoftFabricRaw, MalformedPacketsAndBadOpcode_NakedDroppedOthersServed) {
  auto tf = MakeFabric();
  auto pd = std::move(tf->AllocPd()).value();
  auto cq = std::move(tf->CreateCq({})).value();
  auto l = std::move(tf->Listen(pd.get(), "tcp://127.0.0.1:0")).value();
  ConnectionOptions o;
  o.send_cq = cq.get();
  o.recv_cq = cq.get();
  o.timeout = milliseconds(3000);
  std::vector<uint8_t> region(4096, 0);
  MemoryRegionOptions mo;
  mo.access = kAllRemote;
  auto mr = std::move(pd->RegisterMemory(region.data(), region.size(), mo)).value();
  auto bound = std::move(ParseAddress(l->address())).value();

  auto raw_session = [&](std::vector<uint8_t> packet, uint8_t expect_reason) {
    Result<std::unique_ptr<Connection>> acc = Status::Internal("not run");
    std::thread t([&] { acc = l->Accept(o); });
    int fd = std::move(ConnectSocket(bound, milliseconds(2000))).value();
    std::vector<uint8_t> peer;
    ConnParams params;
    ASSERT_TRUE(HandshakeClient(fd, "asymnvm", params.Encode(), &peer, milliseconds(2000)).ok());
    t.join();
    ASSERT_TRUE(acc.ok());
    auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
    ASSERT_TRUE(WriteFull(fd, packet.data(), packet.size(), deadline).ok());
    uint8_t resp[kResponseHeaderSize];
    ASSERT_TRUE(ReadFull(fd, resp, sizeof resp, deadline).ok());
    size_t consumed;
    auto p = ParsePacket(resp, sizeof resp, &consumed);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->opcode, kWireNak);
    EXPECT_EQ(p->reason, expect_reason);
    uint8_t more;
    EXPECT_FALSE(ReadFull(fd, &more, 1, deadline).ok());  // the target dropped us
    ::close(fd);
  };

  std::vector<uint8_t> bad_op(kRequestHeaderSize);
  EncodeRequestHeader(bad_op.data(), 0x42, 0, 1, 0, mr->rkey(), 0, 0, 0);
  raw_session(bad_op, kNakInvalid);
  std::vector<uint8_t> garbage(64, 0x17);
  raw_session(garbage, kNakInvalid);
  std::vector<uint8_t> wrap(kRequestHeaderSize + 16, 0x99);
  EncodeRequestHeader(wrap.data(), kWireWrite, kFlagNeedsAck, 1, 16, mr->rkey(), ~uint64_t{0} - 7,
                      0, 0);  // addr + len overflows
  raw_session(wrap, kNakAccess);
  for (uint8_t b : region) ASSERT_EQ(b, 0);
  // A proper write from a raw session still succeeds afterwards.
  std::vector<uint8_t> good(kRequestHeaderSize + 4, 0x5);
  EncodeRequestHeader(good.data(), kWireWrite, kFlagNeedsAck, 1, 4, mr->rkey(),
                      reinterpret_cast<uint64_t>(region.data()), 0, 0);
  Result<std::unique_ptr<Connection>> acc = Status::Internal("not run");
  std::thread t([&] { acc = l->Accept(o); });
  int fd = std::move(ConnectSocket(bound, milliseconds(2000))).value();
  ASSERT_TRUE(
      HandshakeClient(fd, "asymnvm", ConnParams{}.Encode(), nullptr, milliseconds(2000)).ok());
  t.join();
  auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
  ASSERT_TRUE(WriteFull(fd, good.data(), good.size(), deadline).ok());
  uint8_t resp[kResponseHeaderSize];
  ASSERT_TRUE(ReadFull(fd, resp, sizeof resp, deadline).ok());
  EXPECT_EQ(resp[2], kWireAck);
  EXPECT_EQ(region[0], 0x5);
  ::close(fd);
}

TEST(SoftFabric, Capabilities_Advertised) {
  auto f = MakeFabric();
  auto c = f->capabilities();
  EXPECT_TRUE(c.multi_packet_srq_native);
  EXPECT_EQ(c.transports, (std::vector<std::string>{"tcp", "unix", "inproc"}));
  EXPECT_EQ(f->provider(), "soft");
}

}  // namespace
}  // namespace asymnvm::fabric::soft
