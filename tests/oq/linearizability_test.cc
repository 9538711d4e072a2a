// Linearizability of the OQ KV under all three policies: concurrent clients (separate processes'
// worth of Client objects, several threads each) issue nilext sets and non-nilext gets on a few
// keys; invocation/response times are recorded and the history is checked
// (tests/common/linearizability.h). Seeded; values are unique per write.
#include "tests/common/linearizability.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "tests/oq/oq_test_util.h"

namespace asymnvm::oq {
namespace {

using testutil::ConnectClient;
using testutil::KvServer;
using testutil::Side;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class OqLinearizability : public ::testing::TestWithParam<Policy> {};

TEST_P(OqLinearizability, ConcurrentSetsAndGetsOnFewKeys_HistoryIsLinearizable) {
  ServerOptions o;
  o.workers = 2;
  o.buffer_size = 4096;
  o.buffers_per_worker = 4;
  o.max_request = 1024;
  o.policy = GetParam();
  KvServer srv(o);
  ASSERT_NE(srv.server, nullptr);
  constexpr int kClients = 3, kThreads = 2, kOps = 150;
  constexpr uint64_t kKeys = 3;
  std::mutex mu;
  std::vector<testing::RegisterOp> history;
  std::vector<Side> sides;
  for (int i = 0; i < kClients; i++) sides.push_back(Side::Open());
  std::vector<std::thread> ts;
  for (int ci = 0; ci < kClients; ci++) {
    ts.emplace_back([&, ci] {
      auto c = ConnectClient(sides[ci], srv.server->address(), 8);
      if (c == nullptr) return;
      std::vector<std::thread> inner;
      for (int t = 0; t < kThreads; t++) {
        inner.emplace_back([&, t] {
          int id = ci * kThreads + t;
          std::mt19937_64 rng(1000 + id);
          std::vector<testing::RegisterOp> mine;
          for (int i = 0; i < kOps; i++) {
            testing::RegisterOp op;
            op.client = id;
            op.key = 1 + rng() % kKeys;
            op.is_write = rng() % 2 == 0;
            op.invoke_ns = NowNs();
            Status st;
            if (op.is_write) {
              op.value = uint64_t(id + 1) * 1'000'000 + i + 1;  // unique per write
              st = testutil::Set(*c, op.key, op.value);
            } else {
              op.value = testutil::Get(*c, op.key, &st);
            }
            op.response_ns = st.ok() ? NowNs() : testing::kNoResponse;
            if (!st.ok() && !op.is_write) continue;
            mine.push_back(op);
            if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
          }
          std::lock_guard<std::mutex> lock(mu);
          history.insert(history.end(), mine.begin(), mine.end());
        });
      }
      for (auto& t : inner) t.join();
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_EQ(history.size(), size_t{kClients} * kThreads * kOps);
  Status st = testing::CheckRegisterHistory(history, 0);
  EXPECT_TRUE(st.ok()) << st.ToString();
  // Negative control: a read of a value nobody wrote must be rejected by the checker.
  auto bad = history;
  bad.push_back({99, 1, false, 424242, NowNs(), NowNs() + 1});
  EXPECT_FALSE(testing::CheckRegisterHistory(bad, 0).ok());
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, OqLinearizability,
                         ::testing::Values(Policy::kOq, Policy::kRawRpc, Policy::kDeferred),
                         [](const auto& info) { return std::string(PolicyName(info.param)); });

}  // namespace
}  // namespace asymnvm::oq
