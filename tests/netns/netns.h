// Network-namespace test harness (doc/partitions.md): every daemon runs in its own Linux network
// namespace ("host") with its own IPv4 address on a shared bridge, so a link between two hosts can
// be cut and healed while both processes stay alive — a network partition, not a kill.
//
// Layout of one Network (all names unique per process and per Network, so parallel ctest runs
// never collide, and nothing is created in the caller's own namespace):
//   <prefix>hub          a namespace holding the bridge br0
//   <prefix><host>       one namespace per host: lo, and eth0 (a veth whose peer is a bridge port
//                        in the hub) with address <subnet>.<k>/24, k = 1, 2, ... in host order
// A cut of the pair (a, b) is a /32 route in each of the two hosts that sends the other's address
// to a next hop whose MAC no interface owns (a permanent neighbour entry): the frames go out and
// are silently lost, as in a real partition (no local error, no RST; connects and retransmissions
// time out). Heal deletes the routes. No package beyond iproute2 is needed (no netem, no nftables).
//
// The calling thread joins a host with Enter (setns: threads it starts afterwards inherit it), so
// a test's clients are one more host whose links can be cut. Daemons are started through
// `ip netns exec NS binary ...` with common/spawn.h (Wrap). The destructor SIGKILLs whatever still
// runs in the namespaces and deletes them, also when a test fails; namespaces left by a crashed
// run (prefix asymnvm-<pid>- of a dead pid) are deleted by the next Create.
//
// Thread safety: Cut/Heal/Enter may be called from any thread; each cut is recorded in the log.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "asymnvm/status.h"
#include "common/spawn.h"

namespace asymnvm::netns {

// Why namespace tests cannot run here ("" when they can): not root, no `ip`, or the kernel
// refused a namespace, veth or bridge (probed by creating and deleting one).
std::string UnavailableReason();

// Writes a random cluster secret to `path` (mode 0600) and sets ASYMNVM_SECRET_FILE to it for
// this process and every child it starts (doc/fabric.md §Cluster secret): daemons refuse to listen
// on a non-loopback address with the built-in default. Call before starting threads.
Status UseClusterSecret(const std::string& path);

// Runs `ip args...` and waits; the error names the command and carries ip's stderr.
Status RunIp(const std::vector<std::string>& args);

struct CutEvent {
  int64_t at_ns = 0;  // steady clock since the Network was created
  std::string a, b;
  bool cut = true;  // false: healed
};

class Network {
 public:
  // `hosts`: distinct names of [a-z0-9] (≤ 8 characters). `subnet`: the first three octets.
  static Result<std::unique_ptr<Network>> Create(const std::vector<std::string>& hosts,
                                                 const std::string& subnet = "10.77.0");
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const std::vector<std::string>& hosts() const { return hosts_; }
  std::string ns(const std::string& host) const;  // the namespace's name
  std::string ip(const std::string& host) const;  // its address (no prefix length)

  // Cuts / heals the link between a and b in both directions (idempotent).
  Status Cut(const std::string& a, const std::string& b);
  Status Heal(const std::string& a, const std::string& b);
  // Cuts `host` from every host in `others`.
  Status Isolate(const std::string& host, const std::vector<std::string>& others);
  Status HealAll();
  bool IsCut(const std::string& a, const std::string& b) const;
  std::vector<CutEvent> events() const;

  // Moves the calling thread into `host` (setns). Restore() moves it back to where it was when
  // the Network was created.
  Status Enter(const std::string& host);
  Status Restore();

  // `spec` to be run inside `host`: `ip netns exec NS <spec.path> <spec.argv[1..]>`. ip execs the
  // binary, so the returned pid is the daemon's.
  SpawnSpec Wrap(const std::string& host, SpawnSpec spec) const;

  // Pids of the processes running in `host` (ip netns pids).
  std::vector<pid_t> Pids(const std::string& host) const;

  int64_t now_ns() const;

 private:
  Network() = default;
  Status Setup(const std::vector<std::string>& hosts, const std::string& subnet);
  Status Route(const std::string& from, const std::string& to, bool cut);

  std::string prefix_;
  std::string subnet_;
  std::vector<std::string> hosts_;
  std::map<std::string, int> index_;
  std::vector<std::string> created_;  // namespaces to delete
  int home_fd_ = -1;                  // the creating thread's namespace
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, bool> cut_;
  std::vector<CutEvent> events_;
};

// A ZooKeeper server (standalone, or one member of an ensemble) bound to a host's address, started
// by pid in that host's namespace (java ... QuorumPeerMain; never a system service). tickTime
// 200 ms; sessions 400 ms .. 60 s. Destroying it SIGKILLs it and removes its directory.
class ZooKeeper {
 public:
  // `members`: the ensemble's hosts (one: standalone); `me` is one of them. Port 2181 (client),
  // 2888/3888 (quorum/election): every host has its own address, so fixed ports do not collide.
  static Result<std::unique_ptr<ZooKeeper>> Start(const Network& net,
                                                  const std::vector<std::string>& members,
                                                  const std::string& me, const std::string& dir);
  ~ZooKeeper();
  pid_t pid() const { return pid_; }
  // Waits until it answers `ruok` with `imok` (from the calling thread's namespace).
  Status WaitServing(std::chrono::milliseconds timeout) const;
  std::string address() const { return ip_ + ":2181"; }

 private:
  pid_t pid_ = -1;
  std::string ip_, dir_;
};

// The connect string "ip:2181,..." of an ensemble on `members`.
std::string ZkConnectString(const Network& net, const std::vector<std::string>& members);

// Sends a four-letter word to ip:port from the calling thread's namespace; "" on failure.
std::string FourLetterWord(const std::string& ip, int port, const std::string& word);

}  // namespace asymnvm::netns
