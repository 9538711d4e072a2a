// Reader-side fencing of a Session (doc/mirror.md §Terms): a Session that found its back-end
// through the group's registration /asymnvm/groups/<uuid>/primary watches that node. Any change
// after the connection — the node deleted (the primary died, or its coordinator session lapsed:
// a mirror may be promoted after its promotion timeout) or replaced (another primary serves) —
// counts as a move; Session::Guarded then does not return the result of a call that was in
// flight across a move (a one-sided READ served by an old primary that resumed after a stop
// would be stale) and reconnects to the registered primary instead.
//
// Why this suffices: a mirror is promoted only after the node has been gone for the promotion
// timeout, and serves a write only after that; the watch reports the deletion within the
// coordinator's notification latency (embedded: its poll interval, 50 ms; ZooKeeper: one
// notification), which the promotion timeout exceeds. A Session cut off from the coordinator
// stops on its own lease (FrontendIdentity::CheckLease) before that.
//
// Thread safety: moves() from any thread; the callback runs on the coordinator's watch thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "asymnvm/coord.h"
#include "asymnvm/status.h"

namespace asymnvm::frontend {

class GroupWatch {
 public:
  // Watches `path` (nullptr, no watch, when the node does not exist: the back-end registers
  // elsewhere or not at all). `connected_via`: the registration data the Session connected
  // through (a node that differs already counts as a move); empty = the node as it is now.
  static std::unique_ptr<GroupWatch> Start(coord::Coordinator& c, const std::string& path,
                                           const std::string& connected_via = "");
  ~GroupWatch();  // unwatches (no callback runs after)

  uint64_t moves() const { return moves_.load(std::memory_order_acquire); }
  const std::string& path() const { return path_; }

 private:
  GroupWatch(coord::Coordinator& c, std::string path, std::string data)
      : c_(c), path_(std::move(path)), data_(std::move(data)) {}
  void OnEvent();

  coord::Coordinator& c_;
  const std::string path_;
  const std::string data_;  // the registration as connected (address, pid, term, start time)
  std::atomic<uint64_t> moves_{0};
  coord::WatchId id_ = 0;
  bool watching_ = false;
};

}  // namespace asymnvm::frontend
