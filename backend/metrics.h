// The back-end's Prometheus collector (doc/operations.md §Metrics): reads Backend::StatusJson()
// (the figures `asymnvm-ctl status` prints) and Backend::request_metrics() on each scrape.
#pragma once

#include "asymnvm/metrics.h"
#include "backend/backend.h"

namespace asymnvm::backend {

// Writes every asymnvm_backend_* family (and asymnvm_pm_* with component="backend").
void WriteMetrics(const Backend& backend, metrics::Writer& w);

// The request type names of the back-end's OQ (rpc.h RequestType), for RequestMetrics.
std::vector<std::pair<uint16_t, std::string>> RequestTypeNames();

}  // namespace asymnvm::backend
