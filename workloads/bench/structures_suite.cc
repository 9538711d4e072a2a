// Suite "structures": the eight persistent structures at each optimization level, side by side in
// one run (papers/asymnvm-asplos20.txt §9, Table 3, Figures 6–13; issue 5).
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
// Level "symmetric" of the issue (local PM + asynchronous log shipping) is not built.
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
    {"queue", 4.4}, {"stack", 5.4}, {"skiplist", 10.6}, {"bst", 5.6}, {"bptree", 8.9},
    {"mvbst", 5.7}, {"mvbptree", 4.3}, {"hash", 1.4}};

struct Cell {
  Kind kind;
  Level level;
  uint32_t batch;
  double cache_pct;
  std::string sweep;  // "", "batch", "cache"
};

struct CellResult {
  uint64_t ops = 0;
  double seconds = 0;
  LatencySampler latency;
  uint64_t round_trips = 0, bytes_out = 0, hits = 0, misses = 0;
  double backend_cpu = 0;
  uint64_t reader_ops = 0, reader_retries = 0;
  double reader_seconds = 0;
};

class StructuresSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--structures", structures_, "stack,queue,hash,skiplist,bst,bptree,mvbst,mvbptree")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--levels", levels_, "naive,r,rc,rcb")->delimiter(',')->capture_default_str();
    cmd->add_option("--mix", mix_, "read%/write% (100/0 .. 0/100) or YCSB A..F")->capture_default_str();
    cmd->add_option("--dist", dist_, "uniform|zipfian|zipfian-raw|latest|hotspot")->capture_default_str();
    cmd->add_option("--theta", theta_, "Zipfian constant")->capture_default_str();
    cmd->add_option("--batch", batch_, "operations per transaction at rcb")->capture_default_str();
    cmd->add_option("--cache-pct", cache_pct_, "cache size, percent of the data")->capture_default_str();
    cmd->add_option("--value-size", value_size_, "value bytes (constant)")->capture_default_str();
    cmd->add_option("--measure-ops", ops_, "operations per front-end per cell (--ops caps it)")
        ->capture_default_str();
    cmd->add_option("--preload", preload_, "keys inserted before measuring (default: 0 for "
                                           "0/100, else the measured op count)");
    cmd->add_option("--frontends", frontends_, "front-ends, each with its own instance")->capture_default_str();
    cmd->add_option("--readers", readers_, "reader threads on front-end 1's instance (SWMR)")
        ->capture_default_str();
    cmd->add_option("--sweep", sweep_, "none|batch|cache|all: also sweep batch size (rcb) and "
                                       "cache size (rc) for --sweep-structure")
        ->capture_default_str();
    cmd->add_option("--sweep-structure", sweep_structure_, "structure of the sweeps")->capture_default_str();
    cmd->add_option("--dir", dir_, "directory for the pool files")->capture_default_str();
    cmd->add_option("--pm-mode", pm_mode_, "back-end persistence: flush (cache-line flush + fence, "
                                           "the model of real PM) | msync (page write-back to the "
                                           "file's disk) | auto")
        ->capture_default_str();
    cmd->add_option("--backend-bin", backend_bin_, "asymnvm-backend binary (default: found next "
                                                   "to asymnvm-bench)");
  }

  Status Validate(const CommonOptions& common) override {
    for (const auto& s : structures_) {
      ASYMNVM_ASSIGN_OR_RETURN(Kind k, structures::ParseKind(s));
      kinds_.push_back(k);
    }
    for (const auto& l : levels_) {
      if (l == "symmetric") return Status::NotSupported("level 'symmetric' is not built yet");
      ASYMNVM_ASSIGN_OR_RETURN(Level lv, frontend::ParseLevel(l));
      level_values_.push_back(lv);
    }
    ASYMNVM_RETURN_IF_ERROR(workloads::ParseMix(mix_).status());
    ASYMNVM_RETURN_IF_ERROR(workloads::MakeKeyGenerator(dist_, 1000, theta_).status());
    if (batch_ < 1 || batch_ > 65536) return Status::InvalidArgument("--batch must be 1..65536");
    if (cache_pct_ <= 0 || cache_pct_ > 1000) return Status::InvalidArgument("--cache-pct must be in (0, 1000]");
    if (value_size_ < 1 || value_size_ > structures::kMaxValueSize) {
      return Status::InvalidArgument("--value-size must be 1.." + std::to_string(structures::kMaxValueSize));
    }
    if (frontends_ < 1 || frontends_ > 64) return Status::InvalidArgument("--frontends must be 1..64");
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
    report->machine()["provider"] = "soft";
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
      for (Level l : level_values_) cells.push_back({k, l, batch_, cache_pct_, ""});
    }
    if (sweep_ == "batch" || sweep_ == "all") {
      for (uint32_t b : {1u, 8u, 64u, 256u, 1024u}) cells.push_back({sweep_kind_, Level::kRcb, b, cache_pct_, "batch"});
    }
    if (sweep_ == "cache" || sweep_ == "all") {
      for (double c : {1.0, 5.0, 10.0, 25.0, 50.0, 100.0}) {
        cells.push_back({sweep_kind_, Level::kRc, batch_, c, "cache"});
      }
    }
    report->AddHeader("structures: " + std::to_string(frontends_) + " front-end(s), " +
                      std::to_string(readers_) + " reader(s), mix " + mix_ + ", " + dist_ +
                      ", value " + std::to_string(value_size_) + " B, batch " +
                      std::to_string(batch_) + ", cache " + std::to_string(cache_pct_) +
                      "% of data, " + std::to_string(ops_) + " ops per front-end per cell, back-end "
                      "pm-mode " + pm_mode_);
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
                  {"frontends", frontends_},
                  {"readers", readers_},
                  {"preload", preload_},
                  {"sweep", cell.sweep}};
      Json rec = MakeRecord(frontend::LevelName(cell.level), cfg);
      const double ops = static_cast<double>(std::max<uint64_t>(r.ops, 1));
      rec["ops_per_sec"] = r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0;
      rec["p50_us"] = r.latency.PercentileUs(50);
      rec["p99_us"] = r.latency.PercentileUs(99);
      rec["round_trips_per_op"] = static_cast<double>(r.round_trips) / ops;
      rec["bytes_per_op"] = static_cast<double>(r.bytes_out) / ops;
      rec["backend_cpu_us_per_op"] = r.backend_cpu * 1e6 / ops;
      rec["cache_hit_ratio"] = r.hits + r.misses ? static_cast<double>(r.hits) / static_cast<double>(r.hits + r.misses) : 0.0;
      rec["structure"] = name;
      rec["ops"] = r.ops;
      if (readers_ > 0) {
        rec["reader_ops_per_sec"] = r.reader_seconds > 0 ? static_cast<double>(r.reader_ops) / r.reader_seconds : 0;
        rec["reader_retry_ratio"] = r.reader_ops ? static_cast<double>(r.reader_retries) / static_cast<double>(r.reader_ops) : 0.0;
      }
      if (cell.sweep.empty()) tput[{name, frontend::LevelName(cell.level)}] = rec["ops_per_sec"].get<double>();
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
      table3.push_back({{"structure", name}, {"ratio", ratio}, {"of", top + "/naive"}, {"paper", paper},
                        {"met", ratio >= paper}});
      char line[160];
      std::snprintf(line, sizeof(line), "%-9s %s/naive = %6.2fx  (paper %.1fx: %s)", name.c_str(),
                    top.c_str(), ratio, paper, ratio >= paper ? "met" : "NOT met");
      report->AddNote(line);
    }
    report->extra()["table3"] = table3;
    report->AddNote("symmetric level: not built (no local-PM + log-shipping variant yet)");
    report->set_columns({{"structure", "structure", 0}, {"be cpu us/op", "backend_cpu_us_per_op", 2},
                         {"hit ratio", "cache_hit_ratio", 3}});
    return Status::Ok();
  }

 private:
  Result<CellResult> RunCell(const Cell& cell) {
    const std::string name = structures::KindName(cell.kind);
    const std::string pool = dir_ + "/asymnvm-bench-st-" + std::to_string(getpid()) + ".pool";
    std::filesystem::remove(pool);
    ASYMNVM_ASSIGN_OR_RETURN(auto be, driver::BackendProcess::Start(backend_bin_, pool, "1G", {"--pm-mode", pm_mode_}, "warn"));
    struct Cleanup {
      std::string pool;
      ~Cleanup() {
        std::filesystem::remove(pool);
        std::filesystem::remove(pool + ".backend.log");
      }
    } cleanup{pool};
    const uint64_t elems = static_cast<uint64_t>(preload_) + ops_;
    const double data_bytes =
        static_cast<double>(elems) * static_cast<double>(8 + (4 + value_size_ + 7) / 8 * 8 + 24);
    const uint64_t cache = std::max<uint64_t>(64 * 1024, static_cast<uint64_t>(data_bytes * cell.cache_pct / 100.0));

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
      so.backends = {be->address()};
      so.frontend_id = static_cast<uint64_t>(i + 1);
      so.level = cell.level;
      so.cache_bytes = cache;
      so.batch_ops = cell.batch;
      so.timeout = std::chrono::milliseconds(30000);
      ASYMNVM_ASSIGN_OR_RETURN(fes[i].session, frontend::Session::Open(so));
      structures::Options o;
      o.value_size = value_size_;
      ASYMNVM_ASSIGN_OR_RETURN(fes[i].handle, structures::Open(*fes[i].session, cell.kind,
                                                               "bench-" + name + "-" + std::to_string(i), o));
    }
    const std::string label = name + "/" + frontend::LevelName(cell.level) +
                              (cell.sweep.empty() ? "" : " " + cell.sweep);
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
          if (tty) std::cerr << "\r\033[K" << label << ": load " << done << "/" << preload_ << std::flush;
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
      so.backends = {be->address()};
      so.frontend_id = static_cast<uint64_t>(1000 + i);
      so.level = cell.level;
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
        rc.max_time = std::chrono::duration_cast<std::chrono::nanoseconds>(duration_);
        rc.seed = seed_ * 7919 + static_cast<uint64_t>(i);
        auto r = driver::Run(*fes[i].handle, rc, [&](uint64_t done) {
          if (tty && i == 0) std::cerr << "\r\033[K" << label << ": " << done << "/" << ops_ << std::flush;
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
        while (!writers_done.load()) {
          Status st;
          if (structures::IsSequence(cell.kind)) {
            st = static_cast<structures::Sequence*>(readers[i].handle.get())->Peek(&v);
          } else {
            st = static_cast<structures::Map*>(readers[i].handle.get())
                     ->Get(workloads::KeyNumToKey(rng.Next() % space, true), &v);
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

  std::vector<std::string> structures_ = {"stack", "queue", "hash", "skiplist", "bst", "bptree", "mvbst", "mvbptree"};
  std::vector<std::string> levels_ = {"naive", "r", "rc", "rcb"};
  std::string mix_ = "0/100", dist_ = "uniform", sweep_ = "none", sweep_structure_ = "bptree";
  double theta_ = 0.99, cache_pct_ = 10;
  uint32_t batch_ = 1024, value_size_ = 64;
  uint64_t ops_ = 4000;
  int64_t preload_ = -1;
  int frontends_ = 1, readers_ = 0;
  std::string dir_ = std::filesystem::temp_directory_path().string();
  std::string backend_bin_;
  std::string pm_mode_ = "flush";
  std::vector<Kind> kinds_;
  std::vector<Level> level_values_;
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
