// Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP) on the RESP
// gateway (doc/types.md §Blocking pops). A blocking command runs on a worker like any other; when
// every key is empty its handler leaves a BlockRequest in the session instead of a reply, and the
// connection's event loop parks it: no thread is held, the connection reads no further command,
// and the registry below remembers it in the FIFO line of each of its keys. A write through this
// gateway signals its keys after it ran (Dispatcher::Execute), and the worker that ran it re-runs
// the command of the first client in each such key's line before the write's own reply leaves (as
// Redis 7 re-executes a blocked command before the pushing client's next command); a served pop
// signals its keys again, which serves the next one in line. Writes through other gateways are
// noticed by an adaptive re-check (10 ms doubling to 200 ms) of the first client in each line.
//
// Ownership of a parked client's session: whoever claims it (TryClaim / ClaimFirst: the worker
// serving it, or its loop for a re-run, a timeout or CLIENT UNBLOCK) until its loop has seen the
// outcome and released it.
//
// Lost wake-ups: each key hashes to a sequence counter that every signal bumps (before it looks
// for parked clients); a command reads its keys' counters before it tries to pop, and the loop
// re-runs it at once when one moved by the time it is parked.
//
// Thread safety: BlockingKeys is shared by every loop and worker (one mutex; sequence counters are
// atomics). A BlockRequest belongs to its connection: the worker running the command or the loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"

namespace asymnvm::kv::resp {

class Dispatcher;

// Left in Session::block by a blocking command that found nothing to pop.
struct BlockRequest {
  std::vector<std::string> argv;  // the command, re-run on every wake
  std::vector<std::string> keys;  // the keys it waits on
  int64_t deadline_ms = 0;        // steady-clock ms (SteadyMs); 0: forever
  std::vector<uint64_t> seqs;     // BlockingKeys::Seq of each key before the last attempt
  bool wait = false;              // the last attempt popped nothing: stay blocked
};

enum class WakeReason { kRetry, kTimeout, kError };

// One blocked connection as the registry sees it.
struct Parked {
  uint64_t client_id = 0;
  std::vector<std::string> keys;
  // Called with the registry's lock held: must only queue the event and wake the loop.
  std::function<void(WakeReason)> wake;
  // Re-runs the client's command on the calling worker (which claimed it) and hands the outcome to
  // its loop; true when it was served (popped or replied an error).
  std::function<bool(Dispatcher&)> run;
  bool unblocked = false;  // CLIENT UNBLOCK already asked (guarded by the registry's mutex)
  bool claimed = false;    // its session is in use (guarded by the registry's mutex)
};

class BlockingKeys {
 public:
  BlockingKeys();
  // The sequence counter of `key` (moves on every Signal of a key that hashes alike).
  uint64_t Seq(std::string_view key) const;
  // After a write to `key` ran: bumps its counter.
  void Bump(std::string_view key);
  // Bump, then wakes (WakeReason::kRetry to its loop) the first client parked on `key` unless it
  // is claimed.
  void Signal(std::string_view key);
  // The first client parked on `key`, claimed; null when there is none or it is claimed already.
  std::shared_ptr<Parked> ClaimFirst(std::string_view key);
  // Claims p; false when it is claimed or no longer parked.
  bool TryClaim(const std::shared_ptr<Parked>& p);
  void Release(const std::shared_ptr<Parked>& p);
  // Puts p at the end of each of its keys' lines (no-op when already parked).
  void Park(const std::shared_ptr<Parked>& p);
  void Unpark(const std::shared_ptr<Parked>& p);  // idempotent
  // Whether p is first in the line of one of its keys (only those re-check on a timer).
  bool IsFirst(const Parked& p) const;
  // CLIENT UNBLOCK: wakes the client with `why` (kTimeout or kError); false when it is not blocked
  // here (or was already unblocked).
  bool Unblock(uint64_t client_id, WakeReason why);
  int64_t blocked() const { return parked_.load(); }
  // Whether the client is parked here (CLIENT LIST's flag b).
  bool IsBlocked(uint64_t client_id) const;

 private:
  static constexpr size_t kSeqBuckets = 4096;
  static size_t Bucket(std::string_view key);
  std::atomic<uint64_t> seq_[kSeqBuckets];
  std::atomic<int64_t> parked_{0};
  mutable Mutex mu_;
  std::unordered_map<std::string, std::deque<std::shared_ptr<Parked>>> lines_
      ASYMNVM_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::shared_ptr<Parked>> by_id_ ASYMNVM_GUARDED_BY(mu_);
};

// Monotonic milliseconds (deadlines of blocked clients).
int64_t SteadyMs();

// Redis's timeout argument: seconds as a long double, 0 = forever. Returns "" and *ms (0: forever,
// else a duration >= 1 ms, rounded up) or Redis's error text.
std::string ParseBlockTimeout(std::string_view arg, int64_t* ms);

// The keys whose waiters a write command may have fed: its key positions, and for the *MPOP
// commands the numkeys keys.
std::vector<std::string> WrittenKeys(std::string_view name, const std::vector<std::string>& argv,
                                     const std::vector<std::string_view>& spec_keys);

// The re-check interval of a parked client: 10 ms after it parked, doubling to 200 ms.
inline constexpr int64_t kRecheckFirstMs = 10;
inline constexpr int64_t kRecheckMaxMs = 200;

}  // namespace asymnvm::kv::resp
