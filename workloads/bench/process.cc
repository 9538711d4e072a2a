#include "workloads/bench/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace asymnvm::bench {

namespace fs = std::filesystem;

Result<std::string> FindTool(const std::string& name, const char* env, const fs::path& build_rel) {
  if (const char* e = std::getenv(env)) {
    if (access(e, X_OK) == 0) return std::string(e);
  }
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && !build_rel.empty()) {
    fs::path p = self.parent_path() / build_rel;
    if (access(p.c_str(), X_OK) == 0) return fs::canonical(p, ec).string();
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string d;
    while (std::getline(ss, d, ':')) {
      fs::path p = fs::path(d) / name;
      if (!d.empty() && access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  return Status::NotFound(
      name + " not found (set " + env +
      "; redis-server/redis-benchmark come from the Debian packages redis-server "
      "and redis-tools, which scripts/setup.sh installs)");
}

Result<std::unique_ptr<Child>> Child::Start(std::vector<std::string> args, const std::string& out,
                                            const std::string& err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status::IoError("spawn " + args[0], rc);
  auto c = std::unique_ptr<Child>(new Child);
  c->pid_ = pid;
  return c;
}

bool Child::Running() {
  if (pid_ < 0) return false;
  int st;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void Child::Stop() {
  if (pid_ < 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 300 && Running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (pid_ >= 0) {
    kill(pid_, SIGKILL);
    int st;
    waitpid(pid_, &st, 0);
    pid_ = -1;
  }
}

std::string ReadFile(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace asymnvm::bench
