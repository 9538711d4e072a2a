// Unit tests of the fault injector over the soft provider (inproc transport).
#include "fabric/faulty_fabric.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include "common/crash_point.h"

namespace asymnvm::fabric {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

std::string UniqueInproc() {
  static std::atomic<int> n{0};
  return "inproc://faulty-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

ConnectionOptions Opts(CompletionQueue* send_cq, CompletionQueue* recv_cq) {
  ConnectionOptions o;
  o.send_cq = send_cq;
  o.recv_cq = recv_cq;
  return o;
}

// A plain soft target serving one registered region, and a FaultyFabric initiator.
class FaultyFabricTest : public ::testing::Test {
 protected:
  void SetUp() override { Init(FaultOptions{}); }

  void Init(const FaultOptions& fo) {
    auto t = Fabric::Open({});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    target_ = std::move(t).value();
    auto i = FaultyFabric::Open({}, fo);
    ASSERT_TRUE(i.ok()) << i.status().ToString();
    init_ = std::move(i).value();
    auto tpd = target_->AllocPd();
    ASSERT_TRUE(tpd.ok());
    tpd_ = std::move(tpd).value();
    auto ipd = init_->AllocPd();
    ASSERT_TRUE(ipd.ok());
    ipd_ = std::move(ipd).value();
    remote_buf_.assign(4096, 0);
    auto rmr = tpd_->RegisterMemory(remote_buf_.data(), remote_buf_.size(), {.access = kAllRemote});
    ASSERT_TRUE(rmr.ok()) << rmr.status().ToString();
    rmr_ = std::move(rmr).value();
    local_buf_.assign(4096, 0);
    auto lmr = ipd_->RegisterMemory(local_buf_.data(), local_buf_.size(), {.access = kLocalWrite});
    ASSERT_TRUE(lmr.ok()) << lmr.status().ToString();
    lmr_ = std::move(lmr).value();
    auto icq = init_->CreateCq({});
    ASSERT_TRUE(icq.ok());
    icq_ = std::move(icq).value();
    auto tcq = target_->CreateCq({});
    ASSERT_TRUE(tcq.ok());
    tcq_ = std::move(tcq).value();
    auto l = target_->Listen(tpd_.get(), UniqueInproc());
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
  }

  void TearDown() override {
    conns_.clear();
    accepted_.clear();
    listener_.reset();
    icq_.reset();
    tcq_.reset();
    lmr_.reset();
    rmr_.reset();
    ipd_.reset();
    tpd_.reset();
    init_.reset();
    target_.reset();
  }

  Connection* Connect() {
    ConnectionOptions topts = Opts(tcq_.get(), tcq_.get());
    auto accepted = std::async(std::launch::async, [&] { return listener_->Accept(topts); });
    ConnectionOptions iopts = Opts(icq_.get(), icq_.get());
    auto c = init_->Connect(ipd_.get(), listener_->address(), iopts);
    auto a = accepted.get();
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (!c.ok() || !a.ok()) return nullptr;
    accepted_.push_back(std::move(a).value());
    conns_.push_back(std::move(c).value());
    return conns_.back().get();
  }

  WorkRequest Write(uint64_t wr_id, uint32_t off, uint32_t len, bool signaled = true) {
    WorkRequest wr;
    wr.wr_id = wr_id;
    wr.opcode = Opcode::kWrite;
    wr.signaled = signaled;
    wr.local_addr = local_buf_.data() + off;
    wr.length = len;
    wr.local_mr = lmr_.get();
    wr.remote_addr = reinterpret_cast<uint64_t>(remote_buf_.data()) + off;
    wr.rkey = rmr_->rkey();
    return wr;
  }
  WorkRequest Read(uint64_t wr_id, uint32_t off, uint32_t len) {
    WorkRequest wr = Write(wr_id, off, len);
    wr.opcode = Opcode::kRead;
    return wr;
  }

  // Waits for exactly n completions (fails the test on timeout).
  std::vector<Completion> WaitN(size_t n, milliseconds timeout = milliseconds(5000)) {
    std::vector<Completion> got;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      Completion c[16];
      auto r = icq_->Wait(std::span<Completion>(c, std::min<size_t>(16, n - got.size())),
                          milliseconds(50));
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok()) break;
      for (size_t i = 0; i < *r; i++) got.push_back(c[i]);
    }
    EXPECT_EQ(got.size(), n) << "timed out waiting for completions";
    return got;
  }
  void ExpectNoMoreCompletions() {
    Completion c;
    auto r = icq_->Wait(std::span<Completion>(&c, 1), milliseconds(20));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 0u) << "unexpected completion wr_id " << c.wr_id << " "
                      << CompletionStatusName(c.status);
  }

  std::unique_ptr<Fabric> target_;
  std::unique_ptr<FaultyFabric> init_;
  std::unique_ptr<ProtectionDomain> tpd_, ipd_;
  std::vector<uint8_t> remote_buf_, local_buf_;
  std::unique_ptr<MemoryRegion> rmr_, lmr_;
  std::unique_ptr<CompletionQueue> icq_, tcq_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Connection>> conns_, accepted_;
};

TEST_F(FaultyFabricTest, Post_NoFaults_ForwardsAndHidesHelperCompletions) {
  Connection* c = Connect();
  ASSERT_NE(c, nullptr);
  std::memset(local_buf_.data(), 0x5A, 1024);
  std::vector<WorkRequest> wrs;
  for (int i = 0; i < 8; i++) wrs.push_back(Write(i, i * 64, 64, /*signaled=*/false));
  ASSERT_TRUE(c->Post(wrs).ok());  // last one unsignaled: the wrapper's helper completion is hidden
  ASSERT_TRUE(c->Post(std::vector<WorkRequest>{Write(100, 512, 64)}).ok());
  auto got = WaitN(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 100u);
  EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
  ExpectNoMoreCompletions();
  for (int i = 0; i < 576; i++) ASSERT_EQ(remote_buf_[i], 0x5A) << i;
  EXPECT_EQ(c->state(), ConnectionState::kConnected);
  EXPECT_EQ(init_->fault_counters().requests_seen, 9u);
  EXPECT_EQ(init_->fault_counters().dropped, 0u);
}

TEST_F(FaultyFabricTest, Post_DropEveryRequest_TransportErrorThenFlushedAndNothingSent) {
  init_->SetFaultOptions({.seed = 1, .drop_one_in = 1});
  Connection* c = Connect();
  ASSERT_NE(c, nullptr);
  std::memset(local_buf_.data(), 0x77, 256);
  ASSERT_TRUE(
      c->Post(std::vector<WorkRequest>{Write(1, 0, 64), Write(2, 64, 64, false), Write(3, 128, 64)})
          .ok());
  auto got = WaitN(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kTransportError);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[1].status, CompletionStatus::kFlushed);
  EXPECT_EQ(got[2].wr_id, 3u);
  EXPECT_EQ(got[2].status, CompletionStatus::kFlushed);
  EXPECT_EQ(got[0].connection_id, c->id());
  EXPECT_EQ(c->state(), ConnectionState::kError);
  EXPECT_FALSE(c->error().ok());
  Status st = c->Post(std::vector<WorkRequest>{Write(4, 0, 64)});
  EXPECT_EQ(st.code(), StatusCode::kConnectionError) << st.ToString();
  for (int i = 0; i < 256; i++) ASSERT_EQ(remote_buf_[i], 0) << "dropped write landed at " << i;
  EXPECT_EQ(init_->fault_counters().dropped, 1u);
  EXPECT_EQ(init_->fault_counters().flushed, 2u);
}

TEST_F(FaultyFabricTest, Post_ErrorInjected_GeneralErrorAndConnectionError) {
  init_->SetFaultOptions({.seed = 1, .error_one_in = 1});
  Connection* c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Post(std::vector<WorkRequest>{Read(9, 0, 64)}).ok());
  auto got = WaitN(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 9u);
  EXPECT_EQ(got[0].opcode, Opcode::kRead);
  EXPECT_EQ(got[0].status, CompletionStatus::kGeneralError);
  EXPECT_EQ(c->state(), ConnectionState::kError);
  EXPECT_EQ(init_->fault_counters().errored, 1u);
}

TEST_F(FaultyFabricTest, Post_InjectedBehindRealRequests_CompletionsStayInPostingOrder) {
  // Only READs are eligible: WRITEs go through, the READ is dropped, and its error must surface
  // after the completions of everything posted before it on the connection.
  init_->SetFaultOptions({.seed = 3, .drop_one_in = 1, .opcode_mask = OpcodeBit(Opcode::kRead)});
  Connection* c = Connect();
  ASSERT_NE(c, nullptr);
  std::memset(local_buf_.data(), 0x11, 4096);
  std::vector<WorkRequest> first;
  for (int i = 0; i < 32; i++) first.push_back(Write(i, (i % 32) * 64, 64, i % 4 == 3));
  first.push_back(Write(32, 0, 64, false));
  ASSERT_TRUE(c->Post(first).ok());
  ASSERT_TRUE(c->Post(std::vector<WorkRequest>{Write(50, 0, 8), Write(51, 8, 8, false),
                                               Read(52, 64, 8), Write(53, 0, 8)})
                  .ok());
  // Visible: the 8 signaled writes of the first list, 50, then 52 (dropped) and 53 (flushed).
  auto got = WaitN(11);
  ASSERT_EQ(got.size(), 11u);
  for (int i = 0; i < 8; i++) {
    EXPECT_EQ(got[i].wr_id, static_cast<uint64_t>(i * 4 + 3));
    EXPECT_EQ(got[i].status, CompletionStatus::kSuccess);
  }
  EXPECT_EQ(got[8].wr_id, 50u);
  EXPECT_EQ(got[8].status, CompletionStatus::kSuccess);
  EXPECT_EQ(got[9].wr_id, 52u);
  EXPECT_EQ(got[9].status, CompletionStatus::kTransportError);
  EXPECT_EQ(got[10].wr_id, 53u);
  EXPECT_EQ(got[10].status, CompletionStatus::kFlushed);
  ExpectNoMoreCompletions();
}

// Runs a fixed workload and returns the fault log.
std::vector<FaultEvent> RunSeeded(uint64_t seed) {
  std::vector<FaultEvent> log;
  auto t = Fabric::Open({});
  auto f = FaultyFabric::Open({}, {.seed = seed,
                                   .drop_one_in = 17,
                                   .error_one_in = 23,
                                   .delay_one_in = 5,
                                   .delay = microseconds(10)});
  EXPECT_TRUE(t.ok() && f.ok());
  if (!t.ok() || !f.ok()) return log;
  auto tpd = std::move((*t)->AllocPd()).value();
  auto ipd = std::move((*f)->AllocPd()).value();
  std::vector<uint8_t> remote(4096), local(4096);
  auto rmr =
      std::move(tpd->RegisterMemory(remote.data(), remote.size(), {.access = kAllRemote})).value();
  auto lmr = std::move(ipd->RegisterMemory(local.data(), local.size(), {})).value();
  auto icq = std::move((*f)->CreateCq({})).value();
  auto tcq = std::move((*t)->CreateCq({})).value();
  auto listener = std::move((*t)->Listen(tpd.get(), UniqueInproc())).value();
  for (int conn_no = 0; conn_no < 4; conn_no++) {
    ConnectionOptions topts = Opts(tcq.get(), tcq.get());
    auto accepted = std::async(std::launch::async, [&] { return listener->Accept(topts); });
    auto c = (*f)->Connect(ipd.get(), listener->address(), Opts(icq.get(), nullptr));
    auto a = accepted.get();
    EXPECT_TRUE(c.ok() && a.ok());
    if (!c.ok() || !a.ok()) return log;
    for (int i = 0; i < 60; i++) {
      WorkRequest wr;
      wr.wr_id = i;
      wr.opcode = i % 2 ? Opcode::kRead : Opcode::kWrite;
      wr.local_addr = local.data();
      wr.length = 64;
      wr.local_mr = lmr.get();
      wr.remote_addr = reinterpret_cast<uint64_t>(remote.data());
      wr.rkey = rmr->rkey();
      std::vector<WorkRequest> list(3, wr);
      if (!(*c)->Post(list).ok()) break;
      Completion out[3];
      size_t seen = 0;
      auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
      while (seen < 3 && std::chrono::steady_clock::now() < deadline) {
        auto r = icq->Wait(std::span<Completion>(out, 3 - seen), milliseconds(50));
        if (!r.ok()) break;
        seen += *r;
      }
      EXPECT_EQ(seen, 3u);
    }
  }
  return (*f)->fault_log();
}

TEST(FaultyFabricSeedTest, Faults_SameSeed_SameFaultSequence) {
  const uint64_t seed = 0xC0FFEE;
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto a = RunSeeded(seed);
  auto b = RunSeeded(seed);
  auto c = RunSeeded(seed + 1);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  bool saw_drop = false, saw_delay = false;
  for (const auto& e : a) {
    saw_drop |= e.kind == FaultKind::kDrop || e.kind == FaultKind::kError;
    saw_delay |= e.kind == FaultKind::kDelay;
  }
  EXPECT_TRUE(saw_drop);
  EXPECT_TRUE(saw_delay);
}

TEST_F(FaultyFabricTest, CutConnection_Live_LaterPostsFailAndTargetKeepsServing) {
  Connection* c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Post(std::vector<WorkRequest>{Write(1, 0, 64)}).ok());
  ASSERT_EQ(WaitN(1).size(), 1u);
  ASSERT_TRUE(init_->CutConnection(c).ok());
  EXPECT_EQ(c->state(), ConnectionState::kError);
  EXPECT_EQ(c->Post(std::vector<WorkRequest>{Write(2, 0, 64)}).code(),
            StatusCode::kConnectionError);
  EXPECT_EQ(init_->fault_counters().cuts, 1u);
  ASSERT_TRUE(init_->CutConnection(c).ok());  // idempotent
  EXPECT_EQ(init_->fault_counters().cuts, 1u);

  Connection* d = Connect();
  ASSERT_NE(d, nullptr);
  std::memset(local_buf_.data(), 0x42, 64);
  ASSERT_TRUE(d->Post(std::vector<WorkRequest>{Write(3, 0, 64)}).ok());
  auto got = WaitN(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(remote_buf_[0], 0x42);
}

TEST_F(FaultyFabricTest, CutConnection_ForeignConnection_InvalidArgument) {
  EXPECT_EQ(init_->CutConnection(nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_F(FaultyFabricTest, Connect_CqNotFromWrapper_InvalidArgument) {
  auto base_cq = init_->base()->CreateCq({});
  ASSERT_TRUE(base_cq.ok());
  auto c = init_->Connect(ipd_.get(), listener_->address(), Opts(base_cq->get(), nullptr));
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FaultyFabricTest, Counters_Forwarded_MatchProvider) {
  Connection* c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Post(std::vector<WorkRequest>{Write(1, 0, 64), Read(2, 64, 64)}).ok());
  ASSERT_EQ(WaitN(2).size(), 2u);
  EXPECT_EQ(c->counters().writes, 1u);
  EXPECT_EQ(c->counters().reads, 1u);
  EXPECT_EQ(init_->counters().writes, init_->base()->counters().writes);
  EXPECT_EQ(init_->provider(), "soft");
}

TEST_F(FaultyFabricTest, CrashPoint_PostBeforeArmed_ProcessKilled) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Connection* c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EXIT(
      {
        ArmCrashPoint("fabric.post.before", 2);
        (void)c->Post(std::vector<WorkRequest>{Write(1, 0, 64)});
        (void)c->Post(std::vector<WorkRequest>{Write(2, 0, 64)});
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "crash point 'fabric.post.before' reached");
}

}  // namespace
}  // namespace asymnvm::fabric
