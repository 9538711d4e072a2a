// Starting a child process without fork(): posix_spawn.
//
// A process is often multi-threaded when it starts a daemon (a Session's pollers, a
// coordinator client, several daemons started from several threads at once). After fork() the
// child holds a copy of every lock another thread held at that moment — the allocator's
// included — so a child that allocates before exec (setenv, std::string, fopen) can hang for
// ever. Under ASan, whose allocator has no fork handler in this toolchain, that happened in a test:
// one of three kv daemons started from three threads never reached exec. posix_spawn builds
// everything in the parent and runs only system calls in the child.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace asymnvm {

struct SpawnSpec {
  std::string path;                                      // the binary ("/proc/self/exe" too)
  std::vector<std::string> argv;                         // argv[0] included
  std::vector<std::pair<std::string, std::string>> env;  // set (or replaced) in the child
  enum class Out { kInherit, kNull, kFile, kFd } out = Out::kInherit;  // the child's stdout
  std::string out_file;     // kFile: created or truncated
  int out_fd = -1;          // kFd: dup'ed onto the child's stdout
  bool stderr_too = false;  // stderr goes where stdout goes
  int err_fd = -1;          // else, if set, the child's stderr
  std::string err_file;     // else, if set, the child's stderr (created or truncated)
};

// Starts the child; returns its pid, or -1 with `*error` (may be null) saying why.
inline pid_t SpawnProcess(const SpawnSpec& s, std::string* error = nullptr) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; e++) {
    const char* eq = std::strchr(*e, '=');
    const std::string name(*e, eq == nullptr ? std::strlen(*e) : static_cast<size_t>(eq - *e));
    bool replaced = false;
    for (const auto& kv : s.env) replaced = replaced || kv.first == name;
    if (!replaced) env_strings.emplace_back(*e);
  }
  for (const auto& [k, v] : s.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = s.argv.empty() ? std::vector<std::string>{s.path} : s.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int rc = 0;
  switch (s.out) {
    case SpawnSpec::Out::kInherit:
      break;
    case SpawnSpec::Out::kNull:
      rc = posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
      break;
    case SpawnSpec::Out::kFile:
      rc = posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, s.out_file.c_str(),
                                            O_WRONLY | O_CREAT | O_TRUNC, 0644);
      break;
    case SpawnSpec::Out::kFd:
      rc = posix_spawn_file_actions_adddup2(&fa, s.out_fd, STDOUT_FILENO);
      break;
  }
  if (rc == 0 && s.stderr_too && s.out != SpawnSpec::Out::kInherit) {
    rc = posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  } else if (rc == 0 && s.err_fd >= 0) {
    rc = posix_spawn_file_actions_adddup2(&fa, s.err_fd, STDERR_FILENO);
  } else if (rc == 0 && !s.err_file.empty()) {
    rc = posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, s.err_file.c_str(),
                                          O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid = -1;
  if (rc == 0) rc = posix_spawn(&pid, s.path.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    if (error != nullptr) *error = "spawn " + s.path + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

}  // namespace asymnvm
