// Rowan receiver + sender over the soft NIC: many concurrent senders into one b-log.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "fabric/rowan/receiver.h"
#include "fabric/rowan/scanner.h"
#include "fabric/rowan/sender.h"

namespace asymnvm::rowan {
namespace {

namespace fs = std::filesystem;

struct Env {
  std::unique_ptr<fabric::Fabric> rx_fabric, tx_fabric;
  std::unique_ptr<fabric::ProtectionDomain> rx_pd, tx_pd;
  std::unique_ptr<pm::Pool> pool;
  std::string path;
};

std::string TempPool(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("asymnvm_rowan_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  fs::remove(p);
  return p.string();
}

Env MakeEnv(const std::string& name, bool crash_sim) {
  Env e;
  auto rf = fabric::Fabric::Open({});
  auto tf = fabric::Fabric::Open({});
  EXPECT_TRUE(rf.ok() && tf.ok());
  e.rx_fabric = std::move(rf).value();
  e.tx_fabric = std::move(tf).value();
  e.rx_pd = std::move(e.rx_fabric->AllocPd()).value();
  e.tx_pd = std::move(e.tx_fabric->AllocPd()).value();
  e.path = TempPool(name);
  auto pool = pm::Pool::Create(e.path, 8u << 20,
                               {.mode = pm::PersistMode::kFlushOnly, .crash_sim = crash_sim});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  e.pool = std::move(pool).value();
  return e;
}

ReceiverOptions RxOptions(Env& e, const std::string& address) {
  ReceiverOptions o;
  o.fabric = e.rx_fabric.get();
  o.pd = e.rx_pd.get();
  o.area = e.pool->user_base();
  o.area_size = e.pool->user_size() / 4096 * 4096;
  o.persister = e.pool->persister();
  o.listen_address = address;
  o.segment_size = 256 * 1024;
  o.mtu = 1024;
  o.grace = std::chrono::microseconds(500);
  return o;
}

// Payload: sender id, sequence, and filler derived from both.
std::vector<uint8_t> Record(uint16_t sender, uint64_t seq, size_t len) {
  std::vector<uint8_t> v(len);
  std::mt19937_64 rng(sender * 1000003ull + seq);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class RowanReceiverTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RowanReceiverTest, ConcurrentSendersEveryAckedEntryFoundOnceInSenderOrder) {
  Env e = MakeEnv("concurrent", false);
  auto rx = Receiver::Open(RxOptions(e, GetParam()));
  ASSERT_TRUE(rx.ok()) << rx.status().ToString();
  const int kSenders = 6;
  const uint64_t kPerSender = 400;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int s = 0; s < kSenders; s++) {
    threads.emplace_back([&, s] {
      auto tx = Sender::Connect(
          {.fabric = e.tx_fabric.get(), .pd = e.tx_pd.get(), .address = (*rx)->address()});
      if (!tx.ok()) {
        ADD_FAILURE() << tx.status().ToString();
        failures++;
        return;
      }
      for (uint64_t i = 0; i < kPerSender; i++) {
        // Mostly small records, every 50th larger than the MTU (split into blocks).
        size_t len = (i % 50 == 49) ? 2500 : 24 + (i * 7) % 200;
        Status st = (*tx)->Append({.type = 1, .owner = static_cast<uint16_t>(s), .version = i},
                                  Record(s, i, len));
        if (!st.ok()) {
          ADD_FAILURE() << st.ToString();
          failures++;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  // Every appended entry was acknowledged. Restart the receiver: recovery hands every segment that
  // was using/used to the consumer, and the scan must find each entry exactly once.
  (*rx)->Close();
  auto reopened = Receiver::Open(RxOptions(e, GetParam()));
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  Scanner scanner(1024);
  std::map<uint16_t, uint64_t> next;
  uint64_t found = 0;
  while (true) {
    auto seg = (*reopened)->NextUsed(std::chrono::milliseconds(200));
    if (!seg.ok()) break;
    scanner.ScanSegment(seg->bytes, seg->index, [&](const ScannedEntry& en) {
      EXPECT_EQ(en.meta.version, next[en.meta.owner]) << "sender " << en.meta.owner;
      next[en.meta.owner] = en.meta.version + 1;
      auto want = Record(en.meta.owner, en.meta.version, en.payload.size());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), en.payload.begin()));
      found++;
    });
    ASSERT_TRUE((*reopened)->Commit(seg->index).ok());
  }
  scanner.Finish();
  EXPECT_EQ(found, kSenders * kPerSender);
  EXPECT_EQ(scanner.report().corrupt_runs, 0u);
  EXPECT_EQ(scanner.report().incomplete_entries, 0u);
}

TEST_P(RowanReceiverTest, SegmentsRecycleUnderSustainedLoadAndUsageStaysBounded) {
  Env e = MakeEnv("recycle", false);
  auto rx = Receiver::Open(RxOptions(e, GetParam()));
  ASSERT_TRUE(rx.ok()) << rx.status().ToString();
  const uint32_t segments = (*rx)->stats().segments;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> consumed{0};
  std::thread consumer([&] {
    Scanner scanner(1024);
    while (true) {
      auto seg = (*rx)->NextUsed(std::chrono::milliseconds(100));
      if (!seg.ok()) {
        if (done.load()) break;
        continue;
      }
      scanner.ScanSegment(seg->bytes, seg->index, [&](const ScannedEntry&) { consumed++; });
      ASSERT_TRUE((*rx)->Commit(seg->index).ok());
    }
  });
  auto tx = Sender::Connect(
      {.fabric = e.tx_fabric.get(), .pd = e.tx_pd.get(), .address = (*rx)->address()});
  ASSERT_TRUE(tx.ok()) << tx.status().ToString();
  // Write several times the area's capacity: only possible if segments are recycled.
  const size_t entry = 448;  // 480 B footprint incl. header → 512 B stride footprint
  const uint64_t total = 2ull * segments * (256 * 1024) / 512;
  for (uint64_t i = 0; i < total; i++) {
    ASSERT_TRUE((*tx)->Append({.type = 2, .owner = 1, .version = i}, Record(1, i, entry)).ok())
        << "append " << i;
  }
  done = true;
  consumer.join();
  auto st = (*rx)->stats();
  EXPECT_GT(st.segments_recycled, segments) << "segments must be reused";
  EXPECT_EQ(st.segments, segments);
  EXPECT_GT(consumed.load(), total / 2);
}

INSTANTIATE_TEST_SUITE_P(Transports, RowanReceiverTest,
                         ::testing::Values("inproc://rowan-test", "tcp://127.0.0.1:0"),
                         [](const auto& info) {
                           return info.param.rfind("tcp", 0) == 0 ? std::string("tcp")
                                                                  : std::string("inproc");
                         });

// The control thread does not poll on a timer: with the fallback interval at 60 s, a
// used segment is still handed over (a landing in the next posted segment wakes it) and a committed
// one recycled (Commit wakes it) well within the deadlines.
TEST(RowanReceiver, EventsWakeTheControlThreadWithoutPolling) {
  Env e = MakeEnv("events", false);
  ReceiverOptions o = RxOptions(e, "inproc://rowan-events");
  o.poll_interval = std::chrono::seconds(60);
  o.max_poll_interval = std::chrono::seconds(60);
  auto rx = Receiver::Open(o);
  ASSERT_TRUE(rx.ok()) << rx.status().ToString();
  auto tx = Sender::Connect(
      {.fabric = e.tx_fabric.get(), .pd = e.tx_pd.get(), .address = (*rx)->address()});
  ASSERT_TRUE(tx.ok()) << tx.status().ToString();
  // 448-byte entries take 512 B of a 256 KiB segment: 768 of them fill one and a half.
  for (uint64_t i = 0; i < 768; i++) {
    ASSERT_TRUE((*tx)->Append({.type = 2, .owner = 1, .version = i}, Record(1, i, 448)).ok());
  }
  auto seg = (*rx)->NextUsed(std::chrono::milliseconds(20000));
  ASSERT_TRUE(seg.ok()) << "no used segment without polling: " << seg.status().ToString();
  ASSERT_TRUE((*rx)->Commit(seg->index).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*rx)->stats().segments_recycled == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GE((*rx)->stats().segments_recycled, 1u) << "a committed segment was not recycled";
}

TEST(RowanReceiver, CrashSimulatedPowerLossKeepsEveryAcknowledgedEntry) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    Env e = MakeEnv("crash" + std::to_string(seed), true);
    std::map<uint16_t, uint64_t> acked;
    {
      auto rx = Receiver::Open(RxOptions(e, "inproc://rowan-crash"));
      ASSERT_TRUE(rx.ok()) << rx.status().ToString();
      std::vector<std::thread> threads;
      std::mutex mu;
      for (int s = 0; s < 3; s++) {
        threads.emplace_back([&, s] {
          auto tx = Sender::Connect(
              {.fabric = e.tx_fabric.get(), .pd = e.tx_pd.get(), .address = (*rx)->address()});
          ASSERT_TRUE(tx.ok());
          for (uint64_t i = 0; i < 150; i++) {
            ASSERT_TRUE((*tx)
                            ->Append({.type = 1, .owner = static_cast<uint16_t>(s), .version = i},
                                     Record(s, i, 40 + i % 300))
                            .ok());
            std::lock_guard<std::mutex> lock(mu);
            acked[s] = i + 1;
          }
        });
      }
      for (auto& t : threads) t.join();
      (*rx)->Close();
    }
    uint64_t dropped = 0, kept = 0;
    ASSERT_TRUE(e.pool->SimulateCrash(seed, 0.0, &dropped, &kept).ok());
    auto rx = Receiver::Open(RxOptions(e, "inproc://rowan-crash2"));
    ASSERT_TRUE(rx.ok()) << rx.status().ToString();
    Scanner scanner(1024);
    std::map<uint16_t, uint64_t> next;
    while (true) {
      auto seg = (*rx)->NextUsed(std::chrono::milliseconds(200));
      if (!seg.ok()) break;
      scanner.ScanSegment(seg->bytes, seg->index, [&](const ScannedEntry& en) {
        EXPECT_EQ(en.meta.version, next[en.meta.owner]) << "seed " << seed;
        next[en.meta.owner] = en.meta.version + 1;
      });
    }
    scanner.Finish();
    for (auto [s, n] : acked) EXPECT_EQ(next[s], n) << "sender " << s << " seed " << seed;
    EXPECT_EQ(scanner.report().corrupt_runs, 0u) << "seed " << seed;
  }
}

}  // namespace
}  // namespace asymnvm::rowan
