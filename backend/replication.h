// Mirroring, primary side (AsymNVM paper §7; doc/mirror.md).
//
// The primary forwards every byte range it makes durable in its pool to every attached mirror, in
// one ordered stream per mirror (one fabric connection: WRITEs into the mirror's pool at the same
// offsets), and a persist barrier of the primary (Persister::Drain) returns only after every
// in-sync mirror acknowledged a FLUSH covering everything forwarded before it (RPO = 0, the
// default). The mirror is passive: its pool is registered with its NIC, nothing of it runs on the
// data path. A mirror's pool is thus always a state the primary's own media could have been in
// at a crash (every range persisted before a barrier is there; ranges are applied in the order
// they were flushed), so promoting it is a back-end restart on that pool (doc/mirror.md §Argument).
//
//   ForwardingPersister  wraps the pool's persister (and, in redo mode, the deferred one): Flush
//                        forwards the range, Drain waits for the mirrors (sync mode).
//   Replicator           the mirror links: attach (connect, hello, copy of what differs, FLUSH,
//   in-sync
//                        callback, "synced" notice), forward, sync, drop (in-sync callback
//                        BEFORE anything else is acknowledged), re-attach in the background.
//
// Mirror control requests (the mirror daemon's non-durable Ordered Queue; payloads little-endian):
//   kMirrorHello  pool_size u64, uuid 16 B, term u64, name_len u32, primary name, stream u64
//                 → region descriptor (32 B: the mirror's whole pool, remote write/read),
//                   addr_len u32, data address, name_len u32, mirror name, resumable u8 (1: the
//                   pool is in sync with that stream as of its last acknowledged FLUSH — the
//                   primary then sends only the ranges the mirror missed)
//   kMirrorSynced term u64 → ∅  (the copy is complete and flushed; the mirror is in the group's
//                 in-sync set from now on)
//   kMirrorDigests first u64, count u32 (≤ kMaxDigestsPerCall) → count × u64: XXH3-64 of each
//                 kMirrorGranule-byte granule of the mirror's pool from granule `first` (clipped
//                 to the pool). Asked after a hello and before anything is forwarded: the
//                 primary then copies only the granules whose digests differ from its own
//                 (doc/mirror.md §Catch-up by digests)
//   kStatus (40)  as for a back-end: JSON (role "mirror").
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"

namespace asymnvm::backend {

inline constexpr uint16_t kMirrorHello = 50;
inline constexpr uint16_t kMirrorSynced = 51;
inline constexpr uint16_t kMirrorDigests = 52;
inline constexpr uint64_t kMirrorGranule = 64u << 10;
inline constexpr uint32_t kMaxDigestsPerCall = 4096;
inline constexpr size_t kMaxMirrors = 16;  // links of one primary (configured + added)

struct ReplicationOptions {
  std::vector<std::string> mirrors;  // OQ addresses of asymnvm-mirror daemons
  // Start the Replicator even with no mirror configured, so mirrors can be added while serving
  // (Backend::AddMirror). Costs nothing on the data path while no mirror is attached.
  bool joinable = false;
  bool async = false;  // --mirror-mode async: Drain does not wait for mirrors
  // A FLUSH not acknowledged within this time drops the mirror (as does a broken connection).
  std::chrono::milliseconds timeout{3000};
  // A dropped or unreachable mirror is tried again this often (caught up while serving).
  std::chrono::milliseconds retry{500};
  std::string name;  // this primary's name (hello; the group state)
  uint64_t term = 0;
  // Called with the names of the in-sync mirrors whenever the set changes: after a mirror's copy
  // is complete (before it counts for RPO) and after a mirror is dropped (before any further
  // barrier returns). A non-OK result means this primary was fenced (a mirror was promoted):
  // the process must not acknowledge anything more; the Replicator logs and calls `fenced` with
  // that Status (sub-code kFenced).
  std::function<Status(const std::array<uint8_t, 16>& uuid, const std::vector<std::string>& insync)>
      on_insync;
  // Required with on_insync (Start: kInvalidArgument without it); the library never ends the
  // process itself. It must stop every acknowledgement: asymnvm-backend and asymnvm-mirror exit
  // with status 5 (mirror::kExitFenced) here.
  std::function<void(const Status&)> fenced;
  // Tests only (asymnvm-backend --TEST-skip-mirror-flush): barriers do not wait for the mirrors'
  // FLUSH — the negative control of the mirror power-loss test (acknowledged writes then live
  // only in the mirror's volatile copy).
  bool TEST_skip_mirror_flush = false;
};

struct MirrorLinkStats {
  std::string address, name, state;  // state: down | copying | in-sync
  uint64_t bytes_forwarded = 0, writes = 0, flushes = 0, copies = 0, drops = 0;
  uint64_t copy_bytes = 0, last_copy_bytes = 0;
  uint64_t incremental_copies = 0;  // catch-ups that sent only what the mirror missed
  double last_copy_ms = 0;
  std::string last_error;
  // async mode: largest forwarded-but-unacknowledged backlog seen (bytes, and its age in µs).
  uint64_t max_lag_bytes = 0, max_lag_us = 0;
};

class Replicator;

// A barrier in two halves (Replicator::BeginSync / EndSync), so the primary persists locally
// while the mirrors' FLUSH is in flight (doc/mirror.md §Overlapped barrier). Per link: whether
// it was in sync at BeginSync, what it must acknowledge (`target`: writes posted by then) and the
// FLUSH this barrier posted, if any.
struct MirrorSyncTicket {
  struct PerLink {
    bool insync = false, posted = false;
    uint64_t target = 0, upto = 0, bytes = 0;
    std::chrono::steady_clock::time_point oldest;
    Status st;
  };
  size_t n = 0;  // links that existed at BeginSync (a link added later is not in sync yet)
  std::array<PerLink, kMaxMirrors> links;
  std::chrono::steady_clock::time_point begun;  // the breakdown in BarrierStats
};

// Where a sync-mode barrier's time goes (status: "mirror_barriers"): barriers that waited for
// at least one in-sync mirror, the time from BeginSync to EndSync (the caller's local persist,
// overlapped with the mirrors' FLUSH) and the time EndSync then waited for the mirrors.
struct BarrierStats {
  uint64_t barriers = 0, local_us = 0, mirror_wait_us = 0;
};

// Persister wrapper: ranges inside the pool are forwarded; Drain waits for the in-sync mirrors.
// Pass-through while no Replicator is attached.
class ForwardingPersister final : public pm::Persister {
 public:
  // wait_on_drain = false: Drain does not wait for the mirrors (the redo mode's deferred
  // persister, whose Drain syncs nothing locally either).
  ForwardingPersister(pm::Persister* inner, const uint8_t* base, uint64_t size,
                      bool wait_on_drain = true)
      : inner_(inner), base_(base), size_(size), wait_on_drain_(wait_on_drain) {}
  void set_replicator(Replicator* r) { repl_.store(r, std::memory_order_release); }
  void Flush(const void* addr, size_t length) override;
  void Drain() override;
  // Forward without persisting locally (the caller persists through another path).
  void ForwardOnly(const void* addr, size_t length);
  pm::Persister* inner() const { return inner_; }

 private:
  pm::Persister* inner_;
  const uint8_t* base_;
  uint64_t size_;
  bool wait_on_drain_;
  std::atomic<Replicator*> repl_{nullptr};
};

class Replicator {
 public:
  // Opens its own fabric instance, registers the whole pool for local reads, starts the manager
  // thread, which attaches every configured mirror (and re-attaches dropped ones). Returns at once.
  static Result<std::unique_ptr<Replicator>> Start(const ReplicationOptions& options,
                                                   const fabric::FabricOptions& fabric_options,
                                                   pm::Pool* pool);
  ~Replicator();

  // Waits until every configured mirror is in sync or `timeout` passes; returns how many are.
  size_t WaitInSync(std::chrono::milliseconds timeout);
  // Adds a mirror while serving (a mirror that announced itself in the group, doc/mirror.md
  // §Joining): the manager attaches it (hello, copy of what differs, in-sync callback) like a
  // configured one. kAlreadyExists for an address already linked, kResourceExhausted past
  // kMaxMirrors, kFailedPrecondition once stopping.
  Status AddMirror(const std::string& address);
  // Posts the range [offset, offset + length) of the pool to every attached mirror (no wait).
  void Forward(uint64_t offset, uint64_t length);
  // Sync mode: returns when every in-sync mirror acknowledged everything forwarded before the
  // call (or was dropped and removed from the in-sync set). Async mode: returns at once.
  // Sync() = EndSync(BeginSync()).
  void Sync();
  // BeginSync posts a FLUSH covering everything forwarded so far to every in-sync mirror that
  // has no FLUSH in flight and returns at once; EndSync waits until every mirror in sync at
  // BeginSync acknowledged everything forwarded before BeginSync (or was dropped and removed
  // from the in-sync set), exactly what Sync promises. Between them the caller persists
  // locally — the primary's msync and the mirrors' run in parallel.
  void BeginSync(MirrorSyncTicket* t);
  void EndSync(MirrorSyncTicket* t);
  std::vector<MirrorLinkStats> stats() const;
  BarrierStats barrier_stats() const;
  bool async() const;
  // Stops the manager, flushes and closes every link. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit Replicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace asymnvm::backend
