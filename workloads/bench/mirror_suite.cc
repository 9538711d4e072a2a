// Suite "mirror": the cost of mirroring and the failover time (doc/mirror.md). Daemons
// are child processes (asymnvm-backend, asymnvm-mirror) on pool files in --dir; one front-end
// (level rcb) runs the SDK's update protocol on a persistent register array (OpLog → MemLog →
// TxWrite, the session's default batching; the write path every structure uses) and fences.
//
//   mirrors-0   the primary alone (the baseline)
//   mirrors-1   one mirror, sync (default: an update is acknowledged once the mirror has it)
//   mirrors-2   two mirrors, sync
//   async-1     one mirror, --mirror-mode async (acknowledged before the mirror has it);
//               max_lag_bytes / max_lag_us: the largest backlog the primary saw (loss window)
//   catch-up    one sync mirror; after the timed updates the mirror is SIGKILLed, updates/4 more
//               run without it, and it restarts on its pool: catchup_ms = restart → in sync again
//               (primary's view), catchup_bytes = what the re-attach copied (incremental: only the
//               granules it missed; doc/mirror.md §Catch-up), full_copy_ms = the first attach's
//               copy of the whole pool, catchup_mb_per_s
//   failover    one sync mirror (--promotion-timeout-ms): updates, then the primary is SIGKILLed
//               and its pool file deleted; failover_ms = SIGKILL → the first acknowledged update
//               on the promoted mirror, split into promoted_ms (SIGKILL → the mirror registered as
//               the group's primary: detection + promotion timeout + recovery) and switch_ms (the
//               rest: the session's reconnection + replay); lost_acknowledged = acknowledged
//               registers whose value the promoted mirror does not hold.
// Fields: ops_per_sec, p50_us, p99_us, mirrors, mode, copy_ms (initial full copy of the pool,
// from the primary's status), bytes_forwarded_per_op, round_trips_per_op and bytes_per_op (the
// front-end's), and with sync mirrors the barrier breakdown: barriers_per_op (primary barriers
// that waited for a mirror), mirror_flushes_per_op, barrier_local_us (per barrier: the local
// persist, overlapped with the mirrors' FLUSH), barrier_mirror_wait_us (the wait after it).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/fabric.h"
#include "asymnvm/frontend.h"
#include "asymnvm/pm.h"
#include "backend/rpc.h"
#include "fabric/oq/oq.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::bench {
namespace {

class MirrorSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--variants", variants_,
                    "mirrors-0,mirrors-1,mirrors-2,async-1,catch-up,failover")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--updates", updates_, "updates per variant")->capture_default_str();
    cmd->add_option("--registers", registers_, "registers")->capture_default_str();
    cmd->add_option("--pool-size", pool_size_, "pool size (the initial copy is all of it)")
        ->capture_default_str();
    cmd->add_option("--promotion-timeout-ms", promotion_ms_, "failover: the mirror's timeout")
        ->capture_default_str();
    cmd->add_option("--mirror-pm-mode", mirror_pm_mode_, "the mirrors' --pm-mode")
        ->capture_default_str();
    cmd->add_option("--dir", dir_, "directory for the pool files")->capture_default_str();
    cmd->add_option("--backend-bin", backend_bin_, "asymnvm-backend binary");
    cmd->add_option("--mirror-bin", mirror_bin_, "asymnvm-mirror binary");
  }

  Status Validate(const CommonOptions&) override {
    for (const auto& v : variants_) {
      if (v != "mirrors-0" && v != "mirrors-1" && v != "mirrors-2" && v != "async-1" &&
          v != "catch-up" && v != "failover") {
        return Status::InvalidArgument("--variants: unknown variant '" + v + "'");
      }
    }
    if (updates_ < 10) return Status::InvalidArgument("--updates must be >= 10");
    if (registers_ < 1 || registers_ > (1u << 16)) {
      return Status::InvalidArgument("--registers must be 1..65536");
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    report->machine()["cores"] = MachineCores();
    report->machine()["provider"] = "soft";
    if (common.quick) updates_ = std::min<uint64_t>(updates_, 2000);
    if (common.ops > 0) updates_ = std::min(updates_, common.ops);
    if (backend_bin_.empty()) {
      ASYMNVM_ASSIGN_OR_RETURN(backend_bin_, driver::FindBackendBinary(""));
    }
    if (mirror_bin_.empty()) {
      if (const char* e = std::getenv("ASYMNVM_MIRROR_BIN")) mirror_bin_ = e;
    }
    if (mirror_bin_.empty()) {
      const auto dir = std::filesystem::path(backend_bin_).parent_path();
      for (auto p : {dir / ".." / "mirror" / "asymnvm-mirror", dir / "asymnvm-mirror"}) {
        if (::access(p.c_str(), X_OK) == 0) {
          mirror_bin_ = p.lexically_normal().string();
          break;
        }
      }
      if (mirror_bin_.empty()) {
        return Status::NotFound("asymnvm-mirror not found next to " + backend_bin_ +
                                " (--mirror-bin, ASYMNVM_MIRROR_BIN)");
      }
    }
    report->AddHeader("mirror: " + std::to_string(updates_) +
                      " updates per variant of 64 B "
                      "registers (OpLog + MemLog + TxWrite, rcb, one front-end), pools of " +
                      pool_size_ + " in " + dir_);
    for (const std::string& variant : variants_) {
      ASYMNVM_RETURN_IF_ERROR(RunVariant(variant, common, report));
    }
    report->set_columns({{"mirrors", "mirrors", 0},
                         {"fwd B/op", "bytes_forwarded_per_op", 0},
                         {"barriers/op", "barriers_per_op", 2},
                         {"local us", "barrier_local_us", 0},
                         {"wait us", "barrier_mirror_wait_us", 0},
                         {"copy ms", "copy_ms", 0},
                         {"catch-up ms", "catchup_copy_ms", 0},
                         {"catch-up B", "catchup_bytes", 0},
                         {"failover ms", "failover_ms", 0},
                         {"lost ack", "lost_acknowledged", 0}});
    report->AddNote(
        "failover_ms = SIGKILL of the primary → first acknowledged update on the "
        "promoted mirror (promoted_ms: until the mirror registered as primary, "
        "switch_ms: the session's reconnection + replay)");
    return Status::Ok();
  }

 private:
  Status RunVariant(const std::string& variant, const CommonOptions& common, Report* report) {
    const bool failover = variant == "failover";
    const bool catchup = variant == "catch-up";
    const bool async = variant == "async-1";
    const unsigned mirrors = variant == "mirrors-0" ? 0 : variant == "mirrors-2" ? 2 : 1;
    const std::string tag = dir_ + "/asymnvm-bench-mirror-" + std::to_string(getpid());
    std::error_code ec;
    std::filesystem::remove_all(tag, ec);
    std::filesystem::create_directories(tag);
    struct Cleanup {
      std::string d;
      ~Cleanup() {
        std::error_code e;
        std::filesystem::remove_all(d, e);
      }
    } cleanup{tag};
    const std::string coord_uri = "dir:" + tag + "/coord";
    std::vector<std::unique_ptr<driver::BackendProcess>> ms;
    std::vector<std::string> pargs = {"--coord", coord_uri, "--pm-mode", "msync"};
    auto mirror_args = [&](unsigned m) {
      std::vector<std::string> a = {"--coord",
                                    coord_uri,
                                    "--pm-mode",
                                    mirror_pm_mode_,
                                    "--promotion-timeout-ms",
                                    std::to_string(failover ? promotion_ms_ : 3600000)};
      if (catchup) {  // a fixed address: the restarted mirror is where the primary looks
        a.push_back("--listen");
        a.push_back("unix://" + tag + "/mirror-" + std::to_string(m) + ".sock");
      }
      return a;
    };
    for (unsigned m = 0; m < mirrors; m++) {
      ASYMNVM_ASSIGN_OR_RETURN(
          auto mp,
          driver::BackendProcess::Start(mirror_bin_, tag + "/mirror-" + std::to_string(m) + ".pool",
                                        pool_size_, mirror_args(m)));
      pargs.push_back("--mirror");
      pargs.push_back(mp->address());
      ms.push_back(std::move(mp));
    }
    if (async) {
      pargs.push_back("--mirror-mode");
      pargs.push_back("async");
    }
    const std::string ppool = tag + "/primary.pool";
    ASYMNVM_ASSIGN_OR_RETURN(auto be,
                             driver::BackendProcess::Start(backend_bin_, ppool, pool_size_, pargs));
    frontend::SessionOptions so;
    so.backends = {be->address()};
    so.coordinator = coord_uri;
    so.level = frontend::Level::kRcb;
    so.reconnect_deadline = std::chrono::seconds(60);
    ASYMNVM_ASSIGN_OR_RETURN(auto s, frontend::Session::Open(so));
    constexpr uint32_t kSize = 64;
    ASYMNVM_ASSIGN_OR_RETURN(auto root, s->CreateRoot("registers", 42));
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t base, s->Malloc(uint64_t{registers_} * kSize));
    ASYMNVM_RETURN_IF_ERROR(s->Fence());
    s->RegisterReplay(42,
                      [base](frontend::Session& s2, const frontend::Structure& st,
                             const frontend::RecoveredOp& op) -> Status {
                        if (op.payload.size() != 16) return Status::Corruption("bad op");
                        uint64_t i, u;
                        std::memcpy(&i, op.payload.data(), 8);
                        std::memcpy(&u, op.payload.data() + 8, 8);
                        std::vector<uint8_t> value(kSize, static_cast<uint8_t>(u));
                        (void)s2.OpLog(st, 1, op.payload);
                        ASYMNVM_RETURN_IF_ERROR(s2.MemLog(base + i * kSize, value));
                        return s2.TxWrite(st);
                      });
    ASYMNVM_ASSIGN_OR_RETURN(Json st0, DaemonStatus(be->address()));
    const auto c0 = s->counters();
    uint64_t mirror_syncs0 = 0;  // the first mirror's syncs before the timed updates
    if (!ms.empty()) {
      auto m0 = DaemonStatus(ms[0]->address());
      if (m0.ok()) mirror_syncs0 = m0->value("pm_syncs", 0ull);
    }
    std::map<uint64_t, uint8_t> acked;  // register → last acknowledged fill byte
    std::mt19937_64 rng(common.seed);
    auto update = [&](uint64_t u) -> Status {
      const uint64_t i = rng() % registers_;
      std::vector<uint8_t> value(kSize, static_cast<uint8_t>(u));
      uint8_t params[16];
      std::memcpy(params, &i, 8);
      std::memcpy(params + 8, &u, 8);
      Status st = s->OpLog(root, 1, params).status();
      if (st.ok()) st = s->MemLog(base + i * kSize, value);
      if (st.ok()) st = s->TxWrite(root);
      if (st.ok()) acked[i] = static_cast<uint8_t>(u);
      return st;
    };
    LatencySampler lat;
    lat.Reserve(updates_);
    const auto t0 = Clock::now();
    for (uint64_t u = 0; u < updates_; u++) {
      const auto a = Clock::now();
      ASYMNVM_RETURN_IF_ERROR(update(u));
      lat.Add(ElapsedNs(a, Clock::now()));
    }
    ASYMNVM_RETURN_IF_ERROR(s->Fence());
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    ASYMNVM_ASSIGN_OR_RETURN(Json st1, DaemonStatus(be->address()));
    const auto c1 = s->counters();
    Json rec = MakeRecord(variant, Json{{"mirrors", mirrors},
                                        {"mode", mirrors == 0 ? "none"
                                                 : async      ? "async"
                                                              : "sync"},
                                        {"registers", registers_},
                                        {"pool_size", pool_size_}});
    rec["ops_per_sec"] = static_cast<double>(updates_) / secs;
    rec["p50_us"] = lat.PercentileUs(50);
    rec["p99_us"] = lat.PercentileUs(99);
    uint64_t fwd0 = 0, fwd1 = 0, lag_bytes = 0, lag_us = 0;
    double copy_ms = 0;
    for (const auto& m : st0.value("mirrors", Json::array()))
      fwd0 += m.value("bytes_forwarded", 0ull);
    for (const auto& m : st1.value("mirrors", Json::array())) {
      fwd1 += m.value("bytes_forwarded", 0ull);
      copy_ms = std::max(copy_ms, m.value("last_copy_ms", 0.0));
      lag_bytes = std::max<uint64_t>(lag_bytes, m.value("max_lag_bytes", 0ull));
      lag_us = std::max<uint64_t>(lag_us, m.value("max_lag_us", 0ull));
    }
    rec["mirrors_in_sync"] = st1.value("mirrors_in_sync", 0ull);
    rec["mirror_pm_mode"] = mirror_pm_mode_;
    if (!ms.empty()) {
      auto m1 = DaemonStatus(ms[0]->address());
      if (m1.ok()) {
        rec["mirror_pm_syncs"] = m1->value("pm_syncs", 0ull);
        rec["mirror_pm_syncs_per_op"] =
            static_cast<double>(m1->value("pm_syncs", 0ull) - mirror_syncs0) /
            static_cast<double>(updates_);
      }
    }
    rec["primary_pm_syncs_per_op"] =
        static_cast<double>(st1.value("pm_syncs", 0ull) - st0.value("pm_syncs", 0ull)) /
        static_cast<double>(updates_);
    rec["bytes_forwarded_per_op"] =
        static_cast<double>(fwd1 - fwd0) / static_cast<double>(updates_);
    const double n_ops = static_cast<double>(updates_);
    rec["round_trips_per_op"] =
        static_cast<double>(c1.fabric.round_trips - c0.fabric.round_trips) / n_ops;
    rec["bytes_per_op"] = static_cast<double>(c1.fabric.bytes_out - c0.fabric.bytes_out) / n_ops;
    // The sync-mode barrier breakdown (doc/mirror.md §Overlapped barrier): barriers per update
    // that waited for the mirrors, their FLUSHes, and per barrier the local persist (overlapped
    // with the mirrors' FLUSH) and the further wait for the mirrors' acknowledgement.
    uint64_t fl0 = 0, fl1 = 0;
    for (const auto& m : st0.value("mirrors", Json::array())) fl0 += m.value("flushes", 0ull);
    for (const auto& m : st1.value("mirrors", Json::array())) fl1 += m.value("flushes", 0ull);
    if (mirrors > 0) rec["mirror_flushes_per_op"] = static_cast<double>(fl1 - fl0) / n_ops;
    if (st1.contains("mirror_barriers") && st0.contains("mirror_barriers")) {
      const Json& b0 = st0["mirror_barriers"];
      const Json& b1 = st1["mirror_barriers"];
      const uint64_t nb = b1.value("barriers", 0ull) - b0.value("barriers", 0ull);
      rec["barriers_per_op"] = static_cast<double>(nb) / n_ops;
      if (nb > 0) {
        rec["barrier_local_us"] =
            static_cast<double>(b1.value("local_us", 0ull) - b0.value("local_us", 0ull)) /
            static_cast<double>(nb);
        rec["barrier_mirror_wait_us"] = static_cast<double>(b1.value("mirror_wait_us", 0ull) -
                                                            b0.value("mirror_wait_us", 0ull)) /
                                        static_cast<double>(nb);
      }
    }
    rec["copy_ms"] = copy_ms;
    if (async) {
      rec["max_lag_bytes"] = lag_bytes;
      rec["max_lag_us"] = lag_us;
    }
    if (catchup) {
      rec["full_copy_ms"] = copy_ms;
      ms[0]->Kill();
      const uint64_t more = std::max<uint64_t>(1, updates_ / 4);
      for (uint64_t u = updates_; u < updates_ + more; u++) {
        ASYMNVM_RETURN_IF_ERROR(update(u).WithContext("an update while the mirror is down"));
      }
      ASYMNVM_RETURN_IF_ERROR(s->Fence());
      const auto restart = Clock::now();
      ASYMNVM_ASSIGN_OR_RETURN(
          ms[0], driver::BackendProcess::Start(mirror_bin_, tag + "/mirror-0.pool", pool_size_,
                                               mirror_args(0)));
      Json st2;
      for (;;) {
        ASYMNVM_ASSIGN_OR_RETURN(st2, DaemonStatus(be->address()));
        if (st2.value("mirrors_in_sync", 0ull) == 1) break;
        if (Clock::now() - restart > std::chrono::seconds(120)) {
          return Status::TimedOut("catch-up: the restarted mirror is not in sync after 120 s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      const double catchup_ms = static_cast<double>(ElapsedNs(restart, Clock::now())) / 1e6;
      const Json& m = st2["mirrors"][0];
      const uint64_t bytes = m.value("last_copy_bytes", 0ull);
      rec["updates_while_down"] = more;
      rec["catchup_ms"] = catchup_ms;  // includes the mirror daemon's start-up
      rec["catchup_copy_ms"] = m.value("last_copy_ms", 0.0);
      rec["catchup_bytes"] = bytes;
      rec["catchup_incremental"] = m.value("incremental_copies", 0ull) > 0;
      rec["catchup_mb_per_s"] =
          m.value("last_copy_ms", 0.0) > 0
              ? static_cast<double>(bytes) / 1e3 / m.value("last_copy_ms", 0.0)
              : 0.0;
    }
    if (failover) {
      ASYMNVM_ASSIGN_OR_RETURN(auto c, coord::Coordinator::Open(coord_uri));
      const std::string primary_path =
          "/asymnvm/groups/" + pm::UuidToString(s->pool_uuid()) + "/primary";
      ASYMNVM_ASSIGN_OR_RETURN(coord::Node old_node, c->Get(primary_path));
      // Watch for the promoted mirror's registration on a thread (not measured by the session).
      std::atomic<int64_t> promoted_ns{-1};
      const auto kill_at = Clock::now();
      std::thread watcher([&] {
        const auto deadline = coord::Clock::now() + std::chrono::seconds(60);
        int64_t known = old_node.version;
        while (coord::Clock::now() < deadline) {
          auto n = c->Get(primary_path);
          if (n.ok() && n->creation_id != old_node.creation_id) {
            promoted_ns = ElapsedNs(kill_at, Clock::now());
            return;
          }
          known = n.ok() ? n->version : coord::Coordinator::kNoNode;
          (void)c->WaitForChange(primary_path, known,
                                 coord::Clock::now() + std::chrono::milliseconds(100));
        }
      });
      be->Kill();
      std::filesystem::remove(ppool);
      // The call in flight when the connection breaks fails (its outcome is unknown, so it is
      // not in the oracle); the session reconnects at its next call.
      Status first = update(updates_);
      for (int attempt = 0; !first.ok() && attempt < 3; attempt++) first = update(updates_ + 1);
      const int64_t failover_ns = ElapsedNs(kill_at, Clock::now());
      watcher.join();
      ASYMNVM_RETURN_IF_ERROR(first.WithContext("first update after the failover"));
      ASYMNVM_RETURN_IF_ERROR(s->Fence());
      uint64_t lost = 0;
      std::vector<uint8_t> buf(kSize);
      for (const auto& [i, fill] : acked) {
        ASYMNVM_RETURN_IF_ERROR(s->Read(base + i * kSize, buf));
        if (std::any_of(buf.begin(), buf.end(), [fill = fill](uint8_t b) { return b != fill; })) {
          lost++;
        }
      }
      rec["failover_ms"] = static_cast<double>(failover_ns) / 1e6;
      rec["promoted_ms"] = static_cast<double>(promoted_ns.load()) / 1e6;
      rec["switch_ms"] = static_cast<double>(failover_ns - promoted_ns.load()) / 1e6;
      rec["promotion_timeout_ms"] = promotion_ms_;
      rec["lost_acknowledged"] = lost;
      rec["verified_registers"] = acked.size();
      rec["reconnects"] = s->reconnects();
      s.reset();
      for (auto& m : ms) ASYMNVM_RETURN_IF_ERROR(m->Stop());
      report->Add(std::move(rec));
      return Status::Ok();
    }
    report->Add(std::move(rec));
    s.reset();
    ASYMNVM_RETURN_IF_ERROR(be->Stop());
    for (auto& m : ms) ASYMNVM_RETURN_IF_ERROR(m->Stop());
    return Status::Ok();
  }

  std::vector<std::string> variants_ = {"mirrors-0", "mirrors-1", "mirrors-2",
                                        "async-1",   "catch-up",  "failover"};
  uint64_t updates_ = 20000;
  uint32_t registers_ = 1024;
  std::string pool_size_ = "64M";
  uint32_t promotion_ms_ = 500;
  std::string dir_ = std::filesystem::temp_directory_path().string();
  std::string backend_bin_, mirror_bin_;
  std::string mirror_pm_mode_ = "msync";
};

}  // namespace

ASYMNVM_REGISTER_SUITE(g_mirror_suite, "mirror",
                       "mirroring cost (0/1/2 sync mirrors, 1 async) and failover time",
                       MirrorSuite);

}  // namespace asymnvm::bench
