// Workload generators: YCSB key choosers, operation mixes and value sizes.
//
// What: the pieces a benchmark driver draws from per operation — which key (KeyGenerator and its
// YCSB implementations: uniform, Zipfian, scrambled Zipfian, skewed-latest, hotspot), which
// operation (Mix / OpChooser), how large a value (ValueSizeGenerator) — plus YCSB's key naming
// (FnvHash64, YcsbKeyName). Semantics follow YCSB's CoreWorkload as summarised in
// the workload specification (specs/workloads.md, doc/references.md) §3; the decisions and
// deviations are in doc/workloads.md.
//
// Randomness is injected: every draw takes the caller's Rng, so a driver owns one seeded Rng per
// thread and runs are reproducible for a fixed seed.
//
// Thread safety: Rng, every KeyGenerator, OpChooser and ValueSizeGenerator are NOT thread-safe
// (one per thread; Zipfian growth mutates state). AcknowledgedCounter IS thread-safe and is meant
// to be shared by all threads of a run (several SkewedLatestGenerators may observe one counter).
//
// Errors: factories return kInvalidArgument for bad parameters (the message names the parameter);
// constructors never fail.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::workloads {

// ---- Hashing and key names (§3.3) --------------------------------------------------------------

// YCSB's Utils.fnvhash64 with Java semantics: FNV-1a over the 8 little-endian octets of v, then
// Math.abs of the result as a signed 64-bit value (INT64_MIN stays negative; returned as its
// two's-complement bit pattern).
uint64_t FnvHash64(uint64_t v);

// YCSB's buildKeyName: "user" + decimal(k) left-padded with '0' to `zeropadding` digits, where
// k = FnvHash64(keynum) if hashed (insertorder=hashed) else keynum. The decimal is of k read as a
// signed Java long, exactly as YCSB prints it.
std::string YcsbKeyName(uint64_t keynum, bool hashed = true, int zeropadding = 1);

// The 8-byte key for fixed-size-key data structures: FnvHash64(keynum) if hashed, else keynum.
// (Scan order then follows the integer, not YCSB's lexicographic string order.)
inline uint64_t KeyNumToKey(uint64_t keynum, bool hashed) {
  return hashed ? FnvHash64(keynum) : keynum;
}

// ---- Randomness ---------------------------------------------------------------------------------

// xoshiro256** seeded through splitmix64. Small, fast, deterministic for a seed; not for crypto.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0x853c49e6748fea9bULL);

  uint64_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n) without modulo bias (Lemire); n == 0 means the full 64-bit range.
  uint64_t Below(uint64_t n);
  // Uniform in [lo, hi], inclusive; requires lo <= hi.
  uint64_t Uniform(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }
  // Standard normal (Box–Muller).
  double NextGaussian();

  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  uint64_t s_[4];
};

// ---- Zeta ---------------------------------------------------------------------------------------

// zeta(n, theta) = sum_{i=1..n} 1/i^theta. Summed term by term (as YCSB does) for
// n <= kExactZetaLimit, otherwise by Euler–Maclaurin (first terms exact, integral tail plus
// corrections; relative error ~1e-12). theta > 0.
inline constexpr uint64_t kExactZetaLimit = 10'000'000;
double Zeta(uint64_t n, double theta);
// sum_{i=from+1..to} 1/i^theta added to `initial` (YCSB's incremental zeta); to >= from.
double ZetaExtend(uint64_t from, uint64_t to, double theta, double initial);

// ---- Key generators (§3.5–3.8) ------------------------------------------------------------------

class KeyGenerator {
 public:
  virtual ~KeyGenerator() = default;
  // Draws the next keynum.
  virtual uint64_t Next(Rng& rng) = 0;
  // The value last returned by Next (YCSB's lastValue); 0 before the first draw.
  virtual uint64_t Last() const { return last_; }

 protected:
  uint64_t last_ = 0;
};

// Uniform keynum in [lo, hi] inclusive.
class UniformGenerator final : public KeyGenerator {
 public:
  // kInvalidArgument if lo > hi.
  static Result<std::unique_ptr<UniformGenerator>> Create(uint64_t lo, uint64_t hi);
  uint64_t Next(Rng& rng) override;

 private:
  UniformGenerator(uint64_t lo, uint64_t hi) : lo_(lo), hi_(hi) {}
  uint64_t lo_, hi_;
};

// YCSB's ZipfianGenerator (Gray et al., SIGMOD'94): keynums in [base, base+n-1], rank 0 (= base)
// the most popular, P(rank i) ~ 1/(i+1)^theta (approximately: Gray's method over-samples some
// low ranks, see doc/workloads.md).
class ZipfianGenerator final : public KeyGenerator {
 public:
  static constexpr double kDefaultTheta = 0.99;
  // kInvalidArgument if n == 0, theta <= 0, theta == 1 or not finite, or base + n overflows.
  static Result<std::unique_ptr<ZipfianGenerator>> Create(uint64_t base, uint64_t n,
                                                          double theta = kDefaultTheta);
  // As Create, with zeta(n, theta) supplied by the caller (no O(n) precompute).
  static Result<std::unique_ptr<ZipfianGenerator>> CreateWithZetan(uint64_t base, uint64_t n,
                                                                   double theta, double zetan);

  uint64_t Next(Rng& rng) override { return NextWithCount(rng, count_for_zeta_); }
  // YCSB's nextLong(itemcount): a larger item_count grows zetan incrementally and recomputes eta
  // (keeping the ORIGINAL n inside (2/n), YCSB's quirk); a smaller one is ignored for zetan but
  // still scales the sample, as in YCSB. item_count must be >= 1.
  uint64_t NextWithCount(Rng& rng, uint64_t item_count);

  uint64_t base() const { return base_; }
  uint64_t items() const { return items_; }
  uint64_t count_for_zeta() const { return count_for_zeta_; }
  double theta() const { return theta_; }
  double zetan() const { return zetan_; }
  double zeta2() const { return zeta2_; }
  double eta() const { return eta_; }

 private:
  ZipfianGenerator(uint64_t base, uint64_t n, double theta, double zetan);
  double ComputeEta() const;

  uint64_t base_;
  uint64_t items_;           // the original n; stays in eta's (2/n) term
  uint64_t count_for_zeta_;  // the n that zetan_ currently covers
  double theta_, alpha_, zeta2_, half_pow_theta_, zetan_, eta_;
};

// YCSB's ScrambledZipfianGenerator: Zipfian over 0..kItemCount (theta 0.99, precomputed zetan),
// output min + FnvHash64(z) % (max-min+1), so popular keys are spread over [min, max].
class ScrambledZipfianGenerator final : public KeyGenerator {
 public:
  static constexpr uint64_t kItemCount = 10'000'000'000ULL;
  static constexpr double kZetan = 26.46902820178302;  // zeta(1e10, 0.99)
  // kInvalidArgument if min > max or theta is invalid (see ZipfianGenerator). For theta != 0.99
  // zetan is computed by Zeta() (Euler–Maclaurin), an extension over YCSB.
  static Result<std::unique_ptr<ScrambledZipfianGenerator>> Create(
      uint64_t min, uint64_t max, double theta = ZipfianGenerator::kDefaultTheta);
  uint64_t Next(Rng& rng) override;

 private:
  ScrambledZipfianGenerator(uint64_t min, uint64_t item_count,
                            std::unique_ptr<ZipfianGenerator> zipf)
      : min_(min), item_count_(item_count), zipf_(std::move(zipf)) {}
  uint64_t min_, item_count_;  // item_count_ == 0 means the full 2^64 range
  std::unique_ptr<ZipfianGenerator> zipf_;
};

// YCSB's AcknowledgedCounterGenerator: hands out insert keynums start, start+1, ... and tracks
// which are acknowledged (insert completed). LastValue() is the highest keynum k such that every
// keynum <= k is acknowledged (start-1 initially). Thread-safe. At most kWindow keynums may be
// outstanding (handed out, not yet acknowledged) beyond LastValue().
class AcknowledgedCounter {
 public:
  static constexpr uint64_t kWindow = uint64_t{1} << 20;
  // kInvalidArgument if start == 0 (LastValue would be -1).
  static Result<std::shared_ptr<AcknowledgedCounter>> Create(uint64_t start);

  // The next keynum to insert.
  uint64_t Next() { return next_.fetch_add(1, std::memory_order_relaxed); }
  // Marks keynum inserted. kInvalidArgument if keynum was never handed out or is already
  // acknowledged; kResourceExhausted if it is kWindow or more beyond LastValue().
  Status Acknowledge(uint64_t keynum);
  uint64_t LastValue() const { return limit_.load(std::memory_order_acquire); }

  explicit AcknowledgedCounter(uint64_t start)
      : next_(start), limit_(start - 1), window_(kWindow, 0) {}

 private:
  std::atomic<uint64_t> next_;
  std::atomic<uint64_t> limit_;
  std::mutex mu_;
  std::vector<uint8_t> window_;  // guarded by mu_: acknowledged keynums above limit_, by slot
};

// YCSB's SkewedLatestGenerator: max = counter.LastValue(); returns max - zipf.NextWithCount(max),
// the zipf built for the counter's value at creation and grown as inserts are acknowledged. The
// newest acknowledged keynum is the most popular; like YCSB, keynum 0 is never returned once
// max >= 1 (it returns 0 only while max == 0).
class SkewedLatestGenerator final : public KeyGenerator {
 public:
  // kInvalidArgument if counter is null.
  static Result<std::unique_ptr<SkewedLatestGenerator>> Create(
      std::shared_ptr<AcknowledgedCounter> counter);
  uint64_t Next(Rng& rng) override;

 private:
  SkewedLatestGenerator(std::shared_ptr<AcknowledgedCounter> counter,
                        std::unique_ptr<ZipfianGenerator> zipf)
      : counter_(std::move(counter)), zipf_(std::move(zipf)) {}
  std::shared_ptr<AcknowledgedCounter> counter_;
  std::unique_ptr<ZipfianGenerator> zipf_;
};

// YCSB's HotspotIntegerGenerator over [lo, hi]: the hot set is the first
// floor(n * data_fraction) keynums; with probability opn_fraction a draw is uniform in the hot
// set, else uniform in the rest. An empty hot (cold) set sends every draw to the other one.
class HotspotGenerator final : public KeyGenerator {
 public:
  // kInvalidArgument if lo > hi or a fraction is outside [0, 1].
  static Result<std::unique_ptr<HotspotGenerator>> Create(uint64_t lo, uint64_t hi,
                                                          double data_fraction = 0.2,
                                                          double opn_fraction = 0.8);
  uint64_t Next(Rng& rng) override;
  uint64_t hot_count() const { return hot_; }

 private:
  HotspotGenerator(uint64_t lo, uint64_t hot, uint64_t cold, double opn_fraction)
      : lo_(lo), hot_(hot), cold_(cold), opn_fraction_(opn_fraction) {}
  uint64_t lo_, hot_, cold_;  // cold_ == 0 with hot_ == 0 means the full 2^64 range is cold
  double opn_fraction_;
};

// Parameters of MakeKeyGenerator beyond name / record count / theta (YCSB property names).
struct KeyGeneratorOptions {
  uint64_t insert_start = 0;       // insertstart
  uint64_t expected_new_keys = 0;  // see ExpectedNewKeys(); widens the "zipfian" range
  double hotspot_data_fraction = 0.2;
  double hotspot_opn_fraction = 0.8;
  // "latest": the run's shared insert counter; null → a fresh one starting at
  // insert_start + record_count.
  std::shared_ptr<AcknowledgedCounter> counter;
};

// YCSB's expectednewkeys = (int)(operationcount * insertproportion * 2.0).
uint64_t ExpectedNewKeys(uint64_t operation_count, double insert_proportion);

// Builds the request distribution `name` over the record_count loaded keys (§3.5):
//   "uniform"     U[insert_start, insert_start + record_count - 1]
//   "zipfian"     scrambled Zipfian over [insert_start, insert_start + record_count +
//                 expected_new_keys] (inclusive, as YCSB)
//   "zipfian-raw" plain Zipfian over [insert_start, insert_start + record_count - 1], rank 0
//                 (= insert_start) hottest
//   "latest"      skewed-latest over options.counter
//   "hotspot"     hotspot over [insert_start, insert_start + record_count - 1]
// theta applies to the two Zipfian kinds. kInvalidArgument for an unknown name (the message lists
// the valid ones), record_count == 0, or bad parameters.
Result<std::unique_ptr<KeyGenerator>> MakeKeyGenerator(const std::string& name,
                                                       uint64_t record_count, double theta,
                                                       const KeyGeneratorOptions& options = {});

// YCSB's nextKeynum: draws from gen, redrawing while the value exceeds counter.LastValue() so only
// acknowledged (existing) keys are requested. Use with every chooser except "latest" (which never
// exceeds it) during a run that inserts.
uint64_t NextExistingKeynum(KeyGenerator& gen, Rng& rng, const AcknowledgedCounter& counter);

// ---- Operation mix (§3.2, §3.4) -----------------------------------------------------------------

enum class Op : uint8_t { kRead, kUpdate, kInsert, kScan, kReadModifyWrite };
std::string_view OpName(Op op);

// Proportions of each operation; need not sum to 1 (OpChooser normalises).
struct Mix {
  double read = 0, update = 0, insert = 0, scan = 0, rmw = 0;
};

// Parses a mix:
//   "R/W" with integers R + W == 100 (e.g. "100/0", "50/50", "25/75", "10/90", "0/100"):
//         read R %, write W % where a write is an insert-or-update (reported as kUpdate);
//   "A".."F" (either case, optionally "ycsb-" prefixed): the YCSB core workloads of §3.2;
//   "load": 100 % insert.
// kInvalidArgument otherwise.
Result<Mix> ParseMix(std::string_view text);

// Weighted draw over a Mix (YCSB's DiscreteGenerator).
class OpChooser {
 public:
  // kInvalidArgument if a proportion is negative or not finite, or all are zero.
  static Result<OpChooser> Create(const Mix& mix);
  Op Next(Rng& rng) const;

 private:
  OpChooser() = default;
  double cum_[5] = {};  // cumulative normalised proportions, in Op order; cum_[4] == 1
};

// ---- Value sizes (§4) ---------------------------------------------------------------------------

// Draws value sizes in bytes. Specs:
//   "constant:N"   always N
//   "uniform:A:B"  U[A, B], A <= B
//   "udb" | "zippydb" | "up2x"  normal(mean, sd) of the FAST'20 RocksDB workloads' values
//                  (126.7/22, 42.9/26, 46.8/12 B; the SDs are unverified), rounded, clamped to
//                  [1, 4 x mean]
// Sizes are at most kMaxValueSize. kInvalidArgument for anything else.
class ValueSizeGenerator {
 public:
  static constexpr uint64_t kMaxValueSize = uint64_t{1} << 30;
  static Result<ValueSizeGenerator> Create(std::string_view spec);
  uint64_t Next(Rng& rng) const;
  // The distribution's mean before rounding/clamping (the parameter, not a measurement).
  double mean() const { return mean_; }

 private:
  enum class Kind : uint8_t { kConstant, kUniform, kNormal };
  ValueSizeGenerator(Kind kind, uint64_t a, uint64_t b, double mean, double sd)
      : kind_(kind), a_(a), b_(b), mean_(mean), sd_(sd) {}
  Kind kind_;
  uint64_t a_, b_;  // constant: a_; uniform: [a_, b_]; normal: clamp bounds [a_, b_]
  double mean_, sd_;
};

}  // namespace asymnvm::workloads
