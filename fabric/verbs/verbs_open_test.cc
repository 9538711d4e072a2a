// Device open, PD/MR/CQ/SRQ creation and their failure branches, against the real libibverbs
// (no device here) and a mocked one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "fabric/verbs/mock_verbs_api.h"
#include "fabric/verbs/verbs_fabric.h"
#include "fabric/verbs/verbs_internal.h"

namespace asymnvm::fabric::verbs {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::InSequence;
using ::testing::Invoke;
using ::testing::Return;

auto FailWithErrno(int err) {
  return Invoke([err](auto&&...) {
    errno = err;
    return nullptr;
  });
}

// ---- real libibverbs ----------------------------------------------------------------------------

TEST(RealVerbs, NoDevice_DeviceAvailableIsFalse) {
  if (VerbsDeviceAvailable()) GTEST_SKIP() << "an RDMA device exists on this machine";
  EXPECT_FALSE(VerbsDeviceAvailable());
}

TEST(RealVerbs, NoDevice_OpenFailsNotSupportedWithClearMessage) {
  if (VerbsDeviceAvailable()) GTEST_SKIP() << "an RDMA device exists on this machine";
  FabricOptions o;
  o.provider = "verbs";
  auto f = OpenVerbsFabric(o);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotSupported);
  EXPECT_THAT(f.status().message(), HasSubstr("no RDMA device"));
  EXPECT_THAT(f.status().message(), HasSubstr("ibv_get_device_list"));
  EXPECT_THAT(f.status().message(), HasSubstr("use --fabric soft"));
}

// ---- open ---------------------------------------------------------------------------------------

class VerbsOpen : public ::testing::Test {
 protected:
  Result<std::unique_ptr<Fabric>> Open() { return OpenVerbsFabricWithApi(options_, fake_.api); }
  FakeVerbs fake_;
  FabricOptions options_;
};

TEST_F(VerbsOpen, NullDeviceList_NotSupportedNamingErrno) {
  EXPECT_CALL(*fake_.api, GetDeviceList(_)).WillOnce(FailWithErrno(ENOSYS));
  EXPECT_CALL(*fake_.api, OpenDevice(_)).Times(0);
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(f.status().message(),
            "verbs: no RDMA device (ibv_get_device_list: Function not implemented); "
            "use --fabric soft");
  EXPECT_EQ(f.status().sys_errno(), ENOSYS);
}

TEST_F(VerbsOpen, EmptyDeviceList_NotSupportedAndListFreed) {
  EXPECT_CALL(*fake_.api, GetDeviceList(_)).WillOnce(Invoke([this](int* n) {
    *n = 0;
    return fake_.list + 2;
  }));
  EXPECT_CALL(*fake_.api, FreeDeviceList(fake_.list + 2));
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotSupported);
  EXPECT_THAT(f.status().message(), HasSubstr("empty list"));
}

TEST_F(VerbsOpen, UnknownDeviceName_InvalidArgumentListingDevices) {
  options_.device = "mlx5_9";
  EXPECT_CALL(*fake_.api, FreeDeviceList(fake_.list));
  EXPECT_CALL(*fake_.api, OpenDevice(_)).Times(0);
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status().message(), HasSubstr("mock0, mock1"));
}

TEST_F(VerbsOpen, NamedDevice_OpensThatDevice) {
  options_.device = "mock1";
  EXPECT_CALL(*fake_.api, OpenDevice(&fake_.devices[1])).WillOnce(Return(&fake_.ctx));
  auto f = Open();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
}

TEST_F(VerbsOpen, BadPortOrGidIndex_InvalidArgumentBeforeAnyCall) {
  EXPECT_CALL(*fake_.api, GetDeviceList(_)).Times(0);
  options_.port = 0;
  EXPECT_EQ(Open().status().code(), StatusCode::kInvalidArgument);
  options_.port = 1;
  options_.gid_index = -1;
  EXPECT_EQ(Open().status().code(), StatusCode::kInvalidArgument);
}

TEST_F(VerbsOpen, OpenDeviceFails_IoErrorAndListFreed) {
  EXPECT_CALL(*fake_.api, OpenDevice(_)).WillOnce(FailWithErrno(EACCES));
  EXPECT_CALL(*fake_.api, FreeDeviceList(fake_.list));
  EXPECT_CALL(*fake_.api, CloseDevice(_)).Times(0);
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIoError);
  EXPECT_THAT(f.status().message(), HasSubstr("ibv_open_device(mock0)"));
  EXPECT_EQ(f.status().sys_errno(), EACCES);
}

TEST_F(VerbsOpen, QueryDeviceFails_ClosesDevice) {
  EXPECT_CALL(*fake_.api, QueryDevice(_, _)).WillOnce(Return(EIO));
  EXPECT_CALL(*fake_.api, CloseDevice(&fake_.ctx));
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("ibv_query_device"));
  EXPECT_EQ(f.status().sys_errno(), EIO);
}

TEST_F(VerbsOpen, QueryPortFails_ClosesDevice) {
  EXPECT_CALL(*fake_.api, QueryPort(_, 1, _)).WillOnce(Return(EINVAL));
  EXPECT_CALL(*fake_.api, CloseDevice(&fake_.ctx));
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("ibv_query_port"));
}

TEST_F(VerbsOpen, PortNotActive_IoErrorClosesDevice) {
  fake_.port_attr.state = IBV_PORT_DOWN;
  EXPECT_CALL(*fake_.api, CloseDevice(&fake_.ctx));
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIoError);
  EXPECT_THAT(f.status().message(), HasSubstr("not active"));
}

TEST_F(VerbsOpen, GidIndexBeyondTable_InvalidArgumentClosesDevice) {
  options_.gid_index = 16;
  EXPECT_CALL(*fake_.api, CloseDevice(&fake_.ctx));
  EXPECT_EQ(Open().status().code(), StatusCode::kInvalidArgument);
}

TEST_F(VerbsOpen, QueryGidFails_ClosesDevice) {
  EXPECT_CALL(*fake_.api, QueryGid(_, 1, 0, _)).WillOnce(Return(-1));
  EXPECT_CALL(*fake_.api, CloseDevice(&fake_.ctx));
  errno = ENODEV;
  auto f = Open();
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("ibv_query_gid"));
}

TEST_F(VerbsOpen, Success_CapabilitiesSayFallbackAndDestroyClosesDevice) {
  auto f = Open();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->provider(), "verbs");
  Capabilities c = (*f)->capabilities();
  EXPECT_FALSE(c.multi_packet_srq_native);
  EXPECT_TRUE(c.atomics);
  EXPECT_EQ(c.max_message, 1u << 30);
  EXPECT_EQ(c.transports, (std::vector<std::string>{"tcp", "unix"}));
  EXPECT_CALL(*fake_.api, CloseDevice(&fake_.ctx));
  f->reset();
}

TEST_F(VerbsOpen, DeviceWithoutAtomics_CapabilitiesAtomicsFalse) {
  fake_.dev_attr.atomic_cap = IBV_ATOMIC_NONE;
  auto f = Open();
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->capabilities().atomics);
}

// ---- PD, MR -------------------------------------------------------------------------------------

class VerbsResources : public VerbsOpen {
 protected:
  void SetUp() override {
    auto f = Open();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fabric_ = std::move(*f);
  }
  std::unique_ptr<ProtectionDomain> Pd() {
    auto pd = fabric_->AllocPd();
    EXPECT_TRUE(pd.ok()) << pd.status().ToString();
    return pd.ok() ? std::move(*pd) : nullptr;
  }
  std::unique_ptr<Fabric> fabric_;
};

TEST_F(VerbsResources, AllocPdFails_IoErrorNamingCall) {
  EXPECT_CALL(*fake_.api, AllocPd(&fake_.ctx)).WillOnce(FailWithErrno(ENOMEM));
  auto pd = fabric_->AllocPd();
  ASSERT_FALSE(pd.ok());
  EXPECT_EQ(pd.status().code(), StatusCode::kIoError);
  EXPECT_THAT(pd.status().message(), HasSubstr("ibv_alloc_pd"));
  EXPECT_EQ(pd.status().sys_errno(), ENOMEM);
}

TEST_F(VerbsResources, ScratchRegistrationFails_PdDeallocated) {
  EXPECT_CALL(*fake_.api, RegMr(_, _, kScratchBytes, IBV_ACCESS_LOCAL_WRITE))
      .WillOnce(FailWithErrno(EFAULT));
  EXPECT_CALL(*fake_.api, DeallocPd(_)).Times(1);
  EXPECT_CALL(*fake_.api, DeregMr(_)).Times(0);
  auto pd = fabric_->AllocPd();
  ASSERT_FALSE(pd.ok());
  EXPECT_THAT(pd.status().message(), HasSubstr("ibv_reg_mr (scratch)"));
}

TEST_F(VerbsResources, PdDestroyed_ScratchDeregisteredThenPdDeallocated) {
  auto pd = Pd();
  ibv_mr* scratch = &fake_.mrs.back();
  InSequence seq;
  EXPECT_CALL(*fake_.api, DeregMr(scratch));
  EXPECT_CALL(*fake_.api, DeallocPd(&fake_.pds.back()));
  pd.reset();
}

TEST_F(VerbsResources, RegisterMemory_AccessFlagsMapped) {
  auto pd = Pd();
  alignas(8) static uint8_t buf[256];
  struct Case {
    uint32_t access;
    int flags;
  } cases[] = {
      {kLocalWrite, IBV_ACCESS_LOCAL_WRITE},
      {kRemoteRead, IBV_ACCESS_REMOTE_READ},
      {kRemoteWrite, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE},
      {kRemoteAtomic, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE},
      {kAllRemote, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                       IBV_ACCESS_REMOTE_ATOMIC},
      {0, 0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MapAccess(c.access), c.flags) << c.access;
    EXPECT_CALL(*fake_.api, RegMr(_, buf, sizeof(buf), c.flags));
    auto mr = pd->RegisterMemory(buf, sizeof(buf), MemoryRegionOptions{c.access});
    ASSERT_TRUE(mr.ok());
    EXPECT_EQ((*mr)->access(), c.access);
  }
}

TEST_F(VerbsResources, RegisterMemory_KeysAndDescriptorFromIbvMr) {
  auto pd = Pd();
  static uint8_t buf[128];
  auto mr = pd->RegisterMemory(buf, sizeof(buf), MemoryRegionOptions{kAllRemote});
  ASSERT_TRUE(mr.ok());
  const ibv_mr& raw = fake_.mrs.back();
  EXPECT_EQ((*mr)->lkey(), raw.lkey);
  EXPECT_EQ((*mr)->rkey(), raw.rkey);
  RegionDescriptor d = (*mr)->descriptor(9);
  EXPECT_EQ(d.addr, reinterpret_cast<uint64_t>(buf));
  EXPECT_EQ(d.length, sizeof(buf));
  EXPECT_EQ(d.rkey, raw.rkey);
  EXPECT_EQ(d.tag, 9u);
  EXPECT_CALL(*fake_.api, DeregMr(_)).Times(::testing::AnyNumber());  // the PD's scratch MR
  EXPECT_CALL(*fake_.api, DeregMr(const_cast<ibv_mr*>(&raw)));
  mr->reset();
}

TEST_F(VerbsResources, RegisterMemory_BadArguments_NoRegMrCall) {
  auto pd = Pd();
  static uint8_t buf[64];
  EXPECT_CALL(*fake_.api, RegMr(_, _, _, _)).Times(0);
  EXPECT_EQ(pd->RegisterMemory(nullptr, 64, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pd->RegisterMemory(buf, 0, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pd->RegisterMemory(buf, 64, MemoryRegionOptions{1u << 7}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(VerbsResources, RegMrFails_IoErrorOrResourceExhausted) {
  auto pd = Pd();
  static uint8_t buf[64];
  EXPECT_CALL(*fake_.api, RegMr(_, buf, _, _))
      .WillOnce(FailWithErrno(EFAULT))
      .WillOnce(FailWithErrno(ENOMEM));
  auto a = pd->RegisterMemory(buf, 64, {});
  EXPECT_EQ(a.status().code(), StatusCode::kIoError);
  EXPECT_THAT(a.status().message(), HasSubstr("ibv_reg_mr(64 bytes)"));
  EXPECT_EQ(a.status().sys_errno(), EFAULT);
  EXPECT_EQ(pd->RegisterMemory(buf, 64, {}).status().code(), StatusCode::kResourceExhausted);
}

// ---- CQ -----------------------------------------------------------------------------------------

TEST_F(VerbsResources, CreateCq_ChannelFails_IoError) {
  EXPECT_CALL(*fake_.api, CreateCompChannel(_)).WillOnce(FailWithErrno(EMFILE));
  EXPECT_CALL(*fake_.api, CreateCq(_, _, _, _, _)).Times(0);
  auto cq = fabric_->CreateCq({});
  ASSERT_FALSE(cq.ok());
  EXPECT_THAT(cq.status().message(), HasSubstr("ibv_create_comp_channel"));
}

TEST_F(VerbsResources, CreateCq_CqFails_ChannelDestroyed) {
  EXPECT_CALL(*fake_.api, CreateCq(_, 4096, _, &fake_.channel, 0)).WillOnce(FailWithErrno(ENOMEM));
  EXPECT_CALL(*fake_.api, DestroyCompChannel(&fake_.channel));
  auto cq = fabric_->CreateCq({});
  ASSERT_FALSE(cq.ok());
  EXPECT_THAT(cq.status().message(), HasSubstr("ibv_create_cq"));
}

TEST_F(VerbsResources, CreateCq_BadCapacity_InvalidArgumentNoCalls) {
  EXPECT_CALL(*fake_.api, CreateCompChannel(_)).Times(0);
  EXPECT_EQ(fabric_->CreateCq(CompletionQueueOptions{0, false}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(fabric_->CreateCq(CompletionQueueOptions{1u << 20, false}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(VerbsResources, CqDestroyed_CqThenChannel) {
  auto cq = fabric_->CreateCq(CompletionQueueOptions{64, true});
  ASSERT_TRUE(cq.ok());
  EXPECT_EQ((*cq)->capacity(), 64u);
  InSequence seq;
  EXPECT_CALL(*fake_.api, DestroyCq(fake_.LastCq()));
  EXPECT_CALL(*fake_.api, DestroyCompChannel(&fake_.channel));
  cq->reset();
}

// ---- SRQ ----------------------------------------------------------------------------------------

TEST_F(VerbsResources, CreateSrq_Fails_IoError) {
  auto pd = Pd();
  EXPECT_CALL(*fake_.api, CreateSrq(_, _)).WillOnce(FailWithErrno(ENOMEM));
  auto srq = fabric_->CreateSrq(pd.get(), {});
  ASSERT_FALSE(srq.ok());
  EXPECT_THAT(srq.status().message(), HasSubstr("ibv_create_srq"));
}

TEST_F(VerbsResources, CreateSrq_DepthPlainAndFallback) {
  auto pd = Pd();
  uint32_t depth = 0;
  EXPECT_CALL(*fake_.api, CreateSrq(_, _))
      .Times(2)
      .WillRepeatedly(Invoke([&](ibv_pd*, ibv_srq_init_attr* a) {
        depth = a->attr.max_wr;
        EXPECT_EQ(a->attr.max_sge, 1u);
        return &fake_.srqs.emplace_back();
      }));
  auto plain = fabric_->CreateSrq(pd.get(), SrqOptions{100, false, 64, 4096});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(depth, 100u);
  EXPECT_FALSE((*plain)->multi_packet_native());
  auto mp = fabric_->CreateSrq(pd.get(), SrqOptions{100, true, 64, 4096});
  ASSERT_TRUE(mp.ok());
  EXPECT_EQ(depth, 32768u);  // min(100 · 1024, device max_srq_wr)
  EXPECT_FALSE((*mp)->multi_packet_native());
  EXPECT_CALL(*fake_.api, DestroySrq(_)).Times(2);
}

TEST_F(VerbsResources, CreateSrq_SlotNotMultipleOfStride_InvalidArgument) {
  auto pd = Pd();
  EXPECT_CALL(*fake_.api, CreateSrq(_, _)).Times(0);
  EXPECT_EQ(fabric_->CreateSrq(pd.get(), SrqOptions{8, true, 64, 100}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(fabric_->CreateSrq(pd.get(), SrqOptions{0, false, 64, 4096}).status().code(),
            StatusCode::kInvalidArgument);
}

// ---- pure mappings ------------------------------------------------------------------------------

TEST(VerbsMapping, WcStatusTable_MapsEveryStatus) {
  struct {
    ibv_wc_status in;
    CompletionStatus out;
  } table[] = {
      {IBV_WC_SUCCESS, CompletionStatus::kSuccess},
      {IBV_WC_LOC_PROT_ERR, CompletionStatus::kLocalProtectionError},
      {IBV_WC_LOC_LEN_ERR, CompletionStatus::kLocalLengthError},
      {IBV_WC_REM_ACCESS_ERR, CompletionStatus::kRemoteAccessError},
      {IBV_WC_REM_INV_REQ_ERR, CompletionStatus::kRemoteInvalidRequest},
      {IBV_WC_RNR_RETRY_EXC_ERR, CompletionStatus::kRnrRetryExceeded},
      {IBV_WC_RETRY_EXC_ERR, CompletionStatus::kTransportError},
      {IBV_WC_WR_FLUSH_ERR, CompletionStatus::kFlushed},
      {IBV_WC_LOC_QP_OP_ERR, CompletionStatus::kGeneralError},
      {IBV_WC_REM_OP_ERR, CompletionStatus::kGeneralError},
      {IBV_WC_FATAL_ERR, CompletionStatus::kGeneralError},
      {IBV_WC_GENERAL_ERR, CompletionStatus::kGeneralError},
  };
  for (const auto& row : table) {
    EXPECT_EQ(MapWcStatus(row.in), row.out) << ibv_wc_status(row.in);
  }
}

TEST(VerbsMapping, RnrTimerCode_SmallestCodeCoveringBackoff) {
  EXPECT_EQ(RnrTimerCode(std::chrono::microseconds(0)), 1);
  EXPECT_EQ(RnrTimerCode(std::chrono::microseconds(10)), 1);
  EXPECT_EQ(RnrTimerCode(std::chrono::microseconds(50)), 5);    // 60 µs
  EXPECT_EQ(RnrTimerCode(std::chrono::microseconds(640)), 12);  // 0.64 ms
  EXPECT_EQ(RnrTimerCode(std::chrono::microseconds(491520)), 31);
  EXPECT_EQ(RnrTimerCode(std::chrono::seconds(1)), 0);  // 655.36 ms, the maximum
}

TEST(VerbsMapping, QpInfoBlob_RoundTripsAndRejectsMalformed) {
  QpInfo a;
  a.qpn = 0xabcdef;
  a.psn = 0x123456;
  a.lid = 0x1234;
  a.mtu = IBV_MTU_4096;
  a.port = 2;
  for (int i = 0; i < 16; i++) a.gid.raw[i] = static_cast<uint8_t>(i);
  a.private_data = {1, 2, 3};
  std::vector<uint8_t> blob = EncodeQpInfo(a);
  ASSERT_EQ(blob.size(), kBlobHeader + 3);
  auto b = DecodeQpInfo(blob);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->qpn, a.qpn);
  EXPECT_EQ(b->psn, a.psn);
  EXPECT_EQ(b->lid, a.lid);
  EXPECT_EQ(b->mtu, a.mtu);
  EXPECT_EQ(b->port, 2);
  EXPECT_EQ(0, std::memcmp(b->gid.raw, a.gid.raw, 16));
  EXPECT_EQ(b->private_data, a.private_data);

  auto bad = blob;
  bad[0] ^= 1;
  EXPECT_EQ(DecodeQpInfo(bad).status().code(), StatusCode::kProtocolError);
  EXPECT_EQ(DecodeQpInfo(std::span(blob.data(), 20)).status().code(), StatusCode::kProtocolError);
  bad = blob;
  bad.push_back(0);  // length mismatch
  EXPECT_EQ(DecodeQpInfo(bad).status().code(), StatusCode::kProtocolError);
  bad = blob;
  bad[7] = 1;  // qpn wider than 24 bits
  EXPECT_EQ(DecodeQpInfo(bad).status().code(), StatusCode::kProtocolError);
  bad = blob;
  bad[14] = 9;  // mtu code
  EXPECT_EQ(DecodeQpInfo(bad).status().code(), StatusCode::kProtocolError);
}

}  // namespace
}  // namespace asymnvm::fabric::verbs
