// Work request translation, completion translation, the ring CQ emulation, Wait, the SRQ slot
// fallback, receive queues and counters — against a mocked device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "fabric/verbs/verbs_test_util.h"

namespace asymnvm::fabric::verbs {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Invoke;
using ::testing::Return;

class VerbsPost : public VerbsConnTest {
 protected:
  void SetUp() override {
    VerbsConnTest::SetUp();
    if (HasFatalFailure()) return;
    Connect();
  }
  WorkRequest Wr(Opcode op, uint64_t wr_id, size_t offset = 0, uint32_t length = 8) {
    WorkRequest w;
    w.wr_id = wr_id;
    w.opcode = op;
    w.local_addr = buf_ + offset;
    w.length = length;
    w.local_mr = mr_.get();
    w.remote_addr = 0x7000'0000'0000 + offset;
    w.rkey = 0xabc;
    return w;
  }
};

// ---- translation --------------------------------------------------------------------------------

TEST_F(VerbsPost, Write_OpcodeSgeRemoteAndSignaledFlag) {
  ASSERT_TRUE(PostList(client_.get(), {Wr(Opcode::kWrite, 1, 64, 100)}).ok());
  ASSERT_EQ(fake_.sent.size(), 1u);
  const SentWr& s = fake_.sent[0][0];
  EXPECT_EQ(s.wr.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(s.wr.send_flags, unsigned(IBV_SEND_SIGNALED));
  ASSERT_EQ(s.sge.size(), 1u);
  EXPECT_EQ(s.sge[0].addr, reinterpret_cast<uint64_t>(buf_ + 64));
  EXPECT_EQ(s.sge[0].length, 100u);
  EXPECT_EQ(s.sge[0].lkey, mr_->lkey());
  EXPECT_EQ(s.wr.wr.rdma.remote_addr, 0x7000'0000'0000u + 64);
  EXPECT_EQ(s.wr.wr.rdma.rkey, 0xabcu);
}

TEST_F(VerbsPost, UnsignaledInlineWrite_NoSignaledFlagAndInlineFlag) {
  WorkRequest w = Wr(Opcode::kWrite, 1, 0, 32);
  w.signaled = false;
  w.inline_data = true;
  w.local_mr = nullptr;  // inline payloads need no region
  ASSERT_TRUE(PostList(client_.get(), {w}).ok());
  const SentWr& s = fake_.sent[0][0];
  EXPECT_EQ(s.wr.send_flags, unsigned(IBV_SEND_INLINE));
  EXPECT_EQ(s.sge[0].length, 32u);
  EXPECT_EQ(s.sge[0].lkey, 0u);
}

TEST_F(VerbsPost, ReadAndSend_MappedOpcodes) {
  ASSERT_TRUE(
      PostList(client_.get(), {Wr(Opcode::kRead, 1, 0, 512), Wr(Opcode::kSend, 2, 512, 16)}).ok());
  const auto& chain = fake_.sent[0];
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain[0].wr.opcode, IBV_WR_RDMA_READ);
  EXPECT_EQ(chain[0].sge[0].length, 512u);
  EXPECT_EQ(chain[0].wr.wr.rdma.rkey, 0xabcu);
  EXPECT_EQ(chain[1].wr.opcode, IBV_WR_SEND);
  EXPECT_EQ(chain[1].sge[0].addr, reinterpret_cast<uint64_t>(buf_ + 512));
  EXPECT_EQ(chain[1].wr.wr.rdma.remote_addr, 0u);  // SEND carries no remote address
}

TEST_F(VerbsPost, Atomics_CompareSwapAndFetchAddFields) {
  WorkRequest cas = Wr(Opcode::kCompareSwap, 1, 8, 8);
  cas.compare_add = 11;
  cas.swap = 22;
  WorkRequest faa = Wr(Opcode::kFetchAdd, 2, 16, 8);
  faa.compare_add = 5;
  ASSERT_TRUE(PostList(client_.get(), {cas, faa}).ok());
  const auto& chain = fake_.sent[0];
  EXPECT_EQ(chain[0].wr.opcode, IBV_WR_ATOMIC_CMP_AND_SWP);
  EXPECT_EQ(chain[0].wr.wr.atomic.compare_add, 11u);
  EXPECT_EQ(chain[0].wr.wr.atomic.swap, 22u);
  EXPECT_EQ(chain[0].wr.wr.atomic.remote_addr, 0x7000'0000'0000u + 8);
  EXPECT_EQ(chain[0].wr.wr.atomic.rkey, 0xabcu);
  EXPECT_EQ(chain[0].sge[0].addr, reinterpret_cast<uint64_t>(buf_ + 8));
  EXPECT_EQ(chain[0].sge[0].length, 8u);
  EXPECT_EQ(chain[1].wr.opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
  EXPECT_EQ(chain[1].wr.wr.atomic.compare_add, 5u);
}

TEST_F(VerbsPost, AtomicWithoutLocalBuffer_UsesScratchMr) {
  WorkRequest faa = Wr(Opcode::kFetchAdd, 1);
  faa.local_addr = nullptr;
  faa.local_mr = nullptr;
  ASSERT_TRUE(PostList(client_.get(), {faa}).ok());
  auto* pd = static_cast<VerbsPd*>(pd_.get());
  const SentWr& s = fake_.sent[0][0];
  EXPECT_EQ(s.sge[0].addr, reinterpret_cast<uint64_t>(pd->scratch()));
  EXPECT_EQ(s.sge[0].length, 8u);
  EXPECT_EQ(s.sge[0].lkey, pd->scratch_lkey());
  EXPECT_EQ(s.sge[0].addr % 8, 0u);
}

TEST_F(VerbsPost, Flush_IsOneByteReadIntoScratch) {
  WorkRequest f;
  f.wr_id = 9;
  f.opcode = Opcode::kFlush;
  f.remote_addr = 0x5000;
  f.rkey = 77;
  ASSERT_TRUE(PostList(client_.get(), {f}).ok());
  auto* pd = static_cast<VerbsPd*>(pd_.get());
  const SentWr& s = fake_.sent[0][0];
  EXPECT_EQ(s.wr.opcode, IBV_WR_RDMA_READ);
  EXPECT_EQ(s.sge[0].length, 1u);
  EXPECT_EQ(s.sge[0].addr, reinterpret_cast<uint64_t>(pd->scratch()));
  EXPECT_EQ(s.sge[0].lkey, pd->scratch_lkey());
  EXPECT_EQ(s.wr.wr.rdma.remote_addr, 0x5000u);
  EXPECT_EQ(s.wr.wr.rdma.rkey, 77u);
  // and it completes as a FLUSH
  fake_.Complete(HwCq(scq_.get()), Qpn(client_.get()), SentId(0, 0), IBV_WC_SUCCESS, 1);
  Completion c[2];
  ASSERT_EQ(PollAll(scq_.get(), c, 2), 1u);
  EXPECT_EQ(c[0].opcode, Opcode::kFlush);
  EXPECT_EQ(c[0].wr_id, 9u);
}

TEST_F(VerbsPost, List_OneChainedPostSendCall) {
  EXPECT_CALL(*fake_.api, PostSend(_, _, _)).Times(1);
  std::vector<WorkRequest> list{Wr(Opcode::kWrite, 1, 0), Wr(Opcode::kWrite, 2, 8),
                                Wr(Opcode::kSend, 3, 16), Wr(Opcode::kFlush, 4)};
  ASSERT_TRUE(client_->Post(list).ok());
  ASSERT_EQ(fake_.sent.size(), 1u);
  ASSERT_EQ(fake_.sent[0].size(), 4u);
  std::set<uint64_t> ids;
  for (const auto& s : fake_.sent[0]) ids.insert(s.wr.wr_id);
  EXPECT_EQ(ids.size(), 4u);
}

// ---- local validation ---------------------------------------------------------------------------

TEST_F(VerbsPost, InvalidRequests_RejectedWithoutPostSend) {
  EXPECT_CALL(*fake_.api, PostSend(_, _, _)).Times(0);
  WorkRequest outside = Wr(Opcode::kWrite, 1, sizeof(buf_) - 4, 8);
  EXPECT_EQ(PostList(client_.get(), {outside}).code(), StatusCode::kInvalidArgument);
  WorkRequest no_mr = Wr(Opcode::kRead, 1);
  no_mr.local_mr = nullptr;
  EXPECT_EQ(PostList(client_.get(), {no_mr}).code(), StatusCode::kInvalidArgument);
  WorkRequest big_inline = Wr(Opcode::kWrite, 1, 0, 257);
  big_inline.inline_data = true;
  EXPECT_EQ(PostList(client_.get(), {big_inline}).code(), StatusCode::kInvalidArgument);
  WorkRequest inline_read = Wr(Opcode::kRead, 1);
  inline_read.inline_data = true;
  EXPECT_EQ(PostList(client_.get(), {inline_read}).code(), StatusCode::kInvalidArgument);
  WorkRequest recv = Wr(Opcode::kRecv, 1);
  EXPECT_EQ(PostList(client_.get(), {recv}).code(), StatusCode::kInvalidArgument);
  // one bad request in a list rejects the whole list
  EXPECT_EQ(PostList(client_.get(), {Wr(Opcode::kWrite, 1), outside}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->counters().round_trips, 0u);
}

TEST_F(VerbsPost, ReadIntoRegionWithoutLocalWrite_InvalidArgument) {
  auto ro = pd_->RegisterMemory(buf_ + 4096, 4096, MemoryRegionOptions{kRemoteRead});
  ASSERT_TRUE(ro.ok());
  WorkRequest r = Wr(Opcode::kRead, 1, 4096, 8);
  r.local_mr = ro->get();
  EXPECT_CALL(*fake_.api, PostSend(_, _, _)).Times(0);
  EXPECT_EQ(PostList(client_.get(), {r}).code(), StatusCode::kInvalidArgument);
}

TEST_F(VerbsPost, BeyondMaxSendWr_ResourceExhaustedUntilCompletionsRetire) {
  client_.reset();
  server_.reset();
  ConnectionOptions o = Options();
  o.max_send_wr = 4;
  ASSERT_TRUE(ConnectPair(o, Options()).ok());
  WorkRequest u = Wr(Opcode::kWrite, 1);
  u.signaled = false;
  ASSERT_TRUE(PostList(client_.get(), {u, u, u, Wr(Opcode::kWrite, 2)}).ok());
  Status st = PostList(client_.get(), {Wr(Opcode::kWrite, 3)});
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(st.retryable());
  EXPECT_EQ(fake_.sent.size(), 1u);
  // the signaled request's completion retires the three unsignaled ones before it
  fake_.Complete(HwCq(scq_.get()), Qpn(client_.get()), SentId(0, 3), IBV_WC_SUCCESS);
  Completion c[4];
  ASSERT_EQ(PollAll(scq_.get(), c, 4), 1u);
  EXPECT_EQ(c[0].wr_id, 2u);
  EXPECT_TRUE(PostList(client_.get(), {u, u, u, Wr(Opcode::kWrite, 4)}).ok());
}

TEST_F(VerbsPost, PostSendFails_StatusNamesCallAndPartialPostAccounted) {
  EXPECT_CALL(*fake_.api, PostSend(_, _, _))
      .WillOnce(Invoke([](ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad) {
        *bad = wr->next;  // the first request went out
        return ENOMEM;
      }))
      .WillOnce(Invoke([](ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad) {
        *bad = wr;
        return EINVAL;
      }));
  Status a = PostList(client_.get(), {Wr(Opcode::kWrite, 1), Wr(Opcode::kWrite, 2)});
  EXPECT_EQ(a.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(a.message(), HasSubstr("ibv_post_send"));
  EXPECT_THAT(a.message(), HasSubstr("1 of 2"));
  Status b = PostList(client_.get(), {Wr(Opcode::kWrite, 3)});
  EXPECT_EQ(b.code(), StatusCode::kIoError);
  EXPECT_EQ(b.sys_errno(), EINVAL);
  Counters c = client_->counters();
  EXPECT_EQ(c.writes, 1u);  // only what reached the send queue
  EXPECT_EQ(c.round_trips, 1u);
}

// ---- completions --------------------------------------------------------------------------------

TEST_F(VerbsPost, Completions_CarryUserWrIdOpcodeLengthAndConnection) {
  ASSERT_TRUE(PostList(client_.get(), {Wr(Opcode::kWrite, 11), Wr(Opcode::kRead, 12, 0, 100),
                                       Wr(Opcode::kCompareSwap, 13, 8)})
                  .ok());
  for (int k = 0; k < 3; k++) {
    fake_.Complete(HwCq(scq_.get()), Qpn(client_.get()), SentId(0, k), IBV_WC_SUCCESS);
  }
  Completion c[4];
  ASSERT_EQ(PollAll(scq_.get(), c, 4), 3u);
  EXPECT_EQ(c[0].wr_id, 11u);
  EXPECT_EQ(c[0].opcode, Opcode::kWrite);
  EXPECT_EQ(c[1].wr_id, 12u);
  EXPECT_EQ(c[1].opcode, Opcode::kRead);
  EXPECT_EQ(c[1].byte_len, 100u);
  EXPECT_EQ(c[2].opcode, Opcode::kCompareSwap);
  for (int k = 0; k < 3; k++) {
    EXPECT_EQ(c[k].status, CompletionStatus::kSuccess);
    EXPECT_EQ(c[k].connection_id, client_->id());
  }
}

struct ErrorCase {
  ibv_wc_status wc;
  CompletionStatus status;
  StatusCode error;
};

class VerbsErrorCompletion : public VerbsPost, public ::testing::WithParamInterface<ErrorCase> {};

TEST_P(VerbsErrorCompletion, FailedRequest_ConnectionEntersErrorAndLaterOnesFlush) {
  const ErrorCase& p = GetParam();
  ASSERT_TRUE(PostList(client_.get(), {Wr(Opcode::kWrite, 1), Wr(Opcode::kWrite, 2)}).ok());
  fake_.Complete(HwCq(scq_.get()), Qpn(client_.get()), SentId(0, 0), p.wc);
  fake_.Complete(HwCq(scq_.get()), Qpn(client_.get()), SentId(0, 1), IBV_WC_WR_FLUSH_ERR);
  Completion c[4];
  ASSERT_EQ(PollAll(scq_.get(), c, 4), 2u);
  EXPECT_EQ(c[0].status, p.status);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[1].status, CompletionStatus::kFlushed);
  EXPECT_EQ(client_->state(), ConnectionState::kError);
  EXPECT_EQ(client_->error().code(), p.error);
  EXPECT_EQ(client_->counters().errors, 2u);
  EXPECT_EQ(client_->counters().rnr_events, p.wc == IBV_WC_RNR_RETRY_EXC_ERR ? 1u : 0u);
  EXPECT_CALL(*fake_.api, PostSend(_, _, _)).Times(0);
  EXPECT_EQ(PostList(client_.get(), {Wr(Opcode::kWrite, 3)}).code(), StatusCode::kConnectionError);
  EXPECT_EQ(server_->state(), ConnectionState::kConnected);  // other connections unaffected
}

INSTANTIATE_TEST_SUITE_P(
    Statuses, VerbsErrorCompletion,
    ::testing::Values(ErrorCase{IBV_WC_REM_ACCESS_ERR, CompletionStatus::kRemoteAccessError,
                                StatusCode::kRemoteAccessError},
                      ErrorCase{IBV_WC_REM_INV_REQ_ERR, CompletionStatus::kRemoteInvalidRequest,
                                StatusCode::kRemoteAccessError},
                      ErrorCase{IBV_WC_RNR_RETRY_EXC_ERR, CompletionStatus::kRnrRetryExceeded,
                                StatusCode::kRnrRetryExceeded},
                      ErrorCase{IBV_WC_RETRY_EXC_ERR, CompletionStatus::kTransportError,
                                StatusCode::kConnectionError},
                      ErrorCase{IBV_WC_LOC_PROT_ERR, CompletionStatus::kLocalProtectionError,
                                StatusCode::kConnectionError},
                      ErrorCase{IBV_WC_LOC_LEN_ERR, CompletionStatus::kLocalLengthError,
                                StatusCode::kConnectionError},
                      ErrorCase{IBV_WC_FATAL_ERR, CompletionStatus::kGeneralError,
                                StatusCode::kConnectionError}));

TEST_F(VerbsPost, CompletionForUnknownQp_Dropped) {
  fake_.Complete(HwCq(scq_.get()), 0xdead, 1, IBV_WC_SUCCESS);
  Completion c[2];
  EXPECT_EQ(PollAll(scq_.get(), c, 2), 0u);
}

// ---- CQ: overrun, ring emulation, Wait ----------------------------------------------------------

TEST_F(VerbsPost, PollCqFails_ResourceExhaustedAndLatched) {
  EXPECT_CALL(*fake_.api, PollCq(HwCq(scq_.get()), _, _)).WillOnce(Return(-22));
  Completion c[2];
  auto a = scq_->Poll(c);
  EXPECT_EQ(a.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(a.status().message(), HasSubstr("ibv_poll_cq"));
  EXPECT_EQ(scq_->Poll(c).status().code(), StatusCode::kResourceExhausted);
}

class VerbsRing : public VerbsConnTest {
 protected:
  void SetUp() override {
    VerbsConnTest::SetUp();
    if (HasFatalFailure()) return;
    auto ring = fabric_->CreateCq(CompletionQueueOptions{4, true});
    ASSERT_TRUE(ring.ok());
    ring_ = std::move(*ring);
    ConnectionOptions o = Options();
    o.send_cq = ring_.get();
    ASSERT_TRUE(ConnectPair(o, Options()).ok());
  }
  void PostAndComplete(int n) {
    for (int i = 0; i < n; i++) {
      WorkRequest w;
      w.wr_id = ++next_;
      w.opcode = Opcode::kFlush;
      ASSERT_TRUE(PostList(client_.get(), {w}).ok());
      fake_.Complete(HwCq(ring_.get()), Qpn(client_.get()), fake_.sent.back()[0].wr.wr_id,
                     IBV_WC_SUCCESS);
    }
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  std::unique_ptr<CompletionQueue> ring_;
  uint64_t next_ = 0;
};

TEST_F(VerbsRing, FullRing_OldestOverwrittenNewestKeptInOrder) {
  PostAndComplete(7);
  Completion c[8];
  auto n = ring_->Poll(c);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 4u);
  for (int i = 0; i < 4; i++) EXPECT_EQ(c[i].wr_id, 4u + i);
  EXPECT_EQ(ring_->overwritten(), 3u);
}

TEST_F(VerbsRing, PostDrainsHardwareCqIntoRing) {
  PostAndComplete(6);  // the 2nd..6th Post each drained the hardware CQ first
  EXPECT_EQ(ring_->overwritten(), 1u);
  EXPECT_TRUE(fake_.hw[HwCq(ring_.get())].size() <= 1u);
}

TEST_F(VerbsPost, Wait_CompletionPresent_ReturnsWithoutArming) {
  ASSERT_TRUE(PostList(client_.get(), {Wr(Opcode::kWrite, 1)}).ok());
  fake_.Complete(HwCq(scq_.get()), Qpn(client_.get()), SentId(0, 0), IBV_WC_SUCCESS);
  EXPECT_CALL(*fake_.api, ReqNotifyCq(_, _)).Times(0);
  Completion c[2];
  auto n = scq_->Wait(c, std::chrono::milliseconds(100));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
}

TEST_F(VerbsPost, Wait_NothingArrives_ArmsNotificationAndTimesOut) {
  EXPECT_CALL(*fake_.api, ReqNotifyCq(HwCq(scq_.get()), 0)).Times(::testing::AtLeast(1));
  EXPECT_CALL(*fake_.api, GetCqEvent(_, _, _)).Times(0);
  Completion c[2];
  auto n = scq_->Wait(c, std::chrono::milliseconds(5));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

TEST_F(VerbsPost, Wait_ChannelEvent_GetsAcksAndPolls) {
  ASSERT_TRUE(PostList(client_.get(), {Wr(Opcode::kWrite, 1)}).ok());
  ibv_cq* hw = HwCq(scq_.get());
  const uint32_t qpn = Qpn(client_.get());
  const uint64_t id = SentId(0, 0);
  EXPECT_CALL(*fake_.api, GetCqEvent(&fake_.channel, _, _))
      .WillOnce(Invoke([&](ibv_comp_channel*, ibv_cq** cq, void** ctx) {
        fake_.Complete(hw, qpn, id, IBV_WC_SUCCESS);  // the interrupt's completion
        *cq = hw;
        *ctx = nullptr;
        return 0;
      }));
  EXPECT_CALL(*fake_.api, AckCqEvents(hw, 1u));
  ASSERT_EQ(::write(fake_.channel_pipe[1], "x", 1), 1);
  Completion c[2];
  auto n = scq_->Wait(c, std::chrono::seconds(5));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(c[0].wr_id, 1u);
}

TEST_F(VerbsPost, Wait_ReqNotifyFails_StatusNamesCall) {
  EXPECT_CALL(*fake_.api, ReqNotifyCq(_, _)).WillOnce(Return(EIO));
  Completion c[1];
  auto n = scq_->Wait(c, std::chrono::milliseconds(1));
  EXPECT_THAT(n.status().message(), HasSubstr("ibv_req_notify_cq"));
}

// ---- receive queues -----------------------------------------------------------------------------

TEST_F(VerbsPost, OwnRq_PostRecvAndRecvCompletion) {
  RecvRequest r{42, buf_ + 1024, 512, mr_.get()};
  ASSERT_TRUE(RecvList(server_.get(), {r}).ok());
  ASSERT_EQ(fake_.recvs.size(), 1u);
  const RecvWr& w = fake_.recvs[0][0];
  EXPECT_EQ(w.sge[0].addr, reinterpret_cast<uint64_t>(buf_ + 1024));
  EXPECT_EQ(w.sge[0].length, 512u);
  EXPECT_EQ(w.sge[0].lkey, mr_->lkey());
  fake_.Complete(HwCq(rcq_.get()), Qpn(server_.get()), w.wr.wr_id, IBV_WC_SUCCESS, 200,
                 IBV_WC_RECV);
  Completion c[2];
  ASSERT_EQ(PollAll(rcq_.get(), c, 2), 1u);
  EXPECT_EQ(c[0].wr_id, 42u);
  EXPECT_EQ(c[0].opcode, Opcode::kRecv);
  EXPECT_EQ(c[0].byte_len, 200u);
  EXPECT_EQ(c[0].offset, 0u);
  EXPECT_TRUE(c[0].buffer_done);
  EXPECT_EQ(c[0].connection_id, server_->id());
  EXPECT_EQ(server_->counters().recvs, 1u);
  EXPECT_EQ(server_->counters().bytes_in, kWireHeaderBytes + 200);
}

TEST_F(VerbsPost, OwnRq_InvalidBuffersRejected) {
  EXPECT_CALL(*fake_.api, PostRecv(_, _, _)).Times(0);
  EXPECT_EQ(RecvList(server_.get(), {RecvRequest{1, buf_, 0, mr_.get()}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RecvList(server_.get(), {RecvRequest{1, buf_ + 8190, 8, mr_.get()}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RecvList(server_.get(), {RecvRequest{1, buf_, 8, nullptr}}).code(),
            StatusCode::kInvalidArgument);
}

class VerbsSrqTest : public VerbsConnTest {
 protected:
  void Make(SrqOptions o) {
    auto srq = fabric_->CreateSrq(pd_.get(), o);
    ASSERT_TRUE(srq.ok()) << srq.status().ToString();
    srq_ = std::move(*srq);
    ConnectionOptions s = Options();
    s.srq = srq_.get();
    ASSERT_TRUE(ConnectPair(Options(), s).ok());
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    srq_.reset();
  }
  void CompleteSlot(size_t chain, size_t k, uint32_t len) {
    fake_.Complete(HwCq(rcq_.get()), Qpn(server_.get()), fake_.recvs.at(chain).at(k).wr.wr_id,
                   IBV_WC_SUCCESS, len, IBV_WC_RECV);
  }
  std::unique_ptr<SharedReceiveQueue> srq_;
};

TEST_F(VerbsSrqTest, MultiPacketFallback_CarvesSlotsReportsOffsetsAndBufferDone) {
  Make(SrqOptions{8, true, 64, 1024});
  EXPECT_FALSE(srq_->multi_packet_native());
  // 4 full slots + a 100-byte tail (>= stride, so a fifth, short slot)
  RecvRequest r{7, buf_, 4 * 1024 + 100, mr_.get()};
  EXPECT_CALL(*fake_.api, PostSrqRecv(_, _, _)).Times(1);
  ASSERT_TRUE(SrqList(srq_.get(), {r}).ok());
  EXPECT_EQ(srq_->posted(), 1u);
  ASSERT_EQ(fake_.recvs.size(), 1u);
  ASSERT_EQ(fake_.recvs[0].size(), 5u);
  for (int k = 0; k < 5; k++) {
    EXPECT_EQ(fake_.recvs[0][k].sge[0].addr, reinterpret_cast<uint64_t>(buf_ + k * 1024));
    EXPECT_EQ(fake_.recvs[0][k].sge[0].length, k < 4 ? 1024u : 100u);
    EXPECT_EQ(fake_.recvs[0][k].sge[0].lkey, mr_->lkey());
  }
  for (int k = 0; k < 5; k++) CompleteSlot(0, k, 10 + k);
  Completion c[8];
  ASSERT_EQ(PollAll(rcq_.get(), c, 8), 5u);
  for (int k = 0; k < 5; k++) {
    EXPECT_EQ(c[k].wr_id, 7u);
    EXPECT_EQ(c[k].opcode, Opcode::kRecv);
    EXPECT_EQ(c[k].offset, uint32_t(k * 1024));
    EXPECT_EQ(c[k].byte_len, uint32_t(10 + k));
    EXPECT_EQ(c[k].buffer_done, k == 4);
    EXPECT_EQ(c[k].connection_id, server_->id());
  }
  EXPECT_EQ(srq_->posted(), 0u);
  EXPECT_EQ(server_->counters().recvs, 5u);
}

TEST_F(VerbsSrqTest, MultiPacketFallback_TailShorterThanStrideUnused) {
  Make(SrqOptions{8, true, 64, 1024});
  ASSERT_TRUE(SrqList(srq_.get(), {RecvRequest{1, buf_, 2 * 1024 + 32, mr_.get()}}).ok());
  EXPECT_EQ(fake_.recvs[0].size(), 2u);
}

TEST_F(VerbsSrqTest, PlainSrq_OneReceivePerBuffer) {
  Make(SrqOptions{8, false, 64, 1024});
  ASSERT_TRUE(SrqList(srq_.get(), {RecvRequest{1, buf_, 4096, mr_.get()},
                                   RecvRequest{2, buf_ + 4096, 4096, mr_.get()}})
                  .ok());
  ASSERT_EQ(fake_.recvs[0].size(), 2u);
  EXPECT_EQ(fake_.recvs[0][1].sge[0].length, 4096u);
  CompleteSlot(0, 1, 300);
  Completion c[2];
  ASSERT_EQ(PollAll(rcq_.get(), c, 2), 1u);
  EXPECT_EQ(c[0].wr_id, 2u);
  EXPECT_EQ(c[0].offset, 0u);
  EXPECT_TRUE(c[0].buffer_done);
  EXPECT_EQ(srq_->posted(), 1u);
}

class VerbsSmallSrq : public VerbsSrqTest {
 protected:
  void SetUp() override {
    fake_.dev_attr.max_srq_wr = 6;  // hardware depth of the fallback SRQ
    VerbsSrqTest::SetUp();
  }
};

TEST_F(VerbsSmallSrq, Limits_MaxWrAndHardwareDepthExhausted) {
  Make(SrqOptions{2, true, 64, 1024});
  EXPECT_TRUE(SrqList(srq_.get(), {RecvRequest{1, buf_, 4096, mr_.get()}}).ok());
  // 4 + 4 slots > 6
  EXPECT_EQ(SrqList(srq_.get(), {RecvRequest{2, buf_ + 4096, 4096, mr_.get()}}).code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(SrqList(srq_.get(), {RecvRequest{3, buf_ + 4096, 2048, mr_.get()}}).ok());
  // max_wr = 2 buffers
  EXPECT_EQ(SrqList(srq_.get(), {RecvRequest{4, buf_ + 6144, 64, mr_.get()}}).code(),
            StatusCode::kResourceExhausted);
}

TEST_F(VerbsSrqTest, InvalidBuffers_RejectedWithoutPosting) {
  Make(SrqOptions{8, true, 64, 1024});
  auto ro = pd_->RegisterMemory(buf_ + 4096, 4096, MemoryRegionOptions{kRemoteRead});
  ASSERT_TRUE(ro.ok());
  EXPECT_CALL(*fake_.api, PostSrqRecv(_, _, _)).Times(0);
  EXPECT_EQ(SrqList(srq_.get(), {RecvRequest{1, buf_, 32, mr_.get()}}).code(),  // < stride
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SrqList(srq_.get(), {RecvRequest{1, buf_ + 4096, 1024, ro->get()}}).code(),
            StatusCode::kInvalidArgument);  // no kLocalWrite
  EXPECT_EQ(SrqList(srq_.get(), {RecvRequest{1, buf_ + 8000, 1024, mr_.get()}}).code(),
            StatusCode::kInvalidArgument);  // outside
}

TEST_F(VerbsSrqTest, PostSrqRecvFails_IoErrorNothingRecorded) {
  Make(SrqOptions{8, false, 64, 1024});
  EXPECT_CALL(*fake_.api, PostSrqRecv(_, _, _))
      .WillOnce(Invoke([](ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
        *bad = wr;
        return EINVAL;
      }));
  Status st = SrqList(srq_.get(), {RecvRequest{1, buf_, 1024, mr_.get()}});
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_THAT(st.message(), HasSubstr("ibv_post_srq_recv"));
  EXPECT_EQ(srq_->posted(), 0u);
}

TEST_F(VerbsSrqTest, ConnectionWithSrq_PostRecvIsFailedPrecondition) {
  Make(SrqOptions{8, false, 64, 1024});
  EXPECT_EQ(RecvList(server_.get(), {RecvRequest{1, buf_, 64, mr_.get()}}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(fake_.qp_inits.back().srq, static_cast<VerbsSrq*>(srq_.get())->core()->srq());
  EXPECT_EQ(fake_.qp_inits.back().cap.max_recv_wr, 0u);
}

// ---- counters -----------------------------------------------------------------------------------

TEST_F(VerbsPost, Counters_VerbsBytesAndRoundTrips) {
  std::vector<WorkRequest> list{Wr(Opcode::kWrite, 1, 0, 100),  Wr(Opcode::kRead, 2, 0, 2000),
                                Wr(Opcode::kCompareSwap, 3, 8), Wr(Opcode::kFetchAdd, 4, 16),
                                Wr(Opcode::kSend, 5, 0, 10),    Wr(Opcode::kFlush, 6)};
  ASSERT_TRUE(client_->Post(list).ok());
  ASSERT_TRUE(PostList(client_.get(), {Wr(Opcode::kWrite, 7, 0, 50)}).ok());
  ASSERT_TRUE(PostList(client_.get(), {}).ok());  // empty: no doorbell
  Counters c = client_->counters();
  EXPECT_EQ(c.writes, 2u);
  EXPECT_EQ(c.reads, 1u);
  EXPECT_EQ(c.compare_swaps, 1u);
  EXPECT_EQ(c.fetch_adds, 1u);
  EXPECT_EQ(c.sends, 1u);
  EXPECT_EQ(c.flushes, 1u);
  EXPECT_EQ(c.round_trips, 2u);
  EXPECT_EQ(c.payload_bytes, 100u + 2000 + 10 + 50);
  const uint64_t H = kWireHeaderBytes;
  // WRITE 100, READ request, CAS, FAA, SEND 10, FLUSH request, WRITE 50 (MTU 1024)
  EXPECT_EQ(c.bytes_out, (H + 100) + H + 2 * (H + kAtomicRequestExtra) + (H + 10) + H + (H + 50));
  // ACK, READ response of 2 packets, 2 atomic responses, ACK, flush response, ACK
  EXPECT_EQ(c.bytes_in, H + (2 * H + 2000) + 2 * (H + 8) + H + (H + 1) + H);
  EXPECT_EQ(c.remote_ops_served, 0u);  // executed by the NIC, invisible to software
  Counters total = fabric_->counters();
  EXPECT_EQ(total.writes, 2u);
  EXPECT_EQ(total.round_trips, 2u);
  client_.reset();  // closed connections still count
  EXPECT_EQ(fabric_->counters().writes, 2u);
}

}  // namespace
}  // namespace asymnvm::fabric::verbs
