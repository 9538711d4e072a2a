// asymnvm-ctl: operator tool for a back-end and its pool (doc/tools.md).
//
//   asymnvm-ctl status ADDR [--json] [--timeout-ms N] [--secret-file PATH]
//                                                      ask a running back-end (kStatus over the OQ)
//   asymnvm-ctl inspect POOL [--json]                   dump a pool that no back-end holds
//   asymnvm-ctl check POOL [--json]                     validate a pool that no back-end holds
//                                                      (and report leaked blocks)
//   asymnvm-ctl gc POOL [--json] [--dry-run] [--pm-mode M]
//                                                      free the leaked blocks of a stopped pool
//   asymnvm-ctl coord ls|get|set|rm URI PATH ...        read / edit coordinator nodes
//   asymnvm-ctl cluster --coord URI [--json]            everything the coordinator knows: groups,
//                                                      KV shards, front-ends (exit 7/8/9: degraded
//                                                      / unprotected / unavailable; ctl_cluster.cc)
//   asymnvm-ctl diff POOL_A POOL_B [--json]             compare two stopped pools region by region
//                                                      (a primary and its mirror; exit 4 if they
//                                                      differ)
//
// inspect and check never write the pool: they open it with pm::Pool::Open (which takes the pool's
// exclusive lock, so a pool a running back-end holds is refused with a message saying so — use
// `status` for a live back-end), then decode the superblock and back-end header from the mapping
// and run the naming-space and allocator validators over DRAM copies of those regions (allocator
// recovery may rewrite its copy; the pool file is untouched). check also scans the landed records
// — every live Rowan b-log segment (rowan::CheckArea) and the OQ durable area from ReqToExecute
// (oq::ScanDurableArea), with the back-end's own decoders — and names a corrupt entry / request
// (region, pool offset, owner or txn_seq when readable), while an unfinished landing a crash cut
// short (never acknowledged) is only a note (doc/tools.md §check).
//
// Exit codes: 0 ok / clean, 1 cannot open or connect (message on stderr), 2 bad arguments,
// 3 (check) corruption found: one line per problem on stdout, naming the region and pool offset,
// 5 (check) no corruption but leaked blocks (LEAK lines), 6 (gc) refused: nothing freed.
//
// Leaks (tools/ctl_gc.cc; doc/tools.md §Leaks): check and gc start a back-end in process —
// check on a sparse copy of the pool (the pool itself is never written), gc on the pool — which
// recovers it as a restart would, then walk every structure (structures/walk.h) with a session of
// front-end id kWalkFrontendId and compare the blocks reached with the allocator's extents.
//
// Thread safety: every function is reentrant (no shared state).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "alloc/backend_allocator.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"

namespace asymnvm::tools {

inline constexpr int kCtlOk = 0;
inline constexpr int kCtlFailed = 1;
inline constexpr int kCtlUsage = 2;
inline constexpr int kCtlCorrupt = 3;
inline constexpr int kCtlDiffer = 4;   // diff: the pools differ
inline constexpr int kCtlLeaks = 5;    // check: leaked blocks, no corruption
inline constexpr int kCtlRefused = 6;  // gc: refused (a structure walk failed, corruption)

// The front-end id of the walk's session (its `fe:` record is removed when the walk ends).
inline constexpr uint64_t kWalkFrontendId = 65521;

struct LeakOptions {
  bool free = false;  // gc: free every leaked extent (only when the walk succeeded)
  pm::PersistMode persist_mode = pm::PersistMode::kAuto;
  // The pool's OQ area geometry (from ExaminePool's report["oq"]).
  uint32_t oq_buffers = 16, oq_buffer_size = 64 * 1024;
};

struct LeakReport {
  uint32_t block_size = 0;
  uint64_t blocks_total = 0, blocks_used = 0, blocks_reachable = 0, blocks_pending_free = 0;
  uint64_t leaked_blocks = 0;
  std::vector<alloc::Extent> leaked;    // allocated extents no structure reaches
  std::vector<alloc::Extent> freed;     // gc: what it freed (= leaked)
  std::vector<std::string> structures;  // walked
  // Non-empty: the walk failed (unknown type, a Verify error): nothing is leaked or freed.
  std::string walk_error;
  StatusCode walk_code = StatusCode::kOk;
  // Data-area ranges a structure read that no allocated extent holds (corruption: gc refuses).
  std::vector<std::pair<uint64_t, uint64_t>> unallocated_reads;
  // Front-end ownership journals found (their extents count as reachable, not leaked) and, for
  // gc, cleared before anything is freed, their extents freed after the leaks (not in `freed`)
  // (frontend/alloc_journal.h; doc/alloc.md §Ownership journal).
  uint64_t journals = 0, journals_cleared = 0;
  uint64_t journal_blocks = 0;  // blocks of the journals' extents (within blocks_reachable)
  double seconds = 0;
};

// Starts a back-end on `pool_path` in process (kFailedPrecondition when the pool is in use),
// walks, compares, and with options.free frees the leaked extents (durably, before returning)
// when the walk succeeded and read nothing unallocated. Other errors: the back-end's, the
// session's.
Result<LeakReport> FindLeaks(const std::string& pool_path, const LeakOptions& options);
// FindLeaks on a sparse copy of the pool in the temp directory (removed afterwards); never frees.
Result<LeakReport> FindLeaksInCopy(const std::string& pool_path, LeakOptions options);
nlohmann::ordered_json LeakJson(const LeakReport& r);
// LEAK lines (at most max_lines extents) and the summary line.
void PrintLeaks(const LeakReport& r, std::ostream& out, size_t max_lines = 50);

// asymnvm-ctl diff A B (tools/ctl_diff.cc): 0 identical, 4 differ, 1 cannot open / in use.
int RunDiff(const std::string& a_path, const std::string& b_path, bool json, std::ostream& out,
            std::ostream& err);

// What inspect/check learned about a pool. `report` is the JSON form (`--json` prints it);
// `problems` lists every inconsistency found ("<region> @<pool offset>: <what>"), empty if clean;
// `notes` lists recoverable findings that are not corruption (e.g. a torn bitmap copy that
// recovery would repair).
struct PoolReport {
  nlohmann::ordered_json report;
  std::vector<std::string> problems;
  std::vector<std::string> notes;
};

// Opens `pool_path` (locking it) and examines it. Errors (the pool cannot be examined at all):
// kNotFound (no file), kFailedPrecondition (held by a running back-end or another process — the
// message says to use `status`), kInvalidArgument (a pm pool of another layout, not a back-end
// pool), kIoError. A pool whose superblock fails validation is NOT an error: it is returned as a
// problem ("superblock: ...") with nothing else examined; likewise a header that fails DecodeLayout
// stops the examination after that problem.
Result<PoolReport> ExaminePool(const std::string& pool_path);

// Sends kStatus to the back-end at `address` (as printed by asymnvm-backend "listening ...") and
// returns its JSON text. Errors: connection errors (kConnectionError, kTimedOut, ...) from the OQ
// client, kProtocolError (the reply is not JSON).
// `secret_file` empty: the cluster secret from ASYMNVM_SECRET_FILE / ASYMNVM_SECRET or the default.
Result<std::string> FetchStatus(const std::string& address, std::chrono::milliseconds timeout,
                                const std::string& secret_file = "");

// Human-readable rendering of a status JSON document / a pool report.
void PrintStatus(const nlohmann::json& status, std::ostream& out);
void PrintPoolReport(const PoolReport& r, std::ostream& out);

// `asymnvm-ctl coord ls|get|set|rm URI PATH ...` (tools/ctl_coord.cc; args exclude "coord").
int RunCtlCoord(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `asymnvm-ctl cluster ...` (tools/ctl_cluster.cc; doc/operations.md §Cluster view).
int RunCtlCluster(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The whole command line (args exclude the program name). Returns the exit code above.
int RunCtl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace asymnvm::tools
