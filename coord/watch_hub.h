// WatchHub: the watch machinery shared by both coordinator implementations.
//
// Each watch keeps the last observed Snapshot of its path. A single thread re-probes every watch
// when woken (Wake(), the implementation's notification fd becoming readable, or a tick) and runs
// the callback of each watch whose snapshot changed, reporting the difference as one event. This
// makes delivery level-triggered: a lost or coalesced notification only delays an event until the
// next probe, never loses it.
//
// The probe is the implementation's: it reads the path's state and (ZooKeeper) arms a one-shot
// server watch that will call Wake(). The implementation chooses the tick: a probe reporting
// `volatile_state` (state that may change without any notification, e.g. an embedded ephemeral
// node whose holder can die silently) or `ok == false` (probe failed; retry) asks for the short
// tick; otherwise the hub sleeps until woken or the idle tick.
//
// Thread safety: every method may be called from any thread, including from inside a callback.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/coord.h"
#include "common/thread_annotations.h"

namespace asymnvm::coord {

struct Snapshot {
  bool ok = true;  // false: the probe failed (connection lost ...); retry at the tick
  bool exists = false;
  int64_t version = 0;
  uint64_t creation_id = 0;
  std::vector<std::string> children;  // kChildren watches only
  bool volatile_state = false;        // may change without a notification: poll at the short tick
  bool SameAs(const Snapshot& o, WatchKind kind) const;
};

struct WatchHubOptions {
  // Probes `path` for `kind`; called without the hub's lock held, from the hub thread or from Add.
  std::function<Snapshot(const std::string& path, WatchKind kind)> probe;
  // Optional fd (inotify) whose readability wakes the hub; `drain` is then called to empty it.
  int notify_fd = -1;
  std::function<void()> drain;
  // Interval while any watch is volatile or failed; doubles (up to idle_tick) while nothing
  // changes when `backoff` is set (polling fallback).
  std::chrono::milliseconds short_tick{50};
  std::chrono::milliseconds idle_tick{1000};  // otherwise (a safety net; 0 = only when woken)
  bool backoff = false;
};

class WatchHub {
 public:
  explicit WatchHub(WatchHubOptions options);
  ~WatchHub();  // Stop()
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // Probes once (in the caller's thread) and registers. kIoError if the wake-up eventfd failed.
  Result<WatchId> Add(const std::string& path, WatchKind kind, WatchCallback callback);
  Status Remove(WatchId id);
  // Re-probe every watch soon.
  void Wake();
  // Delivers kSessionExpired to every watch once, then drops them all (no more events).
  void Expire();
  // Joins the thread; pending callbacks are not run. Idempotent. Wake() stays safe to call until
  // the hub is destroyed (ZooKeeper watcher threads may still call it).
  void Stop();

 private:
  struct Entry {
    std::string path;
    WatchKind kind;
    WatchCallback callback;
    Snapshot last;
  };
  void Run();
  void ProbeAll();
  static EventType Difference(const Snapshot& before, const Snapshot& after, WatchKind kind);

  WatchHubOptions options_;
  int event_fd_ = -1;
  Mutex mu_;
  std::condition_variable idle_cv_;  // signalled when a callback finishes
  std::map<WatchId, std::shared_ptr<Entry>> entries_ ASYMNVM_GUARDED_BY(mu_);
  WatchId next_id_ ASYMNVM_GUARDED_BY(mu_) = 1;
  WatchId running_ ASYMNVM_GUARDED_BY(mu_) = 0;  // id whose callback is running (0: none)
  bool stopping_ ASYMNVM_GUARDED_BY(mu_) = false;
  bool expired_ ASYMNVM_GUARDED_BY(mu_) = false;
  std::atomic<bool> expire_pending_{false};
  std::thread::id thread_id_;
  std::thread thread_;
};

}  // namespace asymnvm::coord
