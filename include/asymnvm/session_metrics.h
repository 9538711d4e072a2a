// Prometheus metrics of an SDK application's Sessions (doc/operations.md §Metrics):
//
//   auto m = asymnvm::metrics::SessionMetrics::Start("0.0.0.0:9464");  // serves GET /metrics
//   ... m->Publish(session);  // from the session's thread, e.g. after each batch of operations
//
// A Session is thread-compatible (used by one thread at a time), so the HTTP thread never reads it:
// Publish copies its Counters (a struct copy under a mutex, no allocation after the first call per
// front-end id) and scrapes read the last copy of every session published, labelled frontend=<id>.
// Link AsymNVM::asymnvm_metrics (and the SDK).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "asymnvm/frontend.h"
#include "asymnvm/metrics.h"

namespace asymnvm::metrics {

// Writes one Session's counters as asymnvm_session_* families.
inline void WriteSessionCounters(uint64_t frontend_id, const frontend::Counters& c, Writer& w) {
  const Labels l{{"frontend", std::to_string(frontend_id)}};
  auto ctr = [&](const char* name, const char* help, uint64_t v) {
    w.Counter(std::string("asymnvm_session_") + name, help, static_cast<double>(v), l);
  };
  ctr("txns_total", "Memory-log transactions sent", c.txns);
  ctr("txn_bytes_total", "Bytes of those transactions", c.txn_bytes);
  ctr("op_logs_total", "Operation logs written", c.op_logs);
  ctr("op_log_bytes_total", "Bytes of operation logs", c.op_log_bytes);
  ctr("mem_logs_total", "Memory logs recorded", c.mem_logs);
  ctr("remote_reads_total", "One-sided reads of back-end memory", c.remote_reads);
  ctr("remote_read_bytes_total", "Bytes read one-sidedly", c.remote_read_bytes);
  ctr("cache_hits_total", "Front-end cache hits", c.cache_hits);
  ctr("cache_misses_total", "Front-end cache misses", c.cache_misses);
  ctr("cache_evictions_total", "Front-end cache evictions", c.cache_evictions);
  ctr("fences_total", "Fences (waits for the back-end to apply)", c.fences);
  ctr("lock_acquires_total", "Writer locks acquired", c.lock_acquires);
  ctr("lock_retries_total", "Writer lock attempts that found it held", c.lock_retries);
  ctr("takeovers_total", "Dead writers' locks taken over", c.takeovers);
  ctr("replayed_ops_total", "Operations replayed by recovery", c.replayed_ops);
  ctr("round_trips_total", "Fabric doorbells (posts that sent at least one request)",
      c.fabric.round_trips);
  ctr("sent_bytes_total", "Fabric wire bytes sent", c.fabric.bytes_out);
  ctr("received_bytes_total", "Fabric wire bytes received", c.fabric.bytes_in);
  ctr("fabric_errors_total", "Fabric requests completed with an error", c.fabric.errors);
}

class SessionMetrics {
 public:
  // listen: HOST:PORT (port 0: ephemeral; address() tells which). Exposer::Start's errors.
  static Result<std::unique_ptr<SessionMetrics>> Start(const std::string& listen) {
    auto e = Exposer::Start(listen);
    if (!e.ok()) return e.status();
    std::unique_ptr<SessionMetrics> m(new SessionMetrics(std::move(e).value()));
    SessionMetrics* p = m.get();
    p->exposer_->Add([p](Writer& w) {
      std::lock_guard<std::mutex> l(p->mu_);
      for (const auto& [id, c] : p->last_) WriteSessionCounters(id, c, w);
    });
    return m;
  }
  ~SessionMetrics() { exposer_.reset(); }  // no scrape after this
  // From the thread using `s`: its counters as of now, for the following scrapes.
  void Publish(const frontend::Session& s) {
    const frontend::Counters c = s.counters();
    std::lock_guard<std::mutex> l(mu_);
    last_[s.frontend_id()] = c;
  }
  std::string address() const { return exposer_->address(); }
  std::string Render() const { return exposer_->Render(); }

 private:
  explicit SessionMetrics(std::unique_ptr<Exposer> e) : exposer_(std::move(e)) {}
  std::unique_ptr<Exposer> exposer_;
  std::mutex mu_;
  std::map<uint64_t, frontend::Counters> last_;
};

}  // namespace asymnvm::metrics
