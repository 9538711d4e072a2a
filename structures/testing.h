// Helpers of the structure suites; their fixture is the shared in-process back-end one.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "backend/backend.h"
#include "common/spawn.h"
#include "tests/common/backend_fixture.h"

namespace asymnvm::structures::testing {

// The in-process back-end fixture (tests/common/backend_fixture.h).
inline backend::BackendOptions TestBackendOptions(const std::string& path) {
  return asymnvm::test_support::SmallBackendOptions(path);
}
using StructuresTest = asymnvm::test_support::BackendTest;

inline std::vector<uint8_t> TestValue(uint64_t key, uint64_t version, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; i++) v[i] = static_cast<uint8_t>(key * 31 + version * 7 + i);
  return v;
}

inline const frontend::Level kAllLevels[] = {frontend::Level::kNaive, frontend::Level::kR,
                                             frontend::Level::kRc, frontend::Level::kRcb};

// ---- crash children (real processes) ----

// How a child run by RunSelfAsChild ended.
struct ChildEnd {
  bool exited = false;  // by itself (an exit, or the SIGKILL of its own crash point)
  int status = 0;       // waitpid's
  bool KilledItself() const { return exited && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
  bool ExitedCleanlyOrWasKilled() const {
    return !exited || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
};

// Runs this test binary again as a child process named `name` with `env` set (the suite's main()
// dispatches on one of the variables; ASYMNVM_CRASH_AT arms its crash points) and polls it every
// 10 ms until it ends by itself, or `kill_when` (may be empty) holds, or `limit` passes — then
// SIGKILLs it. A failed spawn is a test failure (exited false, status -1).
inline ChildEnd RunSelfAsChild(const std::vector<std::pair<std::string, std::string>>& env,
                               const char* name, const std::function<bool()>& kill_when = {},
                               std::chrono::milliseconds limit = std::chrono::seconds(120)) {
  ChildEnd end;
  asymnvm::SpawnSpec spec;
  spec.path = "/proc/self/exe";
  spec.argv = {name};
  spec.env = env;
  std::string error;
  const pid_t pid = asymnvm::SpawnProcess(spec, &error);
  if (pid < 0) {
    ADD_FAILURE() << error;
    end.status = -1;
    return end;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &end.status, WNOHANG) == pid) {
      end.exited = true;
      return end;
    }
    if (kill_when && kill_when()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &end.status, 0);
  return end;
}

// The fields of a crash child's spec ("a|b|c").
inline std::vector<std::string> SplitSpec(const std::string& s) {
  std::vector<std::string> f;
  for (size_t pos = 0;;) {
    const size_t bar = s.find('|', pos);
    f.push_back(s.substr(pos, bar == std::string::npos ? std::string::npos : bar - pos));
    if (bar == std::string::npos) break;
    pos = bar + 1;
  }
  return f;
}

// The acknowledgement records (`record_bytes` each) a crash child appended to `path`.
inline int64_t AckedRecords(const std::string& path, int64_t record_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return 0;
  return static_cast<int64_t>(in.tellg()) / record_bytes;
}

}  // namespace asymnvm::structures::testing
