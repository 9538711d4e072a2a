// Fixture for verbs connection tests: one mocked device (FakeVerbs), a PD, a registered buffer,
// CQs, and client/server connections joined through the real bootstrap over unix:// sockets.
// Test-only header.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "fabric/verbs/mock_verbs_api.h"
#include "fabric/verbs/verbs_fabric.h"
#include "fabric/verbs/verbs_internal.h"

namespace asymnvm::fabric::verbs {

inline std::string TestSocketAddress() {
  static std::atomic<int> n{0};
  return "unix:///tmp/asymnvm-verbs-test-" + std::to_string(::getpid()) + "-" +
         std::to_string(n.fetch_add(1)) + ".sock";
}

// std::span has no initializer-list constructor: these take braced lists.
inline Status PostList(Connection* c, std::vector<WorkRequest> v) { return c->Post(v); }
inline Status RecvList(Connection* c, std::vector<RecvRequest> v) { return c->PostRecv(v); }
inline Status SrqList(SharedReceiveQueue* s, std::vector<RecvRequest> v) { return s->PostRecv(v); }

class VerbsConnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = OpenVerbsFabricWithApi(options_, fake_.api);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fabric_ = std::move(*f);
    auto pd = fabric_->AllocPd();
    ASSERT_TRUE(pd.ok());
    pd_ = std::move(*pd);
    auto mr = pd_->RegisterMemory(buf_, sizeof(buf_), MemoryRegionOptions{kAllRemote});
    ASSERT_TRUE(mr.ok());
    mr_ = std::move(*mr);
    auto scq = fabric_->CreateCq({});
    ASSERT_TRUE(scq.ok());
    scq_ = std::move(*scq);
    auto rcq = fabric_->CreateCq({});
    ASSERT_TRUE(rcq.ok());
    rcq_ = std::move(*rcq);
  }

  ConnectionOptions Options() const {
    ConnectionOptions o;
    o.send_cq = scq_.get();
    o.recv_cq = rcq_.get();
    o.timeout = std::chrono::milliseconds(3000);
    return o;
  }

  // Joins a client and a server connection on the same mocked device. Returns the client's
  // status; the server's is in *server_status.
  Status ConnectPair(const ConnectionOptions& copt, const ConnectionOptions& sopt,
                     Status* server_status = nullptr, Fabric* server_fabric = nullptr,
                     ProtectionDomain* server_pd = nullptr) {
    Fabric* sf = server_fabric != nullptr ? server_fabric : fabric_.get();
    ProtectionDomain* spd = server_pd != nullptr ? server_pd : pd_.get();
    auto l = sf->Listen(spd, TestSocketAddress());
    if (!l.ok()) return l.status();
    listener_ = std::move(*l);
    Status sst;
    std::thread t([&] {
      auto s = listener_->Accept(sopt);
      if (s.ok()) {
        server_ = std::move(*s);
      } else {
        sst = s.status();
      }
    });
    auto c = fabric_->Connect(pd_.get(), listener_->address(), copt);
    t.join();
    if (server_status != nullptr) *server_status = sst;
    if (!c.ok()) return c.status();
    client_ = std::move(*c);
    return Status::Ok();
  }
  void Connect() {
    Status st = ConnectPair(Options(), Options());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_NE(server_, nullptr);
  }

  size_t PollAll(CompletionQueue* cq, Completion* out, size_t n) {
    auto r = cq->Poll(std::span<Completion>(out, n));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  static uint32_t Qpn(Connection* c) { return static_cast<VerbsConnection*>(c)->core()->qpn(); }
  static ibv_cq* HwCq(CompletionQueue* cq) { return static_cast<VerbsCq*>(cq)->cq(); }
  ModifyCall ModifyTo(Connection* c, ibv_qp_state state) {
    for (const auto& m : fake_.ModifiesOf(Qpn(c))) {
      if (m.attr.qp_state == state) return m;
    }
    ADD_FAILURE() << "no ModifyQp to state " << state;
    return {};
  }
  // hardware wr_id of the k-th request of the n-th ibv_post_send chain
  uint64_t SentId(size_t chain, size_t k) { return fake_.sent.at(chain).at(k).wr.wr_id; }

  FakeVerbs fake_;
  FabricOptions options_;
  alignas(64) uint8_t buf_[8192] = {};
  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<ProtectionDomain> pd_;
  std::unique_ptr<MemoryRegion> mr_;
  std::unique_ptr<CompletionQueue> scq_;
  std::unique_ptr<CompletionQueue> rcq_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Connection> server_;
};

}  // namespace asymnvm::fabric::verbs
