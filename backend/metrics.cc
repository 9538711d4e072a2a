#include "backend/metrics.h"

#include <nlohmann/json.hpp>

#include "backend/rpc.h"
#include "pm/sync_metrics.h"

namespace asymnvm::backend {

std::vector<std::pair<uint16_t, std::string>> RequestTypeNames() {
  return {{kRegister, "register"},
          {kNamingCreate, "naming_create"},
          {kNamingLookup, "naming_lookup"},
          {kNamingRemove, "naming_remove"},
          {kClearRejected, "clear_rejected"},
          {kFetchOpLogs, "fetch_op_logs"},
          {kNamingAt, "naming_at"},
          {kLockedBy, "locked_by"},
          {kAllocSlab, "alloc_slab"},
          {kAllocLarge, "alloc_large"},
          {kFree, "free"},
          {kFreeDeferred, "free_deferred"},
          {kExtentOf, "extent_of"},
          {kTxn, "txn"},
          {kStatus, "status"}};
}

void WriteMetrics(const Backend& backend, metrics::Writer& w) {
  const auto j = nlohmann::json::parse(backend.StatusJson());
  auto num = [&](const char* k) { return j.contains(k) ? j[k].get<double>() : 0.0; };
  auto counter = [&](const std::string& name, const char* key, const char* help) {
    w.Counter("asymnvm_backend_" + name, help, num(key));
  };
  auto gauge = [&](const std::string& name, const char* key, const char* help) {
    w.Gauge("asymnvm_backend_" + name, help, num(key));
  };
  // pool::Describe() is "pool PATH: size, ...": the label keeps PATH.
  std::string pool = j.value("pool", "");
  if (pool.rfind("pool ", 0) == 0) pool = pool.substr(5, pool.find(": ") - 5);
  w.Info("asymnvm_backend_info", "The served pool (value 1)",
         {{"pool", pool},
          {"durability", j.value("durability", "")},
          {"mirror_mode", j.value("mirror_mode", "none")}});
  w.Gauge("asymnvm_backend_frontends", "Front-end ids registered in the pool",
          static_cast<double>(j["frontends"].size()));
  for (const auto& f : j["frontends"]) {
    w.Gauge("asymnvm_backend_frontend_incarnation",
            "Current incarnation (registrations) of each front-end id",
            f["incarnation"].get<double>(),
            {{"frontend", std::to_string(f["id"].get<uint64_t>())}});
  }
  counter("txns_applied_total", "txns_applied", "Memory-log transactions applied");
  counter("txns_skipped_total", "txns_skipped", "Transactions skipped as already applied");
  counter("txns_rejected_total", "txns_rejected", "Transactions rejected (invalid)");
  w.Counter("asymnvm_backend_fencing_events_total",
            "Requests refused because their sender was fenced (superseded incarnation or epoch, "
            "or a stale group term)",
            num("txns_fenced"), {{"kind", "txn"}});
  w.Counter("asymnvm_backend_fencing_events_total", "", num("registers_fenced"),
            {{"kind", "register"}});
  counter("op_logs_total", "op_logs_seen", "Operation logs seen in the b-log");
  counter("op_log_scans_total", "op_log_scans", "Pointer entries resolved by scanning the b-log");
  gauge("blog_segments", "log_segments", "Segments of the operation-log (b-log) area");
  gauge("blog_segments_pinned", "log_segments_pinned",
        "Digested b-log segments held by op logs their front-end has not covered yet");
  counter("blog_segments_digested_total", "log_segments_digested", "B-log segments digested");
  counter("blog_segments_recycled_total", "log_segments_recycled",
          "B-log segments returned to the writers");
  counter("corrupt_log_entries_total", "log_corrupt_entries",
          "Landed op logs that failed validation at start");
  counter("corrupt_oq_records_total", "oq_corrupt_records",
          "Landed OQ requests that failed validation at start");
  gauge("deferred_frees_pending", "deferred_frees_pending", "Deferred frees not yet due");
  counter("deferred_frees_total", "deferred_frees_done", "Deferred frees carried out");
  counter("deferred_frees_failed_total", "deferred_frees_failed",
          "Deferred frees of blocks no longer allocated");
  counter("cpu_seconds_total", "cpu_seconds", "CPU time of the back-end process (user+system)");
  pm::WriteSyncMetrics(w, "backend", num("pm_syncs"), num("pm_sync_bytes"));
  counter("checkpoints_total", "checkpoints", "Redo-log mode: checkpoints taken");
  counter("checkpoint_bytes_total", "checkpoint_bytes", "Redo-log mode: bytes checkpoints wrote");
  gauge("checkpoint_lag_txns", "checkpoint_lag_txns",
        "Redo-log mode: transactions applied since the last checkpoint (replayed after a crash)");
  if (j.contains("oq")) {
    w.Gauge("asymnvm_backend_oq_connections", "Front-end connections to the Ordered Queue",
            j["oq"].value("connections", 0.0));
    w.Counter("asymnvm_backend_oq_rnr_total",
              "Receiver-not-ready events at the OQ (a front-end found no receive buffer)",
              j["oq"].value("rnr_seen", 0.0));
  }
  if (j.contains("alloc")) {
    const double total = j["alloc"].value("blocks_total", 0.0);
    const double used = j["alloc"].value("blocks_used", 0.0);
    w.Gauge("asymnvm_backend_alloc_blocks", "Allocator blocks of the data area, by state", used,
            {{"state", "used"}});
    w.Gauge("asymnvm_backend_alloc_blocks", "", total - used, {{"state", "free"}});
  }
  if (j.contains("mirrors")) {
    gauge("mirrors_in_sync", "mirrors_in_sync", "Mirrors in the in-sync set");
    gauge("mirrors_configured", "mirrors_configured", "Mirrors this back-end forwards to");
    for (const auto& m : j["mirrors"]) {
      const metrics::Labels l{{"mirror", m.value("address", "")}};
      const std::string state = m.value("state", "");
      w.Gauge("asymnvm_backend_mirror_in_sync", "1 while the mirror is in sync, else 0",
              state == "in-sync" ? 1 : 0, l);
      for (const char* s : {"down", "copying", "in-sync"}) {
        auto ls = l;
        ls.push_back({"state", s});
        w.Gauge("asymnvm_backend_mirror_state", "Link state of each mirror (one-hot)",
                state == s ? 1 : 0, ls);
      }
      w.Counter("asymnvm_backend_mirror_forwarded_bytes_total", "Bytes forwarded to the mirror",
                m.value("bytes_forwarded", 0.0), l);
      w.Counter("asymnvm_backend_mirror_flushes_total", "Flushes the mirror acknowledged",
                m.value("flushes", 0.0), l);
      w.Counter("asymnvm_backend_mirror_copies_total", "Full or incremental copies to the mirror",
                m.value("copies", 0.0), l);
      w.Counter("asymnvm_backend_mirror_copy_bytes_total", "Bytes of copies to the mirror",
                m.value("copy_bytes", 0.0), l);
      w.Counter("asymnvm_backend_mirror_drops_total", "Times the mirror was dropped from sync",
                m.value("drops", 0.0), l);
      w.Gauge("asymnvm_backend_mirror_max_lag_bytes",
              "Async mode: largest forwarded-but-unacknowledged backlog seen",
              m.value("max_lag_bytes", 0.0), l);
      w.Gauge("asymnvm_backend_mirror_max_lag_seconds", "Async mode: age of that backlog",
              m.value("max_lag_us", 0.0) * 1e-6, l);
    }
  }
  backend.request_metrics().Write(w, "asymnvm_backend");
}

}  // namespace asymnvm::backend
