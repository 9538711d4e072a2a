// Black-box tests of asymnvm-bench and asymnvm-demo: exit codes, the JSON convention of
// doc/tools.md (structure only, never timings) and re-running the demo on the same data dir.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

RunResult RunCmd(const std::string& cmd) {
  RunResult r;
  std::string full = cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "asymnvm-workloads-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string kBench = ASYMNVM_BENCH_BIN;
const std::string kDemo = ASYMNVM_DEMO_BIN;
#ifdef ASYMNVM_JOB_BIN
const std::string kJob = ASYMNVM_JOB_BIN;
#endif

TEST(BenchCli, BadArgumentsExitWithCode2) {
  for (const char* args :
       {"", "nosuchsuite", "fabric --no-such-flag", "fabric --duration -1", "fabric --duration abc",
        "fabric --transports carrier-pigeon", "fabric --outstanding 0", "fabric --op FROB",
        "oq --policies fast", "oq --set-percent 150", "oq --clients 0", "oq --transport smoke",
        "kv --variants paxos", "kv --workloads b", "kv --threads 0"}) {
    RunResult r = RunCmd(kBench + " " + args);
    EXPECT_EQ(r.exit_code, 2) << "args: '" << args << "'\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << "args: '" << args << "' printed no message";
  }
}

TEST(BenchCli, HelpExitsZeroAndListsSuites) {
  RunResult r = RunCmd(kBench + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fabric"), std::string::npos) << r.output;
  r = RunCmd(kBench + " fabric --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--json"), std::string::npos) << r.output;
}

TEST(BenchFabric, QuickRunWritesConventionJsonWithFloors) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string json_path = dir.path() + "/fabric.json";
  const std::string csv_path = dir.path() + "/fabric.csv";
  RunResult r = RunCmd(kBench + " fabric --quick --duration 0.01 --outstanding 1,8 --json " +
                       json_path + " --csv " + csv_path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(json_path);
  ASSERT_TRUE(f.good()) << "no JSON written\n" << r.output;
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "invalid JSON";
  EXPECT_EQ(j["suite"], "fabric");
  ASSERT_TRUE(j["machine"].is_object());
  for (const char* k : {"cores", "provider", "transport", "pm_mode"}) {
    EXPECT_TRUE(j["machine"].contains(k)) << "machine." << k;
  }
  ASSERT_TRUE(j["results"].is_array());
  std::set<std::string> floors;
  std::set<std::string> ops;
  for (const auto& rec : j["results"]) {
    ASSERT_TRUE(rec.contains("variant"));
    ASSERT_TRUE(rec.contains("config"));
    ASSERT_TRUE(rec["config"].is_object());
    if (rec.value("skipped", false)) {
      EXPECT_TRUE(rec.contains("reason"));
      continue;
    }
    for (const char* k :
         {"ops_per_sec", "p50_us", "p99_us", "round_trips_per_op", "bytes_per_op"}) {
      ASSERT_TRUE(rec.contains(k)) << rec["variant"] << " lacks " << k;
      EXPECT_TRUE(rec[k].is_number()) << rec["variant"] << "." << k;
    }
    for (const char* k : {"op", "size", "outstanding", "transport", "provider"}) {
      EXPECT_TRUE(rec["config"].contains(k)) << rec["variant"] << " config lacks " << k;
    }
    std::string v = rec["variant"];
    if (v.rfind("floor/", 0) == 0) {
      floors.insert(v);
    } else {
      ops.insert(rec["config"]["op"].get<std::string>());
      if (rec["config"]["outstanding"] == 1) {
        EXPECT_TRUE(rec.contains("ratio_to_floor")) << v;
      }
    }
  }
  EXPECT_EQ(floors, (std::set<std::string>{"floor/tcp", "floor/unix", "floor/inproc"}));
  EXPECT_EQ(ops, (std::set<std::string>{"WRITE", "READ", "CAS", "SEND+flush"}));
  EXPECT_TRUE(j.contains("summary"));
  // The verbs provider either ran or is recorded as skipped with a message on stdout.
  EXPECT_NE(r.output.find("verbs"), std::string::npos) << r.output;
  std::ifstream csv(csv_path);
  std::string header;
  ASSERT_TRUE(std::getline(csv, header));
  EXPECT_EQ(header.rfind("variant,", 0), 0u) << header;
}

TEST(BenchOq, QuickRunHasAllPoliciesAndTheSameRunRatios) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string json_path = dir.path() + "/oq.json";
  RunResult r = RunCmd(kBench + " oq --duration 0.05 --clients 2 --set-percent 100,50 --keys 50 " +
                       "--json " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(json_path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "invalid JSON";
  EXPECT_EQ(j["suite"], "oq");
  std::set<std::pair<std::string, int>> seen;
  for (const auto& rec : j["results"]) {
    for (const char* k : {"ops_per_sec", "p50_us", "p99_us", "round_trips_per_op", "bytes_per_op",
                          "set_p50_us", "set_p99_us", "get_p50_us"}) {
      ASSERT_TRUE(rec.contains(k)) << rec["variant"] << " lacks " << k;
    }
    EXPECT_GT(rec["ops"].get<uint64_t>(), 0u) << rec["variant"];
    seen.insert({rec["variant"].get<std::string>(), rec["config"]["set_percent"].get<int>()});
  }
  for (const char* p : {"oq", "rawrpc", "deferred"}) {
    EXPECT_TRUE(seen.count({p, 100})) << p;
    EXPECT_TRUE(seen.count({p, 50})) << p;
  }
  ASSERT_TRUE(j.contains("oq_vs_rawrpc"));
  EXPECT_EQ(j["oq_vs_rawrpc"].size(), 2u);
}

TEST(Demo, RunsTwiceOnTheSameDataDir) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string args =
      " --data-dir " + dir.path() + "/data --records 40 --senders 4 --pool-size 8M";
  RunResult first = RunCmd(kDemo + args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("created new pool"), std::string::npos) << first.output;
  RunResult second = RunCmd(kDemo + args);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("opened existing pool"), std::string::npos) << second.output;
}

#ifdef ASYMNVM_JOB_BIN
nlohmann::json RunJson(const std::string& args, const std::string& path) {
  RunResult r = RunCmd(kBench + " " + args + " --json " + path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

// The register-array anchors (counts, not times): naive sends no op log and at least
// two network operations per update; r/rc/rcb exactly one op-log send per update.
TEST(BenchSdk, RoundTripAnchorsPerLevel) {
  TempDir dir;
  nlohmann::json j = RunJson("sdk --quick --updates 200", dir.path() + "/sdk.json");
  ASSERT_EQ(j["suite"], "sdk");
  ASSERT_EQ(j["results"].size(), 4u);
  for (const auto& rec : j["results"]) {
    const std::string v = rec["variant"];
    if (v == "naive") {
      EXPECT_EQ(rec["op_log_sends_per_op"].get<double>(), 0.0);
      EXPECT_GE(rec["round_trips_per_op"].get<double>(), 2.0);
    } else {
      EXPECT_DOUBLE_EQ(rec["op_log_sends_per_op"].get<double>(), 1.0) << v;
    }
    if (v == "r" || v == "rc") {
      EXPECT_DOUBLE_EQ(rec["txns_per_op"].get<double>(), 1.0) << v;
    }
    if (v == "rcb") {
      EXPECT_LT(rec["txns_per_op"].get<double>(), 0.5);
    }
  }
}

// The durability suite: one invocation reports every variant with the agreed fields; counts, not
// times: the msync variants sync (redo log: at most about two syncs per update — op log and
// transaction landings plus amortized checkpoints), the flush variants never do.
TEST(BenchDurability, VariantsFieldsAndSyncCounts) {
  TempDir dir;
  nlohmann::json j =
      RunJson("durability --quick --updates 200 --dir " + dir.path(), dir.path() + "/d.json");
  ASSERT_EQ(j["suite"], "durability");
  ASSERT_EQ(j["results"].size(), 4u);
  std::set<std::string> variants;
  for (const auto& rec : j["results"]) {
    const std::string v = rec["variant"];
    variants.insert(v);
    for (const char* f : {"ops_per_sec", "p50_us", "p99_us", "syncs_per_op",
                          "backend_cpu_us_per_op", "round_trips_per_op", "floor_us"}) {
      ASSERT_TRUE(rec.contains(f)) << v << " lacks " << f;
    }
    EXPECT_GT(rec["ops_per_sec"].get<double>(), 0.0) << v;
    EXPECT_GT(rec["floor_us"].get<double>(), 0.0) << v;
    const double syncs = rec["syncs_per_op"].get<double>();
    if (v.rfind("msync", 0) == 0) {
      EXPECT_EQ(rec["durability"], "redo-log") << v;
      EXPECT_GT(syncs, 0.5) << v;  // every op log landing is synced
      EXPECT_LE(syncs, 2.5) << v;
    } else {
      EXPECT_EQ(rec["durability"], "direct") << v;
      EXPECT_EQ(syncs, 0.0) << v;
    }
  }
  EXPECT_EQ(variants, (std::set<std::string>{"msync", "flush", "msync-4fe", "flush-4fe"}));
}

// Coordination: the op path costs no round trip for the coordinator; a SIGKILLed
// writer is taken over and a restarted back-end reconnected to, losing nothing acknowledged.
TEST(BenchCoord, EmbeddedVariantsCostNothingOnTheOpPathAndLoseNothing) {
  TempDir dir;
  nlohmann::json j =
      RunJson("coord --quick --coordinators embedded --kills 1 --puts 200 --dir " + dir.path(),
              dir.path() + "/c.json");
  ASSERT_EQ(j["suite"], "coord");
  std::set<std::string> variants;
  for (const auto& rec : j["results"]) {
    const std::string v = rec["variant"];
    variants.insert(v);
    if (v.rfind("steady", 0) == 0) {
      EXPECT_GT(rec["ops_per_sec"].get<double>(), 0.0) << v;
      // The lease heartbeat and the claim are off the data path: the same round trips per put
      // (counted exactly; a few fence polls of difference at most).
      EXPECT_LT(std::abs(rec["coord_round_trips_per_op"].get<double>()), 0.25) << v;
    } else {
      EXPECT_EQ(rec["lost_acknowledged"].get<uint64_t>(), 0u) << v;
      EXPECT_GT(rec[v.rfind("takeover", 0) == 0 ? "takeover_ms" : "restart_ms"].get<double>(), 0.0)
          << v;
    }
  }
  EXPECT_EQ(variants, (std::set<std::string>{"steady-none", "steady-embedded", "takeover-embedded",
                                             "restart-embedded"}));
}

// Table 3 machinery: every level of the chosen structures in one run (the symmetric baselines
// included by default), the ratios in the JSON.
// TATP and SmallBank: both transaction drivers, every variant in one run, with the checks of the
// run (each balance against the workers' ledgers, the total money, TATP's row counts and
// referential rules) passing after the run and after reopening; the agreed record fields.
TEST(BenchTxn, TatpAndSmallBankEveryVariantChecked) {
  TempDir dir;
  for (const std::string suite : {"tatp --subscribers 200", "smallbank --accounts 200"}) {
    nlohmann::json j = RunJson(suite + " --frontends 1,2 --seconds 0.3 --dir " + dir.path(),
                               dir.path() + "/txn.json");
    std::set<std::string> variants;
    for (const auto& rec : j["results"]) {
      variants.insert(rec["variant"].get<std::string>());
      EXPECT_TRUE(rec["invariants_ok"].get<bool>()) << rec.dump();
      EXPECT_GT(rec["committed"].get<uint64_t>(), 0u) << rec.dump();
      for (const char* k : {"ops_per_sec", "p50_us", "p99_us", "abort_rate", "round_trips_per_op",
                            "backend_cpu_us_per_txn"}) {
        EXPECT_TRUE(rec[k].is_number()) << k << " " << rec.dump();
      }
      EXPECT_TRUE(rec["config"]["frontends"].is_number()) << rec.dump();
      EXPECT_TRUE(rec["by_type"].is_object()) << rec.dump();
    }
    EXPECT_EQ(variants, (std::set<std::string>{"naive", "r", "rc", "rcb", "symmetric"})) << suite;
    EXPECT_EQ(j["results"].size(), 10u) << suite;
  }
}

// A shipped Twitter trace replayed on the KV server under two OQ policies in one run.
TEST(BenchKvTrace, SampleTraceReplayedUnderEachPolicy) {
  TempDir dir;
  const std::string trace =
      std::string(ASYMNVM_SOURCE_DIR) + "/workloads/traces/cluster-31.sample.csv";
  nlohmann::json j =
      RunJson("kv --trace " + trace + " --trace-policies oq,rawrpc --duration 0.3 --dir " +
                  dir.path() + "/kv",
              dir.path() + "/kv.json");
  ASSERT_EQ(j["suite"], "kv");
  ASSERT_EQ(j["results"].size(), 2u) << j.dump();
  std::set<std::string> variants;
  for (const auto& rec : j["results"]) {
    variants.insert(rec["variant"].get<std::string>());
    EXPECT_EQ(rec["trace"], "cluster-31.sample.csv");
    EXPECT_GT(rec["puts"].get<uint64_t>(), 0u) << rec.dump();
    EXPECT_EQ(rec["errors"].get<uint64_t>(), 0u) << rec.dump();
    for (const char* k : {"ops_per_sec", "p50_us", "p99_us", "put_p50_us", "get_p50_us"}) {
      EXPECT_TRUE(rec[k].is_number()) << k;
    }
  }
  EXPECT_EQ(variants, (std::set<std::string>{"oq", "rawrpc"}));
  RunResult bad = RunCmd(kBench + " kv --trace " + dir.path() + "/missing.csv");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

// The RDMP suite: every variant of every size measured, and each took the path it names.
TEST(BenchRdmp, ReplyBypassHybridEachTakeTheirPath) {
  TempDir dir;
  nlohmann::json j = RunJson("rdmp --quick --ops 40 --sizes 1K,32K", dir.path() + "/rdmp.json");
  ASSERT_EQ(j["suite"], "rdmp");
  ASSERT_EQ(j["results"].size(), 12u) << j.dump();
  for (const auto& rec : j["results"]) {
    const std::string v = rec["variant"].get<std::string>();
    const uint64_t size = rec["config"]["value_bytes"].get<uint64_t>();
    const double bypassed = rec["bypassed_fraction"].get<double>();
    const bool expect_bypass =
        v.rfind("bypass", 0) == 0 || (v.rfind("hybrid", 0) == 0 && size >= 16 * 1024);
    EXPECT_EQ(bypassed, expect_bypass ? 1.0 : 0.0) << rec.dump();
    EXPECT_EQ(rec["fallbacks"].get<uint64_t>(), 0u) << rec.dump();
    EXPECT_GT(rec["ops_per_sec"].get<double>(), 0) << rec.dump();
    EXPECT_GE(rec["round_trips_per_op"].get<double>(), 1.0) << rec.dump();
  }
  RunResult bad = RunCmd(kBench + " rdmp --variants nope");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

TEST(BenchStructures, QuickRunHasEveryLevelAndTable3) {
  TempDir dir;
  nlohmann::json j = RunJson("structures --quick --structures queue,bptree --measure-ops 200",
                             dir.path() + "/st.json");
  ASSERT_EQ(j["suite"], "structures");
  std::set<std::string> cells;
  for (const auto& rec : j["results"]) {
    cells.insert(rec["structure"].get<std::string>() + "/" + rec["variant"].get<std::string>());
    for (const char* k : {"ops_per_sec", "p50_us", "p99_us", "round_trips_per_op", "bytes_per_op",
                          "backend_cpu_us_per_op", "cache_hit_ratio"}) {
      EXPECT_TRUE(rec[k].is_number()) << k;
    }
  }
  EXPECT_EQ(cells.size(), 14u);  // 2 x 6 levels + rcb-v and rcb-bytes for the map
  EXPECT_TRUE(cells.count("bptree/symmetric")) << j["results"].dump();
  EXPECT_TRUE(cells.count("bptree/rcb-bytes")) << j["results"].dump();
  EXPECT_FALSE(cells.count("queue/rcb-bytes")) << j["results"].dump();
  EXPECT_TRUE(cells.count("bptree/rcb-v")) << j["results"].dump();
  EXPECT_FALSE(cells.count("queue/rcb-v")) << j["results"].dump();
  // Vectors: one op log and one descent per vector, so fewer round trips per insert than rcb.
  double rt_rcb = -1, rt_vec = -1;
  for (const auto& rec : j["results"]) {
    if (rec["structure"] != "bptree") continue;
    if (rec["variant"] == "rcb") rt_rcb = rec["round_trips_per_op"].get<double>();
    if (rec["variant"] == "rcb-v") rt_vec = rec["round_trips_per_op"].get<double>();
  }
  EXPECT_GE(rt_vec, 0.0);
  EXPECT_LT(rt_vec, rt_rcb);
  EXPECT_TRUE(cells.count("queue/symmetric-b")) << j["results"].dump();
  for (const auto& rec : j["results"]) {
    const std::string v = rec["variant"].get<std::string>();
    if (v.rfind("symmetric", 0) != 0) continue;
    // Every op log of the measured phase went to the remote log (one doorbell each).
    EXPECT_GT(rec["ops"].get<uint64_t>(), 0u) << v;
    EXPECT_DOUBLE_EQ(rec["log_round_trips_per_op"].get<double>(), 1.0) << v;
  }
  ASSERT_EQ(j["table3"].size(), 3u);
  EXPECT_EQ(j["table3"][0]["structure"], "queue");
  EXPECT_EQ(j["table3"][2]["of"], "rcb-v/naive");
  // rcb ÷ symmetric and rcb ÷ symmetric-b per structure, with the paper's figure.
  ASSERT_EQ(j["table3_vs_symmetric"].size(), 4u) << j["table3_vs_symmetric"].dump();
  std::set<std::string> of;
  for (const auto& e : j["table3_vs_symmetric"]) {
    of.insert(e["structure"].get<std::string>() + ":" + e["of"].get<std::string>());
    EXPECT_GT(e["ratio"].get<double>(), 0.0);
    EXPECT_TRUE(e["paper"].is_number());
  }
  EXPECT_EQ(of, (std::set<std::string>{"queue:rcb/symmetric", "queue:rcb/symmetric-b",
                                       "bptree:rcb/symmetric", "bptree:rcb/symmetric-b"}));
  RunResult bad = RunCmd(kBench + " structures --structures heap");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  bad = RunCmd(kBench + " structures --vector 1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  bad = RunCmd(kBench + " structures --levels symmetric,fast");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

// README command (1): the main job twice on one data dir — the second run reopens the pool and
// verifies what the first left; a third run with fewer structures still verifies all of them.
TEST(Job, RunsTwiceOnTheSameDataDirAndVerifies) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string base = kJob + " --data-dir " + dir.path() + "/data --ops 800 --pool-size 256M";
  RunResult first = RunCmd(base);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("creating"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("ok: data kept"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("stopped (signal 15)"), std::string::npos) << first.output;
  RunResult second = RunCmd(base);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("reopening"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("left by 1 earlier run(s) in 9 structures"), std::string::npos)
      << second.output;  // the eight kinds and the B+tree partitioned over both back-ends
  EXPECT_NE(second.output.find("back-end 1: asymnvm-backend: stopped (signal 15)"),
            std::string::npos)
      << second.output;
  RunResult third = RunCmd(base + " --structures queue --json " + dir.path() + "/job.json");
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_NE(third.output.find("left by 2 earlier run"), std::string::npos) << third.output;
  std::ifstream in(dir.path() + "/job.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["run"], 3);
  EXPECT_EQ(j["ops"], 800);
  EXPECT_EQ(j["backends"], 2);
}

// `base --ops 100000000` in the background, its output to `out`; the caller kills it. -1: fork
// failed.
pid_t StartEndlessJob(const std::string& base, const std::string& out = "/dev/null") {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = "exec " + base + " --ops 100000000 >" + out + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits (up to 2 minutes) until the job's progress file (run number u64, acknowledged operations
// u64) shows run `run` (any run: nullopt) with at least `ops` acknowledged operations.
bool WaitForProgress(const std::string& progress, std::optional<uint64_t> run, uint64_t ops) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream pf(progress, std::ios::binary);
    uint64_t rec[2] = {0, 0};
    if (pf.read(reinterpret_cast<char*>(rec), sizeof rec) && (!run || rec[0] == *run) &&
        rec[1] >= ops) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The job SIGKILLed mid-run: its daemons get SIGTERM (no orphan keeps the pools locked), and the
// next run finds the interrupted run, replays its pending op logs, determines how many of its
// operations took effect (the acknowledged ones, or one more), verifies and records that.
TEST(Job, KilledMidRunIsResolvedOnTheNextRun) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string base =
      kJob + " --data-dir " + dir.path() + "/data --pool-size 256M --pm-mode flush";
  RunResult first = RunCmd(base + " --ops 300");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // Run 2 in the background; SIGKILL it once its progress file shows 100 acknowledged operations.
  const pid_t pid = StartEndlessJob(base);
  ASSERT_GE(pid, 0);
  const bool running = WaitForProgress(dir.path() + "/data/job.progress", 1, 100);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(running) << "run 2 never reached 100 acknowledged operations";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  // The daemons shut down on their own (SIGTERM from the kernel when the job died); wait until
  // both pool locks are free (each daemon holds an exclusive flock on its pool file).
  auto locked = [&](const std::string& pool) {
    const int fd = open(pool.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    close(fd);
    return held;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (
      (locked(dir.path() + "/data/asymnvm.pool") || locked(dir.path() + "/data/asymnvm-1.pool")) &&
      std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  RunResult next = RunCmd(base + " --ops 300");
  ASSERT_EQ(next.exit_code, 0) << next.output;
  EXPECT_NE(next.output.find("run 2 was interrupted after"), std::string::npos) << next.output;
  EXPECT_NE(next.output.find("left by 2 earlier run(s) in 9 structures"), std::string::npos)
      << next.output;
  RunResult again = RunCmd(base + " --ops 100");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("left by 3 earlier run(s)"), std::string::npos) << again.output;
}

// Two live jobs on one data directory: the second is refused by the coordinator (the first holds
// the directory's front-end id) before it touches the pools, and says why; the id is kept in
// DIR/job.frontend-id for later runs (their replay needs the same id).
TEST(Job, SecondLiveJobOnTheSameDirIsRefused) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string base =
      kJob + " --data-dir " + dir.path() + "/data --pool-size 256M --pm-mode flush";
  const pid_t pid = StartEndlessJob(base);
  ASSERT_GE(pid, 0);
  // A fresh directory's first run is run 0.
  const bool running = WaitForProgress(dir.path() + "/data/job.progress", 0, 10);
  RunResult second = running ? RunCmd(base + " --ops 10") : RunResult{};
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(running) << "the first job never reached 10 acknowledged operations";
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("another asymnvm-job is running on"), std::string::npos)
      << second.output;
  std::ifstream idf(dir.path() + "/data/job.frontend-id");
  uint64_t id = 0;
  EXPECT_TRUE(static_cast<bool>(idf >> id));
  EXPECT_EQ(id, 1u);  // the first id the fresh directory's coordinator allocates
}

// A back-end SIGKILLed mid-run: the job exits 4 ("interrupted", not 3 "verification failed" and
// not the generic 1) and says the data is safe; the next run resolves the run and verifies.
TEST(Job, BackendKilledMidRunExits4AndTheNextRunVerifies) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string base =
      kJob + " --data-dir " + dir.path() + "/data --pool-size 256M --pm-mode flush";
  const std::string log = dir.path() + "/run.log";
  const pid_t pid = StartEndlessJob(base, log);
  ASSERT_GE(pid, 0);
  // Once 100 operations are acknowledged, SIGKILL back-end 0 (its pid is in the job's output).
  const bool running = WaitForProgress(dir.path() + "/data/job.progress", std::nullopt, 100);
  std::ifstream lf(log);
  std::stringstream out;
  out << lf.rdbuf();
  const std::string key = "back-end 0: pid ";
  const size_t at = out.str().find(key);
  pid_t be = -1;
  if (at != std::string::npos)
    be = static_cast<pid_t>(std::atol(out.str().c_str() + at + key.size()));
  if (!running || be <= 0) kill(pid, SIGKILL);
  ASSERT_TRUE(running) << "the run never reached 100 acknowledged operations";
  ASSERT_GT(be, 0) << out.str();
  ASSERT_EQ(kill(be, SIGKILL), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream lf2(log);
  std::stringstream out2;
  out2 << lf2.rdbuf();
  ASSERT_TRUE(WIFEXITED(status)) << out2.str();
  EXPECT_EQ(WEXITSTATUS(status), 4) << out2.str();
  EXPECT_NE(out2.str().find("back-end 0 (pid " + std::to_string(be) + ") killed by signal 9"),
            std::string::npos)
      << out2.str();
  EXPECT_NE(out2.str().find("run the job again"), std::string::npos) << out2.str();
  RunResult next = RunCmd(base + " --ops 200");
  ASSERT_EQ(next.exit_code, 0) << next.output;
  EXPECT_NE(next.output.find("run 1 was interrupted after"), std::string::npos) << next.output;
}

#ifdef ASYMNVM_CTL_BIN
// Mirrors in the main job (doc/mirror.md §Main job): --kill-primary-after K SIGKILLs back-end 0
// after K acknowledged operations and deletes its pool; the mirror is promoted, the job's sessions
// follow it, the run completes and verifies every structure; the old pool path rejoins as a mirror
// of the promoted primary (identical after the quiesced stop). Later runs find the promoted pool
// through the group's state on the coordinator, with and without mirrors, and verify everything.
TEST(Job, KillPrimaryAfterPromotesTheMirrorAndLaterRunsVerify) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string data = dir.path() + "/data";
  const std::string base =
      kJob + " --data-dir " + data + " --pool-size 64M --pm-mode flush --backends 1";
  const std::string json = dir.path() + "/kill.json";
  RunResult first = RunCmd(base + " --mirrors 1 --kill-primary-after 300 --ops 600 --json " + json);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("killed back-end 0"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("promoted: "), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("failover of back-end 0"), std::string::npos) << first.output;
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << first.output;
  ASSERT_TRUE(j.contains("failover")) << j.dump();
  const auto& f = j["failover"];
  EXPECT_EQ(f["term"], 2) << f.dump();
  EXPECT_EQ(f["killed_after_ops"], 300);
  EXPECT_NE(f["new_pool"].get<std::string>().find("asymnvm.mirror-0.pool"), std::string::npos);
  EXPECT_NE(f["old_address"], f["new_address"]);
  EXPECT_GT(f["verified_elements"].get<uint64_t>(), 0u);
  EXPECT_GE(f["first_op_ms"].get<double>(), f["switch_ms"].get<double>());
  EXPECT_GT(f["rejoin_in_sync_ms"].get<double>(), 0.0);
  // The old primary's path rejoined as a mirror of the promoted primary: identical after the stop.
  const std::string ctl = ASYMNVM_CTL_BIN;
  RunResult diff =
      RunCmd(ctl + " diff " + data + "/asymnvm.mirror-0.pool " + data + "/asymnvm.pool");
  EXPECT_EQ(diff.exit_code, 0) << diff.output;
  // A plain run is served by the promoted pool and verifies the first run.
  RunResult plain = RunCmd(base + " --ops 200");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("asymnvm.mirror-0.pool (promoted"), std::string::npos)
      << plain.output;
  EXPECT_NE(plain.output.find("left by 1 earlier run(s)"), std::string::npos) << plain.output;
  // With a mirror again: the old path mirrors the promoted pool.
  RunResult again = RunCmd(base + " --mirrors 1 --ops 200");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("left by 2 earlier run(s)"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("(" + data + "/asymnvm.pool)"), std::string::npos) << again.output;
  // Usage: --kill-primary-after needs a mirror and fewer than --ops operations.
  EXPECT_EQ(RunCmd(base + " --kill-primary-after 10").exit_code, 2);
  EXPECT_EQ(RunCmd(base + " --mirrors 1 --ops 10 --kill-primary-after 10").exit_code, 2);
}
#endif

TEST(Job, HelpNamesEveryExitCode) {
  RunResult r = RunCmd(kJob + " --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* code :
       {"0 success", "1 failure", "2 bad command line", "3 verification failed", "4 interrupted"}) {
    EXPECT_NE(r.output.find(code), std::string::npos) << code << "\n" << r.output;
  }
}

TEST(Job, BadArgumentsExitWithCode2) {
  for (const char* args : {" --ops 0", " --structures heap", " --level fast", " --bogus",
                           " --backends 0", " --backends 9"}) {
    RunResult r = RunCmd(kJob + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  }
}
#endif

TEST(Demo, BadArgumentsExitWithCode2) {
  RunResult r = RunCmd(kDemo + " --senders 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = RunCmd(kDemo + " --transport carrier-pigeon");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
