// Child processes for the bench suites: finding a tool, spawning a daemon with its output in
// files, its CPU time, stopping it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/status.h"
#include "common/proc_stat.h"  // ProcessCpuSeconds

namespace asymnvm::bench {

// $env, then build_rel next to this binary, then PATH. kNotFound names the Debian package.
Result<std::string> FindTool(const std::string& name, const char* env,
                             const std::filesystem::path& build_rel);

// A child process with stdout and stderr in files; SIGTERM (then SIGKILL after 15 s) on
// destruction.
class Child {
 public:
  static Result<std::unique_ptr<Child>> Start(std::vector<std::string> args, const std::string& out,
                                              const std::string& err);
  ~Child() { Stop(); }
  bool Running();
  void Stop();
  pid_t pid() const { return pid_; }

 private:
  Child() = default;
  pid_t pid_ = -1;
};

std::string ReadFile(const std::string& path);

}  // namespace asymnvm::bench
