// asymnvm-txn: the TATP and SmallBank drivers as separate steps against running back-end daemons,
// with a ledger on disk so that any of them can be SIGKILLed and the data still checked
// (doc/workloads.md "Crash checks"; the measured driver is `asymnvm-bench tatp|smallbank`).
//
//   asymnvm-txn load  --workload tatp|smallbank --scale N --backend ADDR --ledger DIR
//                     [--coord URI] [--seed S]
//   asymnvm-txn run   --backend ADDR --ledger DIR [--coord URI] [--frontends F] [--seconds S]
//                     [--txns N] [--level naive|r|rc|rcb] [--hold H] [--lock-timeout-ms MS]
//                     [--reconnect-deadline-ms MS] [--first-id ID]
//   asymnvm-txn check --backend ADDR --ledger DIR [--coord URI]
//
// load: creates the tables and populates them (the workload, scale and seed go to DIR/meta.json;
// run and check read them from there). run: F threads, each its own Session (front-end id from the
// coordinator, or --first-id + i without one) and Database; each first recovers what an earlier
// holder of its id left (Database::Recover), then runs the standard mix, reporting every write
// transaction to DIR/fe-<id>.ledger (workloads/txn/ledger.h) before its commit and after it was
// acknowledged. With a coordinator the sessions reconnect by themselves to a restarted back-end or
// a promoted mirror (--reconnect-deadline-ms). check: recovers every front-end id the ledgers name
// (replays its acknowledged transactions, releases its locks), then checks the tables: every
// quantity (SmallBank: each balance, the total money; TATP: the row counts) equals the initial
// state plus the committed transactions plus some subset of the in-doubt ones (a transaction the
// driver did not see return), and the structural rules hold.
//
// Exit codes: 0 ok; 1 failure; 2 bad command line; 3 check failed (the data differs from what was
// acknowledged); 4 interrupted (a back-end died or a connection was lost: run check, or run again).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/frontend.h"
#include "asymnvm/structures/transaction.h"
#include "workloads/txn/ledger.h"
#include "workloads/txn/workload.h"

using namespace asymnvm;
namespace fs = std::filesystem;

namespace {

constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitCheck = 3, kExitInterrupted = 4;
constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok; 1 failure; 2 bad command line; 3 check failed (the data differs from what "
    "was acknowledged); 4 interrupted (a back-end died or a connection was lost: everything "
    "acknowledged is durable; run check, or run again).";

struct Common {
  std::string backend, ledger, coord;
  int lock_ms = 2000;
  int reconnect_ms = 30000;
  uint64_t first_id = 1;
};

struct Meta {
  std::string workload;
  uint64_t scale = 0, seed = 1;
  std::string primary_path;  // where the pool's primary registers on the coordinator
};

Result<Meta> ReadMeta(const std::string& dir) {
  std::ifstream in(dir + "/meta.json");
  if (!in) return Status::NotFound(dir + "/meta.json: no such file (run `asymnvm-txn load` first)");
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("workload") || !j["workload"].is_string() ||
      !j.contains("scale") || !j["scale"].is_number_unsigned() || !j.contains("seed") ||
      !j["seed"].is_number_unsigned()) {
    return Status::Corruption(dir +
                              "/meta.json is not a ledger description (workload, scale, seed)");
  }
  return Meta{j["workload"].get<std::string>(), j["scale"].get<uint64_t>(),
              j["seed"].get<uint64_t>(), j.value("primary_path", std::string())};
}

bool IsLost(const Status& st) {
  return st.code() == StatusCode::kConnectionError || st.code() == StatusCode::kUnavailable ||
         st.code() == StatusCode::kRnrRetryExceeded;
}

int Fail(const std::string& what, const Status& st) {
  std::cerr << "asymnvm-txn: " << what << ": " << st.ToString() << "\n";
  if (IsLost(st)) {
    std::cerr << "asymnvm-txn: interrupted: everything acknowledged is durable; run `asymnvm-txn "
                 "check` (or run again) once the back-end serves (exit "
              << kExitInterrupted << ")\n";
    return kExitInterrupted;
  }
  return kExitFailure;
}

frontend::SessionOptions Options(const Common& c, uint64_t id, frontend::Level level) {
  frontend::SessionOptions so;
  so.backends = {c.backend};
  so.coordinator = c.coord;
  so.frontend_id = id;
  so.level = level;
  so.cache_bytes = 64ull << 20;
  so.batch_ops = 64;
  so.timeout = std::chrono::milliseconds(30000);
  so.lock_timeout = std::chrono::milliseconds(c.lock_ms);
  so.reconnect_deadline =
      c.coord.empty() ? std::chrono::milliseconds(0) : std::chrono::milliseconds(c.reconnect_ms);
  return so;
}

// Opens a session on --backend; when that address does not answer and there is a coordinator,
// on the pool's current primary as registered there (a back-end restarted at a new address, a
// promoted mirror) — and later sessions of this process use that address too.
Result<std::unique_ptr<frontend::Session>> OpenSession(Common& c, const Meta* meta, uint64_t id,
                                                       frontend::Level level) {
  auto s = frontend::Session::Open(Options(c, id, level));
  if (s.ok() || c.coord.empty() || meta == nullptr || meta->primary_path.empty() ||
      !IsLost(s.status()))
    return s;
  auto coord = coord::Coordinator::Open(c.coord);
  if (!coord.ok()) return s;
  auto node = (*coord)->Get(meta->primary_path);
  if (!node.ok())
    return s.status().WithContext("and no primary is registered at " + meta->primary_path);
  std::string address;
  std::istringstream in(node->data);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("address ", 0) == 0) address = line.substr(8);
  }
  if (address.empty() || address == c.backend) return s;
  std::cerr << "asymnvm-txn: " << c.backend << " does not answer; the pool's primary is " << address
            << "\n";
  c.backend = address;
  return frontend::Session::Open(Options(c, id, level));
}

int Load(Common& c, const std::string& workload, uint64_t scale, uint64_t seed) {
  auto wl = txnbench::MakeWorkload(workload, scale);
  if (!wl.ok()) {
    std::cerr << "asymnvm-txn: " << wl.status().message() << "\n";
    return kExitUsage;
  }
  std::error_code ec;
  fs::create_directories(c.ledger, ec);
  if (fs::exists(c.ledger + "/meta.json")) {
    std::cerr << "asymnvm-txn: " << c.ledger << " already describes a loaded database (meta.json); "
              << "use a new ledger directory and a fresh pool\n";
    return kExitFailure;
  }
  auto s =
      frontend::Session::Open(Options(c, c.coord.empty() ? c.first_id : 0, frontend::Level::kRcb));
  if (!s.ok()) return Fail("opening a session on " + c.backend, s.status());
  auto db = structures::Database::Open(**s, (*wl)->Schema());
  if (!db.ok()) return Fail("opening the tables", db.status());
  const bool tty = isatty(2);
  Status st = (*wl)->Load(**db, seed, [&](uint64_t d, uint64_t t) {
    if (tty) std::cerr << "\rloading " << d << "/" << t << std::flush;
  });
  if (tty) std::cerr << "\n";
  if (!st.ok()) return Fail("loading", st);
  db->reset();
  st = (*s)->Fence();
  if (!st.ok()) return Fail("fencing the load", st);
  const std::string tmp = c.ledger + "/meta.json.tmp";
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"workload", workload},
                          {"scale", scale},
                          {"seed", seed},
                          {"primary_path", frontend::BackendGroupPrimaryPath((*s)->pool_uuid())}}
               .dump()
        << "\n";
    if (!out) return Fail("writing " + tmp, Status::IoError("write failed"));
  }
  fs::rename(tmp, c.ledger + "/meta.json", ec);
  if (ec) return Fail("renaming " + tmp, Status::IoError(ec.message()));
  std::cout << "loaded " << workload << " (" << scale
            << (workload == "tatp" ? " subscribers" : " accounts") << ", seed " << seed << ") on "
            << c.backend << "\n";
  return kExitOk;
}

int Run(Common& c, int frontends, double seconds, uint64_t txns, const std::string& level_name,
        uint32_t hold) {
  auto meta = ReadMeta(c.ledger);
  if (!meta.ok()) return Fail("reading the ledger", meta.status());
  auto wl = txnbench::MakeWorkload(meta->workload, meta->scale);
  if (!wl.ok()) return Fail("meta.json", wl.status());
  auto level = frontend::ParseLevel(level_name);
  if (!level.ok()) {
    std::cerr << "asymnvm-txn: --level: " << level.status().message() << "\n";
    return kExitUsage;
  }
  structures::DatabaseOptions dbo = (*wl)->Schema();
  dbo.hold_txns = hold;
  const auto types = (*wl)->TypeNames();
  struct Fe {
    std::unique_ptr<frontend::Session> s;
    std::unique_ptr<structures::Database> db;
    std::unique_ptr<txnbench::Worker> w;
    std::unique_ptr<txnbench::Ledger> ledger;
    std::vector<std::array<uint64_t, 3>> by_type;
    Status st = Status::Ok();
    std::atomic<bool> finished{false};  // its --txns done or failed (st set before)
    uint64_t interrupted = 0;           // transactions cut by a lost connection (reconnected)
  };
  std::vector<Fe> fes(static_cast<size_t>(frontends));
  for (int i = 0; i < frontends; i++) {
    Fe& f = fes[i];
    const uint64_t want = c.coord.empty() ? c.first_id + static_cast<uint64_t>(i) : 0;
    auto s = OpenSession(c, &*meta, want, *level);
    if (!s.ok()) return Fail("opening session " + std::to_string(i), s.status());
    f.s = std::move(*s);
    const uint64_t id = f.s->frontend_id();
    auto l = txnbench::Ledger::Open(c.ledger + "/fe-" + std::to_string(id) + ".ledger",
                                    (*wl)->NumQuantities(), id);
    if (!l.ok()) return Fail("ledger", l.status());
    f.ledger = std::move(*l);
    auto db = structures::Database::Open(*f.s, dbo);
    if (!db.ok()) return Fail("opening the tables", db.status());
    f.db = std::move(*db);
    if (Status r = f.db->Recover(); !r.ok())
      return Fail("recovering front-end " + std::to_string(id), r);
    f.w = (*wl)->MakeWorker(i);
    f.w->set_ledger(f.ledger.get());
    f.by_type.assign(types.size(), {0, 0, 0});
  }
  std::cerr << "running " << meta->workload << " with " << frontends << " front-end(s), ids";
  for (auto& f : fes) std::cerr << " " << f.s->frontend_id();
  std::cerr << "\n";
  std::atomic<bool> stop{false};
  std::vector<std::thread> th;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < frontends; i++) {
    th.emplace_back([&, i] {
      Fe& f = fes[i];
      std::mt19937_64 rng(meta->seed * 7919 + f.s->frontend_id() * 1000003 +
                          static_cast<uint64_t>(std::time(nullptr)));
      for (uint64_t n = 0; !stop.load(std::memory_order_relaxed) && (txns == 0 || n < txns); n++) {
        int type = 0;
        auto o = f.w->RunOne(*f.db, rng, &type);
        if (!o.ok() && IsLost(o.status()) && o.status().code() != StatusCode::kUnavailable) {
          // The back-end died or the connection broke: the Session reconnects (to a restarted
          // back-end or a promoted mirror) and replays at its next call. The transaction in
          // flight is in doubt in the ledger if it reached its commit; the tables are reopened
          // (a transaction that had written cannot be taken back on the old handle).
          f.interrupted++;
          f.db.reset();
          auto db = structures::Database::Open(*f.s, dbo);
          // Recover as an application would after reopening: the session already replayed its own
          // op logs when it reconnected, and a second Replay must not run them again.
          Status r = db.ok() ? (*db)->Recover() : db.status();
          if (r.ok()) {
            f.db = std::move(*db);
            continue;
          }
          o = r.WithContext("reopening the tables after " + o.status().ToString());
        }
        if (!o.ok()) {
          f.st = o.status().WithContext("front-end " + std::to_string(f.s->frontend_id()));
          break;
        }
        f.by_type[type][static_cast<int>(*o)]++;
      }
      // Locks are held across transactions (--hold); a front-end that is done must not make the
      // others wait for them.
      if (f.st.ok()) {
        if (Status r = f.db->ReleaseLocks(); !r.ok()) f.st = r.WithContext("releasing locks");
      }
      f.finished = true;
    });
  }
  // Until --seconds passed or every front-end finished its --txns (or failed).
  while (seconds <= 0 ||
         std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(seconds)) {
    bool all = true;
    for (auto& f : fes) all = all && f.finished.load();
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (auto& t : th) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t committed = 0, failed = 0, aborted = 0, interrupted = 0;
  std::vector<std::array<uint64_t, 3>> per(types.size(), {0, 0, 0});
  for (auto& f : fes) {
    interrupted += f.interrupted;
    for (size_t t = 0; t < types.size(); t++) {
      for (int k = 0; k < 3; k++) per[t][k] += f.by_type[t][k];
    }
  }
  for (auto& p : per) {
    committed += p[0];
    failed += p[1];
    aborted += p[2];
  }
  std::cout << meta->workload << ": " << committed << " committed ("
            << static_cast<uint64_t>(committed / secs) << "/s), " << failed << " failed, "
            << aborted << " aborted, " << interrupted << " interrupted by a lost connection in "
            << secs << " s;";
  for (size_t t = 0; t < types.size(); t++) {
    std::cout << " " << types[t] << " " << per[t][0] << "/" << per[t][1] << "/" << per[t][2];
  }
  std::cout << " (committed/failed/aborted)\n";
  for (auto& f : fes) {
    if (!f.st.ok()) return Fail("running", f.st);
  }
  return kExitOk;
}

int Check(Common& c) {
  auto meta = ReadMeta(c.ledger);
  if (!meta.ok()) return Fail("reading the ledger", meta.status());
  auto wl = txnbench::MakeWorkload(meta->workload, meta->scale);
  if (!wl.ok()) return Fail("meta.json", wl.status());
  auto set = txnbench::ReadLedgers(c.ledger, (*wl)->NumQuantities());
  if (!set.ok()) {
    std::cerr << "asymnvm-txn: CHECK FAILED: the ledgers are unreadable: "
              << set.status().ToString() << "\n";
    return kExitCheck;
  }
  const auto dbo = (*wl)->Schema();
  // Every front-end id the ledgers name: its acknowledged transactions replayed, its locks
  // released (a driver killed mid-run left both).
  std::unique_ptr<frontend::Session> last;
  for (uint64_t id : set->frontend_ids) {
    last.reset();
    auto s = OpenSession(c, &*meta, id, frontend::Level::kRcb);
    if (!s.ok())
      return Fail(
          "opening a session as front-end " + std::to_string(id) + " (is a run still going?)",
          s.status());
    auto db = structures::Database::Open(**s, dbo);
    if (!db.ok()) return Fail("opening the tables", db.status());
    if (Status r = (*db)->Recover(); !r.ok())
      return Fail("recovering front-end " + std::to_string(id), r);
    db->reset();
    last = std::move(*s);
  }
  if (!last) {
    auto s = OpenSession(c, &*meta, c.coord.empty() ? c.first_id : 0, frontend::Level::kRcb);
    if (!s.ok()) return Fail("opening a session on " + c.backend, s.status());
    last = std::move(*s);
  }
  auto db = structures::Database::Open(*last, dbo);
  if (!db.ok()) return Fail("opening the tables", db.status());
  if (Status l = (*db)->LockAll(); !l.ok())
    return Fail("locking every table (is a run still going?)", l);
  auto measured = (*wl)->Measure(**db);
  if (Status r = (*db)->ReleaseLocks(); !r.ok()) return Fail("releasing the locks", r);
  if (!measured.ok()) {
    if (measured.status().code() != StatusCode::kCorruption)
      return Fail("reading the tables", measured.status());
    std::cerr << "asymnvm-txn: CHECK FAILED: " << measured.status().message() << "\n";
    return kExitCheck;
  }
  size_t applied = 0;
  std::vector<int> outcome;
  Status r = txnbench::Resolve(
      *measured, (*wl)->Initial(meta->seed), set->committed, set->in_doubt,
      [&](uint32_t q) { return (*wl)->QuantityName(q); }, &applied, &outcome);
  if (!r.ok()) {
    std::cerr << "asymnvm-txn: CHECK FAILED: " << r.message() << "\n";
    // Every quantity that differs from initial + committed (the in-doubt ones may explain some),
    // so that a failure shows the whole picture, not only its first symptom.
    const auto initial = (*wl)->Initial(meta->seed);
    size_t shown = 0, differing = 0;
    for (size_t q = 0; q < measured->size(); q++) {
      const int64_t want = initial[q] + set->committed[q];
      if ((*measured)[q] == want) continue;
      if (differing++ < 16) {
        std::cerr << "  " << (*wl)->QuantityName(static_cast<uint32_t>(q)) << " = "
                  << (*measured)[q] << ", initial + committed = " << want << " ("
                  << ((*measured)[q] - want > 0 ? "+" : "") << (*measured)[q] - want << ")\n";
        shown++;
      }
    }
    if (differing > shown) std::cerr << "  ... " << differing - shown << " more\n";
    return kExitCheck;
  }
  // Every front-end of the ledgers was recovered first, so these outcomes are final: record the
  // unambiguous ones, and later checks start from them (in-doubt transactions do not pile up).
  size_t ambiguous = 0;
  for (int x : outcome) ambiguous += x < 0;
  if (Status w = txnbench::WriteResolutions(c.ledger, set->in_doubt_ids, outcome); !w.ok()) {
    std::cerr << "asymnvm-txn: recording the resolutions: " << w.ToString() << "\n";
  }
  std::cout << "check passed: " << meta->workload << " " << meta->scale << ", "
            << set->committed_txns << " committed write transactions in " << set->files
            << " ledger(s), " << set->in_doubt.size() << " in doubt (" << applied
            << " found applied, " << ambiguous << " ambiguous), " << set->resolved
            << " settled by earlier checks, every rule holds\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "asymnvm-txn: TATP and SmallBank as load / run / check steps with a ledger on disk "
      "(doc/workloads.md \"Crash checks\")"};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);
  Common c;
  auto common = [&](CLI::App* cmd) {
    cmd->add_option("--backend", c.backend,
                    "the back-end's address (asymnvm-backend's \"listening\" line)")
        ->required();
    cmd->add_option("--ledger", c.ledger, "the ledger directory (meta.json, fe-<id>.ledger)")
        ->required();
    cmd->add_option(
        "--coord", c.coord,
        "coordinator URI (dir:PATH | zk:...): front-end ids claimed there, sessions follow a "
        "restarted back-end or a promoted mirror; default none (ids from --first-id)");
    cmd->add_option("--first-id", c.first_id, "without --coord: the first front-end id (default 1)")
        ->check(CLI::Range(1, 65535));
    cmd->add_option("--lock-timeout-ms", c.lock_ms,
                    "per-lock deadline before a transaction aborts (default 2000)")
        ->check(CLI::Range(1, 3600000));
    cmd->add_option(
           "--reconnect-deadline-ms", c.reconnect_ms,
           "with --coord: how long a session waits for its back-end to come back (default 30000)")
        ->check(CLI::Range(0, 3600000));
  };
  std::string workload;
  uint64_t scale = 0, seed = 1;
  auto* load = app.add_subcommand("load", "create and populate the tables");
  common(load);
  load->add_option("--workload", workload, "tatp | smallbank")
      ->required()
      ->check(CLI::IsMember({"tatp", "smallbank"}));
  load->add_option("--scale", scale, "subscribers (TATP) / accounts (SmallBank)")
      ->required()
      ->check(CLI::Range(uint64_t{2}, uint64_t{100000000}));
  load->add_option("--seed", seed, "population seed (default 1)");
  int frontends = 1;
  double seconds = 10;
  uint64_t txns = 0;
  std::string level = "rcb";
  uint32_t hold = 64;
  auto* run =
      app.add_subcommand("run", "run the standard mix, every write transaction in the ledger");
  common(run);
  run->add_option("--frontends", frontends, "front-end threads, each its own Session (default 1)")
      ->check(CLI::Range(1, 64));
  run->add_option("--seconds", seconds, "stop after this long (default 10; 0: until --txns)")
      ->check(CLI::Range(0.0, 1e6));
  run->add_option("--txns", txns,
                  "stop each front-end after this many transactions (default 0: --seconds)");
  run->add_option("--level", level, "naive | r | rc | rcb (default rcb)");
  run->add_option("--hold", hold, "transactions a front-end keeps its locks for (default 64)");
  auto* check =
      app.add_subcommand("check", "recover every front-end of the ledgers and check the tables");
  common(check);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (*run && seconds <= 0 && txns == 0) {
    std::cerr << "asymnvm-txn run: give --seconds or --txns\n";
    return kExitUsage;
  }
  if (*load) return Load(c, workload, scale, seed);
  if (*run) return Run(c, frontends, seconds, txns, level, hold);
  return Check(c);
}
