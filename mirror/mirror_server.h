// The mirror's serving side (asymnvm-mirror; doc/mirror.md): owns a pool of its primary's size and
// uuid, registers all of it with its NIC (remote write/read, persisted through the pool's
// persister on the primary's FLUSH), and answers the primary's control requests and `status`
// over a non-durable Ordered Queue. It is passive: the primary's WRITEs and FLUSHes land and are
// persisted by the NIC; no mirror thread takes part in the data path.
//
// State (sidecar file POOL.mirror, replaced atomically): "state syncing|in-sync\nuuid U\nterm N\n
// primary NAME\n". A hello (a primary starting a full copy) writes "syncing" before any byte may
// land; the primary's "synced" writes "in-sync". Only an in-sync mirror may be promoted.
//
// Thread safety: every method from any thread; Stop is idempotent.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"

namespace asymnvm::mirror {

struct MirrorOptions {
  std::string pool_path;  // required
  pm::PersistMode persist_mode = pm::PersistMode::kAuto;
  std::string listen_address = "tcp://127.0.0.1:0";       // control (Ordered Queue)
  std::string data_listen_address = "tcp://127.0.0.1:0";  // the primary's WRITE/FLUSH stream
  fabric::FabricOptions fabric;
  std::string name;  // replica name (group state)
  // Runs (on the request thread) once the primary reports the copy complete (state in-sync).
  std::function<void(const std::array<uint8_t, 16>& uuid, uint64_t term)> on_synced;
  // Tests: open the pool with pm crash simulation (PoolOptions::crash_sim), so TEST_PowerLoss can
  // model the loss of the mirror's machine (asymnvm-mirror --TEST-crash-sim, SIGUSR1).
  bool crash_sim = false;
};

struct MirrorState {
  std::string state = "empty";  // empty | syncing | in-sync
  std::array<uint8_t, 16> uuid{};
  bool has_uuid = false;
  uint64_t term = 0;
  std::string primary;
  // The primary's stream this pool is a copy of (0: none known); with state in-sync the pool
  // holds everything of that stream up to its last acknowledged FLUSH, so the same primary can
  // catch it up incrementally (doc/mirror.md §Catch-up).
  uint64_t stream = 0;
};

// Reads POOL.mirror (state "empty" when missing). kCorruption when malformed.
Result<MirrorState> ReadMirrorState(const std::string& pool_path);

class MirrorServer {
 public:
  // Opens the pool if it exists (it must then be the size of the primary that attaches), starts
  // the fabric, the control server and the data listener. Errors: pool errors naming the path
  // (locked by another process, not a pool), fabric errors.
  static Result<std::unique_ptr<MirrorServer>> Start(const MirrorOptions& options);
  ~MirrorServer();

  std::string address() const;  // control address (what a primary's --mirror names)
  std::string data_address() const;
  MirrorState state() const;
  std::string StatusJson() const;
  // Stops serving and closes the pool (its file then holds every byte the mirror acknowledged).
  void Stop();
  // Tests (crash_sim only): stops serving, then models a power loss of the mirror's machine
  // (pm::Pool::SimulateCrash: each line not persisted by an acknowledged FLUSH kept with
  // probability `keep`) and closes the pool. kFailedPrecondition without crash_sim.
  Status TEST_PowerLoss(uint64_t seed, double keep, uint64_t* dropped_lines = nullptr);

 private:
  struct Impl;
  explicit MirrorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace asymnvm::mirror
