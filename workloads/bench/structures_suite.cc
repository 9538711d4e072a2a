// Suite "structures": the eight persistent structures at each optimization level, side by side in
// one run (AsymNVM paper §9, Table 3, Figures 6–13).
//
// Every cell (structure × level × sweep point) gets a fresh asymnvm-backend daemon (a child
// process, soft fabric over loopback TCP, a pool file in --dir) and N front-end sessions in this
// process, each a thread with its own structure instance (--frontends), optionally plus reader
// threads on the first front-end's instance (--readers, SWMR). A load phase inserts --preload
// keys; the measured phase runs --ops operations per front-end of the --mix over the --dist key
// chooser (100 % write = fresh inserts, Table 3's "100 % insert"). Reported per cell: throughput
// (all front-ends), p50/p99 latency per operation, round trips (doorbells) and wire bytes out per
// operation, back-end CPU microseconds per operation (/proc of the daemon), cache hit ratio, and
// the readers' retry ratio.
//
// The cache is --cache-pct percent of the data, estimated as (preload + ops) × frontends ×
// (key 8 B + value slot + 24 B of node overhead); batches hold --batch operations.
// The back-end persists with --pm-mode flush by default (cache-line flush + fence: the cost model
// of real PM; on this disk-backed file msync would make every persist a page write-back).
//
// Levels "symmetric" and "symmetric-b" are the paper's symmetric-architecture baseline (§9 "Compare
// to the Symmetric Setting", Table 3 rows Symmetric / Symmetric-B): the structure lives in local PM
// — an in-process back-end (backend::Backend, soft NIC over inproc, a pool file in --dir, same
// --pm-mode) — and its op logs are shipped asynchronously (SessionOptions::async_op_logs, no wait
// for the acknowledgement) to a remote log: the cell's asymnvm-backend daemon, reached over tcp.
// The session runs at rc (symmetric) or rcb (symmetric-b). It is an optimistic upper bound: an
// acknowledged operation can be lost, and nothing truncates the remote log. For these cells "be
// cpu" is the remote log daemon's CPU (the local back-end's threads are in this process), and
// "log rt/op" counts the doorbells to the remote log (one per op log); rt/op and B/op count every
// connection of the session, the inproc ones to local PM included.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "backend/backend.h"
#include "tools/ctl.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"
#include "workloads/driver/backend_process.h"
#include "workloads/driver/runner.h"

namespace asymnvm::bench {
namespace {

using frontend::Level;
using structures::Kind;

// Paper Table 3: RCB ÷ naive (hash table: RC ÷ naive).
const std::map<std::string, double> kPaperRatio = {
    {"queue", 4.4},  {"stack", 5.4}, {"skiplist", 10.6}, {"bst", 5.6},
    {"bptree", 8.9}, {"mvbst", 5.7}, {"mvbptree", 4.3},  {"hash", 1.4}};

// Paper Table 3, KOPS: AsymNVM-RCB (hash table: RC) ÷ Symmetric and RCB ÷ Symmetric-B.
const std::map<std::string, double> kPaperVsSymmetric = {
    {"queue", 1392 / 1187.0},  {"stack", 1139 / 1076.0}, {"skiplist", 54.9 / 117.6},
    {"bst", 76.2 / 77.1},      {"bptree", 84.4 / 124.3}, {"mvbst", 37.9 / 38.2},
    {"mvbptree", 29.8 / 14.0}, {"hash", 439 / 1148.0}};
const std::map<std::string, double> kPaperVsSymmetricB = {
    {"queue", 1392 / 2459.0}, {"stack", 1139 / 2293.0}, {"skiplist", 54.9 / 189.3},
    {"bst", 76.2 / 134.8},    {"bptree", 84.4 / 174.2}, {"mvbst", 37.9 / 126.6},
    {"mvbptree", 29.8 / 62.7}};
// The bar: AsymNVM-RCB within 1.5x of symmetric.
constexpr double kWithin = 1.5;

// A column of Table 3: an optimization level, or the symmetric baseline at a level.
struct Variant {
  Level level;
  bool symmetric = false;
  bool vector = false;         // rcb-v: rcb with writes sent as Map::PutBatch vectors (Algorithm 3)
  bool inline_values = false;  // rcb-inline: rcb with values inline in the memory logs
  uint32_t key_size = 0;       // rcb-bytes: rcb with byte-string keys ("user<n>", key_size 24)
  std::string Name() const {
    if (key_size != 0) return "rcb-bytes";
    if (vector) return "rcb-v";
    if (inline_values) return "rcb-inline";
    if (!symmetric) return frontend::LevelName(level);
    return level == Level::kRcb ? "symmetric-b" : "symmetric";
  }
};

Result<Variant> ParseVariant(const std::string& name) {
  if (name == "symmetric") return Variant{Level::kRc, true};
  if (name == "symmetric-b") return Variant{Level::kRcb, true};
  if (name == "rcb-v") return Variant{Level::kRcb, false, true};
  if (name == "rcb-inline") return Variant{Level::kRcb, false, false, true};
  if (name == "rcb-bytes") return Variant{Level::kRcb, false, false, false, 24};
  auto l = frontend::ParseLevel(name);
  if (!l.ok()) {
    return Status::InvalidArgument(
        "unknown level '" + name +
        "' (naive, r, rc, rcb, rcb-v, rcb-inline, rcb-bytes, symmetric or symmetric-b)");
  }
  return Variant{*l, false};
}

// The Rowan receiver address of the back-end at `oq_address`, from its status reply (kStatus,
// through asymnvm-ctl's client), so the remote log back-end needs no front-end registration.
Result<std::string> FetchLogAddress(const std::string& oq_address) {
  ASYMNVM_ASSIGN_OR_RETURN(std::string text,
                           tools::FetchStatus(oq_address, std::chrono::seconds(5)));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("log_address") || !j["log_address"].is_string() ||
      j["log_address"].get<std::string>().empty()) {
    return Status::ProtocolError(oq_address + ": status reply names no log_address");
  }
  return j["log_address"].get<std::string>();
}

struct Cell {
  Kind kind;
  Variant variant;
  uint32_t batch;
  double cache_pct;
  std::string sweep;  // "", "batch", "cache"
};

struct CellResult {
  uint64_t ops = 0;
  double seconds = 0;
  LatencySampler latency;
  uint64_t round_trips = 0, bytes_out = 0, hits = 0, misses = 0;
  uint64_t op_logs = 0, op_log_bytes = 0;
  double backend_cpu = 0;
  uint64_t reader_ops = 0, reader_retries = 0;
  double reader_seconds = 0;
};

class StructuresSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--structures", structures_,
                    "stack,queue,hash,skiplist,bst,bptree,mvbst,mvbptree")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--levels", levels_,
                    "naive,r,rc,rcb,rcb-v,rcb-bytes,symmetric,symmetric-b (rcb-v: rcb with "
                    "writes sent as --vector-sized PutBatch vectors, ordered "
                    "maps only; rcb-inline: rcb with values inline in the "
                    "memory logs instead of pointers into the op log; rcb-bytes: "
                    "rcb with byte-string keys \"user<n>\" of up to 24 bytes (maps "
                    "only); symmetric: "
                    "local PM + asynchronous op-log shipping, the paper's baseline)")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--mix", mix_, "read%/write% (100/0 .. 0/100) or YCSB A..F")
        ->capture_default_str();
    cmd->add_option("--dist", dist_, "uniform|zipfian|zipfian-raw|latest|hotspot")
        ->capture_default_str();
    cmd->add_option("--theta", theta_, "Zipfian constant")->capture_default_str();
    cmd->add_option("--batch", batch_, "operations per transaction at rcb")->capture_default_str();
    cmd->add_option("--vector", vector_, "writes per PutBatch vector at level rcb-v")
        ->capture_default_str();
    cmd->add_option("--cache-pct", cache_pct_, "cache size, percent of the data")
        ->capture_default_str();
    cmd->add_option("--value-size", value_size_, "value bytes (constant)")->capture_default_str();
    cmd->add_option("--measure-ops", ops_, "operations per front-end per cell (--ops caps it)")
        ->capture_default_str();
    cmd->add_option("--preload", preload_,
                    "keys inserted before measuring (default: 0 for "
                    "0/100, else the measured op count)");
    cmd->add_option("--frontends", frontends_, "front-ends, each with its own instance")
        ->capture_default_str();
    cmd->add_option("--readers", readers_, "reader threads on front-end 1's instance (SWMR)")
        ->capture_default_str();
    cmd->add_option("--sweep", sweep_,
                    "none|batch|cache|all: also sweep batch size (rcb) and "
                    "cache size (rc) for --sweep-structure")
        ->capture_default_str();
    cmd->add_option("--sweep-structure", sweep_structure_, "structure of the sweeps")
        ->capture_default_str();
    cmd->add_option("--dir", dir_, "directory for the pool files")->capture_default_str();
    cmd->add_option("--fabric", fabric_,
                    "fabric provider of the back-end and the front-ends: soft (default) | shm "
                    "(same host: one-sided operations on the shared pool, doc/fabric.md) | auto")
        ->check(CLI::IsMember({"soft", "shm", "verbs", "auto"}));
    cmd->add_option("--pm-mode", pm_mode_,
                    "back-end persistence: flush (cache-line flush + fence, "
                    "the model of real PM) | msync (page write-back to the "
                    "file's disk) | auto")
        ->capture_default_str();
    cmd->add_option("--backend-bin", backend_bin_,
                    "asymnvm-backend binary (default: found next "
                    "to asymnvm-bench)");
  }

  Status Validate(const CommonOptions& common) override {
    for (const auto& s : structures_) {
      ASYMNVM_ASSIGN_OR_RETURN(Kind k, structures::ParseKind(s));
      kinds_.push_back(k);
    }
    for (const auto& l : levels_) {
      ASYMNVM_ASSIGN_OR_RETURN(Variant v, ParseVariant(l));
      variants_.push_back(v);
    }
    ASYMNVM_RETURN_IF_ERROR(workloads::ParseMix(mix_).status());
    ASYMNVM_RETURN_IF_ERROR(workloads::MakeKeyGenerator(dist_, 1000, theta_).status());
    if (batch_ < 1 || batch_ > 65536) return Status::InvalidArgument("--batch must be 1..65536");
    if (vector_ < 2 || vector_ > 65536) return Status::InvalidArgument("--vector must be 2..65536");
    if (cache_pct_ <= 0 || cache_pct_ > 1000)
      return Status::InvalidArgument("--cache-pct must be in (0, 1000]");
    if (value_size_ < 1 || value_size_ > structures::kMaxValueSize) {
      return Status::InvalidArgument("--value-size must be 1.." +
                                     std::to_string(structures::kMaxValueSize));
    }
    if (frontends_ < 1 || frontends_ > 64)
      return Status::InvalidArgument("--frontends must be 1..64");
    if (readers_ > 64) return Status::InvalidArgument("--readers must be 0..64");
    if (sweep_ != "none" && sweep_ != "batch" && sweep_ != "cache" && sweep_ != "all") {
      return Status::InvalidArgument("--sweep must be none, batch, cache or all");
    }
    ASYMNVM_ASSIGN_OR_RETURN(sweep_kind_, structures::ParseKind(sweep_structure_));
    if (ops_ < 1) return Status::InvalidArgument("--measure-ops must be >= 1");
    if (pm_mode_ != "flush" && pm_mode_ != "msync" && pm_mode_ != "auto") {
      return Status::InvalidArgument("--pm-mode must be flush, msync or auto");
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    report->machine()["cores"] = MachineCores();
    report->machine()["provider"] = fabric_;
    report->machine()["transport"] = "tcp";
    report->machine()["pm_mode"] = pm_mode_;
    if (common.quick) ops_ = std::min<uint64_t>(ops_, 600);
    if (common.ops > 0) ops_ = std::min(ops_, common.ops);
    auto mix = workloads::ParseMix(mix_);
    write_only_ = mix->read == 0 && mix->scan == 0;
    if (preload_ < 0) preload_ = write_only_ ? 0 : static_cast<int64_t>(ops_);
    if (backend_bin_.empty()) {
      ASYMNVM_ASSIGN_OR_RETURN(backend_bin_, driver::FindBackendBinary(""));
    }
    seed_ = common.seed;
    duration_ = common.duration_s > 0 ? std::chrono::duration<double>(common.duration_s)
                                      : std::chrono::duration<double>(common.quick ? 5 : 30);
    std::vector<Cell> cells;
    for (Kind k : kinds_) {
      for (const Variant& v : variants_) {
        // Vectors are the ordered maps' optimization (a hash table's PutBatch is a loop of Puts).
        if (v.vector && !structures::IsOrdered(k)) continue;
        if (v.key_size != 0 && structures::IsSequence(k)) continue;  // sequences have no keys
        cells.push_back({k, v, batch_, cache_pct_, ""});
      }
    }
    if (sweep_ == "batch" || sweep_ == "all") {
      for (uint32_t b : {1u, 8u, 64u, 256u, 1024u})
        cells.push_back({sweep_kind_, {Level::kRcb}, b, cache_pct_, "batch"});
    }
    if (sweep_ == "cache" || sweep_ == "all") {
      for (double c : {1.0, 5.0, 10.0, 25.0, 50.0, 100.0}) {
        cells.push_back({sweep_kind_, {Level::kRc}, batch_, c, "cache"});
      }
    }
    report->AddHeader("structures: " + std::to_string(frontends_) + " front-end(s), " +
                      std::to_string(readers_) + " reader(s), mix " + mix_ + ", " + dist_ +
                      ", value " + std::to_string(value_size_) + " B, batch " +
                      std::to_string(batch_) + ", cache " + std::to_string(cache_pct_) +
                      "% of data, " + std::to_string(ops_) +
                      " ops per front-end per cell, back-end "
                      "pm-mode " +
                      pm_mode_);
    std::map<std::pair<std::string, std::string>, double> tput;
    for (const Cell& cell : cells) {
      ASYMNVM_ASSIGN_OR_RETURN(CellResult r, RunCell(cell));
      const std::string name = structures::KindName(cell.kind);
      Json cfg = {{"structure", name},
                  {"mix", mix_},
                  {"dist", dist_},
                  {"batch", cell.batch},
                  {"cache_pct", cell.cache_pct},
                  {"value_size", value_size_},
                  {"key_size", cell.variant.key_size},
                  {"frontends", frontends_},
                  {"readers", readers_},
                  {"preload", preload_},
                  {"sweep", cell.sweep}};
      Json rec = MakeRecord(cell.variant.Name(), cfg);
      const double ops = static_cast<double>(std::max<uint64_t>(r.ops, 1));
      rec["ops_per_sec"] = r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0;
      rec["p50_us"] = r.latency.PercentileUs(50);
      rec["p99_us"] = r.latency.PercentileUs(99);
      rec["round_trips_per_op"] = static_cast<double>(r.round_trips) / ops;
      rec["bytes_per_op"] = static_cast<double>(r.bytes_out) / ops;
      rec["backend_cpu_us_per_op"] = r.backend_cpu * 1e6 / ops;
      rec["cache_hit_ratio"] =
          r.hits + r.misses ? static_cast<double>(r.hits) / static_cast<double>(r.hits + r.misses)
                            : 0.0;
      if (cell.variant.symmetric) {
        rec["log_round_trips_per_op"] = static_cast<double>(r.op_logs) / ops;
        rec["log_bytes_per_op"] = static_cast<double>(r.op_log_bytes) / ops;
      }
      rec["structure"] = name;
      rec["ops"] = r.ops;
      if (readers_ > 0) {
        rec["reader_ops_per_sec"] =
            r.reader_seconds > 0 ? static_cast<double>(r.reader_ops) / r.reader_seconds : 0;
        rec["reader_retry_ratio"] =
            r.reader_ops ? static_cast<double>(r.reader_retries) / static_cast<double>(r.reader_ops)
                         : 0.0;
      }
      if (cell.sweep.empty()) tput[{name, cell.variant.Name()}] = rec["ops_per_sec"].get<double>();
      report->Add(std::move(rec));
      std::cerr << "\r\033[K";
    }
    // Table 3 ratios.
    Json table3 = Json::array();
    for (Kind k : kinds_) {
      const std::string name = structures::KindName(k);
      const std::string top = k == Kind::kHashTable ? "rc" : "rcb";
      auto hi = tput.find({name, top});
      auto lo = tput.find({name, "naive"});
      if (hi == tput.end() || lo == tput.end() || lo->second <= 0) continue;
      const double ratio = hi->second / lo->second;
      const double paper = kPaperRatio.at(name);
      table3.push_back({{"structure", name},
                        {"ratio", ratio},
                        {"of", top + "/naive"},
                        {"paper", paper},
                        {"met", ratio >= paper}});
      char line[160];
      std::snprintf(line, sizeof(line), "%-9s %s/naive = %6.2fx  (paper %.1fx: %s)", name.c_str(),
                    top.c_str(), ratio, paper, ratio >= paper ? "met" : "NOT met");
      report->AddNote(line);
      // With vector operations (the paper's batching for the ordered structures, Fig. 6).
      auto v = tput.find({name, "rcb-v"});
      if (v != tput.end()) {
        const double vr = v->second / lo->second;
        table3.push_back({{"structure", name},
                          {"ratio", vr},
                          {"of", "rcb-v/naive"},
                          {"paper", paper},
                          {"met", vr >= paper}});
        std::snprintf(line, sizeof(line), "%-9s rcb-v/naive = %6.2fx  (paper %.1fx: %s)",
                      name.c_str(), vr, paper, vr >= paper ? "met" : "NOT met");
        report->AddNote(line);
      }
    }
    report->extra()["table3"] = table3;
    // Against the symmetric baseline (paper: AsymNVM-RCB comparable to symmetric; our bar is
    // within 1.5x). Hash table: RC ÷ symmetric, as in the paper.
    Json vs_sym = Json::array();
    for (Kind k : kinds_) {
      const std::string name = structures::KindName(k);
      const std::string top = k == Kind::kHashTable ? "rc" : "rcb";
      auto hi = tput.find({name, top});
      if (hi == tput.end()) continue;
      for (const auto& [sym, paper_map] :
           {std::pair{std::string("symmetric"), &kPaperVsSymmetric},
            std::pair{std::string("symmetric-b"), &kPaperVsSymmetricB}}) {
        auto lo = tput.find({name, sym});
        if (lo == tput.end() || lo->second <= 0) continue;
        const double ratio = hi->second / lo->second;
        const bool met = ratio >= 1.0 / kWithin;
        Json e = {{"structure", name}, {"ratio", ratio}, {"of", top + "/" + sym}, {"met", met}};
        auto p = paper_map->find(name);
        e["paper"] = p == paper_map->end() ? Json(nullptr) : Json(p->second);
        vs_sym.push_back(e);
        char line[200];
        if (p == paper_map->end()) {
          std::snprintf(line, sizeof(line),
                        "%-9s %s/%s = %6.2fx  (paper: no %s cell; within %.1fx: %s)", name.c_str(),
                        top.c_str(), sym.c_str(), ratio, sym.c_str(), kWithin, met ? "yes" : "NO");
        } else {
          std::snprintf(line, sizeof(line), "%-9s %s/%s = %6.2fx  (paper %.2fx; within %.1fx: %s)",
                        name.c_str(), top.c_str(), sym.c_str(), ratio, p->second, kWithin,
                        met ? "yes" : "NO");
        }
        report->AddNote(line);
      }
    }
    report->extra()["table3_vs_symmetric"] = vs_sym;
    if (!vs_sym.empty()) {
      report->AddNote(
          "symmetric = local PM (in-process back-end, inproc) + op logs shipped "
          "asynchronously to the remote daemon: an upper bound without consistency");
    }
    report->set_columns({{"structure", "structure", 0},
                         {"be cpu us/op", "backend_cpu_us_per_op", 2},
                         {"hit ratio", "cache_hit_ratio", 3},
                         {"log rt/op", "log_round_trips_per_op", 3}});
    return Status::Ok();
  }

 private:
  Result<CellResult> RunCell(const Cell& cell) {
    const std::string name = structures::KindName(cell.kind);
    const std::string pool = dir_ + "/asymnvm-bench-st-" + std::to_string(getpid()) + ".pool";
    std::filesystem::remove(pool);
    ASYMNVM_ASSIGN_OR_RETURN(auto be, driver::BackendProcess::Start(
                                          backend_bin_, pool, "1G",
                                          {"--pm-mode", pm_mode_, "--fabric", fabric_}, "warn"));
    const std::string local_pool = pool + ".local";
    struct Cleanup {
      std::string pool, local_pool;
      std::unique_ptr<backend::Backend> local;
      ~Cleanup() {
        if (local) local->Stop();
        local.reset();
        std::filesystem::remove(pool);
        std::filesystem::remove(pool + ".backend.log");
        std::filesystem::remove(local_pool);
      }
    } cleanup{pool, local_pool, nullptr};
    // The data back-end: the daemon, or for the symmetric baseline local PM in this process with
    // the daemon as the remote log.
    std::string data_address = be->address(), op_log_address;
    if (cell.variant.symmetric) {
      ASYMNVM_ASSIGN_OR_RETURN(op_log_address, FetchLogAddress(be->address()));
      std::filesystem::remove(local_pool);
      backend::BackendOptions bo;
      bo.pool_path = local_pool;
      bo.pool_size = 1ull << 30;
      bo.fabric.provider = fabric_;
      ASYMNVM_ASSIGN_OR_RETURN(bo.persist_mode, pm::ParsePersistMode(pm_mode_));
      static std::atomic<uint64_t> instance{0};
      const std::string tag = "asymnvm-bench-local-" + std::to_string(getpid()) + "-" +
                              std::to_string(instance.fetch_add(1));
      bo.listen_address = "inproc://" + tag;
      bo.log_listen_address = "inproc://" + tag + "-log";
      auto local = backend::Backend::Start(bo);
      if (!local.ok())
        return local.status().WithContext(name + "/" + cell.variant.Name() + ": local PM back-end");
      cleanup.local = std::move(local).value();
      data_address = cleanup.local->address();
    }
    const uint64_t elems = static_cast<uint64_t>(preload_) + ops_;
    const double data_bytes =
        static_cast<double>(elems) * static_cast<double>(8 + (4 + value_size_ + 7) / 8 * 8 + 24);
    const uint64_t cache =
        std::max<uint64_t>(64 * 1024, static_cast<uint64_t>(data_bytes * cell.cache_pct / 100.0));

    struct Fe {
      std::unique_ptr<frontend::Session> session;
      std::unique_ptr<structures::Handle> handle;
      driver::RunResult result;
      Status status;
      frontend::Counters before;
    };
    std::vector<Fe> fes(static_cast<size_t>(frontends_));
    for (int i = 0; i < frontends_; i++) {
      frontend::SessionOptions so;
      so.fabric.provider = fabric_;
      so.backends = {data_address};
      so.frontend_id = static_cast<uint64_t>(i + 1);
      so.level = cell.variant.level;
      so.op_log_address = op_log_address;
      so.async_op_logs = cell.variant.symmetric;
      so.pointer_mem_logs = !cell.variant.inline_values;
      so.cache_bytes = cache;
      so.batch_ops = cell.batch;
      so.timeout = std::chrono::milliseconds(30000);
      ASYMNVM_ASSIGN_OR_RETURN(fes[i].session, frontend::Session::Open(so));
      structures::Options o;
      o.value_size = value_size_;
      o.key_size = cell.variant.key_size;
      ASYMNVM_ASSIGN_OR_RETURN(fes[i].handle,
                               structures::Open(*fes[i].session, cell.kind,
                                                "bench-" + name + "-" + std::to_string(i), o));
    }
    const std::string label =
        name + "/" + cell.variant.Name() + (cell.sweep.empty() ? "" : " " + cell.sweep);
    const bool tty = isatty(2);
    // Load phase.
    if (preload_ > 0) {
      for (int i = 0; i < frontends_; i++) {
        driver::RunConfig lc;
        lc.mix = "0/100";
        lc.fresh_inserts = true;
        lc.ops = static_cast<uint64_t>(preload_);
        lc.key_space = static_cast<uint64_t>(preload_);
        lc.value_size = "constant:" + std::to_string(value_size_);
        lc.seed = seed_ + static_cast<uint64_t>(i);
        lc.max_time = std::chrono::hours(1);
        auto r = driver::Run(*fes[i].handle, lc, [&](uint64_t done) {
          if (tty)
            std::cerr << "\r\033[K" << label << ": load " << done << "/" << preload_ << std::flush;
        });
        if (!r.ok()) return r.status().WithContext(label + " load");
      }
    }
    for (auto& f : fes) f.before = f.session->counters();
    ASYMNVM_ASSIGN_OR_RETURN(double cpu0, be->CpuSeconds());
    std::atomic<bool> writers_done{false};
    // Readers (SWMR on front-end 1's instance).
    struct Reader {
      std::unique_ptr<frontend::Session> session;
      std::unique_ptr<structures::Handle> handle;
      uint64_t ops = 0;
      Status status;
    };
    std::vector<Reader> readers(static_cast<size_t>(readers_));
    for (int i = 0; i < readers_; i++) {
      frontend::SessionOptions so;
      so.fabric.provider = fabric_;
      so.backends = {data_address};
      so.frontend_id = static_cast<uint64_t>(1000 + i);
      so.level = cell.variant.level;
      so.cache_bytes = cache;
      ASYMNVM_ASSIGN_OR_RETURN(readers[i].session, frontend::Session::Open(so));
      structures::Options o;
      o.access = structures::Access::kReader;
      ASYMNVM_ASSIGN_OR_RETURN(readers[i].handle, structures::Open(*readers[i].session, cell.kind,
                                                                   "bench-" + name + "-0", o));
    }
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < frontends_; i++) {
      threads.emplace_back([&, i] {
        driver::RunConfig rc;
        rc.mix = mix_;
        rc.distribution = dist_;
        rc.theta = theta_;
        rc.fresh_inserts = write_only_;
        rc.next_insert = static_cast<uint64_t>(preload_);
        rc.key_space = std::max<uint64_t>(1, static_cast<uint64_t>(preload_));
        rc.value_size = "constant:" + std::to_string(value_size_);
        rc.ops = ops_;
        rc.vector = cell.variant.vector ? vector_ : 1;
        rc.max_time = std::chrono::duration_cast<std::chrono::nanoseconds>(duration_);
        rc.seed = seed_ * 7919 + static_cast<uint64_t>(i);
        auto r = driver::Run(*fes[i].handle, rc, [&](uint64_t done) {
          if (tty && i == 0)
            std::cerr << "\r\033[K" << label << ": " << done << "/" << ops_ << std::flush;
        });
        if (r.ok()) {
          fes[i].result = std::move(*r);
        } else {
          fes[i].status = r.status();
        }
      });
    }
    std::vector<std::thread> rthreads;
    for (int i = 0; i < readers_; i++) {
      rthreads.emplace_back([&, i] {
        workloads::Rng rng(seed_ + 31 * static_cast<uint64_t>(i));
        structures::Value v;
        const uint64_t space = std::max<uint64_t>(1, static_cast<uint64_t>(preload_));
        const uint32_t key_size = cell.variant.key_size;
        while (!writers_done.load()) {
          Status st;
          if (structures::IsSequence(cell.kind)) {
            st = static_cast<structures::Sequence*>(readers[i].handle.get())->Peek(&v);
          } else {
            st = static_cast<structures::Map*>(readers[i].handle.get())
                     ->Get(
                         driver::MapKey(workloads::KeyNumToKey(rng.Next() % space, true), key_size),
                         &v);
          }
          if (!st.ok() && st.code() != StatusCode::kNotFound) {
            readers[i].status = st;
            return;
          }
          readers[i].ops++;
        }
      });
    }
    for (auto& t : threads) t.join();
    writers_done = true;
    const double writer_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& t : rthreads) t.join();
    ASYMNVM_ASSIGN_OR_RETURN(double cpu1, be->CpuSeconds());
    CellResult out;
    for (auto& f : fes) {
      if (!f.status.ok()) return f.status.WithContext(label);
      const auto c = f.session->counters();
      out.ops += f.result.ops;
      out.seconds = std::max(out.seconds, f.result.seconds);
      for (uint64_t ns : f.result.latency.samples()) out.latency.Add(ns);
      out.round_trips += c.fabric.round_trips - f.before.fabric.round_trips;
      out.bytes_out += c.fabric.bytes_out - f.before.fabric.bytes_out;
      out.hits += c.cache_hits - f.before.cache_hits;
      out.misses += c.cache_misses - f.before.cache_misses;
      out.op_logs += c.op_logs - f.before.op_logs;
      out.op_log_bytes += c.op_log_bytes - f.before.op_log_bytes;
    }
    for (auto& r : readers) {
      if (!r.status.ok()) return r.status.WithContext(label + " reader");
      out.reader_ops += r.ops;
      out.reader_retries += r.session->counters().reader_retries;
    }
    out.reader_seconds = writer_seconds;
    out.backend_cpu = cpu1 - cpu0;
    readers.clear();
    fes.clear();
    return out;
  }

  std::vector<std::string> structures_ = {"stack", "queue",  "hash",  "skiplist",
                                          "bst",   "bptree", "mvbst", "mvbptree"};
  std::vector<std::string> levels_ = {"naive", "r",         "rc",        "rcb",
                                      "rcb-v", "rcb-bytes", "symmetric", "symmetric-b"};
  std::string mix_ = "0/100", dist_ = "uniform", sweep_ = "none", sweep_structure_ = "bptree";
  double theta_ = 0.99, cache_pct_ = 10;
  uint32_t batch_ = 1024, value_size_ = 64, vector_ = 1024;
  uint64_t ops_ = 4000;
  int64_t preload_ = -1;
  int frontends_ = 1, readers_ = 0;
  std::string dir_ = std::filesystem::temp_directory_path().string();
  std::string backend_bin_;
  std::string pm_mode_ = "flush";
  std::string fabric_ = "soft";
  std::vector<Kind> kinds_;
  std::vector<Variant> variants_;
  Kind sweep_kind_ = Kind::kBPlusTree;
  bool write_only_ = true;
  uint64_t seed_ = 42;
  std::chrono::duration<double> duration_{30};
};

}  // namespace

ASYMNVM_REGISTER_SUITE(g_structures_suite, "structures",
                       "the eight persistent structures per optimization level (Table 3), with "
                       "batch and cache sweeps",
                       StructuresSuite);

}  // namespace asymnvm::bench
