// The scrape endpoint of include/asymnvm/metrics.h over prometheus-cpp (pull + core): collectors
// write our Family structs, converted to prometheus::MetricFamily on each scrape.
#include "asymnvm/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <limits>
#include <mutex>

namespace asymnvm::metrics {

namespace {

std::vector<prometheus::MetricFamily> Convert(std::vector<Family> families) {
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families.size());
  for (auto& f : families) {
    prometheus::MetricFamily m;
    m.name = std::move(f.name);
    m.help = std::move(f.help);
    m.type = f.type == Type::kCounter ? prometheus::MetricType::Counter
             : f.type == Type::kGauge ? prometheus::MetricType::Gauge
                                      : prometheus::MetricType::Histogram;
    for (auto& s : f.samples) {
      prometheus::ClientMetric c;
      for (auto& [k, v] : s.labels) c.label.push_back({k, v});
      switch (f.type) {
        case Type::kCounter:
          c.counter.value = s.value;
          break;
        case Type::kGauge:
          c.gauge.value = s.value;
          break;
        case Type::kHistogram:
          c.histogram.sample_count = s.count;
          c.histogram.sample_sum = s.sum;
          for (size_t i = 0; i < s.bounds.size() && i < s.cumulative.size(); i++) {
            c.histogram.bucket.push_back({s.cumulative[i], s.bounds[i]});
          }
          c.histogram.bucket.push_back({s.count, std::numeric_limits<double>::infinity()});
          break;
      }
      m.metric.push_back(std::move(c));
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Splits HOST:PORT ([v6]:PORT accepted as civetweb spells it).
bool SplitHostPort(const std::string& a, std::string* host, int* port) {
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size()) return false;
  *host = a.substr(0, colon);
  const std::string p = a.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  *port = std::stoi(p);
  return *port <= 65535;
}

const int64_t kStartUnixMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();

}  // namespace

struct Exposer::Impl : public prometheus::Collectable {
  std::string host;
  int port = 0;
  mutable std::mutex mu;
  std::vector<Collector> collectors;
  std::unique_ptr<prometheus::Exposer> exposer;

  std::vector<Family> CollectOurs() const {
    std::vector<Collector> cs;
    {
      std::lock_guard<std::mutex> l(mu);
      cs = collectors;
    }
    Writer w;
    for (const auto& c : cs) c(w);
    return w.Take();
  }
  std::vector<prometheus::MetricFamily> Collect() const override { return Convert(CollectOurs()); }
};

Result<std::unique_ptr<Exposer>> Exposer::Start(const std::string& listen) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(listen, &host, &port)) {
    return Status::InvalidArgument("metrics listen address '" + listen +
                                   "' is not HOST:PORT (e.g. 127.0.0.1:9464 or 0.0.0.0:9464)");
  }
  auto impl = std::make_shared<Impl>();
  impl->host = host;
  try {
    // One thread: scrapes are rare (seconds apart) and each reads a few counters.
    impl->exposer = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return Status::IoError("metrics: cannot listen on " + listen + ": " + e.what());
  }
  const auto ports = impl->exposer->GetListeningPorts();
  impl->port = ports.empty() ? port : ports.front();
  impl->exposer->RegisterCollectable(impl);
  return std::unique_ptr<Exposer>(new Exposer(std::move(impl)));
}

Exposer::Exposer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Exposer::~Exposer() {
  // Stops the HTTP server (joins its threads) before the collectors' owners go away.
  impl_->exposer.reset();
}

void Exposer::Add(Collector c) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->collectors.push_back(std::move(c));
}

std::string Exposer::address() const { return impl_->host + ":" + std::to_string(impl_->port); }

std::string Exposer::Render() const { return metrics::Render(impl_->CollectOurs()); }

std::string Render(const std::vector<Family>& families) {
  prometheus::TextSerializer ser;
  return ser.Serialize(Convert(families));
}

void WriteProcessInfo(Writer& w, std::string_view component) {
  w.Info("asymnvm_build_info", "AsymNVM build facts (value 1)",
         {{"component", std::string(component)}, {"version", ASYMNVM_VERSION_STRING}});
  w.Gauge("asymnvm_process_start_time_seconds", "Start time of the process since the Unix epoch",
          static_cast<double>(kStartUnixMs) / 1000.0);
}

}  // namespace asymnvm::metrics
