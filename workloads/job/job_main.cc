// asymnvm-job: the main job (README command 1): flags → JobOptions → RunJob → the report. What
// a run does, the data directory's files, mirrors and failover: workloads/job/job.h.
//
//   asymnvm-job [--data-dir DIR] [--ops N] [--structures LIST] [--level L] [--pool-size SIZE]
//               [--backends N] [--json FILE] [--fresh] [--pm-mode auto|flush|msync]
//               [--fabric soft|shm|verbs|auto]
//               [--backend-bin PATH] [--log-level L] [--show-runs] [--coord URI]
//               [--mirrors N] [--mirror-mode sync|async] [--kill-primary-after K]
//
// Exit codes (one meaning each; job::kExit*, also in --help and the README):
//   0 success; 1 failure (a session, structure or file error); 2 bad command line;
//   3 verification failed: the data differs from what earlier runs acknowledged;
//   4 interrupted: a back-end daemon died or a connection to one was lost. Everything acknowledged
//     is durable; the next run replays and verifies it.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "workloads/job/job.h"

using namespace asymnvm;

int main(int argc, char** argv) {
  // Line-buffered even into a file or pipe: a supervisor reading the output (the back-end pids,
  // progress) sees each line when it is printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{
      "asymnvm-job: the AsymNVM main job (back-end daemon + front-end over all structures)"};
  app.footer(job::kExitCodesHelp);
  job::JobOptions o;
  o.program_path = argv[0];
  std::string json_path;
  app.add_option("--coord", o.coord,
                 "coordinator URI (dir:PATH | zk:HOST:PORT[,...][/chroot]); "
                 "default dir:DATA_DIR/coord, also passed to the back-end daemons");
  app.add_option("--data-dir", o.data_dir, "directory of the pool file")->capture_default_str();
  app.add_option("--ops", o.ops, "operations in this run")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}))
      ->capture_default_str();
  app.add_option("--structures", o.structures, "structures to use")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--level", o.level, "naive|r|rc|rcb")
      ->check(CLI::IsMember({"naive", "r", "rc", "rcb"}))
      ->capture_default_str();
  app.add_option("--pool-size", o.pool_size, "pool size of each back-end when creating it")
      ->capture_default_str();
  app.add_option("--backends", o.backends,
                 "back-end daemons (more if the data dir holds more pools); "
                 "pbptree is partitioned over all of them")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app.add_option("--json", json_path, "write the result as JSON");
  app.add_flag("--fresh", o.fresh, "delete the pool first (start over)");
  app.add_flag("--show-runs", o.show_runs,
               "print the run log (after replaying an interrupted run) and exit");
  app.add_option("--backend-bin", o.backend_bin,
                 "asymnvm-backend binary (default: found next to this one)");
  app.add_option("--pm-mode", o.pm_mode,
                 "back-end persistence: auto (msync on a disk-backed file: "
                 "durable across power loss) | flush (cache-line flush: the cost model of real PM; "
                 "on a disk-backed file durable across process crashes only) | msync")
      ->check(CLI::IsMember({"auto", "flush", "msync"}))
      ->capture_default_str();
  app.add_option("--fabric", o.fabric,
                 "fabric provider of the front-end and the back-ends: soft | shm (same host: "
                 "one-sided operations are loads and stores on the shared pool, doc/fabric.md) | "
                 "verbs | auto")
      ->check(CLI::IsMember({"soft", "shm", "verbs", "auto"}))
      ->capture_default_str();
  app.add_option("--mirrors", o.mirrors,
                 "asymnvm-mirror daemons per back-end (doc/mirror.md): every "
                 "persisted range is forwarded to them (DIR/asymnvm[-N].mirror-M.pool); default 0 "
                 "(on this 2-core machine a mirror made the default run 2.6x slower: "
                 "doc/mirror.md §Main job)")
      ->check(CLI::Range(0, 4))
      ->capture_default_str();
  app.add_option("--mirror-mode", o.mirror_mode, "sync (RPO 0) | async")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  app.add_option("--kill-primary-after", o.kill_primary_after,
                 "with --mirrors >= 1: SIGKILL back-end 0 after K acknowledged operations and "
                 "delete its pool file; a mirror is promoted, the job follows it and verifies "
                 "everything (the old pool path rejoins as a mirror)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}));
  app.add_option("--log-level", o.log_level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? job::kExitOk : job::kExitUsage;
  }
  auto report = job::RunJob(o);  // prints its progress and every diagnostic as it goes
  if (!report.ok()) return job::JobExitCode(report.status());
  if (report->showed_runs) return job::kExitOk;
  return job::PrintReport(*report, json_path);
}
