// How long the pools' msyncs take, and the pm metrics every daemon exports (doc/operations.md
// §Metrics). Kept out of include/asymnvm/pm.h, which every component includes.
#pragma once

#include <string>

#include "asymnvm/metrics.h"

namespace asymnvm::pm {

// Every msync a pool of this process made (pm::Pool in msync mode; flush mode makes none), timed,
// in the metrics' power-of-two microsecond buckets. Process-wide: a daemon serves one pool.
const metrics::LatencyHistogram& SyncLatency();

// asymnvm_pm_syncs_total, asymnvm_pm_sync_bytes_total (the pool's sync_stats) and
// asymnvm_pm_sync_duration_seconds (SyncLatency), labelled component=<component>.
inline void WriteSyncMetrics(metrics::Writer& w, const std::string& component, double syncs,
                             double bytes) {
  const metrics::Labels l{{"component", component}};
  w.Counter("asymnvm_pm_syncs_total", "Pool msync calls (0 in flush mode)", syncs, l);
  w.Counter("asymnvm_pm_sync_bytes_total", "Bytes of the pool made durable by msync", bytes, l);
  SyncLatency().Write(w, "asymnvm_pm_sync_duration_seconds",
                      "Time of each pool msync (the device flush a durable write waits for)", l);
}

}  // namespace asymnvm::pm
