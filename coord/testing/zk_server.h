// Test support for the coordinator suites: child processes with a line-oriented stdout, and a
// ZooKeeper server / ensemble started by PID (java ... QuorumPeerMain), never a system service.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::coord::testing {

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline After(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

// A child process (fork + exec) whose stdout is a pipe read line by line. The destructor
// SIGKILLs and reaps it if it is still running.
class Subprocess {
 public:
  // `stdout_to`: if non-empty, stdout and stderr go to this file instead of the pipe.
  static Result<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv,
                                                   const std::string& stdout_to = "");
  ~Subprocess();
  pid_t pid() const { return pid_; }
  // The next stdout line (without '\n'); kTimedOut at the deadline, kNotFound at end of output.
  Result<std::string> ReadLine(Deadline deadline);
  // Reads lines until one starts with `prefix`; returns it.
  Result<std::string> WaitForLine(const std::string& prefix, Deadline deadline);
  void Signal(int sig);
  // Waits for exit; returns the wait status (or kTimedOut).
  Result<int> Wait(Deadline deadline);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool reaped_ = false;
  std::string buffered_;
};

// Why ZooKeeper tests cannot run here ("" if they can): java or the zookeeper jar missing.
std::string ZooKeeperUnavailableReason();

// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
int FreePort();

// A ZooKeeper server (n == 1, standalone) or an n-node ensemble on 127.0.0.1, tickTime 200 ms,
// data in a fresh temporary directory, admin server off. Destroying it kills every server.
class ZkEnsemble {
 public:
  static Result<std::unique_ptr<ZkEnsemble>> Start(int n, Deadline ready_by);
  ~ZkEnsemble();
  int size() const { return static_cast<int>(servers_.size()); }
  std::string connect_string() const;  // "127.0.0.1:P1,127.0.0.1:P2,..."
  int client_port(int i) const { return servers_[i].client_port; }
  // "leader", "follower", "standalone", or "" (not serving / not answering).
  std::string Mode(int i) const;
  // Index of the serving leader (or the standalone server); -1 if none.
  int Leader() const;
  // Waits until a leader serves and every live server serves (kTimedOut otherwise).
  Status WaitServing(Deadline deadline) const;
  void Kill(int i);       // SIGKILL + reap
  Status Restart(int i);  // starts a killed server again on its ports and data directory
  bool alive(int i) const { return servers_[i].proc != nullptr; }

 private:
  struct Server {
    int client_port = 0, quorum_port = 0, election_port = 0;
    std::string dir;
    std::unique_ptr<Subprocess> proc;
  };
  Status Launch(int i);
  std::string root_;
  std::vector<Server> servers_;
};

// Sends a four-letter word to 127.0.0.1:port and returns the reply ("" on failure).
std::string FourLetterWord(int port, const std::string& word);

}  // namespace asymnvm::coord::testing
