// A back-end daemon (asymnvm-backend) run as a child process: the way benchmarks and the main job
// use a back-end, so its CPU time is its own (back-end CPU per operation) and it stops the way an
// operator stops it (SIGTERM → clean exit 0).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::driver {

// The asymnvm-backend binary: $ASYMNVM_BACKEND_BIN, next to `argv0`, ../backend/ relative to it
// (the build tree), or on $PATH. kNotFound naming the places looked at.
Result<std::string> FindBackendBinary(const std::string& argv0);

class BackendProcess {
 public:
  // Starts `bin --pool POOL --size SIZE --log-level LEVEL extra...` and waits for its
  // "listening ADDR" line. kIoError / kInternal with the daemon's stderr when it fails to start.
  // The daemon gets SIGTERM when the thread that started it dies (PR_SET_PDEATHSIG: a driver
  // killed with SIGKILL leaves no daemon behind holding the pool lock), so start daemons from a
  // thread that outlives them (the main thread).
  static Result<std::unique_ptr<BackendProcess>> Start(const std::string& bin,
                                                       const std::string& pool,
                                                       const std::string& size,
                                                       const std::vector<std::string>& extra = {},
                                                       const std::string& log_level = "warn");
  // SIGKILL if still running.
  ~BackendProcess();

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // User + system CPU seconds of the daemon so far (/proc/PID/stat).
  Result<double> CpuSeconds() const;
  // SIGTERM and wait; kAborted if it died of another signal first (killed by someone else),
  // kInternal unless it exits 0. Its stderr summary line is returned in `*log`.
  Status Stop(std::string* log = nullptr);
  // SIGKILL and wait (crash tests).
  void Kill();
  // Whether the daemon has exited (without reaping it, so Stop/Kill still work); `*how` says how
  // ("killed by signal 9", "exited with status 1").
  bool Exited(std::string* how = nullptr) const;

 private:
  BackendProcess() = default;
  pid_t pid_ = -1;
  int err_fd_ = -1;
  std::string address_;
};

}  // namespace asymnvm::driver
