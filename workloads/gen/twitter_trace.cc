// Twitter cache traces: format, reader, generator, statistics (workloads/gen/twitter_trace.h).
#include "workloads/gen/twitter_trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace asymnvm::workloads {

namespace {

constexpr const char* kOpNames[kTraceOps] = {
    "get", "gets", "set", "add", "replace", "cas", "append", "prepend", "delete", "incr", "decr"};

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

const char* TraceOpName(TraceOp op) {
  const auto i = static_cast<size_t>(op);
  return i < kTraceOps ? kOpNames[i] : "?";
}

bool IsTraceWrite(TraceOp op) { return op != TraceOp::kGet && op != TraceOp::kGets; }

Result<TraceRecord> ParseTraceLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // timestamp, then the key (which may hold commas), then five fields from the right.
  const size_t first = line.find(',');
  if (first == std::string_view::npos)
    return Status::Corruption("trace line has no fields: \"" + std::string(line.substr(0, 60)) +
                              "\"");
  std::string_view tail[5];
  size_t end = line.size();
  for (int i = 4; i >= 0; i--) {
    const size_t comma = line.rfind(',', end - 1);
    if (end == 0 || comma == std::string_view::npos || comma <= first) {
      return Status::Corruption("trace line has fewer than 7 fields: \"" +
                                std::string(line.substr(0, 60)) + "\"");
    }
    tail[i] = line.substr(comma + 1, end - comma - 1);
    end = comma;
  }
  TraceRecord r;
  if (!ParseU64(line.substr(0, first), &r.timestamp))
    return Status::Corruption("trace line: bad timestamp \"" + std::string(line.substr(0, first)) +
                              "\"");
  r.key = std::string(line.substr(first + 1, end - first - 1));
  if (r.key.empty()) return Status::Corruption("trace line: empty key");
  uint64_t ks = 0, vs = 0;
  if (!ParseU64(tail[0], &ks) || ks > (1u << 20))
    return Status::Corruption("trace line: bad key size \"" + std::string(tail[0]) + "\"");
  if (!ParseU64(tail[1], &vs) || vs > (1ull << 30))
    return Status::Corruption("trace line: bad value size \"" + std::string(tail[1]) + "\"");
  r.key_size = static_cast<uint32_t>(ks);
  r.value_size = static_cast<uint32_t>(vs);
  if (!ParseU64(tail[2], &r.client))
    return Status::Corruption("trace line: bad client id \"" + std::string(tail[2]) + "\"");
  bool known = false;
  for (int i = 0; i < kTraceOps; i++) {
    if (tail[3] == kOpNames[i]) {
      r.op = static_cast<TraceOp>(i);
      known = true;
    }
  }
  if (!known)
    return Status::Corruption("trace line: unknown operation \"" + std::string(tail[3]) + "\"");
  if (!ParseU64(tail[4], &r.ttl))
    return Status::Corruption("trace line: bad TTL \"" + std::string(tail[4]) + "\"");
  return r;
}

std::string FormatTraceLine(const TraceRecord& r) {
  return std::to_string(r.timestamp) + "," + r.key + "," + std::to_string(r.key_size) + "," +
         std::to_string(r.value_size) + "," + std::to_string(r.client) + "," + TraceOpName(r.op) +
         "," + std::to_string(r.ttl);
}

Result<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  auto r = std::unique_ptr<TraceReader>(new TraceReader());
  r->in_.open(path);
  if (!r->in_) return Status::IoError("cannot open trace " + path);
  r->path_ = path;
  return r;
}

Result<bool> TraceReader::Next(TraceRecord* r) {
  std::string line;
  while (std::getline(in_, line)) {
    line_++;
    if (line.empty() || line == "\r") continue;
    auto rec = ParseTraceLine(line);
    if (!rec.ok()) return rec.status().WithContext(path_ + ":" + std::to_string(line_));
    *r = std::move(*rec);
    return true;
  }
  if (in_.bad()) return Status::IoError("reading " + path_);
  return false;
}

std::vector<int> TwitterClusterIds() { return {12, 19, 27, 31}; }

Result<ClusterProfile> TwitterCluster(int id) {
  // specs/workloads.md §5 (twitter/cache-trace stat/2020Mar.md means; the most common TTL).
  switch (id) {
    case 12:
      return ClusterProfile{12, 0.80, 44, 1030, 0.3048, 4.36, 300};
    case 19:
      return ClusterProfile{19, 0.25, 42, 101, 0.735, 3.31, 25200};
    case 27:
      return ClusterProfile{27, 0.15, 66, 8, 1.065, 24.55, 8000640};
    case 31:
      return ClusterProfile{31, 0.94, 41, 15, 0.0, 2.52, 60};
    default:
      break;
  }
  return Status::NotFound("no Twitter cluster " + std::to_string(id) + " (known: 12, 19, 27, 31)");
}

Result<std::unique_ptr<TraceGenerator>> TraceGenerator::Create(const ClusterProfile& p,
                                                               uint64_t keys, uint64_t clients,
                                                               uint64_t seed) {
  if (keys == 0 || keys > 100000000)
    return Status::InvalidArgument("trace generator: keys must be 1..10^8");
  if (clients == 0) return Status::InvalidArgument("trace generator: clients must be at least 1");
  if (p.key_size == 0)
    return Status::InvalidArgument("trace generator: key size must be at least 1");
  if (!(p.alpha >= 0) || !std::isfinite(p.alpha))
    return Status::InvalidArgument("trace generator: alpha must be >= 0");
  return std::unique_ptr<TraceGenerator>(new TraceGenerator(p, keys, clients, seed));
}

TraceGenerator::TraceGenerator(ClusterProfile p, uint64_t keys, uint64_t clients, uint64_t seed)
    : p_(p), keys_(keys), clients_(clients), rng_(seed) {
  if (p_.alpha > 0) {
    // Exact inverse CDF: P(rank i) ∝ (i+1)^-alpha, i in [0, keys).
    cdf_.resize(keys_);
    double sum = 0;
    for (uint64_t i = 0; i < keys_; i++) {
      sum += std::pow(static_cast<double>(i + 1), -p_.alpha);
      cdf_[i] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }
}

std::string TraceGenerator::KeyFor(uint64_t rank) const {
  static const char* kHex = "0123456789abcdef";
  const uint64_t h = FnvHash64(rank);
  std::string digits(16, '0');
  for (int i = 0; i < 16; i++) digits[i] = kHex[(h >> (60 - 4 * i)) & 0xF];
  std::string key;
  key.reserve(p_.key_size);
  while (key.size() < p_.key_size) key += digits;
  key.resize(p_.key_size);
  return key;
}

TraceRecord TraceGenerator::Next() {
  TraceRecord r;
  const double per_s = std::max(1.0, p_.kqps * 1000);
  r.timestamp = static_cast<uint64_t>(static_cast<double>(n_++) / per_s);
  uint64_t rank;
  if (cdf_.empty()) {
    rank = rng_.Below(keys_);
  } else {
    const double u = rng_.NextDouble();
    rank = static_cast<uint64_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    if (rank >= keys_) rank = keys_ - 1;
  }
  r.key = KeyFor(rank);
  r.key_size = p_.key_size;
  const bool set = rng_.NextDouble() < p_.set_ratio;
  r.op = set ? TraceOp::kSet : TraceOp::kGet;
  r.value_size = p_.value_size;
  r.ttl = set ? p_.ttl : 0;
  r.client = 1 + rng_.Below(clients_);
  return r;
}

double TraceStats::write_ratio() const {
  if (requests == 0) return 0;
  return 1.0 - static_cast<double>(per_op[static_cast<int>(TraceOp::kGet)] +
                                   per_op[static_cast<int>(TraceOp::kGets)]) /
                   static_cast<double>(requests);
}

void TraceStatsBuilder::Add(const TraceRecord& r) {
  if (s_.requests == 0) first_ts_ = r.timestamp;
  last_ts_ = std::max(last_ts_, r.timestamp);
  s_.requests++;
  s_.per_op[static_cast<int>(r.op)]++;
  key_bytes_ += r.key_size;
  value_bytes_ += r.value_size;
  freq_[r.key]++;
  clients_[r.client] = true;
}

TraceStats TraceStatsBuilder::Finish() const {
  TraceStats s = s_;
  if (s.requests) {
    s.mean_key_size = key_bytes_ / static_cast<double>(s.requests);
    s.mean_value_size = value_bytes_ / static_cast<double>(s.requests);
  }
  s.distinct_keys = freq_.size();
  s.clients = clients_.size();
  s.duration_s = last_ts_ - first_ts_;
  std::vector<uint64_t> f;
  for (const auto& [k, n] : freq_) f.push_back(n);
  std::sort(f.rbegin(), f.rend());
  size_t m = 0;
  while (m < f.size() && f[m] >= 5) m++;
  if (m >= 10) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < m; i++) {
      const double x = std::log(static_cast<double>(i + 1)),
                   y = std::log(static_cast<double>(f[i]));
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    const double n = static_cast<double>(m);
    const double den = n * sxx - sx * sx;
    if (den > 0) s.zipf_alpha = std::max(0.0, -(n * sxy - sx * sy) / den);
  }
  return s;
}

}  // namespace asymnvm::workloads
