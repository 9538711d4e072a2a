#include "workloads/driver/backend_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/proc_stat.h"

extern char** environ;

namespace asymnvm::driver {

namespace fs = std::filesystem;

Result<std::string> FindBackendBinary(const std::string& argv0) {
  std::vector<std::string> tried;
  auto ok = [&](const fs::path& p) {
    tried.push_back(p.string());
    std::error_code ec;
    return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
  };
  if (const char* env = std::getenv("ASYMNVM_BACKEND_BIN")) {
    if (ok(env)) return std::string(env);
  }
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = fs::absolute(argv0, ec);
  const fs::path dir = self.parent_path();
  for (const fs::path& p : {dir / "asymnvm-backend", dir / ".." / "backend" / "asymnvm-backend"}) {
    if (ok(p)) return fs::canonical(p, ec).string();
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string d;
    while (std::getline(ss, d, ':')) {
      if (!d.empty() && ok(fs::path(d) / "asymnvm-backend"))
        return (fs::path(d) / "asymnvm-backend").string();
    }
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  return Status::NotFound("asymnvm-backend not found (set ASYMNVM_BACKEND_BIN; looked at " + list +
                          ")");
}

namespace {
std::string Drain(int fd) {
  std::string s;
  if (fd < 0) return s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}
}  // namespace

Result<std::unique_ptr<BackendProcess>> BackendProcess::Start(const std::string& bin,
                                                              const std::string& pool,
                                                              const std::string& size,
                                                              const std::vector<std::string>& extra,
                                                              const std::string& log_level) {
  std::vector<std::string> args = {bin, "--pool", pool, "--size", size, "--log-level", log_level};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // stdout: a pipe for the two address lines; stderr: a file next to the pool (never a pipe
  // nobody drains).
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::IoError("backend process: pipe", errno);
  const std::string err_path = pool + ".backend.log";
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err < 0) {
    close(out[0]);
    close(out[1]);
    return Status::IoError("backend process: cannot create " + err_path, errno);
  }
  const off_t log_start = lseek(err, 0, SEEK_END);
  if (access(bin.c_str(), X_OK) != 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    close(err);
    return Status::IoError("backend process: cannot start " + bin, e);
  }
  // fork + exec rather than posix_spawn: the child asks for SIGTERM when its parent dies
  // (PR_SET_PDEATHSIG), so a driver killed with SIGKILL does not leave a daemon holding the pool
  // lock; the daemon shuts down cleanly instead. Only async-signal-safe calls after fork.
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    close(err);
    return Status::IoError("backend process: fork", e);
  }
  if (pid == 0) {
    if (dup2(out[1], 1) < 0 || dup2(err, 2) < 0) _exit(126);
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) _exit(126);
    if (getppid() != parent) _exit(126);  // the parent died before prctl
    execve(bin.c_str(), argv.data(), environ);
    _exit(127);
  }
  close(out[1]);
  close(err);
  auto p = std::unique_ptr<BackendProcess>(new BackendProcess());
  p->pid_ = pid;
  p->err_fd_ = open(err_path.c_str(), O_RDONLY | O_CLOEXEC);
  // The log keeps earlier runs on the same pool (a restarted daemon appends): read this one's.
  if (p->err_fd_ >= 0) (void)lseek(p->err_fd_, log_start, SEEK_SET);
  // stdout: "listening ADDR\nlog ADDR\n", then nothing more.
  auto read_line = [&] {
    std::string l;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') l.push_back(c);
    return l;
  };
  std::string line = read_line();
  (void)read_line();
  close(out[0]);
  const std::string prefix = "listening ";
  if (line.rfind(prefix, 0) != 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    p->pid_ = -1;
    std::string msg = Drain(p->err_fd_);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return Status::Internal("asymnvm-backend failed to start (exit " +
                            std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                            "): " + msg);
  }
  p->address_ = line.substr(prefix.size());
  return p;
}

BackendProcess::~BackendProcess() {
  Kill();
  if (err_fd_ >= 0) close(err_fd_);
}

Result<double> BackendProcess::CpuSeconds() const { return ProcessCpuSeconds(pid_); }

Status BackendProcess::Stop(std::string* log) {
  if (pid_ < 0) return Status::FailedPrecondition("backend process not running");
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  std::string msg = Drain(err_fd_);
  if (log) *log = msg;
  if (WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM) {
    // It died before it could handle the SIGTERM (someone else killed it): not a shutdown bug.
    return Status::Aborted("asymnvm-backend was killed by signal " +
                           std::to_string(WTERMSIG(status)) + " before it stopped: " + msg);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Internal("asymnvm-backend did not stop cleanly (status " +
                            std::to_string(status) + "): " + msg);
  }
  return Status::Ok();
}

bool BackendProcess::Exited(std::string* how) const {
  if (pid_ < 0) return false;  // stopped or killed by us, and reaped
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  if (info.si_pid == 0) return false;
  if (how) {
    *how = info.si_code == CLD_EXITED ? "exited with status " + std::to_string(info.si_status)
                                      : "killed by signal " + std::to_string(info.si_status);
  }
  return true;
}

void BackendProcess::Kill() {
  if (pid_ < 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace asymnvm::driver
