// The in-process back-end test fixture shared by the suites (header-only; link asymnvm_backend):
// a back-end on a temp pool named after the running test, restarts, sessions at any level.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/frontend.h"
#include "backend/backend.h"

namespace asymnvm::test_support {

// /tmp/asymnvm-<tag>-<pid>-<name>: unique per process (parallel ctest runs) and per name.
inline std::string TempPath(const std::string& tag, const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("asymnvm-" + tag + "-" + std::to_string(getpid()) + "-" + name))
      .string();
}

// The running test's name with '/' (parameterized tests) made file-name safe.
inline std::string CurrentTestName() {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& ch : name) {
    if (ch == '/') ch = '_';
  }
  return name;
}

// A small back-end: 64 MiB pool (ASYMNVM_TEST_POOL_MB: larger, for long campaigns), 256 KiB b-log
// segments, 8 OQ buffers of 64 KiB, frees reclaimed after 1 ms.
inline backend::BackendOptions SmallBackendOptions(const std::string& path) {
  backend::BackendOptions o;
  o.pool_path = path;
  const char* mb = std::getenv("ASYMNVM_TEST_POOL_MB");
  o.pool_size = (mb != nullptr ? std::max<uint64_t>(64, std::strtoull(mb, nullptr, 10)) : 64) << 20;
  o.log_segment = 256 * 1024;
  o.oq_buffers = 8;
  o.oq_buffer_size = 64 * 1024;
  o.reclaim_delay = std::chrono::microseconds(1000);
  return o;
}

// A test session of front-end `fe` at `level` on `backends`: 4 MiB cache, batches of 64 that
// flush by size or fence, not by time.
inline frontend::SessionOptions TestSessionOptions(std::vector<std::string> backends, uint64_t fe,
                                                   frontend::Level level) {
  frontend::SessionOptions o;
  o.backends = std::move(backends);
  o.frontend_id = fe;
  o.level = level;
  o.cache_bytes = 4 << 20;
  o.batch_ops = 64;
  o.batch_timeout = std::chrono::hours(1);
  return o;
}

class BackendTest : public ::testing::Test {
 protected:
  // The back-end's options (a fixture may shape them).
  virtual backend::BackendOptions BackendOptionsFor(const std::string& path) {
    return SmallBackendOptions(path);
  }
  // The pool file's tag in TempPath.
  virtual std::string PoolTag() const { return "st"; }

  void SetUp() override {
    path_ = TempPath(PoolTag(), CurrentTestName() + ".pool");
    std::remove(path_.c_str());
    StartBackend();
  }
  void TearDown() override {
    if (be_) be_->Stop();
    be_.reset();
    std::remove(path_.c_str());
  }
  void StartBackend() {
    auto be = backend::Backend::Start(BackendOptionsFor(path_));
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
    return TestSessionOptions({be_->address()}, fe, level);
  }
  std::unique_ptr<frontend::Session> OpenSession(const frontend::SessionOptions& o) {
    auto s = frontend::Session::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<frontend::Session> OpenSession(uint64_t fe, frontend::Level level) {
    return OpenSession(SessionOpts(fe, level));
  }

  std::string path_;
  std::unique_ptr<backend::Backend> be_;
};

}  // namespace asymnvm::test_support
