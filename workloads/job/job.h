// The main job (README command 1) as a library: asymnvm-job's whole run behind one call.
//
// RunJob starts asymnvm-backend daemons on DIR/asymnvm.pool, DIR/asymnvm-1.pool, ... (created
// on first use; as many as JobOptions::backends or as the pools already there), opens every
// structure kind as a named root on the first back-end and a B+tree partitioned over all
// back-ends ("pbptree") from one front-end, replays op logs left by a crashed earlier run,
// VERIFIES the data left by earlier runs against a model regenerated from their seeds
// (workloads/job/job_model.h), runs a mixed workload over all structures (maps: 50 % get, 40 %
// put, 10 % delete; sequences: 60 % push, 40 % pop) checking every read against the model,
// records the run, stops the daemons with SIGTERM and checks that they exited cleanly. Running
// it again on the same DIR reopens and verifies the same data.
//
// Mirrors and failover (doc/mirror.md §Main job; workloads/job/job_replicas.h): `mirrors` N
// starts N asymnvm-mirror daemons per back-end; `kill_primary_after` K SIGKILLs back-end 0 after
// K acknowledged operations, deletes its pool, follows the promoted mirror, rejoins the old path
// as a mirror and verifies everything.
//
// Front-end identity (doc/coord.md): the job holds its front-end id on the coordinator
// (`coord`, default dir:DIR/coord) for its whole life; the id is kept in DIR/job.frontend-id
// (a later run replays a crashed one's op logs only under the same id). A second live job on
// the same directory is refused before it touches anything.
//
// The run log ("job-runs", a stack on the first back-end) is only ever pushed to and read with
// Sequence::List: a run never removes a record, so a kill at any moment cannot lose one.
//
// Output: RunJob prints its progress (daemons started, replay, verification, failover) to
// stdout and every diagnostic to stderr as it goes, exactly as asymnvm-job shows them;
// PrintReport prints the result. Not thread-safe: one RunJob per process at a time (it owns the
// daemons it starts, and stdout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::job {

// Exit codes of asymnvm-job (one meaning each).
inline constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitVerification = 3,
                     kExitInterrupted = 4;
inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 success; 1 failure (session, structure or file error); 2 bad command line; "
    "3 verification failed (the data differs from what earlier runs acknowledged); 4 interrupted "
    "(a back-end daemon died or a connection to it was lost: everything acknowledged is durable, "
    "run the job again to replay and verify it).";

struct JobOptions {
  std::string data_dir = "data";
  uint64_t ops = 10000;  // operations in this run, 1..1e8
  // Structures this run uses (kind names or "pbptree"); earlier runs' others are verified too.
  std::vector<std::string> structures = {"stack",  "queue", "hash",     "skiplist", "bst",
                                         "bptree", "mvbst", "mvbptree", "pbptree"};
  std::string level = "rcb";       // naive | r | rc | rcb
  std::string pool_size = "1G";    // of each back-end's pool when creating it
  uint32_t backends = 2;           // more if the data dir holds more pools; 1..8
  bool fresh = false;              // delete the pools first (start over)
  bool show_runs = false;          // print the run log (after replaying) and stop
  std::string backend_bin;         // empty: found next to `program_path`
  std::string program_path;        // argv[0] of the calling program
  std::string log_level = "warn";  // of the daemons
  std::string pm_mode = "auto";    // auto | flush | msync
  std::string fabric = "soft";     // soft | shm | verbs | auto
  std::string coord;               // coordinator URI; empty: dir:DATA_DIR/coord
  uint32_t mirrors = 0;            // asymnvm-mirror daemons per back-end, 0..4
  std::string mirror_mode = "sync";
  uint64_t kill_primary_after = 0;  // 0: never; needs mirrors >= 1 and < ops
};

struct StructureReport {
  std::string name;
  uint64_t ops = 0;
  double p50_us = 0, p99_us = 0;
  uint64_t elements = 0;
  uint64_t read_mismatches = 0;  // reads that returned data other than the model's
};

// --kill-primary-after: the failover of back-end 0 (doc/mirror.md §Main job).
struct FailoverReport {
  bool killed = false;
  int old_pid = 0;
  std::string old_address, new_address, old_pool, new_pool, rejoin_address;
  uint64_t term = 0, replayed = 0;
  double switch_ms = -1, first_op_ms = -1, rejoin_ms = -1;
  uint64_t verified_elements = 0;  // verified after the promotion
};

struct JobReport {
  bool showed_runs = false;  // JobOptions::show_runs: only the run log was printed
  uint64_t run = 0;          // this run's number, from 0
  uint64_t ops = 0;
  double seconds = 0;
  std::string level, pm_mode, data_dir;
  uint64_t verified_elements = 0;  // left by earlier runs, verified before this run
  std::vector<StructureReport> structures;
  // Per operation; -1 where not measurable (after a failover the counters restarted).
  double round_trips_per_op = -1, bytes_per_op = -1, backend_cpu_us_per_op = -1;
  double cache_hit_percent = -1, syncs_per_op = -1, syncs_per_update = -1;
  size_t backends = 0;  // served by the front-end
  uint64_t kill_primary_after = 0;
  FailoverReport failover;
  uint32_t mirrors = 0;
  std::string mirror_mode;
  // The daemons' stop lines ("back-end 0: <its last log line>", ...), in order.
  std::vector<std::string> stop_lines;
  // Stopping a daemon failed: what RunJob would have printed to stderr, and the exit code.
  // PrintReport prints it after the stop lines before it (and nothing after).
  std::string stop_failure_text;
  int stop_failure_exit = kExitOk;
  size_t pools = 0;  // daemons started for back-ends
  uint64_t total_read_mismatches() const;
};

// Runs the job. An error is how the run ended, already reported on stderr; JobExitCode maps it:
//   kInvalidArgument  bad options (checked before anything is touched)          exit 2
//   kCorruption       verification failed: the data differs from what earlier  exit 3
//                     runs acknowledged
//   kUnavailable      interrupted: a back-end died or a connection to one was   exit 4
//                     lost; everything acknowledged is durable, a next run replays and verifies
//   anything else     a session, structure or file error                         exit 1
Result<JobReport> RunJob(const JobOptions& options);
int JobExitCode(const Status& st);

// Prints the report (result table, per-operation costs, failover, the daemons' stop lines) to
// stdout, writes it as JSON to `json_path` when not empty, and returns the exit code: kExitOk,
// kExitVerification (reads differed from the model), or a failure to stop a daemon's code.
int PrintReport(const JobReport& report, const std::string& json_path);

}  // namespace asymnvm::job
