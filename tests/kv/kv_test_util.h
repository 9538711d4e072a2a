// Shared pieces of the asymnvm-kv process suites: start/kill/stop a daemon, a temp directory,
// a client on explicit addresses.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/kv.h"
#include "common/spawn.h"

namespace asymnvm::kv::testutil {

// A daemon process; SIGKILLed and reaped when it goes out of scope still running (a failed
// ASSERT never leaks a server).
struct Proc {
  pid_t pid = -1;
  std::string first_line;  // "listening <address>"
  Proc() = default;
  Proc(Proc&& o) noexcept : pid(o.pid), first_line(std::move(o.first_line)) { o.pid = -1; }
  Proc& operator=(Proc&& o) noexcept {
    if (this != &o) {
      Reap();
      pid = o.pid;
      first_line = std::move(o.first_line);
      o.pid = -1;
    }
    return *this;
  }
  ~Proc() { Reap(); }
  void Reap() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      int st;
      waitpid(pid, &st, 0);
      pid = -1;
    }
  }
  std::string address() const {
    return first_line.rfind("listening ", 0) == 0 ? first_line.substr(10) : "";
  }
};

// The spawn spec of asymnvm-kv with `args`, its log level set to `level`.
inline SpawnSpec KvSpec(const std::vector<std::string>& args, const char* level) {
  SpawnSpec s;
  s.path = ASYMNVM_KV_SERVER;
  s.argv.push_back(s.path);
  s.argv.insert(s.argv.end(), args.begin(), args.end());
  s.env = {{"ASYMNVM_LOG_LEVEL", level}};
  return s;
}

// Starts asymnvm-kv with `args` (and `env` added to its environment); waits for its first stdout
// line (or its exit).
inline Proc StartKv(const std::vector<std::string>& args,
                    const std::vector<std::pair<std::string, std::string>>& env = {}) {
  int out[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  SpawnSpec s = KvSpec(args, "warn");
  s.env.insert(s.env.end(), env.begin(), env.end());
  s.out = SpawnSpec::Out::kFd;
  s.out_fd = out[1];
  std::string error;
  Proc p;
  p.pid = SpawnProcess(s, &error);
  EXPECT_GT(p.pid, 0) << error;
  close(out[1]);
  char c;
  while (p.pid > 0 && read(out[0], &c, 1) == 1 && c != '\n') p.first_line.push_back(c);
  close(out[0]);
  return p;
}

// Starts asymnvm-kv with `args` without waiting for it (stdout discarded): for SIGKILLs that land
// while it starts up and recovers.
inline pid_t SpawnKv(const std::vector<std::string>& args) {
  SpawnSpec s = KvSpec(args, "error");
  s.out = SpawnSpec::Out::kNull;
  std::string error;
  const pid_t pid = SpawnProcess(s, &error);
  EXPECT_GT(pid, 0) << error;
  return pid;
}

// Polls `done` (an observable state) every millisecond until it holds or `timeout` passes.
template <typename F>
bool WaitFor(F done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// SIGSTOPs `pid` and waits until every thread of it is stopped (state T in /proc): kill()
// returns before a thread running on another core has stopped, which may still serve a request.
inline bool StopAndWait(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  if (kill(pid, SIGSTOP) != 0) return false;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  return WaitFor(
      [&] {
        DIR* dir = opendir(task_dir.c_str());
        if (dir == nullptr) return false;
        bool all = true;
        while (dirent* e = readdir(dir)) {
          if (e->d_name[0] == '.') continue;
          std::ifstream stat(task_dir + "/" + e->d_name + "/stat");
          std::string line;
          std::getline(stat, line);
          const size_t close = line.rfind(')');  // "tid (comm) S ..."
          if (close == std::string::npos || close + 2 >= line.size() ||
              (line[close + 2] != 'T' && line[close + 2] != 't')) {
            all = false;
          }
        }
        closedir(dir);
        return all;
      },
      timeout);
}

inline int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

inline void Kill9(Proc& p) {
  if (p.pid > 0) {
    kill(p.pid, SIGKILL);
    WaitExit(p.pid);
    p.pid = -1;
  }
}

inline int Term(Proc& p) {
  if (p.pid <= 0) return -1;
  kill(p.pid, SIGTERM);
  int st = WaitExit(p.pid);
  p.pid = -1;
  return st;
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("kv-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& n) const { return (path_ / n).string(); }

 private:
  std::filesystem::path path_;
};

// A client that must open: a failure fails the test.
inline std::unique_ptr<Client> OpenClient(
    const std::vector<std::string>& servers,
    std::chrono::milliseconds retry = std::chrono::seconds(20)) {
  ClientOptions o;
  o.servers = servers;
  o.retry_deadline = retry;
  auto c = Client::Open(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// A client that may legitimately fail to open (its server is being killed): nullptr then.
inline std::unique_ptr<Client> TryOpenClient(const std::vector<std::string>& servers,
                                             std::chrono::milliseconds retry) {
  ClientOptions o;
  o.servers = servers;
  o.retry_deadline = retry;
  auto c = Client::Open(o);
  return c.ok() ? std::move(c).value() : nullptr;
}

}  // namespace asymnvm::kv::testutil
