// Test doubles for the verbs provider: a gMock VerbsApi and FakeVerbs, which installs default
// actions that behave like a one-port HCA (objects are plain structs owned by FakeVerbs, posted
// work requests are deep-copied for inspection, each CQ is a queue tests push ibv_wc into).
// Tests override single calls with EXPECT_CALL to inject failures. Test-only header.
#pragma once

#include <gmock/gmock.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fabric/verbs/verbs_api.h"

namespace asymnvm::fabric::verbs {

class MockVerbsApi : public VerbsApi {
 public:
  MOCK_METHOD(ibv_device**, GetDeviceList, (int*), (override));
  MOCK_METHOD(void, FreeDeviceList, (ibv_device**), (override));
  MOCK_METHOD(const char*, GetDeviceName, (ibv_device*), (override));
  MOCK_METHOD(ibv_context*, OpenDevice, (ibv_device*), (override));
  MOCK_METHOD(int, CloseDevice, (ibv_context*), (override));
  MOCK_METHOD(int, QueryDevice, (ibv_context*, ibv_device_attr*), (override));
  MOCK_METHOD(int, QueryPort, (ibv_context*, uint8_t, ibv_port_attr*), (override));
  MOCK_METHOD(int, QueryGid, (ibv_context*, uint8_t, int, ibv_gid*), (override));
  MOCK_METHOD(ibv_pd*, AllocPd, (ibv_context*), (override));
  MOCK_METHOD(int, DeallocPd, (ibv_pd*), (override));
  MOCK_METHOD(ibv_mr*, RegMr, (ibv_pd*, void*, size_t, int), (override));
  MOCK_METHOD(int, DeregMr, (ibv_mr*), (override));
  MOCK_METHOD(ibv_comp_channel*, CreateCompChannel, (ibv_context*), (override));
  MOCK_METHOD(int, DestroyCompChannel, (ibv_comp_channel*), (override));
  MOCK_METHOD(ibv_cq*, CreateCq, (ibv_context*, int, void*, ibv_comp_channel*, int), (override));
  MOCK_METHOD(int, DestroyCq, (ibv_cq*), (override));
  MOCK_METHOD(int, ReqNotifyCq, (ibv_cq*, int), (override));
  MOCK_METHOD(int, GetCqEvent, (ibv_comp_channel*, ibv_cq**, void**), (override));
  MOCK_METHOD(void, AckCqEvents, (ibv_cq*, unsigned int), (override));
  MOCK_METHOD(ibv_srq*, CreateSrq, (ibv_pd*, ibv_srq_init_attr*), (override));
  MOCK_METHOD(int, DestroySrq, (ibv_srq*), (override));
  MOCK_METHOD(ibv_qp*, CreateQp, (ibv_pd*, ibv_qp_init_attr*), (override));
  MOCK_METHOD(int, DestroyQp, (ibv_qp*), (override));
  MOCK_METHOD(int, ModifyQp, (ibv_qp*, ibv_qp_attr*, int), (override));
  MOCK_METHOD(int, PostSend, (ibv_qp*, ibv_send_wr*, ibv_send_wr**), (override));
  MOCK_METHOD(int, PostRecv, (ibv_qp*, ibv_recv_wr*, ibv_recv_wr**), (override));
  MOCK_METHOD(int, PostSrqRecv, (ibv_srq*, ibv_recv_wr*, ibv_recv_wr**), (override));
  MOCK_METHOD(int, PollCq, (ibv_cq*, int, ibv_wc*), (override));
};

// One captured ibv_send_wr / ibv_recv_wr with its scatter list (next/sg_list are not kept).
struct SentWr {
  ibv_send_wr wr;
  std::vector<ibv_sge> sge;
};
struct RecvWr {
  ibv_recv_wr wr;
  std::vector<ibv_sge> sge;
};
struct ModifyCall {
  uint32_t qp_num;
  ibv_qp_attr attr;
  int mask;
};

class FakeVerbs {
 public:
  FakeVerbs() : api(std::make_shared<::testing::NiceMock<MockVerbsApi>>()) {
    using ::testing::_;
    using ::testing::Invoke;
    if (::pipe(channel_pipe) != 0) channel_pipe[0] = channel_pipe[1] = -1;
    channel.fd = channel_pipe[0];
    std::snprintf(devices[0].name, sizeof(devices[0].name), "mock0");
    std::snprintf(devices[1].name, sizeof(devices[1].name), "mock1");
    list[0] = &devices[0];
    list[1] = &devices[1];
    list[2] = nullptr;
    dev_attr.max_cqe = 65536;
    dev_attr.max_srq_wr = 32768;
    dev_attr.max_qp_rd_atom = 16;
    dev_attr.max_qp_init_rd_atom = 16;
    dev_attr.atomic_cap = IBV_ATOMIC_HCA;
    port_attr.state = IBV_PORT_ACTIVE;
    port_attr.active_mtu = IBV_MTU_1024;
    port_attr.max_msg_sz = 1u << 30;
    port_attr.lid = 7;
    port_attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
    port_attr.gid_tbl_len = 16;
    for (int i = 0; i < 16; i++) gid.raw[i] = static_cast<uint8_t>(0xf0 + i);

    auto& m = *api;
    ON_CALL(m, GetDeviceList(_)).WillByDefault(Invoke([this](int* n) {
      *n = 2;
      return list;
    }));
    ON_CALL(m, GetDeviceName(_)).WillByDefault(Invoke([](ibv_device* d) {
      return static_cast<const char*>(d->name);
    }));
    ON_CALL(m, OpenDevice(_)).WillByDefault(Invoke([this](ibv_device*) { return &ctx; }));
    ON_CALL(m, QueryDevice(_, _)).WillByDefault(Invoke([this](ibv_context*, ibv_device_attr* a) {
      *a = dev_attr;
      return 0;
    }));
    ON_CALL(m, QueryPort(_, _, _))
        .WillByDefault(Invoke([this](ibv_context*, uint8_t, ibv_port_attr* a) {
          *a = port_attr;
          return 0;
        }));
    ON_CALL(m, QueryGid(_, _, _, _))
        .WillByDefault(Invoke([this](ibv_context*, uint8_t, int, ibv_gid* g) {
          *g = gid;
          return 0;
        }));
    ON_CALL(m, AllocPd(_)).WillByDefault(Invoke([this](ibv_context*) {
      std::lock_guard<std::mutex> lk(mu);
      return &pds.emplace_back();
    }));
    ON_CALL(m, RegMr(_, _, _, _))
        .WillByDefault(Invoke([this](ibv_pd* pd, void* addr, size_t len, int access) {
          std::lock_guard<std::mutex> lk(mu);
          ibv_mr& mr = mrs.emplace_back();
          mr.pd = pd;
          mr.addr = addr;
          mr.length = len;
          mr.lkey = next_key++;
          mr.rkey = next_key++;
          return &mr;
        }));
    ON_CALL(m, CreateCompChannel(_)).WillByDefault(Invoke([this](ibv_context*) {
      return &channel;
    }));
    ON_CALL(m, CreateCq(_, _, _, _, _))
        .WillByDefault(Invoke([this](ibv_context*, int cqe, void*, ibv_comp_channel* ch, int) {
          std::lock_guard<std::mutex> lk(mu);
          ibv_cq& cq = cqs.emplace_back();
          cq.cqe = cqe;
          cq.channel = ch;
          return &cq;
        }));
    ON_CALL(m, CreateSrq(_, _)).WillByDefault(Invoke([this](ibv_pd* pd, ibv_srq_init_attr*) {
      std::lock_guard<std::mutex> lk(mu);
      ibv_srq& s = srqs.emplace_back();
      s.pd = pd;
      return &s;
    }));
    ON_CALL(m, CreateQp(_, _)).WillByDefault(Invoke([this](ibv_pd* pd, ibv_qp_init_attr* a) {
      std::lock_guard<std::mutex> lk(mu);
      ibv_qp& qp = qps.emplace_back();
      qp.pd = pd;
      qp.qp_num = next_qpn++;
      qp.send_cq = a->send_cq;
      qp.recv_cq = a->recv_cq;
      qp.srq = a->srq;
      qp.qp_type = a->qp_type;
      qp_inits.push_back(*a);
      return &qp;
    }));
    ON_CALL(m, ModifyQp(_, _, _))
        .WillByDefault(Invoke([this](ibv_qp* qp, ibv_qp_attr* a, int mask) {
          std::lock_guard<std::mutex> lk(mu);
          modifies.push_back(ModifyCall{qp->qp_num, *a, mask});
          return 0;
        }));
    ON_CALL(m, PostSend(_, _, _))
        .WillByDefault(Invoke([this](ibv_qp*, ibv_send_wr* wr, ibv_send_wr**) {
          std::lock_guard<std::mutex> lk(mu);
          post_send_calls++;
          std::vector<SentWr> chain;
          for (; wr != nullptr; wr = wr->next) {
            SentWr s{*wr, std::vector<ibv_sge>(wr->sg_list, wr->sg_list + wr->num_sge)};
            s.wr.next = nullptr;
            s.wr.sg_list = nullptr;
            chain.push_back(s);
          }
          sent.push_back(chain);
          return 0;
        }));
    auto capture_recv = [this](ibv_recv_wr* wr) {
      std::lock_guard<std::mutex> lk(mu);
      std::vector<RecvWr> chain;
      for (; wr != nullptr; wr = wr->next) {
        RecvWr r{*wr, std::vector<ibv_sge>(wr->sg_list, wr->sg_list + wr->num_sge)};
        r.wr.next = nullptr;
        r.wr.sg_list = nullptr;
        chain.push_back(r);
      }
      recvs.push_back(chain);
      return 0;
    };
    ON_CALL(m, PostRecv(_, _, _))
        .WillByDefault(Invoke(
            [capture_recv](ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr**) { return capture_recv(wr); }));
    ON_CALL(m, PostSrqRecv(_, _, _))
        .WillByDefault(Invoke(
            [capture_recv](ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr**) { return capture_recv(wr); }));
    ON_CALL(m, PollCq(_, _, _)).WillByDefault(Invoke([this](ibv_cq* cq, int n, ibv_wc* wc) {
      std::lock_guard<std::mutex> lk(mu);
      auto& q = hw[cq];
      int k = 0;
      while (k < n && !q.empty()) {
        wc[k++] = q.front();
        q.pop_front();
      }
      return k;
    }));
  }
  ~FakeVerbs() {
    if (channel_pipe[0] >= 0) ::close(channel_pipe[0]);
    if (channel_pipe[1] >= 0) ::close(channel_pipe[1]);
  }

  // Queues a hardware completion on `cq`.
  void Complete(ibv_cq* cq, uint32_t qp_num, uint64_t wr_id, ibv_wc_status status,
                uint32_t byte_len = 0, ibv_wc_opcode opcode = IBV_WC_RDMA_WRITE) {
    std::lock_guard<std::mutex> lk(mu);
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = status;
    wc.qp_num = qp_num;
    wc.byte_len = byte_len;
    wc.opcode = opcode;
    hw[cq].push_back(wc);
  }
  ibv_cq* LastCq() {
    std::lock_guard<std::mutex> lk(mu);
    return &cqs.back();
  }
  std::vector<ModifyCall> ModifiesOf(uint32_t qp_num) {
    std::lock_guard<std::mutex> lk(mu);
    std::vector<ModifyCall> out;
    for (const auto& c : modifies) {
      if (c.qp_num == qp_num) out.push_back(c);
    }
    return out;
  }

  std::shared_ptr<::testing::NiceMock<MockVerbsApi>> api;
  std::mutex mu;
  ibv_device devices[2] = {};
  ibv_device* list[3] = {};
  ibv_context ctx{};
  ibv_device_attr dev_attr{};
  ibv_port_attr port_attr{};
  ibv_gid gid{};
  ibv_comp_channel channel{};
  int channel_pipe[2] = {-1, -1};
  std::deque<ibv_pd> pds;
  std::deque<ibv_mr> mrs;
  std::deque<ibv_cq> cqs;
  std::deque<ibv_srq> srqs;
  std::deque<ibv_qp> qps;
  uint32_t next_qpn = 0x100;
  uint32_t next_key = 0x1000;
  std::vector<ModifyCall> modifies;
  std::vector<ibv_qp_init_attr> qp_inits;
  int post_send_calls = 0;
  std::vector<std::vector<SentWr>> sent;
  std::vector<std::vector<RecvWr>> recvs;
  std::map<ibv_cq*, std::deque<ibv_wc>> hw;
};

}  // namespace asymnvm::fabric::verbs
