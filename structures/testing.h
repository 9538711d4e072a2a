// Test fixture shared by the structure suites: an in-process back-end on a temp pool, sessions
// at any level, back-end restarts.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "backend/backend.h"

namespace asymnvm::structures::testing {

inline backend::BackendOptions TestBackendOptions(const std::string& path) {
  backend::BackendOptions o;
  o.pool_path = path;
  // ASYMNVM_TEST_POOL_MB: a larger pool for long campaigns (default 64 MiB).
  const char* mb = std::getenv("ASYMNVM_TEST_POOL_MB");
  o.pool_size = (mb != nullptr ? std::max<uint64_t>(64, std::strtoull(mb, nullptr, 10)) : 64) << 20;
  o.log_segment = 256 * 1024;
  o.oq_buffers = 8;
  o.oq_buffer_size = 64 * 1024;
  o.reclaim_delay = std::chrono::microseconds(1000);
  return o;
}

class StructuresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& ch : name) {
      if (ch == '/') ch = '_';
    }
    path_ = (std::filesystem::temp_directory_path() /
             ("asymnvm-st-" + std::to_string(getpid()) + "-" + name + ".pool"))
                .string();
    std::remove(path_.c_str());
    StartBackend();
  }
  void TearDown() override {
    if (be_) be_->Stop();
    be_.reset();
    std::remove(path_.c_str());
  }
  void StartBackend() {
    auto be = backend::Backend::Start(TestBackendOptions(path_));
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    be_ = std::move(*be);
  }
  // Every session must be closed before (their connections die with the back-end).
  void RestartBackend() {
    be_->Stop();
    be_.reset();
    StartBackend();
  }
  frontend::SessionOptions SessionOpts(uint64_t fe, frontend::Level level) {
    frontend::SessionOptions o;
    o.backends = {be_->address()};
    o.frontend_id = fe;
    o.level = level;
    o.cache_bytes = 4 << 20;
    o.batch_ops = 64;
    o.batch_timeout = std::chrono::hours(1);  // batches flush by size or fence, not by time
    return o;
  }
  std::unique_ptr<frontend::Session> OpenSession(uint64_t fe, frontend::Level level) {
    auto s = frontend::Session::Open(SessionOpts(fe, level));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string path_;
  std::unique_ptr<backend::Backend> be_;
};

inline std::vector<uint8_t> TestValue(uint64_t key, uint64_t version, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; i++) v[i] = static_cast<uint8_t>(key * 31 + version * 7 + i);
  return v;
}

inline const frontend::Level kAllLevels[] = {frontend::Level::kNaive, frontend::Level::kR,
                                             frontend::Level::kRc, frontend::Level::kRcb};

}  // namespace asymnvm::structures::testing
