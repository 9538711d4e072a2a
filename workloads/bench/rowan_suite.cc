// Suite "rowan": many concurrent write streams of small entries into one receiver, for Rowan and
// the baselines of Rowan paper §6 (rwrite, share, batch; fabric/rowan/baselines.h):
// throughput, p50/p99 append latency (submit → durable acknowledgment), round trips and wire bytes
// per entry, and device-level write amplification (DLWA) from the XPLine model (doc/pm-layout.md).
//
// Driver model: a stream is one writer connection with its own log position (rowan: a Sender into
// the shared b-log; rwrite/batch: an exclusive remote log; share: a reservation on one shared log).
// `--threads` driver threads each own streams/threads of them, share one CQ among them, keep
// `--window` appends outstanding per stream (closed loop) and re-submit on each acknowledgment.
// Initiator and receiver are two soft NICs (two Fabric instances) in this process.
//
// DLWA: the receiver registers its data region through a LandingPersister, so a pm::XPLineModel
// sees every range the NIC lands and persists, in that order, for every variant; the receiver's
// own bookkeeping (Rowan's meta words, zeroing of recycled segments) is not counted. Each entry
// is the same encoded block (32 B header + entry_size − 32 B payload = entry_size bytes) for every
// variant, so the requested bytes are identical. DLWA = media bytes / requested bytes, with the
// model's buffer written back at the end.
#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "common/logging.h"
#include "fabric/rowan/baselines.h"
#include "fabric/rowan/receiver.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"

namespace asymnvm::bench {
namespace {

using rowan::LogVariant;

constexpr double kRowanDlwaTarget = 1.03;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct Config {
  LogVariant variant;
  uint32_t streams;
  uint32_t entry_size;
};

struct StreamState {
  std::unique_ptr<rowan::LogWriter> writer;
  uint16_t owner = 0;
  uint64_t next_version = 1;
  std::deque<Clock::time_point> started;  // submit times of outstanding appends, in order
};

struct DriverResult {
  uint64_t ops_measured = 0;         // acknowledged before the stop
  uint64_t ops_total = 0;            // including the drain
  std::vector<uint64_t> latency_ns;  // measured appends
  Status status;
};

class RowanSuite final : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--variants", variants_, "Variants: rowan, rwrite, share, batch")
        ->delimiter(',');
    cmd->add_option("--streams", streams_, "Concurrent write streams (list)")->delimiter(',');
    cmd->add_option("--entry-sizes", sizes_,
                    "Encoded entry bytes (32 B header + payload), 64..256 (list)")
        ->delimiter(',');
    cmd->add_option("--threads", threads_, "Driver threads")->check(CLI::Range(1, 64));
    cmd->add_option("--window", window_, "Outstanding appends per stream")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--transport", transport_, "tcp | unix | inproc")
        ->check(CLI::IsMember({"tcp", "unix", "inproc"}));
    cmd->add_option("--batch-bytes", batch_bytes_, "batch: send at this many bytes")
        ->check(CLI::Range(64, 1024));
    cmd->add_option("--batch-delay-us", batch_delay_us_, "batch: or after this delay")
        ->check(CLI::Range(0.0, 10000.0));
    cmd->add_option("--xp-buffer", xp_buffer_, "XPLine model: write-combining buffer bytes");
    cmd->add_option("--xp-line", xp_line_, "XPLine model: media line bytes");
    cmd->add_option("--pm-dir", pm_dir_,
                    "Put the receiver's area in a PM pool file in DIR (removed afterwards; "
                    "persist mode flush); default DRAM with a no-op persister")
        ->type_name("DIR");
  }

  Status Validate(const CommonOptions&) override {
    if (variants_.empty() || streams_.empty() || sizes_.empty()) {
      return Status::InvalidArgument("empty --variants/--streams/--entry-sizes");
    }
    for (const std::string& v : variants_) {
      ASYMNVM_ASSIGN_OR_RETURN(LogVariant parsed, rowan::ParseLogVariant(v));
      parsed_.push_back(parsed);
    }
    for (uint32_t s : streams_) {
      if (s == 0 || s > 4096) return Status::InvalidArgument("--streams: 1..4096");
    }
    for (uint32_t e : sizes_) {
      if (e < 64 || e > rowan::LogWriter::kMaxEntryBytes || e % 64 != 0) {
        return Status::InvalidArgument("--entry-sizes: multiples of 64 in 64..256");
      }
    }
    if (xp_line_ == 0 || xp_buffer_ < xp_line_) {
      return Status::InvalidArgument("--xp-buffer must hold at least one --xp-line");
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    duration_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(common.duration_s > 0 ? common.duration_s
                                      : common.quick        ? 0.12
                                                            : 1.0));
    max_ops_ = common.ops;
    Json& m = report->machine();
    m["cores"] = MachineCores();
    m["provider"] = "soft";
    m["transport"] = transport_;
    m["pm"] = pm_dir_.empty() ? std::string("dram (no-op persister)") : "pool file (flush)";
    m["driver_threads"] = threads_;
    m["driver"] =
        "closed loop: each driver thread owns streams/threads writer connections on one "
        "CQ, window outstanding appends per stream";
    m["xpline_buffer_bytes"] = xp_buffer_;
    m["xpline_line_bytes"] = xp_line_;
    m["batch_bytes"] = batch_bytes_;
    m["batch_delay_us"] = batch_delay_us_;
    m["duration_s"] = std::chrono::duration<double>(duration_).count();
    report->AddHeader("asymnvm-bench rowan: " + std::to_string(MachineCores()) +
                      " cores; soft NICs (initiator + receiver) over " + transport_ +
                      " in one process; " + std::to_string(threads_) +
                      " driver threads, closed loop, window " + std::to_string(window_) +
                      " per stream; " + FormatDouble(m["duration_s"].get<double>(), 2) +
                      " s per measurement.");
    report->AddHeader(
        "entry_size = encoded bytes per entry (32 B header + payload), the same for "
        "every variant; DLWA = XPLine-model media bytes / landed bytes (" +
        std::to_string(xp_buffer_ / 1024) + " KiB buffer, " + std::to_string(xp_line_) +
        " B lines).");
    for (uint32_t size : sizes_) {
      for (LogVariant v : parsed_) {
        for (uint32_t streams : streams_) {
          std::cerr << "  " << rowan::LogVariantName(v) << " " << streams << " streams x " << size
                    << " B ...\n";
          auto rec = Measure({v, streams, size}, common.seed);
          if (!rec.ok()) {
            return rec.status().WithContext(std::string(rowan::LogVariantName(v)) + " " +
                                            std::to_string(streams) + " streams " +
                                            std::to_string(size) + " B");
          }
          report->Add(std::move(rec).value());
        }
      }
    }
    Summarize(report);
    report->set_columns({{"DLWA", "dlwa", 3}});
    return Status::Ok();
  }

 private:
  static std::string FormatDouble(double d, int precision) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(precision) << d;
    return os.str();
  }

  std::string ListenAddress(const std::string& tag) const {
    if (transport_ == "tcp") return "tcp://127.0.0.1:0";
    static std::atomic<uint64_t> n{0};
    std::string name =
        "asymnvm-rowan-bench-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(n++);
    if (transport_ == "unix")
      return "unix://" + (std::filesystem::temp_directory_path() / name).string();
    return "inproc://" + name;
  }

  Result<Json> Measure(const Config& cfg, uint64_t seed) {
    fabric::FabricOptions fo;
    ASYMNVM_ASSIGN_OR_RETURN(auto rx_fabric, fabric::Fabric::Open(fo));
    ASYMNVM_ASSIGN_OR_RETURN(auto tx_fabric, fabric::Fabric::Open(fo));
    ASYMNVM_ASSIGN_OR_RETURN(auto rx_pd, rx_fabric->AllocPd());
    ASYMNVM_ASSIGN_OR_RETURN(auto tx_pd, tx_fabric->AllocPd());

    // The receiver's area.
    const size_t log_bytes = 256 * 1024;
    size_t area_bytes = 64u << 20;
    if (cfg.variant == LogVariant::kRWrite || cfg.variant == LogVariant::kBatch) {
      area_bytes = size_t{cfg.streams} * log_bytes;
    }
    std::unique_ptr<void, FreeDeleter> dram;
    std::unique_ptr<pm::Pool> pool;
    std::string pool_path;
    uint8_t* area = nullptr;
    pm::Persister* persister = pm::DramPersister();
    if (pm_dir_.empty()) {
      dram.reset(std::aligned_alloc(4096, area_bytes));
      if (!dram) return Status::ResourceExhausted("rowan bench: out of memory for the area");
      std::memset(dram.get(), 0, area_bytes);
      area = static_cast<uint8_t*>(dram.get());
    } else {
      pool_path = (std::filesystem::path(pm_dir_) /
                   ("asymnvm-rowan-bench-" + std::to_string(getpid()) + ".pool"))
                      .string();
      std::filesystem::remove(pool_path);
      ASYMNVM_ASSIGN_OR_RETURN(pool, pm::Pool::Create(pool_path, area_bytes + 8192,
                                                      {.mode = pm::PersistMode::kFlushOnly}));
      area = pool->user_base();
      persister = pool->persister();
    }
    struct PoolCleanup {
      std::string path;
      ~PoolCleanup() {
        if (!path.empty()) std::filesystem::remove(path);
      }
    } cleanup{pool_path};

    pm::XPLineModel model(xp_buffer_, xp_line_);
    std::unique_ptr<rowan::Receiver> receiver;
    std::unique_ptr<rowan::LogTarget> target;
    std::string address;
    if (cfg.variant == LogVariant::kRowan) {
      rowan::ReceiverOptions ro;
      ro.fabric = rx_fabric.get();
      ro.pd = rx_pd.get();
      ro.area = area;
      ro.area_size = area_bytes;
      ro.persister = persister;
      ro.landing_observer = &model;
      ro.listen_address = ListenAddress("rx");
      ro.segment_size = 4u << 20;
      ASYMNVM_ASSIGN_OR_RETURN(receiver, rowan::Receiver::Open(ro, /*format=*/true));
      address = receiver->address();
    } else {
      rowan::LogTargetOptions to;
      to.fabric = rx_fabric.get();
      to.pd = rx_pd.get();
      to.area = area;
      to.area_size = area_bytes;
      to.persister = persister;
      to.landing_observer = &model;
      to.listen_address = ListenAddress("tg");
      to.shared = cfg.variant == LogVariant::kShare;
      to.log_bytes = log_bytes;
      ASYMNVM_ASSIGN_OR_RETURN(target, rowan::LogTarget::Open(to));
      address = target->address();
    }

    // Rowan's consumer: hands used segments back (commit → zeroed → free), keeping PM bounded.
    std::atomic<bool> consumer_stop{false};
    std::thread consumer;
    if (receiver) {
      consumer = std::thread([&] {
        while (!consumer_stop.load()) {
          auto seg = receiver->NextUsed(std::chrono::milliseconds(20));
          if (seg.ok()) (void)receiver->Commit(seg->index);
        }
      });
    }

    // Streams, dealt round-robin to the driver threads.
    const uint32_t threads = std::min(threads_, cfg.streams);
    std::vector<std::unique_ptr<fabric::CompletionQueue>> cqs(threads);
    std::vector<std::vector<StreamState>> owned(threads);
    rowan::SharedCursor cursor;
    Status setup;
    for (uint32_t t = 0; t < threads && setup.ok(); t++) {
      uint32_t mine = cfg.streams / threads + (t < cfg.streams % threads ? 1 : 0);
      auto cq = tx_fabric->CreateCq({.capacity = std::max<uint32_t>(1024, 4 * mine * window_)});
      if (!cq.ok()) {
        setup = cq.status();
        break;
      }
      cqs[t] = std::move(cq).value();
      owned[t].resize(mine);
    }
    for (uint32_t s = 0; s < cfg.streams && setup.ok(); s++) {
      rowan::WriterOptions wo;
      wo.fabric = tx_fabric.get();
      wo.pd = tx_pd.get();
      wo.address = address;
      wo.cq = cqs[s % threads].get();
      wo.max_outstanding = window_;
      wo.cursor = &cursor;
      wo.batch_bytes = batch_bytes_;
      wo.batch_delay = std::chrono::nanoseconds(static_cast<int64_t>(batch_delay_us_ * 1000));
      auto w = rowan::ConnectWriter(cfg.variant, wo);
      if (!w.ok()) {
        setup = w.status().WithContext("stream " + std::to_string(s));
        break;
      }
      StreamState& st = owned[s % threads][s / threads];
      st.writer = std::move(w).value();
      st.owner = static_cast<uint16_t>(s + 1);
      st.next_version = 1 + (seed & 0xffff);
    }

    std::vector<DriverResult> results(threads);
    if (setup.ok()) {
      model.Reset();
      fabric::Counters before = tx_fabric->counters();
      std::atomic<bool> stop{false};
      std::atomic<uint64_t> acked{0};
      std::vector<std::thread> drivers;
      auto t0 = Clock::now();
      for (uint32_t t = 0; t < threads; t++) {
        drivers.emplace_back(
            [&, t] { results[t] = Drive(cfg, cqs[t].get(), &owned[t], &stop, &acked); });
      }
      auto deadline = t0 + duration_;
      while (Clock::now() < deadline && (max_ops_ == 0 || acked.load() < max_ops_)) {
        bool failed = false;
        for (auto& r : results) failed |= !r.status.ok();
        if (failed) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      stop.store(true);
      double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      for (auto& d : drivers) d.join();
      fabric::Counters delta = tx_fabric->counters() - before;
      model.Finish();

      Measurement meas;
      meas.seconds = seconds;
      uint64_t total = 0;
      for (auto& r : results) {
        if (!r.status.ok() && setup.ok()) setup = r.status;
        meas.ops += r.ops_measured;
        total += r.ops_total;
      }
      if (setup.ok()) {
        LatencySampler all;  // percentiles over every stream's appends
        for (auto& r : results) {
          for (uint64_t ns : r.latency_ns) all.Add(ns);
        }
        Json c{{"streams", cfg.streams},
               {"entry_size", cfg.entry_size},
               {"window", window_},
               {"threads", threads}};
        Json rec = MakeRecord(rowan::LogVariantName(cfg.variant), c);
        rec["ops_per_sec"] = meas.ops_per_sec();
        rec["p50_us"] = all.PercentileUs(50);
        rec["p99_us"] = all.PercentileUs(99);
        double ops = static_cast<double>(std::max<uint64_t>(1, total));
        rec["round_trips_per_op"] = static_cast<double>(delta.round_trips) / ops;
        rec["bytes_per_op"] = static_cast<double>(delta.bytes_out + delta.bytes_in) / ops;
        rec["dlwa"] = model.dlwa();
        rec["ops"] = meas.ops;
        rec["ops_with_drain"] = total;
        rec["requested_bytes"] = model.requested_bytes();
        rec["media_bytes"] = model.media_bytes();
        rec["requested_bytes_per_op"] = static_cast<double>(model.requested_bytes()) / ops;
        if (receiver) {
          auto st = receiver->stats();
          rec["segments_recycled"] = st.segments_recycled;
        }
        consumer_stop.store(true);
        if (consumer.joinable()) consumer.join();
        return rec;
      }
    }
    consumer_stop.store(true);
    if (consumer.joinable()) consumer.join();
    return setup;
  }

  // One driver thread: keeps `window_` appends in flight on each of its streams until `stop`,
  // then drains (no new submits) so every landing is counted by the model.
  DriverResult Drive(const Config& cfg, fabric::CompletionQueue* cq,
                     std::vector<StreamState>* streams, std::atomic<bool>* stop,
                     std::atomic<uint64_t>* acked) {
    DriverResult r;
    std::vector<uint8_t> payload(cfg.entry_size - rowan::kBlockHeaderSize);
    std::unordered_map<uint64_t, StreamState*> by_conn;
    for (auto& s : *streams) by_conn[s.writer->connection_id()] = &s;
    const bool ticks = cfg.variant == LogVariant::kBatch;
    size_t outstanding = 0;
    auto submit = [&](StreamState& s) -> Status {
      rowan::EntryMeta meta{.type = 1, .owner = s.owner, .version = s.next_version};
      for (size_t i = 0; i < payload.size(); i++) {
        payload[i] = static_cast<uint8_t>(s.next_version * 131 + i);
      }
      ASYMNVM_RETURN_IF_ERROR(s.writer->Submit(meta, payload, s.next_version));
      s.next_version++;
      s.started.push_back(Clock::now());
      outstanding++;
      return Status::Ok();
    };
    for (auto& s : *streams) {
      for (uint32_t w = 0; w < window_; w++) {
        r.status = submit(s);
        if (!r.status.ok()) return r;
      }
    }
    std::vector<fabric::Completion> comps(256);
    std::vector<uint64_t> durable;
    auto next_tick = Clock::time_point::max();
    Clock::time_point drain_deadline{};
    bool draining = false;
    while (true) {
      auto now = Clock::now();
      if (!draining && stop->load(std::memory_order_relaxed)) {
        draining = true;
        drain_deadline = now + std::chrono::seconds(10);
      }
      if (draining && outstanding == 0) break;
      if (draining && now > drain_deadline) {
        r.status = Status::TimedOut("rowan bench: appends not acknowledged while draining");
        return r;
      }
      auto timeout = std::chrono::microseconds(20000);
      if (next_tick != Clock::time_point::max()) {
        timeout = std::min(
            timeout,
            std::max(std::chrono::microseconds(0),
                     std::chrono::duration_cast<std::chrono::microseconds>(next_tick - now)));
      }
      auto n = timeout.count() == 0 ? cq->Poll(comps) : cq->Wait(comps, timeout);
      if (!n.ok()) {
        r.status = n.status();
        return r;
      }
      now = Clock::now();
      for (size_t i = 0; i < *n; i++) {
        auto it = by_conn.find(comps[i].connection_id);
        if (it == by_conn.end()) continue;
        StreamState& s = *it->second;
        durable.clear();
        r.status = s.writer->OnCompletion(comps[i], &durable);
        if (!r.status.ok()) return r;
        for (size_t k = 0; k < durable.size(); k++) {
          auto started = s.started.front();
          s.started.pop_front();
          outstanding--;
          r.ops_total++;
          if (!draining) {
            r.ops_measured++;
            r.latency_ns.push_back(ElapsedNs(started, now));
            acked->fetch_add(1, std::memory_order_relaxed);
            r.status = submit(s);
            if (!r.status.ok()) return r;
          }
        }
      }
      if (ticks) {
        next_tick = Clock::time_point::max();
        for (auto& s : *streams) {
          auto t = s.writer->Tick(now);
          if (!t.ok()) {
            r.status = t.status();
            return r;
          }
          next_tick = std::min(next_tick, *t);
        }
      }
    }
    return r;
  }

  // Targets (doc/rowan.md): Rowan DLWA <= 1.03 at every stream count; where rwrite crosses it.
  void Summarize(Report* report) {
    Json checks = Json::array();
    Json crossover = Json::object();
    for (uint32_t size : sizes_) {
      double worst = 0;
      bool any = false;
      Json first_over = nullptr;
      uint32_t last_under = 0;
      for (const Json& r : report->results()) {
        const Json& c = r["config"];
        if (c["entry_size"].get<uint32_t>() != size) continue;
        uint32_t streams = c["streams"].get<uint32_t>();
        double d = r["dlwa"].get<double>();
        if (r["variant"] == "rowan") {
          worst = std::max(worst, d);
          any = true;
        }
        if (r["variant"] == "rwrite") {
          if (d > kRowanDlwaTarget) {
            if (first_over.is_null() || streams < first_over.get<uint32_t>()) first_over = streams;
          } else if (first_over.is_null() || streams < first_over.get<uint32_t>()) {
            last_under = std::max(last_under, streams);
          }
        }
      }
      if (any) {
        checks.push_back(
            Json{{"check", "rowan " + std::to_string(size) + " B: max DLWA over stream counts"},
                 {"value", worst},
                 {"target", "<= 1.03"},
                 {"met", worst <= kRowanDlwaTarget}});
      }
      crossover[std::to_string(size)] =
          Json{{"rwrite_last_streams_at_or_below_1.03", last_under},
               {"rwrite_first_streams_above_1.03", first_over},
               {"model_prediction_streams_above", xp_buffer_ / xp_line_}};
    }
    report->extra()["summary"] = checks;
    report->extra()["rwrite_crossover"] = crossover;
    report->AddNote("");
    report->AddNote("targets:");
    for (const Json& ck : checks) {
      report->AddNote("  " + std::string(ck["met"].get<bool>() ? "MET   " : "MISSED") + "  " +
                      ck["check"].get<std::string>() + " = " +
                      FormatDouble(ck["value"].get<double>(), 3) + " (target " +
                      ck["target"].get<std::string>() + ")");
    }
    for (auto it = crossover.begin(); it != crossover.end(); ++it) {
      const Json& c = it.value();
      std::string over = c["rwrite_first_streams_above_1.03"].is_null()
                             ? std::string("none measured")
                             : c["rwrite_first_streams_above_1.03"].dump();
      report->AddNote("  rwrite crossover, " + it.key() + " B entries: DLWA <= 1.03 up to " +
                      c["rwrite_last_streams_at_or_below_1.03"].dump() +
                      " streams, above it from " + over +
                      " streams (model: one open line per "
                      "stream, " +
                      c["model_prediction_streams_above"].dump() + " lines in the buffer)");
    }
  }

  std::vector<std::string> variants_{"rowan", "rwrite", "share", "batch"};
  std::vector<uint32_t> streams_{1, 8, 36, 72, 144};
  std::vector<uint32_t> sizes_{64, 128};
  uint32_t threads_ = 2;
  uint32_t window_ = 1;
  std::string transport_ = "tcp";
  uint32_t batch_bytes_ = 256;
  double batch_delay_us_ = 5;
  size_t xp_buffer_ = 16 * 1024;
  size_t xp_line_ = 256;
  std::string pm_dir_;
  std::vector<LogVariant> parsed_;
  std::chrono::nanoseconds duration_{};
  uint64_t max_ops_ = 0;
};

}  // namespace

ASYMNVM_REGISTER_SUITE(kRowanSuiteRegistered, "rowan",
                       "Rowan b-log vs rwrite/share/batch: throughput, latency, XPLine DLWA",
                       RowanSuite);

}  // namespace asymnvm::bench
