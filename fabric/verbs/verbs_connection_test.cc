// Connection set-up: QP creation, INIT → RTR → RTS attributes, the bootstrap exchange (real
// unix:// sockets, mocked device), failure clean-up, Close.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fabric/verbs/verbs_test_util.h"

namespace asymnvm::fabric::verbs {
namespace {

using ::testing::_;
using ::testing::AnyNumber;
using ::testing::HasSubstr;
using ::testing::Invoke;
using ::testing::Return;

class NotVerbsCq : public CompletionQueue {
 public:
  Result<size_t> Poll(std::span<Completion>) override { return size_t{0}; }
  Result<size_t> Wait(std::span<Completion>, std::chrono::microseconds) override {
    return size_t{0};
  }
  uint64_t overwritten() const override { return 0; }
  uint32_t capacity() const override { return 1; }
};

using VerbsSetup = VerbsConnTest;

TEST_F(VerbsSetup, Loopback_CreatesRcQpWithRequestedCaps) {
  ConnectionOptions o = Options();
  o.max_send_wr = 33;
  o.max_recv_wr = 44;
  o.max_inline = 128;
  ASSERT_TRUE(ConnectPair(o, Options()).ok());
  const ibv_qp_init_attr& a = fake_.qp_inits.at(0);
  EXPECT_EQ(a.qp_type, IBV_QPT_RC);
  EXPECT_EQ(a.send_cq, HwCq(scq_.get()));
  EXPECT_EQ(a.recv_cq, HwCq(rcq_.get()));
  EXPECT_EQ(a.srq, nullptr);
  EXPECT_EQ(a.sq_sig_all, 0);
  EXPECT_EQ(a.cap.max_send_wr, 33u);
  EXPECT_EQ(a.cap.max_recv_wr, 44u);
  EXPECT_EQ(a.cap.max_inline_data, 128u);
  EXPECT_EQ(a.cap.max_send_sge, 1u);
  EXPECT_EQ(client_->state(), ConnectionState::kConnected);
  EXPECT_NE(client_->id(), server_->id());
}

TEST_F(VerbsSetup, Loopback_InitAttrsGrantRemoteAccessOnPort) {
  Connect();
  ModifyCall init = ModifyTo(client_.get(), IBV_QPS_INIT);
  EXPECT_EQ(init.attr.port_num, 1);
  EXPECT_EQ(init.attr.pkey_index, 0);
  EXPECT_EQ(init.attr.qp_access_flags,
            unsigned(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC));
  EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

TEST_F(VerbsSetup, Loopback_RtrUsesPeerQpnPsnLidAndMtu) {
  Connect();
  ModifyCall rtr = ModifyTo(client_.get(), IBV_QPS_RTR);
  ModifyCall server_rts = ModifyTo(server_.get(), IBV_QPS_RTS);
  EXPECT_EQ(rtr.attr.dest_qp_num, Qpn(server_.get()));
  EXPECT_EQ(rtr.attr.rq_psn, server_rts.attr.sq_psn);
  EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(rtr.attr.max_dest_rd_atomic, 16);
  EXPECT_EQ(rtr.attr.min_rnr_timer, RnrTimerCode(std::chrono::microseconds(50)));
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 7);
  EXPECT_EQ(rtr.attr.ah_attr.port_num, 1);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 0);  // InfiniBand link: routed by LID
  EXPECT_EQ(rtr.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  // and symmetrically
  ModifyCall srtr = ModifyTo(server_.get(), IBV_QPS_RTR);
  EXPECT_EQ(srtr.attr.dest_qp_num, Qpn(client_.get()));
  EXPECT_EQ(srtr.attr.rq_psn, ModifyTo(client_.get(), IBV_QPS_RTS).attr.sq_psn);
}

TEST_F(VerbsSetup, Loopback_RtsAttrsTimeoutRetriesAndBoundedRnrRetry) {
  ConnectionOptions o = Options();
  o.rnr_retry = 7;  // 7 = "forever" in IB: clamped so RNR always ends in an error
  ConnectionOptions s = Options();
  s.rnr_retry = 3;
  ASSERT_TRUE(ConnectPair(o, s).ok());
  ModifyCall rts = ModifyTo(client_.get(), IBV_QPS_RTS);
  EXPECT_EQ(rts.attr.timeout, kQpAckTimeout);
  EXPECT_EQ(rts.attr.retry_cnt, 7);
  EXPECT_EQ(rts.attr.rnr_retry, 6);
  EXPECT_EQ(rts.attr.max_rd_atomic, 16);
  EXPECT_EQ(rts.attr.sq_psn & ~0xffffffu, 0u);
  EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  EXPECT_EQ(ModifyTo(server_.get(), IBV_QPS_RTS).attr.rnr_retry, 3);
}

class VerbsRoce : public VerbsConnTest {
 protected:
  void SetUp() override {
    fake_.port_attr.link_layer = IBV_LINK_LAYER_ETHERNET;
    options_.gid_index = 3;
    VerbsConnTest::SetUp();
  }
};

TEST_F(VerbsRoce, Loopback_RtrCarriesGrhWithPeerGid) {
  Connect();
  ModifyCall rtr = ModifyTo(client_.get(), IBV_QPS_RTR);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 1);
  EXPECT_EQ(0, std::memcmp(rtr.attr.ah_attr.grh.dgid.raw, fake_.gid.raw, 16));
  EXPECT_EQ(rtr.attr.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(rtr.attr.ah_attr.grh.hop_limit, 64);
}

TEST(VerbsQpAttrs, Rtr_PathMtuIsTheSmallerSide) {
  DeviceCore dev;
  dev.options.port = 2;
  dev.dev_attr.max_qp_rd_atom = 64;  // clamped to 16
  QpInfo local, peer;
  local.mtu = IBV_MTU_4096;
  peer.mtu = IBV_MTU_2048;
  peer.qpn = 77;
  peer.psn = 99;
  int mask = 0;
  ibv_qp_attr a = BuildRtrAttr(dev, local, peer, ConnectionOptions{}, &mask);
  EXPECT_EQ(a.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(a.dest_qp_num, 77u);
  EXPECT_EQ(a.rq_psn, 99u);
  EXPECT_EQ(a.max_dest_rd_atomic, 16);
  EXPECT_EQ(a.ah_attr.port_num, 2);
  EXPECT_EQ(a.ah_attr.is_global, 1);  // peer LID 0: needs a GRH
}

TEST_F(VerbsSetup, PrivateDataAndAddressesExchanged) {
  ConnectionOptions c = Options(), s = Options();
  c.private_data = {1, 2, 3};
  s.private_data = {9};
  ASSERT_TRUE(ConnectPair(c, s).ok());
  EXPECT_EQ(server_->peer_private_data(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(client_->peer_private_data(), (std::vector<uint8_t>{9}));
  EXPECT_EQ(client_->peer_address(), listener_->address());
  EXPECT_THAT(listener_->address(), HasSubstr("unix:///tmp/asymnvm-verbs-test-"));
}

TEST_F(VerbsSetup, InprocAddress_NotSupported) {
  EXPECT_CALL(*fake_.api, CreateQp(_, _)).Times(0);
  EXPECT_EQ(fabric_->Connect(pd_.get(), "inproc://x", Options()).status().code(),
            StatusCode::kNotSupported);
  EXPECT_EQ(fabric_->Listen(pd_.get(), "inproc://x").status().code(), StatusCode::kNotSupported);
}

TEST_F(VerbsSetup, BadOptions_InvalidArgumentWithoutQp) {
  EXPECT_CALL(*fake_.api, CreateQp(_, _)).Times(0);
  ConnectionOptions o = Options();
  o.send_cq = nullptr;
  EXPECT_EQ(fabric_->Connect(pd_.get(), TestSocketAddress(), o).status().code(),
            StatusCode::kInvalidArgument);
  NotVerbsCq foreign;
  o = Options();
  o.send_cq = &foreign;
  EXPECT_EQ(fabric_->Connect(pd_.get(), TestSocketAddress(), o).status().code(),
            StatusCode::kInvalidArgument);
  o = Options();
  o.private_data.resize(1025);
  EXPECT_EQ(fabric_->Connect(pd_.get(), TestSocketAddress(), o).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(VerbsSetup, CreateQpFails_IoErrorNamingCall) {
  EXPECT_CALL(*fake_.api, CreateQp(_, _)).WillOnce(Invoke([](auto, auto) {
    errno = ENOMEM;
    return nullptr;
  }));
  auto c = fabric_->Connect(pd_.get(), TestSocketAddress(), Options());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIoError);
  EXPECT_THAT(c.status().message(), HasSubstr("ibv_create_qp"));
  EXPECT_EQ(c.status().sys_errno(), ENOMEM);
}

TEST_F(VerbsSetup, InitTransitionFails_QpDestroyed) {
  EXPECT_CALL(*fake_.api, ModifyQp(_, _, _)).WillOnce(Return(EINVAL));
  EXPECT_CALL(*fake_.api, DestroyQp(_)).Times(1);
  auto c = fabric_->Connect(pd_.get(), TestSocketAddress(), Options());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("ibv_modify_qp(INIT)"));
  EXPECT_EQ(c.status().sys_errno(), EINVAL);
}

TEST_F(VerbsSetup, NobodyListening_QpDestroyed) {
  EXPECT_CALL(*fake_.api, DestroyQp(_)).Times(1);
  auto c = fabric_->Connect(pd_.get(), TestSocketAddress(), Options());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("verbs: connect"));
}

TEST_F(VerbsSetup, RtrFails_BothSidesFailAndDestroyTheirQps) {
  EXPECT_CALL(*fake_.api, ModifyQp(_, _, _)).Times(AnyNumber());
  EXPECT_CALL(*fake_.api, ModifyQp(_, ::testing::Field(&ibv_qp_attr::qp_state, IBV_QPS_RTR), _))
      .WillOnce(Return(EINVAL))
      .WillRepeatedly(Return(EINVAL));
  EXPECT_CALL(*fake_.api, DestroyQp(_)).Times(2);
  Status server;
  Status client = ConnectPair(Options(), Options(), &server);
  EXPECT_FALSE(client.ok());
  EXPECT_FALSE(server.ok());
  EXPECT_THAT(client.message() + server.message(), HasSubstr("ibv_modify_qp(RTR)"));
}

TEST_F(VerbsSetup, WrongClusterSecret_PermissionDeniedAndQpsDestroyed) {
  FabricOptions other = options_;
  other.cluster_secret = "not-the-secret";
  auto f2 = OpenVerbsFabricWithApi(other, fake_.api);
  ASSERT_TRUE(f2.ok());
  auto pd2 = (*f2)->AllocPd();
  ASSERT_TRUE(pd2.ok());
  EXPECT_CALL(*fake_.api, DestroyQp(_)).Times(2);
  Status server;
  Status client = ConnectPair(Options(), Options(), &server, f2->get(), pd2->get());
  EXPECT_FALSE(client.ok());
  EXPECT_FALSE(server.ok());
  EXPECT_TRUE(client.code() == StatusCode::kPermissionDenied ||
              server.code() == StatusCode::kPermissionDenied)
      << client.ToString() << " / " << server.ToString();
  listener_.reset();
}

TEST_F(VerbsSetup, Close_QpToErrThenDestroyedAndOutstandingFlushed) {
  Connect();
  const uint32_t qpn = Qpn(client_.get());
  WorkRequest w;
  w.wr_id = 5;
  w.local_addr = buf_;
  w.length = 8;
  w.local_mr = mr_.get();
  WorkRequest u = w;
  u.wr_id = 6;
  u.signaled = false;
  std::vector<WorkRequest> list{w, u};
  ASSERT_TRUE(client_->Post(list).ok());
  EXPECT_CALL(*fake_.api, ModifyQp(_, _, _)).Times(AnyNumber());  // the server, at teardown
  EXPECT_CALL(*fake_.api, DestroyQp(_)).Times(AnyNumber());
  {
    ::testing::InSequence seq;
    EXPECT_CALL(*fake_.api,
                ModifyQp(::testing::Field(&ibv_qp::qp_num, qpn),
                         ::testing::Field(&ibv_qp_attr::qp_state, IBV_QPS_ERR), IBV_QP_STATE));
    EXPECT_CALL(*fake_.api, DestroyQp(::testing::Field(&ibv_qp::qp_num, qpn)));
  }
  client_->Close();
  EXPECT_EQ(client_->state(), ConnectionState::kClosed);
  Completion out[4];
  auto n = scq_->Poll(out);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 2u);
  EXPECT_EQ(out[0].wr_id, 5u);
  EXPECT_EQ(out[0].status, CompletionStatus::kFlushed);
  EXPECT_EQ(out[1].wr_id, 6u);
  EXPECT_EQ(out[1].status, CompletionStatus::kFlushed);
  EXPECT_EQ(client_->Post(list).code(), StatusCode::kConnectionError);
  client_->Close();  // idempotent
}

}  // namespace
}  // namespace asymnvm::fabric::verbs
