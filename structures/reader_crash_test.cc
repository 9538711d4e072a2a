// Reader crash (AsymNVM paper §7.2 case 1), with real processes:
// reader processes of a hash table (seqlock readers) and of an MV-BST and an MV-B+tree
// (multi-version readers: no lock, no registration) are SIGKILLed mid-read at seeded moments while
// the writer — this test's thread — keeps updating all three. The writer never waits on a dead
// reader (every update of the phase succeeds), a reader that lives through the kills keeps reading
// whole values (never a torn or mixed one) and sees every key, and nothing leaks: the back-end's
// used blocks after the kills equal those before a second, writer-idle round of kills.
//
// A reader is this binary re-executed with ASYMNVM_READER_CHILD=address|frontend id|kind|stop file;
// it counts its reads in DIR/reads-<id> and exits 0 when the stop file appears, 9 on a bad value.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "backend/backend.h"
#include "common/spawn.h"

namespace asymnvm::structures {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kKeys = 64;
constexpr uint32_t kValueSize = 64;

// Key k at version v: [k u64][v u64][48 bytes of (k * 31 + v)]: a reader can tell a torn value.
Value ValueOf(uint64_t key, uint64_t version) {
  Value v(kValueSize, static_cast<uint8_t>(key * 31 + version));
  std::memcpy(v.data(), &key, 8);
  std::memcpy(v.data() + 8, &version, 8);
  return v;
}

bool Whole(uint64_t key, const Value& v) {
  if (v.size() != kValueSize) return false;
  uint64_t k = 0, ver = 0;
  std::memcpy(&k, v.data(), 8);
  std::memcpy(&ver, v.data() + 8, 8);
  return k == key && v == ValueOf(key, ver);
}

const char* Name(Kind kind) {
  switch (kind) {
    case Kind::kHashTable:
      return "rc-hash";
    case Kind::kMvBst:
      return "rc-mvbst";
    default:
      return "rc-mvbptree";
  }
}

frontend::SessionOptions SessionFor(const std::string& address, uint64_t fe) {
  frontend::SessionOptions o;
  o.backends = {address};
  o.frontend_id = fe;
  o.level = frontend::Level::kRcb;
  o.timeout = std::chrono::milliseconds(30000);
  return o;
}

[[noreturn]] void RunReader(const char* spec) {
  std::string s(spec);
  std::vector<std::string> f;
  for (size_t a = 0, b; (b = s.find('|', a)) != std::string::npos || a < s.size(); a = b + 1) {
    if (b == std::string::npos) b = s.size();
    f.push_back(s.substr(a, b - a));
  }
  if (f.size() != 4) _exit(2);
  const uint64_t fe = std::strtoull(f[1].c_str(), nullptr, 10);
  const Kind kind = static_cast<Kind>(std::strtoul(f[2].c_str(), nullptr, 10));
  auto session = frontend::Session::Open(SessionFor(f[0], fe));
  if (!session.ok()) _exit(3);
  structures::Options mo;
  mo.access = Access::kReader;
  auto map = OpenMap(**session, kind, Name(kind), mo);
  if (!map.ok()) _exit(4);
  const std::string counter = fs::path(f[3]).parent_path() / ("reads-" + f[1]);
  std::mt19937_64 rng(fe);
  for (uint64_t n = 1;; n++) {
    const uint64_t key = rng() % kKeys;
    Value v;
    Status st = (*map)->Get(key, &v);
    if (!st.ok()) {
      std::fprintf(stderr, "reader %llu: key %llu: %s\n", static_cast<unsigned long long>(fe),
                   static_cast<unsigned long long>(key), st.ToString().c_str());
      _exit(8);
    }
    if (!Whole(key, v)) {
      std::fprintf(stderr, "reader %llu: key %llu: torn value\n",
                   static_cast<unsigned long long>(fe), static_cast<unsigned long long>(key));
      _exit(9);
    }
    if (n % 16 == 0) {
      std::ofstream(counter, std::ios::trunc) << n << "\n";
      if (fs::exists(f[3])) _exit(0);
    }
  }
}

uint64_t Reads(const std::string& dir, uint64_t fe) {
  std::ifstream in(dir + "/reads-" + std::to_string(fe));
  uint64_t n = 0;
  in >> n;
  return n;
}

class ReaderCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-readercrash-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    backend::BackendOptions o;
    o.pool_path = dir_ + "/pool";
    o.pool_size = 32ull << 20;
    o.log_segment = 256 * 1024;
    auto be = backend::Backend::Start(o);
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    be_ = std::move(*be);
  }
  void TearDown() override {
    if (be_) be_->Stop();
    be_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  uint64_t BlocksUsed() const {
    auto j = nlohmann::json::parse(be_->StatusJson());
    return j["alloc"]["blocks_used"].get<uint64_t>();
  }
  pid_t StartReader(uint64_t fe, Kind kind, const std::string& stop) {
    const std::string spec = be_->address() + "|" + std::to_string(fe) + "|" +
                             std::to_string(static_cast<uint32_t>(kind)) + "|" + stop;
    asymnvm::SpawnSpec child;
    child.path = "/proc/self/exe";
    child.argv = {"reader"};
    child.env = {{"ASYMNVM_READER_CHILD", spec}};
    std::string error;
    const pid_t pid = asymnvm::SpawnProcess(child, &error);
    EXPECT_GT(pid, 0) << error;
    return pid;
  }
  std::string dir_;
  std::unique_ptr<backend::Backend> be_;
};

TEST_F(ReaderCrashTest, SigkilledReadersStallNothingAndLeakNothing) {
  auto s = frontend::Session::Open(SessionFor(be_->address(), 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Kind kinds[] = {Kind::kHashTable, Kind::kMvBst, Kind::kMvBPlusTree};
  std::vector<std::unique_ptr<Map>> maps;
  std::vector<uint64_t> version(kKeys, 0);
  structures::Options mo;
  mo.value_size = kValueSize;
  for (Kind kind : kinds) {
    auto m = OpenMap(**s, kind, Name(kind), mo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (uint64_t k = 0; k < kKeys; k++) ASSERT_TRUE((*m)->Put(k, ValueOf(k, 0)).ok());
    ASSERT_TRUE((*m)->Sync().ok());
    maps.push_back(std::move(*m));
  }
  auto update = [&](uint64_t key) {
    version[key]++;
    for (auto& m : maps) {
      Status st = m->Put(key, ValueOf(key, version[key]));
      if (!st.ok()) return st;
    }
    return Status::Ok();
  };
  const std::string stop = dir_ + "/stop";
  // One long-lived reader per kind (ids 10..12) through everything.
  std::vector<pid_t> survivors;
  for (size_t i = 0; i < std::size(kinds); i++)
    survivors.push_back(StartReader(10 + i, kinds[i], stop));

  std::mt19937_64 rng(20261124);
  uint64_t writes = 0;
  auto kill_round = [&](int rounds, bool writing) {
    for (int r = 0; r < rounds; r++) {
      const uint64_t fe = 20 + static_cast<uint64_t>(r % 6);  // ids reused: no naming growth
      const Kind kind = kinds[r % std::size(kinds)];
      fs::remove(dir_ + "/reads-" + std::to_string(fe));
      const pid_t pid = StartReader(fe, kind, dir_ + "/never");
      ASSERT_GT(pid, 0);
      // Let it read a little, then kill it at a seeded moment of its read loop.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (Reads(dir_, fe) < 32 && std::chrono::steady_clock::now() < deadline) {
        if (writing) {
          ASSERT_TRUE(update(rng() % kKeys).ok()) << "write " << writes;
          writes++;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        ASSERT_NE(waitpid(pid, nullptr, WNOHANG), pid) << "reader " << fe << " exited early";
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      kill(pid, SIGKILL);
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFSIGNALED(status)) << "reader " << fe << " exited with " << status;
      if (writing) {
        for (int i = 0; i < 8; i++) {
          ASSERT_TRUE(update(rng() % kKeys).ok()) << "write " << writes << " after a reader kill";
          writes++;
        }
      }
    }
  };
  // Phase 1: readers killed while the writer writes.
  kill_round(12, true);
  ASSERT_FALSE(HasFatalFailure());
  for (auto& m : maps) ASSERT_TRUE(m->Sync().ok());
  // Phase 2: the writer idle: killed readers must leave the used blocks exactly as they were.
  const uint64_t before = BlocksUsed();
  kill_round(6, false);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(BlocksUsed(), before) << "killed readers leaked blocks";
  // The writer goes on, and sees its own latest versions.
  for (uint64_t k = 0; k < kKeys; k++) ASSERT_TRUE(update(k).ok());
  for (auto& m : maps) {
    ASSERT_TRUE(m->Sync().ok());
    ASSERT_TRUE(m->Verify().ok());
    for (uint64_t k = 0; k < kKeys; k++) {
      Value v;
      ASSERT_TRUE(m->Get(k, &v).ok());
      ASSERT_EQ(v, ValueOf(k, version[k])) << "key " << k;
    }
  }
  // The long-lived readers read whole values all along and stop cleanly.
  std::ofstream(stop) << "stop\n";
  for (size_t i = 0; i < survivors.size(); i++) {
    int status = 0;
    ASSERT_EQ(waitpid(survivors[i], &status, 0), survivors[i]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "surviving reader " << 10 + i << " status " << status;
    EXPECT_GT(Reads(dir_, 10 + i), 0u);
  }
  std::printf("reader crash: 18 readers SIGKILLed mid-read, %llu writes meanwhile\n",
              static_cast<unsigned long long>(writes));
}

}  // namespace
}  // namespace asymnvm::structures

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("ASYMNVM_READER_CHILD")) {
    asymnvm::structures::RunReader(spec);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
