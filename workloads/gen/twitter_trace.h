// Twitter cache traces (doc/workloads.md "Twitter cache
// traces"): the public twemcache trace format, a reader, a generator of statistically similar
// traces for the clusters JUNE BERRY evaluates (12, 19, 27, 31), and trace statistics.
//
// Format (one request per line, comma-separated, as published in twitter/cache-trace):
//   timestamp,anonymized key,key size,value size,client id,operation,TTL
// e.g. "0,q:1:8WTfjZU,23,57,1,get,0". The timestamp is in seconds from the trace's start; the key
// may itself contain commas (the last five fields are parsed from the right); operations are get,
// gets, set, add, replace, cas, append, prepend, delete, incr, decr.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "asymnvm/status.h"
#include "workloads/gen/generators.h"

namespace asymnvm::workloads {

enum class TraceOp : uint8_t {
  kGet,
  kGets,
  kSet,
  kAdd,
  kReplace,
  kCas,
  kAppend,
  kPrepend,
  kDelete,
  kIncr,
  kDecr,
};
inline constexpr int kTraceOps = 11;
const char* TraceOpName(TraceOp op);
// A write whose client needs no data back (the KV server's nilext PUT): set, add, replace, cas,
// append, prepend... — here: set/add/replace/cas/append/prepend map to PUT; delete to DELETE;
// incr/decr to INCR; get/gets to GET.
bool IsTraceWrite(TraceOp op);

struct TraceRecord {
  uint64_t timestamp = 0;  // seconds
  std::string key;
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint64_t client = 0;
  TraceOp op = TraceOp::kGet;
  uint64_t ttl = 0;  // seconds, 0 = none
};

// One line (without its newline; a trailing '\r' is ignored). kCorruption naming the field for a
// malformed line (missing fields, a number that does not parse, an unknown operation, an empty key,
// a key size above 1 MiB or a value size above 1 GiB).
Result<TraceRecord> ParseTraceLine(std::string_view line);
// The line for `r` (no newline); ParseTraceLine(FormatTraceLine(r)) == r.
std::string FormatTraceLine(const TraceRecord& r);

// Reads a trace file record by record. Blank lines are skipped.
class TraceReader {
 public:
  static Result<std::unique_ptr<TraceReader>> Open(const std::string& path);
  // true with *r filled, false at the end; kCorruption naming "FILE:LINE".
  Result<bool> Next(TraceRecord* r);

 private:
  std::ifstream in_;
  std::string path_;
  uint64_t line_ = 0;
};

// A cluster's published statistics (specs/workloads.md §5).
struct ClusterProfile {
  int id = 0;
  double set_ratio = 0;     // the rest are gets
  uint32_t key_size = 0;    // bytes
  uint32_t value_size = 0;  // bytes
  double alpha = 0;         // Zipf exponent of key popularity, 0 = uniform
  double kqps = 0;          // request rate (thousands per second), for timestamps
  uint64_t ttl = 0;         // the common TTL of sets (seconds)
};
// Clusters 12, 19, 27, 31. kNotFound for another id (the message lists the known ones).
Result<ClusterProfile> TwitterCluster(int id);
std::vector<int> TwitterClusterIds();

// Synthetic requests with a cluster's statistics: op = set with set_ratio else get; key rank ~
// Zipf(alpha) over `keys` keys by exact inverse CDF (alpha 0: uniform), the rank scrambled with
// FnvHash64 into a key of exactly key_size bytes; client uniform in 1..clients; timestamps at the
// cluster's rate. Deterministic for a seed.
class TraceGenerator {
 public:
  // kInvalidArgument: keys 0 or above 10^8, clients 0, key_size below 1, alpha negative.
  static Result<std::unique_ptr<TraceGenerator>> Create(const ClusterProfile& p, uint64_t keys,
                                                        uint64_t clients, uint64_t seed);
  TraceRecord Next();

 private:
  TraceGenerator(ClusterProfile p, uint64_t keys, uint64_t clients, uint64_t seed);
  std::string KeyFor(uint64_t rank) const;
  ClusterProfile p_;
  uint64_t keys_, clients_;
  Rng rng_;
  std::vector<double> cdf_;  // empty: uniform
  uint64_t n_ = 0;
};

// What a trace holds: counts per operation, mean key and value sizes, distinct keys, and the Zipf
// exponent fitted to the key frequencies (least squares of log frequency on log rank over the
// ranks whose key was seen at least 5 times; 0 when fewer than 10 such keys — a uniform trace).
struct TraceStats {
  uint64_t requests = 0;
  uint64_t per_op[kTraceOps] = {};
  double mean_key_size = 0, mean_value_size = 0;
  uint64_t distinct_keys = 0;
  double zipf_alpha = 0;
  uint64_t clients = 0;
  uint64_t duration_s = 0;  // last timestamp − first
  double write_ratio() const;
};
class TraceStatsBuilder {
 public:
  void Add(const TraceRecord& r);
  TraceStats Finish() const;

 private:
  TraceStats s_;
  std::map<std::string, uint64_t> freq_;
  std::map<uint64_t, bool> clients_;
  uint64_t first_ts_ = 0, last_ts_ = 0;
  double key_bytes_ = 0, value_bytes_ = 0;
};

}  // namespace asymnvm::workloads
