// Prometheus metrics (doc/operations.md §Metrics): a scrape endpoint over the counters a process
// already keeps.
//
// A process registers collectors: functions that, on each scrape, read its counters (a daemon's
// stats, a Session's Counters) and describe them to a Writer as counters, gauges and histograms.
// The exposition (text format, HTTP) is prometheus-cpp's (Debian prometheus-cpp-dev); nothing here
// keeps a copy of a counter between scrapes. LatencyHistogram and RequestMetrics are the only
// bookkeeping of their own: lock-free per-request-type counts, bytes and latency buckets that a
// request path records (a few relaxed atomic adds per request).
//
// Names follow Prometheus's conventions: asymnvm_<component>_<what>_<unit>, counters end in
// _total, times are seconds, sizes bytes.
//
// Thread safety: Writer is used by one collector call at a time; LatencyHistogram and
// RequestMetrics are recorded from any thread; Exposer's methods from any thread (collectors run on
// the HTTP server's threads, so they must be thread-safe against the process's own).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class Type { kCounter, kGauge, kHistogram };

struct Sample {
  Labels labels;
  double value = 0;  // counter / gauge
  // Histogram: upper bounds (ascending, +Inf implied last) and the cumulative count at each bound;
  // `value` is unused, `count` and `sum` are the totals.
  std::vector<double> bounds;
  std::vector<uint64_t> cumulative;
  uint64_t count = 0;
  double sum = 0;
};

struct Family {
  std::string name, help;
  Type type = Type::kCounter;
  std::vector<Sample> samples;
};

// What a collector writes into: families by name, in first-written order. Writing a sample of an
// existing family adds to it (the name's help and type must be the same).
class Writer {
 public:
  void Counter(std::string_view name, std::string_view help, double value, Labels labels = {}) {
    Sample s;
    s.labels = std::move(labels);
    s.value = value;
    Get(name, help, Type::kCounter).samples.push_back(std::move(s));
  }
  void Gauge(std::string_view name, std::string_view help, double value, Labels labels = {}) {
    Sample s;
    s.labels = std::move(labels);
    s.value = value;
    Get(name, help, Type::kGauge).samples.push_back(std::move(s));
  }
  // bounds: ascending upper bounds (without +Inf); per_bucket: counts per bucket, one more than
  // bounds (the last is above the last bound).
  void Histogram(std::string_view name, std::string_view help, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& per_bucket, double sum, Labels labels = {}) {
    Sample s;
    s.labels = std::move(labels);
    s.bounds = bounds;
    uint64_t c = 0;
    for (size_t i = 0; i < per_bucket.size(); i++) {
      c += per_bucket[i];
      if (i < bounds.size()) s.cumulative.push_back(c);
    }
    s.count = c;
    s.sum = sum;
    Get(name, help, Type::kHistogram).samples.push_back(std::move(s));
  }
  // A fact about the process as a gauge of value 1 with the facts as labels (Prometheus's
  // "info" pattern, e.g. asymnvm_backend_info{pool="...",durability="direct"} 1).
  void Info(std::string_view name, std::string_view help, Labels labels) {
    Gauge(name, help, 1, std::move(labels));
  }
  const std::vector<Family>& families() const { return families_; }
  std::vector<Family> Take() { return std::move(families_); }

 private:
  Family& Get(std::string_view name, std::string_view help, Type type) {
    for (auto& f : families_) {
      if (f.name == name) return f;
    }
    families_.push_back(Family{std::string(name), std::string(help), type, {}});
    return families_.back();
  }
  std::vector<Family> families_;
};

// Latencies in power-of-two buckets from 1 µs to ~0.5 s (20 bounds, then +Inf).
class LatencyHistogram {
 public:
  static constexpr int kBounds = 20;
  void Record(uint64_t nanos) {
    const uint64_t us = (nanos + 999) / 1000;  // rounded up: a bucket holds values <= its bound
    // Bucket i holds (2^(i-1), 2^i] µs; bucket 0 holds <= 1 µs.
    int i = us <= 1 ? 0 : static_cast<int>(std::bit_width(us - 1));
    if (i > kBounds) i = kBounds;
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(nanos, std::memory_order_relaxed);
  }
  static std::vector<double> Bounds() {
    std::vector<double> b;
    for (int i = 0; i < kBounds; i++) b.push_back(static_cast<double>(uint64_t{1} << i) * 1e-6);
    return b;
  }
  std::vector<uint64_t> Buckets() const {
    std::vector<uint64_t> v;
    for (const auto& b : buckets_) v.push_back(b.load(std::memory_order_relaxed));
    return v;
  }
  uint64_t count() const {
    uint64_t c = 0;
    for (const auto& b : buckets_) c += b.load(std::memory_order_relaxed);
    return c;
  }
  double sum_seconds() const { return static_cast<double>(sum_ns_.load()) * 1e-9; }
  void Write(Writer& w, std::string_view name, std::string_view help, Labels labels = {}) const {
    w.Histogram(name, help, Bounds(), Buckets(), sum_seconds(), std::move(labels));
  }

 private:
  std::array<std::atomic<uint64_t>, kBounds + 1> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Per request type (a small integer code, < kMaxTypes): requests, failed requests, request and
// response payload bytes, and latency. Types are named at construction; unnamed codes are counted
// as "other".
class RequestMetrics {
 public:
  static constexpr int kMaxTypes = 64;
  explicit RequestMetrics(std::vector<std::pair<uint16_t, std::string>> names)
      : names_(std::move(names)) {}
  void Record(uint16_t type, uint64_t nanos, uint64_t bytes_in, uint64_t bytes_out, bool ok) {
    Slot& s = slots_[type < kMaxTypes ? type : 0];
    s.count.fetch_add(1, std::memory_order_relaxed);
    if (!ok) s.errors.fetch_add(1, std::memory_order_relaxed);
    s.bytes_in.fetch_add(bytes_in, std::memory_order_relaxed);
    s.bytes_out.fetch_add(bytes_out, std::memory_order_relaxed);
    s.latency.Record(nanos);
  }
  uint64_t count(uint16_t type) const {
    return slots_[type < kMaxTypes ? type : 0].count.load(std::memory_order_relaxed);
  }
  // <prefix>_requests_total, _request_errors_total, _request_bytes_total,
  // _response_bytes_total, _request_duration_seconds, each labelled type="<name>". Every named
  // type is written (zeros included: a series that exists from the start rates correctly).
  void Write(Writer& w, const std::string& prefix) const {
    auto emit = [&](const Slot& s, const std::string& name) {
      Labels l{{"type", name}};
      w.Counter(prefix + "_requests_total", "Requests served, by request type",
                static_cast<double>(s.count.load()), l);
      w.Counter(prefix + "_request_errors_total", "Requests answered with an error, by type",
                static_cast<double>(s.errors.load()), l);
      w.Counter(prefix + "_request_bytes_total", "Request payload bytes received, by type",
                static_cast<double>(s.bytes_in.load()), l);
      w.Counter(prefix + "_response_bytes_total", "Response payload bytes sent, by type",
                static_cast<double>(s.bytes_out.load()), l);
      s.latency.Write(w, prefix + "_request_duration_seconds",
                      "Time from dequeuing a request to its response, by type", l);
    };
    std::array<bool, kMaxTypes> named{};
    for (const auto& [code, name] : names_) {
      if (code < kMaxTypes) {
        named[code] = true;
        emit(slots_[code], name);
      }
    }
    // Codes without a name (never expected: the daemons name all of theirs) under "other".
    uint64_t other = 0;
    for (int i = 0; i < kMaxTypes; i++) {
      if (!named[i]) other += slots_[i].count.load();
    }
    if (other != 0) {
      w.Counter(prefix + "_requests_total", "", static_cast<double>(other), {{"type", "other"}});
    }
  }

 private:
  struct Slot {
    std::atomic<uint64_t> count{0}, errors{0}, bytes_in{0}, bytes_out{0};
    LatencyHistogram latency;
  };
  std::vector<std::pair<uint16_t, std::string>> names_;
  std::array<Slot, kMaxTypes> slots_;
};

using Collector = std::function<void(Writer&)>;

// The HTTP endpoint Prometheus scrapes (GET /metrics, text format 0.0.4), served by
// prometheus-cpp's Exposer on its own threads. Every scrape runs each collector once.
class Exposer {
 public:
  // listen: HOST:PORT (port 0: an ephemeral one; address() tells which). kInvalidArgument for a
  // malformed address, kIoError when it cannot be bound (the message names it).
  static Result<std::unique_ptr<Exposer>> Start(const std::string& listen);
  ~Exposer();
  void Add(Collector c);
  std::string address() const;  // HOST:PORT actually bound
  // What a scrape returns now (the text format), for tests and `--metrics-dump`-style tools.
  std::string Render() const;
  struct Impl;

 private:
  explicit Exposer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// The text format of `families` (prometheus-cpp's TextSerializer).
std::string Render(const std::vector<Family>& families);

// Standard process facts every daemon exposes: asymnvm_build_info{component,version} and
// process start time (Unix seconds) under `component`'s label.
void WriteProcessInfo(Writer& w, std::string_view component);

}  // namespace asymnvm::metrics
