// asymnvm-job: the main job (README command 1).
//
//   asymnvm-job [--data-dir DIR] [--ops N] [--structures LIST] [--level L] [--pool-size SIZE]
//               [--backends N] [--json FILE] [--fresh] [--pm-mode auto|flush|msync]
//               [--fabric soft|shm|verbs|auto]
//               [--backend-bin PATH] [--log-level L] [--show-runs] [--coord URI]
//               [--mirrors N] [--mirror-mode sync|async] [--kill-primary-after K]
//
// Mirrors (doc/mirror.md): --mirrors N starts N asymnvm-mirror daemons per back-end (pools
// DIR/asymnvm[-i].mirror-M.pool, control sockets next to them) before it, passes them with
// --mirror, and stops them after the back-ends (a clean stop never promotes a mirror).
// --kill-primary-after K (needs --mirrors >= 1): after K acknowledged operations the job SIGKILLs
// back-end 0 and deletes its pool file; a mirror is promoted (term change on the coordinator), the
// job's sessions (which share the job's front-end identity and so reconnect by themselves) follow
// it and replay, the operations go on, the old primary's pool path rejoins as a mirror of the
// promoted primary (full copy while it serves), and every structure is verified at the end.
// Replica slots of back-end i: slot 0 = DIR/asymnvm[-i].pool, slot m+1 = its mirror m's pool.
// Which slot serves is the group's state on the coordinator (/asymnvm/groups/<uuid>/state names
// the primary replica, host:absolute pool path): a later run serves the promoted pool, and the
// other slots (the old primary's path included) become its mirrors (doc/mirror.md §Main job).
//
// Front-end identity (doc/coord.md): the job holds its front-end id on the coordinator (--coord,
// default the embedded one in the data directory, dir:DIR/coord, which the daemons use too) for
// its whole life. The id is allocated on the first run and kept in DIR/job.frontend-id, because a
// later run replays the op logs of a crashed one only under the SAME id; a data directory from
// before this file uses id 1. A second live job on the same directory is refused (exit 1) before
// it touches anything.
//
// Starts asymnvm-backend daemons on DIR/asymnvm.pool, DIR/asymnvm-1.pool, ... (created on first
// use; as many as --backends or as the pools already there, default 2), opens every structure kind
// as a named root on the first back-end and a B+tree partitioned over all back-ends ("pbptree",
// frontend::Cluster + structures::OpenPartitioned) from one front-end, replays op logs left by a
// crashed earlier run, VERIFIES the data left by earlier runs against a model regenerated from
// their seeds, runs a mixed workload over all structures (maps: 50 % get, 40 % put, 10 % delete;
// sequences: 60 % push, 40 % pop) checking every read against the model, prints progress and a
// result table, records the run, stops the back-end with SIGTERM and checks that it exited
// cleanly. Running it again on the same DIR reopens and verifies the same data.
//
// Exit codes (one meaning each; kExit* below, also in --help and the README):
//   0 success; 1 failure (a session, structure or file error); 2 bad command line;
//   3 verification failed: the data differs from what earlier runs acknowledged;
//   4 interrupted: a back-end daemon died or a connection to one was lost. Everything acknowledged
//     is durable; the next run replays and verifies it.
//
// The run log ("job-runs", a stack on the first back-end) is only ever pushed to and read with
// Sequence::List: a run never removes a record, so a kill at any moment cannot lose one.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "asymnvm/cluster.h"
#include "asymnvm/frontend.h"
#include "asymnvm/pm.h"
#include "asymnvm/structures/partitioned.h"
#include "asymnvm/structures/structure.h"
#include "common/logging.h"
#include "frontend/identity.h"
#include "mirror/group.h"
#include "tools/ctl.h"
#include "workloads/bench/latency.h"
#include "workloads/driver/backend_process.h"
#include "workloads/driver/runner.h"
#include "workloads/gen/generators.h"

using namespace asymnvm;
namespace fs = std::filesystem;
using structures::Kind;

namespace {

constexpr uint64_t kKeys = 4096;        // keynums per map
constexpr uint64_t kSeedBase = 0xA5A5;  // run r uses seed kSeedBase + r
constexpr uint32_t kValueSize = 64;
// The job's B+tree partitioned over every back-end: a pseudo-kind of its own (bit 16 of a run
// record's mask), a map like the others.
constexpr Kind kPartitioned = static_cast<Kind>(16);
// Run log records: run u64 | ops u64 | kinds mask u64; this bit of the mask marks a run's start
// record (pushed before its first operation; the end record follows when it completes).
constexpr uint64_t kStartedBit = uint64_t{1} << 63;

constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitVerification = 3,
              kExitInterrupted = 4;
constexpr const char* kExitCodesHelp =
    "Exit codes: 0 success; 1 failure (session, structure or file error); 2 bad command line; "
    "3 verification failed (the data differs from what earlier runs acknowledged); 4 interrupted "
    "(a back-end daemon died or a connection to it was lost: everything acknowledged is durable, "
    "run the job again to replay and verify it).";

// Errors that mean "a daemon or a connection went away", not "the data is wrong".
bool IsLostConnection(const Status& st) {
  switch (st.code()) {
    case StatusCode::kConnectionError:
    case StatusCode::kTimedOut:
    case StatusCode::kRnrRetryExceeded:
    case StatusCode::kAborted:
    case StatusCode::kUnavailable:
      return true;
    default:
      return false;
  }
}

// The pool's uuid from its superblock (read-only look at the first 4 KiB).
Result<std::array<uint8_t, 16>> ReadPoolUuid(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("open " + path, errno);
  std::vector<uint8_t> buf(pm::kSuperblockSize);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  const int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(buf.size()))
    return Status::IoError("read superblock of " + path, e);
  pm::Superblock sb;
  ASYMNVM_RETURN_IF_ERROR(pm::DecodeSuperblock(buf.data(), buf.size(), &sb));
  return sb.uuid;
}

const char* JobName(Kind k) { return k == kPartitioned ? "pbptree" : structures::KindName(k); }

Result<Kind> ParseJobKind(const std::string& n) {
  if (n == "pbptree") return kPartitioned;
  auto k = structures::ParseKind(n);
  if (!k.ok()) {
    return Status::InvalidArgument(std::string(k.status().message()) +
                                   ", or pbptree (a B+tree "
                                   "partitioned over every back-end)");
  }
  return k;
}

std::vector<Kind> JobKinds() {
  std::vector<Kind> v(std::begin(structures::kAllKinds), std::end(structures::kAllKinds));
  v.push_back(kPartitioned);
  return v;
}

Result<std::unique_ptr<structures::Handle>> OpenJobStructure(frontend::Cluster& c, Kind k) {
  if (k == kPartitioned) {
    ASYMNVM_ASSIGN_OR_RETURN(auto m,
                             structures::OpenPartitioned(c, Kind::kBPlusTree, "job-pbptree"));
    return std::unique_ptr<structures::Handle>(std::move(m));
  }
  return structures::Open(c.session(0), k, std::string("job-") + structures::KindName(k));
}

struct Model {
  std::map<uint64_t, structures::Value> map;
  std::deque<structures::Value> seq;
};

// One operation of a run, derived from the run's RNG only (never from the data), so a later run
// can regenerate the whole history.
struct JobOp {
  size_t structure;  // index into the job's structure list
  int kind;          // maps: 0 get, 1 put, 2 delete; sequences: 0 peek, 1 push, 2 pop
  uint64_t key;
  structures::Value value;
};

JobOp NextOp(workloads::Rng& rng, const std::vector<Kind>& kinds, uint64_t run, uint64_t i) {
  JobOp op;
  op.structure = rng.Next() % kinds.size();
  const uint64_t r = rng.Next() % 100;
  if (structures::IsSequence(kinds[op.structure])) {
    op.kind = r < 60 ? 1 : 2;
  } else {
    op.kind = r < 50 ? 0 : (r < 90 ? 1 : 2);
  }
  op.key = workloads::KeyNumToKey(rng.Next() % kKeys, true);
  if (op.kind == 1) {
    op.value = driver::ValueFor(op.key, run * 1000003 + i, 1 + rng.Next() % kValueSize);
  }
  return op;
}

void ApplyToModel(Model& m, Kind kind, const JobOp& op) {
  if (structures::IsSequence(kind)) {
    if (op.kind == 1) {
      m.seq.push_back(op.value);
    } else if (op.kind == 2 && !m.seq.empty()) {
      if (kind == Kind::kStack) {
        m.seq.pop_back();
      } else {
        m.seq.pop_front();
      }
    }
  } else if (op.kind == 1) {
    m.map[op.key] = op.value;
  } else if (op.kind == 2) {
    m.map.erase(op.key);
  }
}

// The command line's structures come first in `kinds` (earlier runs' extra ones are appended).
size_t names_count(const std::vector<Kind>& kinds, const std::vector<std::string>& names) {
  size_t n = 0;
  for (Kind k : kinds) {
    if (std::find(names.begin(), names.end(), JobName(k)) == names.end()) break;
    n++;
  }
  return n;
}

std::string Fmt(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", prec, v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered even into a file or pipe: a supervisor reading the output (the back-end pids,
  // progress) sees each line when it is printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{
      "asymnvm-job: the AsymNVM main job (back-end daemon + front-end over all structures)"};
  app.footer(kExitCodesHelp);
  std::string data_dir = "data", level_name = "rcb", pool_size = "1G", json_path, backend_bin,
              log_level = "warn", pm_mode = "auto";
  uint64_t ops = 10000;
  uint32_t nbackends = 2;
  std::vector<std::string> names = {"stack",  "queue", "hash",     "skiplist", "bst",
                                    "bptree", "mvbst", "mvbptree", "pbptree"};
  bool fresh = false, show_runs = false;
  std::string coord_uri;
  app.add_option("--coord", coord_uri,
                 "coordinator URI (dir:PATH | zk:HOST:PORT[,...][/chroot]); "
                 "default dir:DATA_DIR/coord, also passed to the back-end daemons");
  app.add_option("--data-dir", data_dir, "directory of the pool file")->capture_default_str();
  app.add_option("--ops", ops, "operations in this run")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}))
      ->capture_default_str();
  app.add_option("--structures", names, "structures to use")->delimiter(',')->capture_default_str();
  app.add_option("--level", level_name, "naive|r|rc|rcb")
      ->check(CLI::IsMember({"naive", "r", "rc", "rcb"}))
      ->capture_default_str();
  app.add_option("--pool-size", pool_size, "pool size of each back-end when creating it")
      ->capture_default_str();
  app.add_option("--backends", nbackends,
                 "back-end daemons (more if the data dir holds more pools); "
                 "pbptree is partitioned over all of them")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app.add_option("--json", json_path, "write the result as JSON");
  app.add_flag("--fresh", fresh, "delete the pool first (start over)");
  app.add_flag("--show-runs", show_runs,
               "print the run log (after replaying an interrupted run) and exit");
  app.add_option("--backend-bin", backend_bin,
                 "asymnvm-backend binary (default: found next to this one)");
  app.add_option("--pm-mode", pm_mode,
                 "back-end persistence: auto (msync on a disk-backed file: "
                 "durable across power loss) | flush (cache-line flush: the cost model of real PM; "
                 "on a disk-backed file durable across process crashes only) | msync")
      ->check(CLI::IsMember({"auto", "flush", "msync"}))
      ->capture_default_str();
  std::string fabric_provider = "soft";
  app.add_option("--fabric", fabric_provider,
                 "fabric provider of the front-end and the back-ends: soft | shm (same host: "
                 "one-sided operations are loads and stores on the shared pool, doc/fabric.md) | "
                 "verbs | auto")
      ->check(CLI::IsMember({"soft", "shm", "verbs", "auto"}))
      ->capture_default_str();
  uint32_t nmirrors = 0;
  std::string mirror_mode = "sync";
  app.add_option("--mirrors", nmirrors,
                 "asymnvm-mirror daemons per back-end (doc/mirror.md): every "
                 "persisted range is forwarded to them (DIR/asymnvm[-N].mirror-M.pool); default 0 "
                 "(on this 2-core machine a mirror made the default run 2.6x slower: "
                 "doc/mirror.md §Main job)")
      ->check(CLI::Range(0, 4))
      ->capture_default_str();
  app.add_option("--mirror-mode", mirror_mode, "sync (RPO 0) | async")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  uint64_t kill_after = 0;
  app.add_option("--kill-primary-after", kill_after,
                 "with --mirrors >= 1: SIGKILL back-end 0 after K acknowledged operations and "
                 "delete its pool file; a mirror is promoted, the job follows it and verifies "
                 "everything (the old pool path rejoins as a mirror)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}));
  app.add_option("--log-level", log_level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (kill_after > 0 && nmirrors == 0) {
    std::cerr << "asymnvm-job: --kill-primary-after needs --mirrors >= 1 (a mirror to promote)\n";
    return kExitUsage;
  }
  if (kill_after > 0 && kill_after >= ops) {
    std::cerr << "asymnvm-job: --kill-primary-after must be less than --ops\n";
    return kExitUsage;
  }
  LogLevel ll;
  ParseLogLevel(log_level, &ll);
  SetLogLevel(ll);
  std::vector<Kind> kinds;  // this run's structures
  for (const auto& n : names) {
    auto k = ParseJobKind(n);
    if (!k.ok()) {
      std::cerr << "asymnvm-job: --structures: " << k.status().message() << "\n";
      return kExitUsage;
    }
    if (std::find(kinds.begin(), kinds.end(), *k) == kinds.end()) kinds.push_back(*k);
  }
  // A run's operations pick structures by index into its kinds in this order; a later run
  // regenerates them from the kinds mask, so the order must not depend on the command line.
  std::sort(kinds.begin(), kinds.end());
  std::vector<std::unique_ptr<driver::BackendProcess>> daemons;
  // A failed step: kExitInterrupted when a daemon died or a connection was lost (the data is
  // safe), kExitFailure otherwise.
  auto fail = [&daemons](const std::string& what, const Status& st) {
    std::cerr << "asymnvm-job: " << what << ": " << st.ToString() << "\n";
    // A killed daemon's sockets close as it exits, so the lost connection can be seen a moment
    // before the exit itself: give the exit up to a second to show before naming the cause.
    bool died = false;
    const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    do {
      for (size_t i = 0; i < daemons.size(); i++) {
        std::string how;
        if (daemons[i] && daemons[i]->Exited(&how)) {
          std::cerr << "asymnvm-job: back-end " << i << " (pid " << daemons[i]->pid() << ") " << how
                    << "\n";
          died = true;
        }
      }
      if (died || !IsLostConnection(st)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < settle);
    if (died || IsLostConnection(st)) {
      std::cerr
          << "asymnvm-job: interrupted: everything acknowledged is durable in the pool files; "
             "run the job again to replay and verify it (exit "
          << kExitInterrupted << ")\n";
      return kExitInterrupted;
    }
    return kExitFailure;
  };
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  if (ec) {
    std::cerr << "asymnvm-job: cannot create " << data_dir << ": " << ec.message() << "\n";
    return kExitFailure;
  }
  auto pool_path = [&](uint32_t i) {
    return (fs::path(data_dir) /
            (i == 0 ? std::string("asymnvm.pool") : "asymnvm-" + std::to_string(i) + ".pool"))
        .string();
  };
  // The front-end id: claimed before anything else, held until exit (frontend/identity.h).
  if (coord_uri.empty()) coord_uri = "dir:" + (fs::absolute(data_dir) / "coord").string();
  const std::string id_path = (fs::path(data_dir) / "job.frontend-id").string();
  uint64_t wanted_id = 0;
  if (fs::exists(id_path)) {
    std::ifstream f(id_path);
    if (!(f >> wanted_id) || wanted_id == 0 || wanted_id > 0xFFFF) {
      std::cerr << "asymnvm-job: " << id_path << " does not hold a front-end id (1..65535)\n";
      return kExitFailure;
    }
  } else if (fs::exists(pool_path(0))) {
    wanted_id = 1;  // a data directory of a run from before job.frontend-id: its op logs are id 1
  }
  auto identity = frontend::FrontendIdentity::Claim(coord_uri, wanted_id, std::chrono::seconds(30));
  if (!identity.ok()) {
    if (identity.status().code() == StatusCode::kAlreadyExists) {
      std::cerr << "asymnvm-job: another asymnvm-job is running on " << data_dir << ": "
                << identity.status().message() << "\n";
      return kExitFailure;
    }
    return fail("coordinator " + coord_uri, identity.status());
  }
  // Shared with the Cluster's sessions (SessionOptions::identity): each reconnects by itself.
  std::shared_ptr<frontend::FrontendIdentity> held(std::move(*identity));
  if (wanted_id == 0) {
    // Keep the allocated id for every later run (replay needs the same id): tmp + fsync + rename.
    const std::string tmp = id_path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << held->id() << "\n";
      f.flush();
      if (!f) {
        std::cerr << "asymnvm-job: cannot write " << tmp << "\n";
        return kExitFailure;
      }
    }
    int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)::fsync(fd);
      ::close(fd);
    }
    fs::rename(tmp, id_path, ec);
    if (ec) {
      std::cerr << "asymnvm-job: cannot write " << id_path << ": " << ec.message() << "\n";
      return kExitFailure;
    }
  }
  std::cout << "asymnvm-job: front-end id " << held->id() << " (epoch " << held->epoch()
            << ") held at " << coord_uri << "\n";
  auto mirror_path = [&](uint32_t i, uint32_t m) {
    std::string p = pool_path(i);
    return p.substr(0, p.size() - 5) + ".mirror-" + std::to_string(m) + ".pool";
  };
  // Replica slots of back-end i: 0 = its pool, m + 1 = its mirror m's pool; each slot's mirror
  // daemon listens on a unix socket next to the pool, so every run finds it at the same address.
  constexpr uint32_t kSlots = 5;
  auto slot_path = [&](uint32_t i, uint32_t slot) {
    return slot == 0 ? pool_path(i) : mirror_path(i, slot - 1);
  };
  auto slot_address = [&](uint32_t i, uint32_t slot) {
    return "unix://" + fs::absolute(slot_path(i, slot)).lexically_normal().string() + ".sock";
  };
  auto backend_exists = [&](uint32_t i) {
    for (uint32_t slot = 0; slot < kSlots; slot++) {
      if (fs::exists(slot_path(i, slot))) return true;
    }
    return false;
  };
  if (fresh) {
    for (uint32_t i = 0; backend_exists(i); i++) {
      fs::remove(pool_path(i), ec);
      fs::remove(pool_path(i) + ".backend.log", ec);
      fs::remove(pool_path(i) + ".mirror", ec);  // the old primary's path rejoined as a mirror
      for (uint32_t m = 0; m < 4; m++) {
        for (const char* suffix : {"", ".mirror", ".backend.log"}) {
          fs::remove(mirror_path(i, m) + suffix, ec);
        }
      }
    }
  }
  const std::string pool = pool_path(0);
  while (backend_exists(nbackends)) nbackends++;  // every pool of earlier runs is served
  // The slot serving back-end i: the one the group's state on the coordinator names (a mirror
  // promoted by an earlier run), slot 0 when the group has no state.
  coord::Coordinator& job_coord = held->coordinator();
  // A slot whose pool is a mirror's torn copy (sidecar POOL.mirror not "in-sync") never serves.
  auto torn_copy = [&](uint32_t i, uint32_t slot) {
    std::ifstream side(slot_path(i, slot) + ".mirror");
    std::string first;
    return side && std::getline(side, first) && first != "state in-sync";
  };
  auto serving_slot = [&](uint32_t i) -> Result<uint32_t> {
    for (uint32_t slot = 0; slot < kSlots; slot++) {
      if (!fs::exists(slot_path(i, slot)) || torn_copy(i, slot)) continue;
      auto uuid = ReadPoolUuid(slot_path(i, slot));
      if (!uuid.ok()) continue;  // a mirror whose copy never started
      auto node = job_coord.Get(mirror::GroupPath(*uuid) + "/state");
      if (!node.ok()) {
        if (node.status().code() == StatusCode::kNotFound) continue;  // no group (yet)
        return node.status();
      }
      ASYMNVM_ASSIGN_OR_RETURN(mirror::GroupState gs, mirror::DecodeGroupState(node->data));
      for (uint32_t t = 0; t < kSlots; t++) {
        if (mirror::DefaultReplicaName(slot_path(i, t)) == gs.primary) return t;
      }
      return Status::FailedPrecondition("the group " + pm::UuidToString(*uuid) + " of back-end " +
                                        std::to_string(i) + " is served by " + gs.primary +
                                        " (term " + std::to_string(gs.term) +
                                        "), not by a pool of " + data_dir);
    }
    if (fs::exists(slot_path(i, 0)) && torn_copy(i, 0)) {
      return Status::FailedPrecondition(
          slot_path(i, 0) + " is a mirror's incomplete copy (" + slot_path(i, 0) +
          ".mirror) and no group state names a pool to serve instead");
    }
    return 0u;
  };
  if (backend_bin.empty()) {
    auto b = driver::FindBackendBinary(argv[0]);
    if (!b.ok()) return fail("back-end", b.status());
    backend_bin = *b;
  }
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<driver::BackendProcess>>
      mirror_daemons;  // stopped after the back-ends
  std::string mirror_bin;
  if (nmirrors > 0) {
    const auto dir = fs::path(backend_bin).parent_path();
    for (auto p : {dir / ".." / "mirror" / "asymnvm-mirror", dir / "asymnvm-mirror"}) {
      if (::access(p.c_str(), X_OK) == 0) {
        mirror_bin = p.lexically_normal().string();
        break;
      }
    }
    if (mirror_bin.empty()) {
      return fail("mirrors", Status::NotFound("asymnvm-mirror not found next to " + backend_bin));
    }
  }
  // Per back-end: the serving slot and its mirrors' slots (the mirror daemons of back-end i are
  // mirror_daemons[mirror_first[i] ...], in the order of group_slots[i] after the first).
  std::vector<std::vector<uint32_t>> group_slots(nbackends);
  std::vector<size_t> mirror_first(nbackends);
  // A mirror daemon of the group of back-end i on `slot`: it forwards, once promoted, to every
  // other slot of the group (the old primary's path rejoins there, doc/mirror.md §Main job).
  auto start_mirror = [&](uint32_t i,
                          uint32_t slot) -> Result<std::unique_ptr<driver::BackendProcess>> {
    const std::string mp = slot_path(i, slot);
    std::vector<std::string> margs = {"--pm-mode", pm_mode,    "--coord",
                                      coord_uri,   "--listen", slot_address(i, slot)};
    if (kill_after > 0) {
      margs.push_back("--promotion-timeout-ms");
      margs.push_back("1000");
    }
    for (uint32_t other : group_slots[i]) {
      if (other == slot) continue;
      margs.push_back("--mirror");
      margs.push_back(slot_address(i, other));
    }
    if (nmirrors > 0) {
      margs.push_back("--mirror-mode");
      margs.push_back(mirror_mode);
    }
    return driver::BackendProcess::Start(mirror_bin, mp, pool_size, margs, log_level);
  };
  for (uint32_t i = 0; i < nbackends; i++) {
    auto serve = serving_slot(i);
    if (!serve.ok()) return fail("back-end " + std::to_string(i), serve.status());
    const std::string p = slot_path(i, *serve);
    group_slots[i].push_back(*serve);
    for (uint32_t slot = 0; slot < kSlots && group_slots[i].size() < nmirrors + 1; slot++) {
      if (slot != *serve) group_slots[i].push_back(slot);
    }
    std::cout << "asymnvm-job: " << (fs::exists(p) ? "reopening " : "creating ") << p;
    if (*serve != 0) std::cout << " (promoted: the group's state on the coordinator names it)";
    std::cout << "\n";
    std::vector<std::string> bargs = {"--pm-mode", pm_mode,    "--coord",
                                      coord_uri,   "--fabric", fabric_provider};
    mirror_first[i] = mirror_daemons.size();
    for (size_t m = 1; m < group_slots[i].size(); m++) {
      const std::string mp = slot_path(i, group_slots[i][m]);
      auto md = start_mirror(i, group_slots[i][m]);
      if (!md.ok()) return fail("starting mirror " + mp, md.status());
      std::cout << "mirror " << m - 1 << " of back-end " << i << ": pid " << (*md)->pid() << " at "
                << (*md)->address() << " (" << mp << ")\n";
      bargs.push_back("--mirror");
      bargs.push_back((*md)->address());
      mirror_daemons.push_back(std::move(*md));
    }
    if (nmirrors > 0) {
      bargs.push_back("--mirror-mode");
      bargs.push_back(mirror_mode);
    }
    auto be = driver::BackendProcess::Start(backend_bin, p, pool_size, bargs, log_level);
    if (!be.ok()) return fail("starting back-end " + std::to_string(i), be.status());
    std::cout << "back-end " << i << ": pid " << (*be)->pid() << " serving at " << (*be)->address()
              << "\n";
    addresses.push_back((*be)->address());
    daemons.push_back(std::move(*be));
  }

  frontend::SessionOptions so;
  so.backends = addresses;
  so.fabric.provider = fabric_provider;
  // The id is held by `identity` for the whole job: the Cluster's sessions (one per back-end,
  // same id) are opened with it given, not claimed again per session.
  so.frontend_id = held->id();
  // The sessions share the identity (not claimed again) and so follow a promoted mirror by
  // themselves (doc/frontend.md §Reconnection); `coordinator` lets them take over dead writers.
  so.identity = held;
  so.coordinator = coord_uri;
  // With mirrors a lost back-end is waited for (a mirror is promoted within seconds); without,
  // a dead back-end ends the run at once with exit 4 (the next run replays and verifies).
  so.reconnect_deadline =
      nmirrors > 0 ? std::chrono::milliseconds(60000) : std::chrono::milliseconds(0);
  so.level = frontend::ParseLevel(level_name).value();
  so.cache_bytes = 32ull << 20;
  so.timeout = std::chrono::milliseconds(30000);
  auto cluster = frontend::Cluster::Open(so);
  // A connection refused or cut during the handshake while every daemon is alive is a slow or
  // busy machine, not a failure: retry with back-off for up to the session timeout.
  const auto open_deadline = std::chrono::steady_clock::now() + so.timeout;
  for (int attempt = 1; !cluster.ok() && cluster.status().code() == StatusCode::kConnectionError &&
                        std::chrono::steady_clock::now() < open_deadline;
       attempt++) {
    bool alive = true;
    for (auto& d : daemons) alive = alive && !d->Exited();
    if (!alive) break;
    std::cerr << "asymnvm-job: connecting (attempt " << attempt
              << "): " << cluster.status().ToString() << "; retrying\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 50 * attempt)));
    cluster = frontend::Cluster::Open(so);
  }
  if (!cluster.ok()) return fail("session", cluster.status());
  frontend::Cluster& cl = **cluster;
  frontend::Session& s = cl.session(0);
  for (size_t i = 0; i < cl.size(); i++) structures::RegisterReplays(cl.session(i));
  std::vector<std::unique_ptr<structures::Handle>> handles;
  for (Kind k : kinds) {
    auto h = OpenJobStructure(cl, k);
    if (!h.ok()) return fail(std::string("opening ") + JobName(k), h.status());
    handles.push_back(std::move(*h));
  }
  // The run log: one push per completed run (value = run number u64 | op count u64 | mask u64 of
  // the structure kinds it used, bit = Kind value).
  auto runs = structures::OpenSequence(s, Kind::kStack, "job-runs");
  if (!runs.ok()) return fail("opening the run log", runs.status());
  Status rep = cl.Replay();
  if (!rep.ok()) return fail("replaying op logs of an interrupted run", rep);
  uint64_t replayed = 0;
  for (size_t i = 0; i < cl.size(); i++) replayed += cl.session(i).counters().replayed_ops;
  if (replayed > 0) std::cout << "replayed " << replayed << " operations of an interrupted run\n";

  // Regenerate the model of every earlier completed run and verify.
  auto nruns = (*runs)->Count();
  if (!nruns.ok()) return fail("run log", nruns.status());
  struct RunRec {
    uint64_t run, ops, mask;
  };
  // The progress file of the last run that started: (run u64, operations acknowledged u64).
  const std::string progress_path = (fs::path(data_dir) / "job.progress").string();
  uint64_t progress[2] = {0, 0};
  bool have_progress = false;
  {
    std::ifstream pf(progress_path, std::ios::binary);
    have_progress = static_cast<bool>(pf.read(reinterpret_cast<char*>(progress), sizeof progress));
  }
  std::vector<RunRec> run_recs;  // completed runs, in order (ops = operations applied)
  RunRec irec{};                 // a run that started and never recorded its end ...
  bool interrupted = false;      // ... when this is set
  {
    // Read the run records without removing anything (a kill here must not lose one): List gives
    // them newest first.
    std::vector<structures::Value> recs;
    Status st = (*runs)->List(SIZE_MAX, &recs);
    if (!st.ok()) return fail("run log", st);
    for (auto it = recs.rbegin(); it != recs.rend(); ++it) {
      if (it->size() != 24) {
        std::cerr << "asymnvm-job: VERIFICATION FAILED: run log record of " << it->size()
                  << " bytes (expected 24)\n";
        return kExitVerification;
      }
      RunRec rr;
      std::memcpy(&rr.run, it->data(), 8);
      std::memcpy(&rr.ops, it->data() + 8, 8);
      std::memcpy(&rr.mask, it->data() + 16, 8);
      if (show_runs) {
        std::printf(
            "run log %3zu: run %llu %s ops %llu mask 0x%llx\n",
            static_cast<size_t>(it - recs.rbegin()), static_cast<unsigned long long>(rr.run + 1),
            (rr.mask & kStartedBit) ? "start" : "end  ", static_cast<unsigned long long>(rr.ops),
            static_cast<unsigned long long>(rr.mask & ~kStartedBit));
      }
      if (rr.mask & kStartedBit) {  // a run's start record; its end record follows it
        if (interrupted) {
          std::cerr << "asymnvm-job: VERIFICATION FAILED: run log: run " << irec.run + 1
                    << " started twice without an end record\n";
          return kExitVerification;
        }
        rr.mask &= ~kStartedBit;
        irec = rr;
        interrupted = true;
        continue;
      }
      if (interrupted && irec.run != rr.run) {
        std::cerr << "asymnvm-job: VERIFICATION FAILED: run log: run " << irec.run + 1
                  << " is followed by the end record of run " << rr.run + 1 << "\n";
        return kExitVerification;
      }
      if (rr.run != run_recs.size()) {
        std::cerr << "asymnvm-job: VERIFICATION FAILED: run log: the end record of run "
                  << rr.run + 1 << " follows " << run_recs.size() << " completed run(s)\n";
        return kExitVerification;
      }
      interrupted = false;
      run_recs.push_back(rr);
    }
    if (show_runs) {
      std::printf(
          "%zu completed run(s)%s\n", run_recs.size(),
          interrupted ? (", run " + std::to_string(irec.run + 1) + " interrupted").c_str() : "");
      // Forensics: which run pushed each element of the stack? Every pushed value is a function of
      // (run, operation index), so the runs that left data can be named even without their
      // records. Runs are assumed to have used every structure, and as many operations as the
      // largest start record asks for. Short values can be pushed by several (run, op): ambiguous.
      uint64_t last_run = run_recs.size() + (interrupted ? 1 : 0);
      if (have_progress) last_run = std::max(last_run, progress[0] + 1);
      const auto kst = std::find(kinds.begin(), kinds.end(), Kind::kStack);
      std::vector<structures::Value> elems;
      if (kst != kinds.end() && static_cast<structures::Sequence*>(
                                    handles[static_cast<size_t>(kst - kinds.begin())].get())
                                    ->List(SIZE_MAX, &elems)
                                    .ok()) {
        std::map<structures::Value, std::pair<uint64_t, uint64_t>> origin;
        std::set<structures::Value> ambiguous;
        uint64_t max_ops = 1;
        for (const auto& v : recs) {
          uint64_t o = 0, m = 0;
          std::memcpy(&o, v.data() + 8, 8);
          std::memcpy(&m, v.data() + 16, 8);
          if (m & kStartedBit) max_ops = std::max(max_ops, o);
        }
        const std::vector<Kind> all = JobKinds();
        const size_t stack_index =
            static_cast<size_t>(std::find(all.begin(), all.end(), Kind::kStack) - all.begin());
        for (uint64_t r = 0; r < last_run; r++) {
          workloads::Rng rng(kSeedBase + r);
          for (uint64_t i = 0; i < max_ops; i++) {
            JobOp op = NextOp(rng, all, r, i);
            if (op.structure != stack_index || op.kind != 1) continue;
            if (!origin.emplace(op.value, std::make_pair(r, i)).second) ambiguous.insert(op.value);
          }
        }
        std::map<uint64_t, std::pair<uint64_t, uint64_t>>
            per_run;  // run -> (elements, max op index)
        uint64_t unknown = 0;
        for (const auto& e : elems) {
          auto it = origin.find(e);
          if (ambiguous.count(e)) continue;
          if (it == origin.end()) {
            unknown++;
            continue;
          }
          auto& pr = per_run[it->second.first];
          pr.first++;
          pr.second = std::max(pr.second, it->second.second);
        }
        std::printf("stack: %zu elements (of runs of up to %llu operations)\n", elems.size(),
                    static_cast<unsigned long long>(max_ops));
        for (const auto& [r, pr] : per_run) {
          std::printf("  %llu pushed by run %llu (latest at operation %llu)\n",
                      static_cast<unsigned long long>(pr.first),
                      static_cast<unsigned long long>(r + 1),
                      static_cast<unsigned long long>(pr.second + 1));
        }
        if (unknown)
          std::printf("  %llu of no run 1..%llu\n", static_cast<unsigned long long>(unknown),
                      static_cast<unsigned long long>(last_run));
      }
      return kExitOk;
    }
  }
  // Models per kind, from every earlier run's own structure list.
  std::map<Kind, Model> by_kind;
  for (uint64_t r = 0; r < run_recs.size(); r++) {
    std::vector<Kind> rk;
    for (Kind k : JobKinds()) {
      if (run_recs[r].mask & (uint64_t{1} << static_cast<uint32_t>(k))) rk.push_back(k);
    }
    if (rk.empty()) {
      std::cerr << "asymnvm-job: VERIFICATION FAILED: run log record " << r
                << " names no structure\n";
      return kExitVerification;
    }
    workloads::Rng rng(kSeedBase + r);
    for (uint64_t i = 0; i < run_recs[r].ops; i++) {
      JobOp op = NextOp(rng, rk, r, i);
      ApplyToModel(by_kind[rk[op.structure]], rk[op.structure], op);
    }
  }
  // The structures of an interrupted run are verified too.
  std::vector<Kind> interrupted_kinds;
  if (interrupted) {
    for (Kind k : JobKinds()) {
      if (irec.mask & (uint64_t{1} << static_cast<uint32_t>(k))) {
        interrupted_kinds.push_back(k);
        (void)by_kind[k];
      }
    }
    if (interrupted_kinds.empty()) {
      std::cerr << "asymnvm-job: VERIFICATION FAILED: run log: interrupted run " << irec.run + 1
                << " names no structure\n";
      return kExitVerification;
    }
  }
  // Structures of earlier runs that this run does not use are verified too.
  for (const auto& [k, m] : by_kind) {
    if (std::find(kinds.begin(), kinds.end(), k) != kinds.end()) continue;
    auto h = OpenJobStructure(cl, k);
    if (!h.ok()) return fail(std::string("opening ") + JobName(k), h.status());
    kinds.push_back(k);
    handles.push_back(std::move(*h));
  }
  std::vector<Model> models(kinds.size());
  for (size_t i = 0; i < kinds.size(); i++) models[i] = by_kind[kinds[i]];
  // Compares every structure with `ms`: "" when equal, else what differs; *elements counts them.
  // A call that fails for another reason than corruption (a lost connection, a dead daemon) sets
  // *err instead: that is not evidence about the data.
  auto verify = [&](const std::vector<Model>& ms, uint64_t* elements, Status* err) -> std::string {
    auto check = [&](const std::string& name, const Status& st) -> std::string {
      if (st.code() == StatusCode::kCorruption) return name + st.ToString();
      *err = st.WithContext(name + "verification");
      return name + st.ToString();
    };
    for (size_t i = 0; i < kinds.size(); i++) {
      const std::string name = JobName(kinds[i]) + std::string(": ");
      Status vs = handles[i]->Verify();
      if (!vs.ok()) return check(name, vs);
      auto n = handles[i]->Count();
      if (!n.ok()) return check(name, n.status());
      const uint64_t want = structures::IsSequence(kinds[i]) ? ms[i].seq.size() : ms[i].map.size();
      if (*n != want)
        return name + std::to_string(*n) + " elements, expected " + std::to_string(want);
      if (structures::IsSequence(kinds[i])) {
        // Every element, in pop order.
        std::vector<structures::Value> got;
        Status st = static_cast<structures::Sequence*>(handles[i].get())->List(SIZE_MAX, &got);
        if (!st.ok()) return check(name, st);
        if (got.size() != want) {
          return name + "lists " + std::to_string(got.size()) + " elements, expected " +
                 std::to_string(want);
        }
        for (uint64_t j = 0; j < want; j++) {
          const auto& expect = kinds[i] == Kind::kStack ? ms[i].seq[want - 1 - j] : ms[i].seq[j];
          if (got[j] != expect)
            return name + "element " + std::to_string(j) + " (in pop order) differs";
        }
      } else {
        auto* m = static_cast<structures::Map*>(handles[i].get());
        for (const auto& [k, val] : ms[i].map) {
          structures::Value v;
          Status st = m->Get(k, &v);
          if (st.code() == StatusCode::kNotFound)
            return name + "key " + std::to_string(k) + " is missing";
          if (!st.ok()) return check(name + "key " + std::to_string(k) + ": ", st);
          if (v != val) return name + "key " + std::to_string(k) + " has a different value";
        }
      }
      *elements += want;
    }
    return "";
  };
  uint64_t verified = 0;
  {
    // Run numbers are the count of completed runs when a run starts, and the progress file names
    // the last run that started: a larger number than the run log knows means the run log lost
    // records. Jobs before the run log became push-only read it by popping every record and
    // pushing it back, and a kill in between lost the records popped (doc/workloads.md).
    if (have_progress && progress[0] > run_recs.size()) {
      std::cerr << "asymnvm-job: VERIFICATION FAILED: the run log holds " << run_recs.size()
                << " completed run(s) but " << progress_path << " names run " << progress[0] + 1
                << ": run records were lost (a job older than the push-only run log was killed "
                   "while it re-pushed them); the model of earlier runs cannot be rebuilt\n";
      return kExitVerification;
    }
  }
  if (interrupted) {
    // An interrupted run (the job was killed): its acknowledged operations are durable and the
    // replay above re-executed those whose memory logs were pending, so the data is the state
    // after a prefix of its operations: A (the last acknowledged one, from the progress file)
    // or A + 1 (the one in flight, when its op log had landed). Find which, and record it.
    const bool known = have_progress && progress[0] == irec.run;
    const uint64_t acked = known ? progress[1] : 0;
    if (!known) {
      std::cerr << "asymnvm-job: VERIFICATION FAILED: run " << irec.run + 1
                << " was interrupted and its progress file " << progress_path
                << " is missing or from another run\n";
      return kExitVerification;
    }
    std::map<Kind, size_t> index;
    for (size_t i = 0; i < kinds.size(); i++) index[kinds[i]] = i;
    std::string why;
    bool resolved = false;
    for (uint64_t cand : {acked + 1, acked}) {
      if (cand > irec.ops) continue;
      std::vector<Model> ms = models;
      workloads::Rng irng(kSeedBase + irec.run);
      for (uint64_t i = 0; i < cand; i++) {
        JobOp op = NextOp(irng, interrupted_kinds, irec.run, i);
        const Kind k = interrupted_kinds[op.structure];
        ApplyToModel(ms[index[k]], k, op);
      }
      uint64_t elements = 0;
      Status err;
      why = verify(ms, &elements, &err);
      if (!err.ok()) return fail("verifying interrupted run " + std::to_string(irec.run + 1), err);
      if (!why.empty()) continue;
      models = std::move(ms);
      verified = elements;
      uint8_t rec[24];
      std::memcpy(rec, &irec.run, 8);
      std::memcpy(rec + 8, &cand, 8);
      std::memcpy(rec + 16, &irec.mask, 8);
      Status pr = (*runs)->Push(std::span<const uint8_t>(rec, 24));
      if (pr.ok()) pr = (*runs)->Sync();
      if (!pr.ok()) return fail("run log", pr);
      run_recs.push_back({irec.run, cand, irec.mask});
      std::cout << "run " << irec.run + 1 << " was interrupted after " << cand << " of " << irec.ops
                << " operations (" << acked << " acknowledged); recorded\n";
      resolved = true;
      break;
    }
    if (!resolved) {
      std::cerr << "asymnvm-job: VERIFICATION FAILED after interrupted run " << irec.run + 1 << " ("
                << acked << " operations acknowledged): " << why << "\n";
      return kExitVerification;
    }
  } else {
    Status err;
    const std::string why = verify(models, &verified, &err);
    if (!err.ok()) return fail("verifying", err);
    if (!why.empty()) {
      std::cerr << "asymnvm-job: VERIFICATION FAILED for " << why << "\n";
      return kExitVerification;
    }
  }
  if (!run_recs.empty()) {
    std::cout << "verified " << verified << " elements left by " << run_recs.size()
              << " earlier run(s) in " << kinds.size() << " structures\n";
  }

  // This run.
  const uint64_t run = run_recs.size();
  // This run's operations go to the structures named on the command line only.
  const size_t active = names_count(kinds, names);
  const std::vector<Kind> run_kinds(kinds.begin(), kinds.begin() + static_cast<long>(active));
  uint64_t mask = 0;
  for (Kind k : run_kinds) mask |= uint64_t{1} << static_cast<uint32_t>(k);
  workloads::Rng rng(kSeedBase + run);
  // The progress file: (run, operations acknowledged), rewritten after every operation. It
  // survives a kill of the job (page cache), not necessarily a machine crash. (run, 0) is written
  // before the start record, so a start record found by a later job always has its progress.
  const int progress_fd = open(progress_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (progress_fd < 0) return fail("progress file", Status::IoError(progress_path, errno));
  auto note_progress = [&](uint64_t done) {
    const uint64_t rec[2] = {run, done};
    return pwrite(progress_fd, rec, sizeof rec, 0) == static_cast<ssize_t>(sizeof rec);
  };
  if (!note_progress(0)) return fail("progress file", Status::IoError(progress_path, errno));
  {
    // The start record: a later job that finds it without its end record knows this run was
    // interrupted, and which operations it was running.
    uint8_t rec[24];
    const uint64_t started = mask | kStartedBit;
    std::memcpy(rec, &run, 8);
    std::memcpy(rec + 8, &ops, 8);
    std::memcpy(rec + 16, &started, 8);
    Status pr = (*runs)->Push(std::span<const uint8_t>(rec, 24));
    if (pr.ok()) pr = (*runs)->Sync();
    if (!pr.ok()) return fail("recording the run's start", pr);
  }
  std::vector<bench::LatencySampler> lat(kinds.size());
  std::vector<uint64_t> per_ops(kinds.size()), mismatches(kinds.size());
  auto counters = [&] {
    frontend::Counters sum;
    for (size_t i = 0; i < cl.size(); i++) {
      const auto c = cl.session(i).counters();
      sum.fabric.round_trips += c.fabric.round_trips;
      sum.fabric.bytes_out += c.fabric.bytes_out;
      sum.cache_hits += c.cache_hits;
      sum.cache_misses += c.cache_misses;
    }
    return sum;
  };
  auto cpu = [&]() -> Result<double> {
    double t = 0;
    for (auto& d : daemons) {
      if (!d) return Status::FailedPrecondition("a back-end was killed");
      ASYMNVM_ASSIGN_OR_RETURN(double x, d->CpuSeconds());
      t += x;
    }
    return t;
  };
  // Back-end syncs (msync/fdatasync calls, from each daemon's status): the disk-durable mode's
  // cost.
  auto syncs = [&]() -> Result<uint64_t> {
    uint64_t t = 0;
    for (const auto& a : addresses) {
      ASYMNVM_ASSIGN_OR_RETURN(std::string st,
                               tools::FetchStatus(a, std::chrono::milliseconds(10000)));
      auto j = nlohmann::json::parse(st, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.contains("pm_syncs"))
        return Status::ProtocolError("status without pm_syncs");
      t += j["pm_syncs"].get<uint64_t>();
    }
    return t;
  };
  // --kill-primary-after: the failover of back-end 0 (doc/mirror.md §Main job).
  struct Failover {
    bool killed = false;
    bench::Clock::time_point kill_time;
    pid_t old_pid = 0;
    std::string old_address, new_address, old_pool, new_pool, rejoin_address;
    uint64_t term = 0, replayed = 0;
    double switch_ms = -1, first_op_ms = -1, rejoin_ms = -1;
  } fo;
  // A promoted mirror serves: stopped after the back-ends, before the mirrors.
  std::vector<std::unique_ptr<driver::BackendProcess>> promoted_daemons;
  // Waits (polling the daemon's status, 20 ms doubling to 500 ms, up to 3 minutes) until the
  // back-end at `address` reports every configured mirror in sync.
  auto wait_mirrors_in_sync = [&](const std::string& address) -> Status {
    const auto deadline = bench::Clock::now() + std::chrono::minutes(3);
    auto pause = std::chrono::milliseconds(20);
    std::string last;
    for (;;) {
      auto st = tools::FetchStatus(address, std::chrono::milliseconds(10000));
      if (st.ok()) {
        auto j = nlohmann::json::parse(*st, nullptr, /*allow_exceptions=*/false);
        if (!j.is_discarded() && j.value("mirrors_configured", 0ull) > 0 &&
            j.value("mirrors_in_sync", 0ull) == j.value("mirrors_configured", 0ull)) {
          return Status::Ok();
        }
        last = st->substr(0, 400);
      } else {
        last = st.status().ToString();
      }
      if (bench::Clock::now() > deadline) {
        return Status::TimedOut("the back-end at " + address +
                                " did not report its mirrors in "
                                "sync within 3 minutes; last status: " +
                                last);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  };
  auto kill_primary = [&]() -> Status {
    // No sync first: the primary dies while the structures hold ops open in DRAM (a stack's or
    // queue's pending pushes, unpublished MV versions) and memory logs in an unsent batch, as an
    // application would be; the sessions' reconnection drops and replays them (doc/frontend.md
    // §Reconnection).
    // Only an in-sync mirror may be promoted: a mirror still copying (a large pool on a slow
    // disk may outlast the back-end's --mirror-wait-ms) is waited for first.
    ASYMNVM_RETURN_IF_ERROR(wait_mirrors_in_sync(addresses[0]));
    const uint32_t old_slot = group_slots[0][0];
    fo.old_pid = daemons[0]->pid();
    fo.old_address = addresses[0];
    fo.old_pool = slot_path(0, old_slot);
    daemons[0]->Kill();
    fo.kill_time = bench::Clock::now();
    fo.killed = true;
    daemons[0].reset();
    std::error_code rec;
    fs::remove(fo.old_pool, rec);
    if (rec) return Status::IoError("removing " + fo.old_pool + ": " + rec.message());
    std::cout << "killed back-end 0 (pid " << fo.old_pid << ", SIGKILL) after " << kill_after
              << " acknowledged operations; deleted " << fo.old_pool << "\n";
    // A call that is safe to repeat: the session finds the connection broken, waits for the
    // group's new primary to register on the coordinator, connects, replays its op logs not
    // covered there, and retries (doc/frontend.md §Reconnection). A batch that was pending when
    // the connection broke makes the first call fail ("reconnects at its next call"): again.
    frontend::Session& s0 = cl.session(0);
    const uint64_t replayed0 = s0.counters().replayed_ops;
    Status st;
    for (int attempt = 0; attempt < 3; attempt++) {
      st = s0.Fence();
      if (st.ok() || !IsLostConnection(st)) break;
    }
    if (!st.ok()) return st.WithContext("switching to the promoted mirror");
    fo.switch_ms =
        std::chrono::duration<double, std::milli>(bench::Clock::now() - fo.kill_time).count();
    fo.replayed = s0.counters().replayed_ops - replayed0;
    fo.new_address = s0.backend_address();
    addresses[0] = fo.new_address;
    // Which mirror won: the group's state names it.
    auto node = job_coord.Get(mirror::GroupPath(s0.pool_uuid()) + "/state");
    if (!node.ok()) return node.status().WithContext("the group's state");
    ASYMNVM_ASSIGN_OR_RETURN(mirror::GroupState gs, mirror::DecodeGroupState(node->data));
    fo.term = gs.term;
    size_t winner = 0;
    for (size_t m = 1; m < group_slots[0].size(); m++) {
      if (mirror::DefaultReplicaName(slot_path(0, group_slots[0][m])) == gs.primary) winner = m;
    }
    if (winner == 0) {
      return Status::FailedPrecondition("the group's state names " + gs.primary +
                                        ", none of back-end 0's mirrors");
    }
    fo.new_pool = slot_path(0, group_slots[0][winner]);
    const size_t di = mirror_first[0] + winner - 1;
    promoted_daemons.push_back(std::move(mirror_daemons[di]));
    mirror_daemons.erase(mirror_daemons.begin() + static_cast<long>(di));
    // Rejoin: the old primary's path as a mirror of the promoted primary, which was started
    // with --mirror naming it and copies it while serving.
    auto md = start_mirror(0, old_slot);
    if (!md.ok()) return md.status().WithContext("rejoining " + fo.old_pool + " as a mirror");
    fo.rejoin_address = (*md)->address();
    std::cout << "promoted: " << fo.new_pool << " serves back-end 0 at " << fo.new_address
              << " (term " << fo.term << "); the job switched to it " << Fmt(fo.switch_ms, 0)
              << " ms after the kill (" << fo.replayed << " op(s) replayed); " << fo.old_pool
              << " rejoins as its mirror (pid " << (*md)->pid() << ")\n";
    mirror_daemons.push_back(std::move(*md));
    return Status::Ok();
  };
  const auto c0 = counters();
  auto cpu0 = cpu();
  auto syncs0 = syncs();
  const bool tty = isatty(1);
  const auto t0 = bench::Clock::now();
  for (uint64_t i = 0; i < ops; i++) {
    JobOp op = NextOp(rng, run_kinds, run, i);
    const size_t x = op.structure;
    Model& m = models[x];
    const auto a = bench::Clock::now();
    Status st;
    structures::Value got;
    if (structures::IsSequence(kinds[x])) {
      auto* q = static_cast<structures::Sequence*>(handles[x].get());
      if (op.kind == 1) {
        st = q->Push(op.value);
      } else {
        st = q->Pop(&got);
        if (st.ok()) {
          const auto& expect = kinds[x] == Kind::kStack ? m.seq.back() : m.seq.front();
          if (got != expect) mismatches[x]++;
        } else if (st.code() == StatusCode::kNotFound && m.seq.empty()) {
          st = Status::Ok();
        }
      }
    } else {
      auto* mp = static_cast<structures::Map*>(handles[x].get());
      auto it = m.map.find(op.key);
      if (op.kind == 0) {
        st = mp->Get(op.key, &got);
        if (st.ok() && (it == m.map.end() || got != it->second)) mismatches[x]++;
        if (st.code() == StatusCode::kNotFound && it == m.map.end()) st = Status::Ok();
      } else if (op.kind == 1) {
        st = mp->Put(op.key, op.value);
      } else {
        st = mp->Delete(op.key);
        if (st.code() == StatusCode::kNotFound && it == m.map.end()) st = Status::Ok();
      }
    }
    lat[x].Add(bench::ElapsedNs(a, bench::Clock::now()));
    if (!st.ok()) {
      return fail("operation " + std::to_string(i) + " on " + JobName(kinds[x]), st);
    }
    ApplyToModel(m, kinds[x], op);
    per_ops[x]++;
    if (!note_progress(i + 1)) return fail("progress file", Status::IoError(progress_path, errno));
    if (fo.killed && fo.first_op_ms < 0) {
      fo.first_op_ms =
          std::chrono::duration<double, std::milli>(bench::Clock::now() - fo.kill_time).count();
    }
    if (kill_after > 0 && i + 1 == kill_after) {
      Status k = kill_primary();
      if (!k.ok()) return fail("failover after killing back-end 0", k);
    }
    if (tty && (i % 512 == 0 || i + 1 == ops)) {
      const double el = std::chrono::duration<double>(bench::Clock::now() - t0).count();
      std::cout << "\r\033[Krun " << run + 1 << ": " << i + 1 << "/" << ops << " ops, "
                << Fmt(static_cast<double>(i + 1) / std::max(el, 1e-9), 0) << " ops/s"
                << std::flush;
    }
  }
  for (auto& h : handles) {
    Status st = h->Sync();
    if (!st.ok()) return fail("sync", st);
  }
  const double secs = std::chrono::duration<double>(bench::Clock::now() - t0).count();
  if (tty) std::cout << "\r\033[K";
  const auto c1 = counters();
  auto cpu1 = cpu();
  auto syncs1 = syncs();
  uint64_t verified_after = 0;
  if (fo.killed) {
    // The rejoined mirror: its full copy ran while the operations went on; wait (generously)
    // until the promoted primary reports every mirror in sync.
    Status ws = wait_mirrors_in_sync(fo.new_address);
    if (!ws.ok()) return fail("rejoin", ws);
    fo.rejoin_ms =
        std::chrono::duration<double, std::milli>(bench::Clock::now() - fo.kill_time).count();
    // Full verification of every structure against the job's model after the promotion.
    Status err;
    const std::string why = verify(models, &verified_after, &err);
    if (!err.ok()) return fail("verifying after the promotion", err);
    if (!why.empty()) {
      std::cerr << "asymnvm-job: VERIFICATION FAILED after the promotion: " << why << "\n";
      return kExitVerification;
    }
  }
  close(progress_fd);
  // Record the run's end, durably, before declaring success.
  uint8_t rec[24];
  std::memcpy(rec, &run, 8);
  std::memcpy(rec + 8, &ops, 8);
  std::memcpy(rec + 16, &mask, 8);
  Status pr = (*runs)->Push(std::span<const uint8_t>(rec, 24));
  if (pr.ok()) pr = (*runs)->Sync();
  if (!pr.ok()) return fail("recording the run", pr);

  uint64_t total_mismatch = 0;
  std::printf("\nrun %llu: %llu operations in %.2f s = %.0f ops/s at level %s\n",
              static_cast<unsigned long long>(run + 1), static_cast<unsigned long long>(ops), secs,
              static_cast<double>(ops) / secs, level_name.c_str());
  std::printf("%-10s %8s %10s %10s %10s %8s\n", "structure", "ops", "p50 us", "p99 us", "elements",
              "check");
  nlohmann::ordered_json j;
  j["run"] = run + 1;
  j["ops"] = ops;
  j["seconds"] = secs;
  j["level"] = level_name;
  j["verified_elements_from_earlier_runs"] = verified;
  j["structures"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < kinds.size(); i++) {
    auto n = handles[i]->Count();
    const uint64_t elems = n.ok() ? *n : 0;
    total_mismatch += mismatches[i];
    std::printf("%-10s %8llu %10.1f %10.1f %10llu %8s\n", JobName(kinds[i]),
                static_cast<unsigned long long>(per_ops[i]), lat[i].PercentileUs(50),
                lat[i].PercentileUs(99), static_cast<unsigned long long>(elems),
                mismatches[i] ? "WRONG" : "ok");
    j["structures"].push_back({{"structure", JobName(kinds[i])},
                               {"ops", per_ops[i]},
                               {"p50_us", lat[i].PercentileUs(50)},
                               {"p99_us", lat[i].PercentileUs(99)},
                               {"elements", elems},
                               {"read_mismatches", mismatches[i]}});
  }
  // After a failover the switched session's counters started again from 0: not comparable (-1).
  const double rt = fo.killed ? -1
                              : static_cast<double>(c1.fabric.round_trips - c0.fabric.round_trips) /
                                    static_cast<double>(ops);
  const double bytes = fo.killed ? -1
                                 : static_cast<double>(c1.fabric.bytes_out - c0.fabric.bytes_out) /
                                       static_cast<double>(ops);
  const double cpu_us =
      cpu0.ok() && cpu1.ok() ? (*cpu1 - *cpu0) * 1e6 / static_cast<double>(ops) : -1;
  std::printf(
      "round trips/op %.2f, bytes out/op %.0f, back-end CPU %.1f us/op, cache hits %.1f%%\n", rt,
      bytes, cpu_us,
      fo.killed
          ? -1.0
          : 100.0 * static_cast<double>(c1.cache_hits - c0.cache_hits) /
                std::max<double>(1, static_cast<double>((c1.cache_hits - c0.cache_hits) +
                                                        (c1.cache_misses - c0.cache_misses))));
  j["round_trips_per_op"] = rt;
  j["bytes_per_op"] = bytes;
  j["backend_cpu_us_per_op"] = cpu_us;
  uint64_t updates = 0;  // acknowledged operations that change data (puts, deletes, pushes, pops)
  {
    workloads::Rng urng(kSeedBase + run);
    for (uint64_t i = 0; i < ops; i++) updates += NextOp(urng, run_kinds, run, i).kind != 0 ? 1 : 0;
  }
  const double syncs_per_op =
      !fo.killed && syncs0.ok() && syncs1.ok()
          ? static_cast<double>(*syncs1 - *syncs0) / static_cast<double>(ops)
          : -1;
  const double syncs_per_update =
      !fo.killed && syncs0.ok() && syncs1.ok() && updates > 0
          ? static_cast<double>(*syncs1 - *syncs0) / static_cast<double>(updates)
          : -1;
  std::printf("back-end syncs/op %.2f (%.2f per update), pm mode %s\n", syncs_per_op,
              syncs_per_update, pm_mode.c_str());
  j["syncs_per_op"] = syncs_per_op;
  j["syncs_per_update"] = syncs_per_update;
  j["pm_mode"] = pm_mode;
  j["backends"] = cl.size();
  if (fo.killed) {
    std::printf(
        "failover of back-end 0 (killed after %llu acknowledged operations, pool deleted):\n"
        "  %-12s %s (%s, pid %d, SIGKILL)\n  %-12s %s (%s, term %llu)\n"
        "  %-12s %.0f ms kill -> sessions switched (%llu op(s) replayed), %.0f ms kill -> "
        "first successful operation\n  %-12s %s in sync %.0f ms after the kill (full copy "
        "while serving)\n  %-12s %llu elements in %zu structures, every one as acknowledged\n",
        static_cast<unsigned long long>(kill_after), "old primary", fo.old_address.c_str(),
        fo.old_pool.c_str(), static_cast<int>(fo.old_pid), "new primary", fo.new_address.c_str(),
        fo.new_pool.c_str(), static_cast<unsigned long long>(fo.term), "switch-over", fo.switch_ms,
        static_cast<unsigned long long>(fo.replayed), fo.first_op_ms, "rejoined",
        fo.old_pool.c_str(), fo.rejoin_ms, "verified",
        static_cast<unsigned long long>(verified_after), kinds.size());
    j["failover"] = {{"killed_after_ops", kill_after},
                     {"old_address", fo.old_address},
                     {"old_pool", fo.old_pool},
                     {"new_address", fo.new_address},
                     {"new_pool", fo.new_pool},
                     {"term", fo.term},
                     {"switch_ms", fo.switch_ms},
                     {"first_op_ms", fo.first_op_ms},
                     {"replayed_ops", fo.replayed},
                     {"rejoin_in_sync_ms", fo.rejoin_ms},
                     {"verified_elements", verified_after}};
  }
  handles.clear();
  runs->reset();
  cluster->reset();
  for (size_t i = 0; i < daemons.size(); i++) {
    if (!daemons[i]) {
      std::cout << "back-end " << i << ": killed by the job (--kill-primary-after)\n";
      continue;
    }
    std::string log;
    Status stop = daemons[i]->Stop(&log);
    if (!stop.ok()) return fail("stopping back-end " + std::to_string(i), stop);
    while (!log.empty() && log.back() == '\n') log.pop_back();
    const size_t nl = log.rfind('\n');
    std::cout << "back-end " << i << ": " << (nl == std::string::npos ? log : log.substr(nl + 1))
              << "\n";
  }
  for (auto& pd : promoted_daemons) {
    std::string log;
    Status stop = pd->Stop(&log);
    if (!stop.ok()) return fail("stopping the promoted mirror", stop);
    while (!log.empty() && log.back() == '\n') log.pop_back();
    const size_t nl = log.rfind('\n');
    std::cout << "promoted mirror: " << (nl == std::string::npos ? log : log.substr(nl + 1))
              << "\n";
  }
  for (size_t m = 0; m < mirror_daemons.size(); m++) {
    Status stop = mirror_daemons[m]->Stop();
    if (!stop.ok()) return fail("stopping mirror " + std::to_string(m), stop);
  }
  if (nmirrors > 0) {
    std::cout << nmirrors << " " << mirror_mode << " mirror(s) per back-end stopped after it; "
              << "asymnvm-ctl diff POOL MIRROR_POOL compares them\n";
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
  }
  if (total_mismatch > 0) {
    std::cerr << "asymnvm-job: VERIFICATION FAILED: " << total_mismatch
              << " reads returned data that differs from the model\n";
    return kExitVerification;
  }
  std::cout << "ok: data kept in " << data_dir << " (" << daemons.size()
            << " pool(s); run again to reopen and verify it)\n";
  return kExitOk;
}
