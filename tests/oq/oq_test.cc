// OQ server + client in one process (two soft NICs): wire format, options, the three policies,
// client-side delegation, bad input, RNR back-pressure.
#include "fabric/oq/oq.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "common/checksum.h"
#include "common/coding.h"
#include "fabric/oq/wire.h"
#include "tests/oq/oq_test_util.h"

namespace asymnvm::oq {
namespace {

using testutil::ConnectClient;
using testutil::KvServer;
using testutil::Side;

TEST(OqWire, RequestRoundTrip_AndEveryCorruptionDetected) {
  std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
  std::vector<uint8_t> b;
  EncodeRequest({0, 0, 7, true, 42, 9, 3}, payload, &b);
  ASSERT_EQ(b.size(), kRequestHeaderSize + 5);
  auto h = ValidateRequest(b, 1024);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->type, 7);
  EXPECT_TRUE(h->nilext);
  EXPECT_EQ(h->client_id, 42u);
  EXPECT_EQ(h->seq, 9u);
  EXPECT_EQ(h->worker, 3u);
  EXPECT_EQ(h->size, b.size());
  for (size_t i = 0; i < b.size(); i++) {
    auto c = b;
    c[i] ^= 0x10;
    EXPECT_FALSE(ValidateRequest(c, 1024).ok()) << "flip at byte " << i;
  }
  EXPECT_EQ(ValidateRequest({b.data(), 20}, 1024).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ValidateRequest({b.data(), b.size() - 1}, 1024).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(ValidateRequest(b, 44).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> zeros(256, 0);
  EXPECT_FALSE(ValidateRequest(zeros, 1024).ok());
}

// Found by oq_wire_fuzz: a response with an unknown byte 14 (now the sub-code) or its reserved
// word set validated, so it did not re-encode to its own bytes. An unknown sub-code, a sub-code on
// an OK response and a non-zero reserved word are all rejected.
// The error codec: code and sub-code cross in the header, the message (cut at kMaxErrorMessage) as
// context. Every sub-code round-trips with every code it is used with; errno and retryable stay
// behind (a response proves the request landed).
TEST(OqWire, ErrorStatusRoundTripsCodeAndSubCode) {
  for (int sc = 0; sc <= static_cast<int>(kLastStatusSubCode); sc++) {
    for (StatusCode code :
         {StatusCode::kUnavailable, StatusCode::kFailedPrecondition, StatusCode::kCorruption,
          StatusCode::kInvalidArgument, StatusCode::kAborted}) {
      const auto sub = static_cast<StatusSubCode>(sc);
      const Status sent = Status(code, "shard 4 lives elsewhere", 5, true).WithSubCode(sub);
      std::vector<uint8_t> b;
      wire::EncodeErrorResponse(sent, 31, 2, &b);
      auto h = wire::ValidateResponse(b);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_EQ(h->seq, 31u);
      EXPECT_EQ(h->worker, 2u);
      const Status got = wire::DecodeErrorStatus(
          *h,
          std::span<const uint8_t>(b).subspan(kResponseHeaderSize, h->size - kResponseHeaderSize));
      EXPECT_EQ(got.code(), code);
      EXPECT_EQ(got.subcode(), sub);
      EXPECT_EQ(got.message(), "oq server: shard 4 lives elsewhere");
      EXPECT_EQ(got.sys_errno(), 0);
      EXPECT_FALSE(got.retryable());
    }
  }
  // A long message is cut; an OK Status is never sent as a success.
  std::vector<uint8_t> b;
  wire::EncodeErrorResponse(Status::Internal(std::string(5000, 'x')), 1, 0, &b);
  auto h = wire::ValidateResponse(b);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->size, kResponseHeaderSize + wire::kMaxErrorMessage);
  b.clear();
  wire::EncodeErrorResponse(Status::Ok(), 1, 0, &b);
  h = wire::ValidateResponse(b);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->code, StatusCode::kInternal);
}

TEST(OqWire, ResponseWithUnknownSubCodeOrReservedBitsIsRejected) {
  wire::ResponseHeader h;
  h.code = StatusCode::kNotFound;
  h.seq = 9;
  std::vector<uint8_t> b;
  const uint8_t body[] = {'n', 'o'};
  wire::EncodeResponse(h, body, &b);
  auto ok = wire::ValidateResponse(b);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->seq, 9u);
  auto reseal = [](std::vector<uint8_t> m) {
    PutLe64(m.data(), Hash64(m.data() + 8, m.size() - 8));
    return m;
  };
  auto flags = b;
  flags[14] = static_cast<uint8_t>(kLastStatusSubCode) + 1;
  EXPECT_EQ(wire::ValidateResponse(reseal(flags)).status().code(), StatusCode::kCorruption);
  flags[14] = 0xFF;
  EXPECT_EQ(wire::ValidateResponse(reseal(flags)).status().code(), StatusCode::kCorruption);
  std::vector<uint8_t> ok_response;
  wire::EncodeResponse(wire::ResponseHeader{}, body, &ok_response);
  ok_response[14] = static_cast<uint8_t>(StatusSubCode::kFenced);
  EXPECT_EQ(wire::ValidateResponse(reseal(ok_response)).status().code(), StatusCode::kCorruption);
  auto reserved = b;
  reserved[29] = 0x10;
  EXPECT_EQ(wire::ValidateResponse(reseal(reserved)).status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(wire::ValidateResponse(reseal(b)).ok());
}

TEST(OqWire, PolicyNamesAndWords) {
  for (auto p : {Policy::kOq, Policy::kRawRpc, Policy::kDeferred}) {
    auto q = ParsePolicy(PolicyName(p));
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(*q, p);
  }
  EXPECT_EQ(ParsePolicy("fast").status().code(), StatusCode::kInvalidArgument);
  uint64_t v = 0;
  EXPECT_TRUE(wire::DecodeWord(wire::EncodeWord(0x123456789abcdeULL), &v));
  EXPECT_EQ(v, 0x123456789abcdeULL);
  EXPECT_FALSE(wire::DecodeWord(wire::EncodeWord(5) ^ 1, &v));
  EXPECT_FALSE(wire::DecodeWord(0, &v));
  EXPECT_EQ(DurableAreaSize(2, 4, 65536), 4096u + 8 * 65536u);
}

TEST(OqServer, BadOptions_RejectedBeforeAcquiringAnything) {
  Side side = Side::Open();
  auto handler = [](const RequestContext&, std::span<const uint8_t>, std::vector<uint8_t>*) {
    return Status::Ok();
  };
  ServerOptions o;
  EXPECT_EQ(Server::Start(o, handler).status().code(), StatusCode::kInvalidArgument);
  o.fabric = side.fabric.get();
  o.pd = side.pd.get();
  EXPECT_EQ(Server::Start(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  auto bad = [&](auto mutate) {
    ServerOptions x = o;
    mutate(x);
    return Server::Start(x, handler).status().code();
  };
  EXPECT_EQ(bad([](ServerOptions& x) { x.workers = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](ServerOptions& x) { x.buffers_per_worker = 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](ServerOptions& x) { x.buffer_size = 5000; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](ServerOptions& x) { x.stride = 96; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](ServerOptions& x) { x.max_request = 1u << 20; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](ServerOptions& x) { x.durable = true; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](ServerOptions& x) {
              x.workers = 3;
              x.worker_listen_addresses = {"tcp://127.0.0.1:0"};  // one short
            }),
            StatusCode::kInvalidArgument);
  ClientOptions co;
  EXPECT_EQ(Client::Connect(co).status().code(), StatusCode::kInvalidArgument);
}

class OqPolicy : public ::testing::TestWithParam<Policy> {};

TEST_P(OqPolicy, SetsThenGets_ReadYourWritesAcrossWorkers) {
  ServerOptions o;
  o.workers = 3;
  o.buffer_size = 4096;
  o.buffers_per_worker = 2;
  o.max_request = 1024;
  o.policy = GetParam();
  KvServer srv(o);
  ASSERT_NE(srv.server, nullptr);
  Side cs = Side::Open();
  auto c = ConnectClient(cs, srv.server->address());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->server().workers, 3u);
  EXPECT_EQ(c->server().policy, GetParam());
  for (uint64_t k = 1; k <= 300; k++) {
    ASSERT_TRUE(testutil::Set(*c, k, k * 10).ok());
    // Case 3 of the OQ proof: a get invoked after the set's commit sees it.
    ASSERT_EQ(testutil::Get(*c, k), k * 10);
  }
  EXPECT_EQ(testutil::Get(*c, 100000), 0u);
  auto st = srv.server->stats();
  EXPECT_EQ(st.executed, 601u);
  uint64_t responses = 0, retired = 0;
  for (auto& w : st.workers) {
    responses += w.responses;
    retired += w.buffers_retired;
  }
  EXPECT_EQ(responses, GetParam() == Policy::kOq ? 301u : 601u);
  EXPECT_GT(retired, 0u);  // ~200 × 64 B per worker > 4 KiB: buffers were re-posted
}

// Workers beyond the first listen where the options say (a firewall can name every port), and
// clients reach them there.
TEST(OqServer, WorkerListenAddresses_EveryWorkerListensWhereToldAndServes) {
  const std::string base = "/tmp/asymnvm-oq-test-" + std::to_string(::getpid());
  ServerOptions o;
  o.workers = 3;
  o.listen_address = "unix://" + base + ".w0";
  o.worker_listen_addresses = {"unix://" + base + ".first", "unix://" + base + ".second",
                               "unix://" + base + ".unused"};  // more than needed: ignored
  KvServer srv(o);
  ASSERT_NE(srv.server, nullptr);
  EXPECT_TRUE(std::filesystem::exists(base + ".first"));
  EXPECT_TRUE(std::filesystem::exists(base + ".second"));
  EXPECT_FALSE(std::filesystem::exists(base + ".unused"));
  EXPECT_FALSE(std::filesystem::exists(base + ".w0.w1"));  // not the derived address
  Side cs = Side::Open();
  auto c = ConnectClient(cs, srv.server->address());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->server().workers, 3u);
  for (uint64_t k = 1; k <= 60; k++) ASSERT_TRUE(testutil::Set(*c, k, k + 1).ok());
  for (uint64_t k = 1; k <= 60; k++) EXPECT_EQ(testutil::Get(*c, k), k + 1);
  uint64_t busy = 0;
  for (const auto& w : srv.server->stats().workers) busy += w.executed > 0 ? 1 : 0;
  EXPECT_EQ(busy, 3u);  // keys spread over the three workers, each reached at its address
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, OqPolicy,
                         ::testing::Values(Policy::kOq, Policy::kRawRpc, Policy::kDeferred),
                         [](const auto& info) { return std::string(PolicyName(info.param)); });

TEST(OqClient, ThreadsShareOneClient_EveryRequestDeliveredToItsThread) {
  ServerOptions o;
  o.workers = 2;
  KvServer srv(o);
  ASSERT_NE(srv.server, nullptr);
  Side cs = Side::Open();
  auto c = ConnectClient(cs, srv.server->address(), 8);
  ASSERT_NE(c, nullptr);
  constexpr int kThreads = 8, kOps = 150;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      for (int i = 1; i <= kOps; i++) {
        uint64_t key = uint64_t(t) * 1000 + i % 7;
        if (!testutil::Set(*c, key, i).ok()) failures++;
        Status st;
        if (testutil::Get(*c, key, &st) != uint64_t(i)) failures++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto ctr = c->counters();
  // Every request is one SEND; flat combining may put several in one doorbell.
  EXPECT_EQ(ctr.sends, uint64_t{kThreads} * kOps * 2);
  EXPECT_LE(ctr.round_trips, ctr.sends);
  EXPECT_EQ(srv.server->stats().connections, 2u);  // one per worker, not per thread
}

// SubmitMany: requests to every worker posted together, each committed; requests to one key keep
// their order (the last value wins); one doorbell per connection per round, one FLUSH each.
TEST(OqClient, SubmitMany_AllCommitInOrderWithFewDoorbells) {
  ServerOptions o;
  o.workers = 2;
  KvServer srv(o);
  ASSERT_NE(srv.server, nullptr);
  Side cs = Side::Open();
  auto c = ConnectClient(cs, srv.server->address(), 32);
  ASSERT_NE(c, nullptr);
  std::vector<std::vector<uint8_t>> payloads;
  for (uint64_t i = 0; i < 40; i++) payloads.push_back(KvStore::SetPayload(i % 10, i));
  std::vector<Client::Outgoing> reqs;
  for (uint64_t i = 0; i < 40; i++) {
    reqs.push_back({KvStore::WorkerFor(i % 10, 2), kKvSet, payloads[i]});
  }
  const auto before = c->counters();
  std::vector<Status> st = c->SubmitMany(reqs);
  const auto after = c->counters();
  ASSERT_EQ(st.size(), 40u);
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
  for (uint64_t k = 0; k < 10; k++) EXPECT_EQ(testutil::Get(*c, k), 30 + k);  // the last set
  EXPECT_EQ(after.sends - before.sends, 40u);
  // Rounds of half the window (16): 3 rounds, at most one doorbell and one FLUSH per worker each.
  EXPECT_LE(after.round_trips - before.round_trips, 6u);
  EXPECT_LE(after.flushes - before.flushes, 6u);
  // A request to a worker that does not exist fails alone.
  std::vector<Client::Outgoing> bad = {{0, kKvSet, payloads[0]}, {7, kKvSet, payloads[1]}};
  st = c->SubmitMany(bad);
  EXPECT_TRUE(st[0].ok());
  EXPECT_EQ(st[1].code(), StatusCode::kInvalidArgument);
}

// A request made on a connection known to have failed never leaves the client: it fails with the
// connection error marked retryable ("not sent"), so a caller may resend even a non-idempotent
// request elsewhere (kv::Client does: the first PUT after a primary's death is not an "outcome
// unknown" error). A request whose fate is unknown is never marked so.
TEST(OqClient, RequestOnAFailedConnectionIsNotSentAndSaysSo) {
  ServerOptions o;
  o.workers = 1;
  KvServer srv(o);
  ASSERT_NE(srv.server, nullptr);
  Side cs = Side::Open();
  auto c = ConnectClient(cs, srv.server->address(), 8);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(testutil::Set(*c, 1, 1).ok());
  srv.server->Stop();
  srv.server.reset();
  Status first = testutil::Set(*c, 1, 2);  // discovers the failure (sent or not: either)
  ASSERT_FALSE(first.ok());
  for (int i = 0; i < 3; i++) {
    Status again = testutil::Set(*c, 1, 3);
    ASSERT_FALSE(again.ok());
    EXPECT_TRUE(again.code() == StatusCode::kConnectionError ||
                again.code() == StatusCode::kRnrRetryExceeded)
        << again.ToString();
    EXPECT_TRUE(again.retryable()) << again.ToString();
    EXPECT_NE(again.message().find("not sent"), std::string::npos) << again.ToString();
  }
}

TEST(OqBadInput, CorruptShortWrongWorkerUnknownType_ClearErrorsServerKeepsServing) {
  ServerOptions o;
  o.workers = 2;
  KvServer srv(o);
  ASSERT_NE(srv.server, nullptr);
  Side cs = Side::Open();
  auto c = ConnectClient(cs, srv.server->address());
  ASSERT_NE(c, nullptr);
  std::vector<uint8_t> resp;

  // Corrupt non-nilext request: the server answers kCorruption.
  std::vector<uint8_t> raw;
  EncodeRequest({0, 0, kKvGet, false, c->client_id(), c->TEST_NextSeq(0), 0},
                KvStore::KeyPayload(1), &raw);
  raw[raw.size() - 1] ^= 0xFF;
  Status st = c->TEST_CallRaw(0, raw, &resp);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();

  // Wrong worker in the header.
  raw.clear();
  EncodeRequest({0, 0, kKvGet, false, c->client_id(), c->TEST_NextSeq(0), 1},
                KvStore::KeyPayload(1), &raw);
  st = c->TEST_CallRaw(0, raw, &resp);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();

  // Short garbage and a nilext request with a bad checksum: acknowledged by the NIC, rejected and
  // counted by the server, never executed.
  std::vector<uint8_t> junk(20, 0xAB);
  EXPECT_TRUE(c->TEST_SendRaw(0, junk).ok());
  raw.clear();
  EncodeRequest({0, 0, kKvSet, true, c->client_id(), 1, 0}, KvStore::SetPayload(5, 55), &raw);
  raw[3] ^= 1;
  EXPECT_TRUE(c->TEST_SendRaw(0, raw).ok());

  // Unknown type and a bad payload: handler errors reach Call; a failing nilext is counted.
  st = c->Call(0, 99, {}, &resp);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("unknown request type"), std::string::npos) << st.message();
  std::vector<uint8_t> three = {1, 2, 3};
  EXPECT_TRUE(c->Submit(0, kKvSet, three).ok());
  // Oversized payload is refused by the client before sending.
  std::vector<uint8_t> big(c->server().max_request, 0);
  EXPECT_EQ(c->Submit(0, kKvSet, big).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Submit(7, kKvSet, three).code(), StatusCode::kInvalidArgument);

  // Still serving, in order: the get is behind every rejected request in worker 0's queue.
  ASSERT_TRUE(c->Submit(0, kKvSet, KvStore::SetPayload(5, 6)).ok());
  ASSERT_TRUE(c->Call(0, kKvGet, KvStore::KeyPayload(5), &resp).ok());
  EXPECT_EQ(GetLe64(resp.data()), 6u);
  auto s = srv.server->stats();
  EXPECT_EQ(s.workers[0].rejected, 4u);
  EXPECT_EQ(s.workers[0].handler_errors, 2u);
  EXPECT_EQ(srv.kv->Get(5).applied_sets, 1u);  // the corrupt set(5, 55) never ran
}

TEST(OqBackPressure, RnrStormTinyBuffers_NothingLostNothingReordered) {
  // A handler that checks, per sender thread, that sequence numbers arrive gap-free and in order.
  Side ss = Side::Open();
  std::mutex mu;
  std::map<uint64_t, uint64_t> last;  // sender → last seq
  std::atomic<uint64_t> violations{0}, executed{0};
  auto handler = [&](const RequestContext& ctx, std::span<const uint8_t> p,
                     std::vector<uint8_t>* resp) -> Status {
    if (p.size() < 16) return Status::InvalidArgument("short");
    uint64_t sender = GetLe64(p.data()), seq = GetLe64(p.data() + 8);
    std::lock_guard<std::mutex> lock(mu);
    if (last[sender] + 1 != seq) violations++;
    last[sender] = seq;
    executed++;
    if (executed % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (!ctx.nilext) resp->assign(8, 0);
    return Status::Ok();
  };
  ServerOptions o;
  o.fabric = ss.fabric.get();
  o.pd = ss.pd.get();
  o.buffer_size = 4096;
  o.buffers_per_worker = 2;
  o.max_request = 4096;
  auto srv = Server::Start(o, handler);
  ASSERT_TRUE(srv.ok()) << srv.status().ToString();
  constexpr int kClients = 4, kThreads = 3, kOps = 60;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  std::vector<Side> sides;
  for (int i = 0; i < kClients; i++) sides.push_back(Side::Open());
  for (int ci = 0; ci < kClients; ci++) {
    ts.emplace_back([&, ci] {
      auto c = ConnectClient(sides[ci], (*srv)->address(), 8);
      if (c == nullptr) {
        failures++;
        return;
      }
      std::vector<std::thread> inner;
      for (int t = 0; t < kThreads; t++) {
        inner.emplace_back([&, t] {
          uint64_t sender = uint64_t(ci) * 100 + t;
          std::vector<uint8_t> p(1500, 0);  // two requests per 4 KiB buffer
          for (uint64_t s = 1; s <= kOps; s++) {
            PutLe64(p.data(), sender);
            PutLe64(p.data() + 8, s);
            if (!c->Submit(0, 1, p).ok()) failures++;
          }
        });
      }
      for (auto& t : inner) t.join();
      std::vector<uint8_t> r;
      std::vector<uint8_t> p(16, 0);
      PutLe64(p.data(), uint64_t(ci) * 100 + 99);
      PutLe64(p.data() + 8, 1);
      if (!c->Call(0, 1, p, &r).ok()) failures++;  // a barrier: every set before it executed
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_EQ(executed.load(), uint64_t{kClients} * (kThreads * kOps + 1));
  auto st = (*srv)->stats();
  EXPECT_GT(st.rnr_seen, 0u) << "the storm never ran out of receive buffers";
  EXPECT_EQ(st.workers[0].rejected, 0u);
  (*srv)->Stop();
}

}  // namespace
}  // namespace asymnvm::oq
