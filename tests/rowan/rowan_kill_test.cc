// A Rowan receiver *process* (rowan_test_receiver) is killed with SIGKILL mid-stream at seeded
// moments and restarted on the same pool file, while sender threads in this process append
// numbered entries and record the ones acknowledged. At the end the b-log is recovered in this
// process and every recovered segment scanned: every acknowledged entry is found exactly once,
// each sender's entries appear in its order, and nothing torn is yielded (every yielded payload
// matches what its sender wrote for that version).
//
// Rounds: ASYMNVM_ROWAN_KILL_ROUNDS (default 3; ctest's rowan_kill_long runs 30).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
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

constexpr size_t kSegment = 64 * 1024;

// Deterministic payload of (owner, version): its size and every byte derive from both.
std::vector<uint8_t> Payload(uint16_t owner, uint64_t version) {
  std::mt19937_64 rng(owner * 1000003ull + version);
  size_t len = 16 + rng() % 600;
  if (version % 17 == 0) len = 5000 + rng() % 3000;  // multi-block (MTU 4096)
  std::vector<uint8_t> p(len);
  for (auto& b : p) b = static_cast<uint8_t>(rng());
  return p;
}

// The receiver child: started with a pipe on its stdout (for "ADDR ...") and one on its stdin
// (closing it asks for a clean exit; SIGKILL is what the test uses).
class ReceiverProcess {
 public:
  ~ReceiverProcess() { Kill(); }

  // Starts the child and waits (up to 10 s) for its address.
  testing::AssertionResult Start(const std::string& pool) {
    int out[2], in[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) {
      return testing::AssertionFailure() << "pipe";
    }
    const std::string seg = std::to_string(kSegment);  // no allocation after fork
    pid_ = fork();
    if (pid_ < 0) return testing::AssertionFailure() << "fork";
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(in[0], 0);
      execl(ASYMNVM_ROWAN_TEST_RECEIVER, "rowan_test_receiver", pool.c_str(), seg.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    close(in[0]);
    out_ = out[0];
    in_ = in[1];
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (line.find('\n') == std::string::npos) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count());
      if (left <= 0) return testing::AssertionFailure() << "receiver printed no address";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) continue;
      char buf[256];
      ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) return testing::AssertionFailure() << "receiver exited before its address";
      line.append(buf, static_cast<size_t>(n));
    }
    if (line.rfind("ADDR ", 0) != 0) return testing::AssertionFailure() << "bad line: " << line;
    address_ = line.substr(5, line.find('\n') - 5);
    return testing::AssertionSuccess();
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    close(out_);
    close(in_);
  }
  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1, in_ = -1;
  std::string address_;
};

// What the senders share with the test's main thread: the receiver's current address and
// generation; senders reconnect when the generation moves on.
struct Directory {
  std::mutex mu;
  std::condition_variable cv;
  std::string address;
  uint64_t generation = 0;
  bool done = false;
};

int Rounds() {
  const char* v = std::getenv("ASYMNVM_ROWAN_KILL_ROUNDS");
  int n = v ? std::atoi(v) : 3;
  return n > 0 ? n : 3;
}

TEST(RowanReceiverKill, AcknowledgedEntriesSurviveSigkillAndRestart) {
  fs::path dir = fs::temp_directory_path() / ("asymnvm_rowan_kill_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string pool_path = (dir / "blog.pool").string();
  fs::remove(pool_path);

  constexpr int kSenders = 4;
  const int rounds = Rounds();
  std::mt19937_64 rng(20231122);

  auto tx_fabric = fabric::Fabric::Open({});
  ASSERT_TRUE(tx_fabric.ok());
  auto tx_pd = (*tx_fabric)->AllocPd();
  ASSERT_TRUE(tx_pd.ok());

  Directory d;
  ReceiverProcess rx;
  ASSERT_TRUE(rx.Start(pool_path));
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.address = rx.address();
    d.generation = 1;
  }

  std::vector<std::vector<uint64_t>> acked(kSenders);  // per sender, in order
  std::vector<uint64_t> failures(kSenders, 0);
  std::atomic<uint64_t> landed{0};  // read by the killer: it kills after progress, not time
  std::vector<std::thread> senders;
  for (int s = 0; s < kSenders; s++) {
    senders.emplace_back([&, s] {
      const uint16_t owner = static_cast<uint16_t>(s + 1);
      uint64_t version = 1;
      uint64_t seen_gen = 0;
      std::unique_ptr<Sender> sender;
      while (true) {
        std::string address;
        {
          std::unique_lock<std::mutex> lock(d.mu);
          d.cv.wait(lock, [&] { return d.done || d.generation != seen_gen || sender != nullptr; });
          if (d.done) return;
          if (sender == nullptr || d.generation != seen_gen) {
            seen_gen = d.generation;
            address = d.address;
            sender.reset();
          }
        }
        if (sender == nullptr) {
          SenderOptions so;
          so.fabric = tx_fabric->get();
          so.pd = tx_pd->get();
          so.address = address;
          so.timeout = std::chrono::milliseconds(2000);
          so.rnr_retry = 7;
          auto c = Sender::Connect(so);
          if (!c.ok()) {  // receiver already gone again: wait for the next generation
            std::unique_lock<std::mutex> lock(d.mu);
            d.cv.wait_for(lock, std::chrono::milliseconds(50));
            continue;
          }
          sender = std::move(c).value();
        }
        auto p = Payload(owner, version);
        Status st = sender->Append({.type = 7, .owner = owner, .version = version}, p);
        if (st.ok()) {
          acked[s].push_back(version);
          landed.fetch_add(1);
        } else {
          failures[s]++;
          sender.reset();  // reconnect (to the restarted receiver)
          std::unique_lock<std::mutex> lock(d.mu);
          d.cv.wait_for(lock, std::chrono::milliseconds(20));
        }
        version++;  // a failed version is never reused: it may or may not have landed
      }
    });
  }

  for (int round = 0; round < rounds; round++) {
    // Seeded moment: once the senders have landed a seeded number of entries on this
    // generation (progress, not elapsed time: a slow machine only takes longer), kill -9
    // mid-stream.
    const uint64_t want = landed.load() + 1 + rng() % 60;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (landed.load() < want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (landed.load() < want) {  // not ASSERT: the senders must be stopped and joined below
      ADD_FAILURE() << "round " << round << ": no entry landed in 120 s";
      break;
    }
    rx.Kill();
    ASSERT_TRUE(rx.Start(pool_path)) << "restart " << round;
    std::lock_guard<std::mutex> lock(d.mu);
    d.address = rx.address();
    d.generation++;
    d.cv.notify_all();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.done = true;
    d.cv.notify_all();
  }
  for (auto& t : senders) t.join();
  rx.Kill();  // the last one dies mid-stream too (no clean shutdown)

  // Recover in this process and scan every recovered segment in landing order.
  auto pool =
      pm::Pool::Open(pool_path, {.mode = pm::PersistMode::kFlushOnly, .layout = "rowan-test"});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  auto rx_fabric = fabric::Fabric::Open({});
  ASSERT_TRUE(rx_fabric.ok());
  auto rx_pd = (*rx_fabric)->AllocPd();
  ASSERT_TRUE(rx_pd.ok());
  ReceiverOptions ro;
  ro.fabric = rx_fabric->get();
  ro.pd = rx_pd->get();
  ro.area = (*pool)->user_base();
  ro.area_size = (*pool)->user_size() / 4096 * 4096;
  ro.persister = (*pool)->persister();
  ro.segment_size = kSegment;
  auto recovered = Receiver::Open(ro);
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  EXPECT_GT((*recovered)->stats().recovered_segments, 0u);

  std::map<uint16_t, std::vector<uint64_t>> found;
  uint64_t bad_payloads = 0;
  Scanner scanner;
  while (true) {
    auto seg = (*recovered)->NextUsed(std::chrono::milliseconds(200));
    if (!seg.ok()) break;
    scanner.ScanSegment(seg->bytes, seg->post_seq, [&](const ScannedEntry& e) {
      found[e.meta.owner].push_back(e.meta.version);
      auto want = Payload(e.meta.owner, e.meta.version);
      if (e.meta.type != 7 || want.size() != e.payload.size() ||
          !std::equal(want.begin(), want.end(), e.payload.begin())) {
        bad_payloads++;
      }
    });
  }
  scanner.Finish();
  (*recovered)->Close();

  EXPECT_EQ(bad_payloads, 0u) << "a yielded entry differs from what its sender wrote";
  uint64_t total_acked = 0, total_failures = 0;
  for (int s = 0; s < kSenders; s++) {
    const uint16_t owner = static_cast<uint16_t>(s + 1);
    const auto& f = found[owner];
    // Per-sender order: versions strictly increase in landing order (so also no duplicates).
    for (size_t i = 1; i < f.size(); i++) {
      ASSERT_LT(f[i - 1], f[i]) << "sender " << owner << " out of order at " << i;
    }
    std::set<uint64_t> have(f.begin(), f.end());
    for (uint64_t v : acked[s]) {
      ASSERT_TRUE(have.count(v)) << "sender " << owner << " version " << v
                                 << " was acknowledged but is lost";
    }
    total_acked += acked[s].size();
    total_failures += failures[s];
  }
  EXPECT_GT(total_acked, 0u);
  RecordProperty("acknowledged", std::to_string(total_acked));
  RecordProperty("failed_appends", std::to_string(total_failures));
  std::printf(
      "rounds %d: %llu acknowledged, %llu failed appends, %llu corrupt runs, %llu incomplete\n",
      rounds, static_cast<unsigned long long>(total_acked),
      static_cast<unsigned long long>(total_failures),
      static_cast<unsigned long long>(scanner.report().corrupt_runs),
      static_cast<unsigned long long>(scanner.report().incomplete_entries));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace asymnvm::rowan
