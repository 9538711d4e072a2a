#include "workloads/gen/generators.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

namespace asymnvm::workloads {

// ---- Hashing and key names ----------------------------------------------------------------------

uint64_t FnvHash64(uint64_t v) {
  constexpr uint64_t kOffsetBasis = 0xCBF29CE484222325ULL;
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t h = kOffsetBasis;
  // Java shifts a signed long arithmetically, but only the 8 low octets are ever consumed, so a
  // logical shift yields the same octets.
  for (int i = 0; i < 8; ++i) {
    h ^= v & 0xFF;
    v >>= 8;
    h *= kPrime;
  }
  // Math.abs on a signed long: negate when the sign bit is set (INT64_MIN maps to itself).
  if (h >> 63) h = ~h + 1;
  return h;
}

std::string YcsbKeyName(uint64_t keynum, bool hashed, int zeropadding) {
  const uint64_t k = hashed ? FnvHash64(keynum) : keynum;
  const std::string value = std::to_string(static_cast<int64_t>(k));  // Java's Long.toString
  std::string key = "user";
  const int fill = zeropadding - static_cast<int>(value.size());
  if (fill > 0) key.append(static_cast<size_t>(fill), '0');
  key += value;
  return key;
}

// ---- Rng ----------------------------------------------------------------------------------------

namespace {
uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) : seed_(seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = SplitMix64(x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) {
  if (n == 0) return Next();
  // Lemire's nearly-divisionless bounded draw.
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Rng::NextGaussian() {
  double u1 = NextDouble();
  while (u1 <= 0.0) u1 = NextDouble();
  const double u2 = NextDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// ---- Zeta ---------------------------------------------------------------------------------------

double ZetaExtend(uint64_t from, uint64_t to, double theta, double initial) {
  if (to - from <= kExactZetaLimit) {
    double sum = initial;
    for (uint64_t i = from; i < to; ++i) sum += 1.0 / std::pow(static_cast<double>(i + 1), theta);
    return sum;
  }
  return initial + (Zeta(to, theta) - Zeta(from, theta));
}

double Zeta(uint64_t n, double theta) {
  if (n <= kExactZetaLimit) return ZetaExtend(0, n, theta, 0.0);
  // Euler–Maclaurin: sum_{i<m} f(i) + integral_m^n f + (f(m)+f(n))/2 + (f'(n)-f'(m))/12
  //                  - (f'''(n)-f'''(m))/720, f(x) = x^-theta. The next term is O(m^-(theta+5)).
  constexpr uint64_t m = 10'000;
  const double md = static_cast<double>(m), nd = static_cast<double>(n);
  double sum = ZetaExtend(0, m - 1, theta, 0.0);
  const double one_minus = 1.0 - theta;
  const double log_ratio = std::log(nd / md);
  // (n^(1-t) - m^(1-t)) / (1-t) computed without cancellation.
  const double integral =
      std::fabs(one_minus) < 1e-12
          ? log_ratio
          : std::pow(md, one_minus) * std::expm1(one_minus * log_ratio) / one_minus;
  auto f = [&](double x) { return std::pow(x, -theta); };
  auto f1 = [&](double x) { return -theta * std::pow(x, -theta - 1); };
  auto f3 = [&](double x) { return -theta * (theta + 1) * (theta + 2) * std::pow(x, -theta - 3); };
  sum += integral + (f(md) + f(nd)) / 2 + (f1(nd) - f1(md)) / 12 - (f3(nd) - f3(md)) / 720;
  return sum;
}

// ---- Uniform ------------------------------------------------------------------------------------

Result<std::unique_ptr<UniformGenerator>> UniformGenerator::Create(uint64_t lo, uint64_t hi) {
  if (lo > hi) {
    return Status::InvalidArgument("uniform: lo " + std::to_string(lo) + " > hi " +
                                   std::to_string(hi));
  }
  return std::unique_ptr<UniformGenerator>(new UniformGenerator(lo, hi));
}

uint64_t UniformGenerator::Next(Rng& rng) { return last_ = rng.Uniform(lo_, hi_); }

// ---- Zipfian ------------------------------------------------------------------------------------

namespace {
Status CheckTheta(double theta) {
  if (!std::isfinite(theta) || theta <= 0.0 || theta == 1.0) {
    return Status::InvalidArgument("zipfian: theta " + std::to_string(theta) +
                                   " must be finite, > 0 and != 1");
  }
  return Status::Ok();
}
}  // namespace

ZipfianGenerator::ZipfianGenerator(uint64_t base, uint64_t n, double theta, double zetan)
    : base_(base),
      items_(n),
      count_for_zeta_(n),
      theta_(theta),
      alpha_(1.0 / (1.0 - theta)),
      zeta2_(1.0 + std::pow(0.5, theta)),
      half_pow_theta_(std::pow(0.5, theta)),
      zetan_(zetan),
      eta_(0) {
  eta_ = ComputeEta();
}

double ZipfianGenerator::ComputeEta() const {
  return (1.0 - std::pow(2.0 / static_cast<double>(items_), 1.0 - theta_)) /
         (1.0 - zeta2_ / zetan_);
}

Result<std::unique_ptr<ZipfianGenerator>> ZipfianGenerator::CreateWithZetan(uint64_t base,
                                                                            uint64_t n,
                                                                            double theta,
                                                                            double zetan) {
  ASYMNVM_RETURN_IF_ERROR(CheckTheta(theta));
  if (n == 0) return Status::InvalidArgument("zipfian: item count must be >= 1");
  if (base > std::numeric_limits<uint64_t>::max() - (n - 1)) {
    return Status::InvalidArgument("zipfian: base + n - 1 overflows 64 bits");
  }
  if (!std::isfinite(zetan) || zetan < 1.0) {
    return Status::InvalidArgument("zipfian: zetan must be >= 1");
  }
  return std::unique_ptr<ZipfianGenerator>(new ZipfianGenerator(base, n, theta, zetan));
}

Result<std::unique_ptr<ZipfianGenerator>> ZipfianGenerator::Create(uint64_t base, uint64_t n,
                                                                   double theta) {
  ASYMNVM_RETURN_IF_ERROR(CheckTheta(theta));
  if (n == 0) return Status::InvalidArgument("zipfian: item count must be >= 1");
  return CreateWithZetan(base, n, theta, Zeta(n, theta));
}

uint64_t ZipfianGenerator::NextWithCount(Rng& rng, uint64_t item_count) {
  if (item_count > count_for_zeta_) {
    zetan_ = ZetaExtend(count_for_zeta_, item_count, theta_, zetan_);
    count_for_zeta_ = item_count;
    eta_ = ComputeEta();  // YCSB keeps the original n (items_) in the (2/n) term
  }
  const double u = rng.NextDouble();
  const double uz = u * zetan_;
  if (uz < 1.0) return last_ = base_;
  if (uz < 1.0 + half_pow_theta_ && item_count >= 2) return last_ = base_ + 1;
  const double x = static_cast<double>(item_count) * std::pow(eta_ * u - eta_ + 1.0, alpha_);
  // Gray's formula stays below item_count for u < 1; the clamp only guards rounding.
  uint64_t rank = x >= static_cast<double>(item_count) ? item_count - 1 : static_cast<uint64_t>(x);
  if (rank >= item_count) rank = item_count - 1;
  return last_ = base_ + rank;
}

// ---- Scrambled Zipfian --------------------------------------------------------------------------

Result<std::unique_ptr<ScrambledZipfianGenerator>> ScrambledZipfianGenerator::Create(uint64_t min,
                                                                                     uint64_t max,
                                                                                     double theta) {
  if (min > max) {
    return Status::InvalidArgument("scrambled zipfian: min " + std::to_string(min) + " > max " +
                                   std::to_string(max));
  }
  ASYMNVM_RETURN_IF_ERROR(CheckTheta(theta));
  // As YCSB: ZipfianGenerator(0, ITEM_COUNT), i.e. ITEM_COUNT + 1 items.
  const double zetan =
      theta == ZipfianGenerator::kDefaultTheta ? kZetan : Zeta(kItemCount + 1, theta);
  ASYMNVM_ASSIGN_OR_RETURN(auto zipf,
                           ZipfianGenerator::CreateWithZetan(0, kItemCount + 1, theta, zetan));
  return std::unique_ptr<ScrambledZipfianGenerator>(
      new ScrambledZipfianGenerator(min, max - min + 1, std::move(zipf)));
}

uint64_t ScrambledZipfianGenerator::Next(Rng& rng) {
  const uint64_t h = FnvHash64(zipf_->Next(rng));
  return last_ = min_ + (item_count_ == 0 ? h : h % item_count_);
}

// ---- Acknowledged counter and skewed latest
// ------------------------------------------------------

Result<std::shared_ptr<AcknowledgedCounter>> AcknowledgedCounter::Create(uint64_t start) {
  if (start == 0) return Status::InvalidArgument("acknowledged counter: start must be >= 1");
  return std::make_shared<AcknowledgedCounter>(start);
}

Status AcknowledgedCounter::Acknowledge(uint64_t keynum) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t limit = limit_.load(std::memory_order_relaxed);
  if (keynum <= limit || keynum >= next_.load(std::memory_order_relaxed)) {
    return Status::InvalidArgument("acknowledge: keynum " + std::to_string(keynum) +
                                   " was not handed out or is already acknowledged");
  }
  if (keynum - limit > kWindow) {
    return Status::ResourceExhausted("acknowledge: too many unacknowledged insert keynums");
  }
  uint8_t& slot = window_[keynum & (kWindow - 1)];
  if (slot) {
    return Status::InvalidArgument("acknowledge: keynum " + std::to_string(keynum) +
                                   " already acknowledged");
  }
  slot = 1;
  uint64_t new_limit = limit;
  while (window_[(new_limit + 1) & (kWindow - 1)]) {
    window_[(new_limit + 1) & (kWindow - 1)] = 0;
    ++new_limit;
  }
  if (new_limit != limit) limit_.store(new_limit, std::memory_order_release);
  return Status::Ok();
}

Result<std::unique_ptr<SkewedLatestGenerator>> SkewedLatestGenerator::Create(
    std::shared_ptr<AcknowledgedCounter> counter) {
  if (!counter) return Status::InvalidArgument("latest: counter is null");
  const uint64_t max = counter->LastValue();
  ASYMNVM_ASSIGN_OR_RETURN(auto zipf, ZipfianGenerator::Create(0, std::max<uint64_t>(max, 1)));
  return std::unique_ptr<SkewedLatestGenerator>(
      new SkewedLatestGenerator(std::move(counter), std::move(zipf)));
}

uint64_t SkewedLatestGenerator::Next(Rng& rng) {
  const uint64_t max = counter_->LastValue();
  if (max == 0) return last_ = 0;
  return last_ = max - zipf_->NextWithCount(rng, max);
}

// ---- Hotspot ------------------------------------------------------------------------------------

Result<std::unique_ptr<HotspotGenerator>> HotspotGenerator::Create(uint64_t lo, uint64_t hi,
                                                                   double data_fraction,
                                                                   double opn_fraction) {
  if (lo > hi) {
    return Status::InvalidArgument("hotspot: lo " + std::to_string(lo) + " > hi " +
                                   std::to_string(hi));
  }
  if (!(data_fraction >= 0.0 && data_fraction <= 1.0)) {
    return Status::InvalidArgument("hotspot: data fraction must be in [0, 1]");
  }
  if (!(opn_fraction >= 0.0 && opn_fraction <= 1.0)) {
    return Status::InvalidArgument("hotspot: operation fraction must be in [0, 1]");
  }
  const uint64_t interval = hi - lo + 1;  // 0 means 2^64
  const double n = interval == 0 ? 0x1.0p64 : static_cast<double>(interval);
  uint64_t hot = static_cast<uint64_t>(std::min(n * data_fraction, 0x1.0p64 - 2048));
  if (interval != 0 && hot > interval) hot = interval;
  return std::unique_ptr<HotspotGenerator>(
      new HotspotGenerator(lo, hot, interval - hot, opn_fraction));
}

uint64_t HotspotGenerator::Next(Rng& rng) {
  bool hot = rng.NextDouble() < opn_fraction_;
  if (hot_ == 0) {
    hot = false;  // (cold_ == 0 here means the full 64-bit range: Below(0) covers it)
  } else if (cold_ == 0) {
    hot = true;
  }
  if (hot) return last_ = lo_ + rng.Below(hot_);
  return last_ = lo_ + hot_ + rng.Below(cold_);
}

// ---- Factory ------------------------------------------------------------------------------------

uint64_t ExpectedNewKeys(uint64_t operation_count, double insert_proportion) {
  return static_cast<uint64_t>(static_cast<double>(operation_count) * insert_proportion * 2.0);
}

Result<std::unique_ptr<KeyGenerator>> MakeKeyGenerator(const std::string& name,
                                                       uint64_t record_count, double theta,
                                                       const KeyGeneratorOptions& options) {
  if (record_count == 0) return Status::InvalidArgument("key generator: record count is 0");
  const uint64_t lo = options.insert_start;
  if (lo > std::numeric_limits<uint64_t>::max() - record_count) {
    return Status::InvalidArgument("key generator: insert_start + record_count overflows");
  }
  const uint64_t hi = lo + record_count - 1;
  auto up = [](auto r) -> Result<std::unique_ptr<KeyGenerator>> {
    if (!r.ok()) return r.status();
    return std::unique_ptr<KeyGenerator>(std::move(r).value());
  };
  if (name == "uniform") return up(UniformGenerator::Create(lo, hi));
  if (name == "zipfian") {
    if (hi > std::numeric_limits<uint64_t>::max() - 1 - options.expected_new_keys) {
      return Status::InvalidArgument("key generator: zipfian range overflows");
    }
    return up(ScrambledZipfianGenerator::Create(lo, hi + 1 + options.expected_new_keys, theta));
  }
  if (name == "zipfian-raw") return up(ZipfianGenerator::Create(lo, record_count, theta));
  if (name == "latest") {
    std::shared_ptr<AcknowledgedCounter> counter = options.counter;
    if (!counter) counter = std::make_shared<AcknowledgedCounter>(hi + 1);
    return up(SkewedLatestGenerator::Create(std::move(counter)));
  }
  if (name == "hotspot") {
    return up(HotspotGenerator::Create(lo, hi, options.hotspot_data_fraction,
                                       options.hotspot_opn_fraction));
  }
  return Status::InvalidArgument("key generator: unknown distribution '" + name +
                                 "' (valid: uniform, zipfian, zipfian-raw, latest, hotspot)");
}

uint64_t NextExistingKeynum(KeyGenerator& gen, Rng& rng, const AcknowledgedCounter& counter) {
  uint64_t k;
  do {
    k = gen.Next(rng);
  } while (k > counter.LastValue());
  return k;
}

// ---- Operation mix ------------------------------------------------------------------------------

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kRead:
      return "read";
    case Op::kUpdate:
      return "update";
    case Op::kInsert:
      return "insert";
    case Op::kScan:
      return "scan";
    case Op::kReadModifyWrite:
      return "rmw";
  }
  return "?";
}

namespace {
bool ParseUint(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}
}  // namespace

Result<Mix> ParseMix(std::string_view text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t.rfind("ycsb-", 0) == 0) t = t.substr(5);
  struct Named {
    std::string_view name;
    Mix mix;
  };
  static constexpr Named kNamed[] = {
      {"a", {.read = 0.5, .update = 0.5}},
      {"b", {.read = 0.95, .update = 0.05}},
      {"c", {.read = 1.0}},
      {"d", {.read = 0.95, .insert = 0.05}},
      {"e", {.insert = 0.05, .scan = 0.95}},
      {"f", {.read = 0.5, .rmw = 0.5}},
      {"load", {.insert = 1.0}},
  };
  for (const auto& n : kNamed) {
    if (t == n.name) return n.mix;
  }
  Mix m;
  const size_t slash = t.find('/');
  uint64_t r = 0, w = 0;
  if (slash != std::string::npos && ParseUint(std::string_view(t).substr(0, slash), r) &&
      ParseUint(std::string_view(t).substr(slash + 1), w) && r <= 100 && w <= 100 && r + w == 100) {
    m.read = static_cast<double>(r) / 100.0;
    m.update = static_cast<double>(w) / 100.0;
    return m;
  }
  return Status::InvalidArgument("mix: '" + std::string(text) +
                                 "' is neither R/W with R + W = 100 (e.g. 50/50) nor a YCSB "
                                 "workload letter A..F nor 'load'");
}

Result<OpChooser> OpChooser::Create(const Mix& mix) {
  const double w[5] = {mix.read, mix.update, mix.insert, mix.scan, mix.rmw};
  double sum = 0;
  for (double x : w) {
    if (!std::isfinite(x) || x < 0) {
      return Status::InvalidArgument("op chooser: proportions must be finite and >= 0");
    }
    sum += x;
  }
  if (!(sum > 0)) return Status::InvalidArgument("op chooser: all proportions are 0");
  OpChooser c;
  double acc = 0;
  for (int i = 0; i < 5; ++i) {
    acc += w[i] / sum;
    c.cum_[i] = acc;
  }
  // Trailing zero-weight ops keep cum == previous; make the last nonzero op absorb rounding.
  for (int i = 4; i >= 0; --i) {
    if (w[i] > 0) {
      for (int j = i; j < 5; ++j) c.cum_[j] = 1.0;
      break;
    }
  }
  return c;
}

Op OpChooser::Next(Rng& rng) const {
  const double u = rng.NextDouble();
  for (int i = 0; i < 4; ++i) {
    if (u < cum_[i]) return static_cast<Op>(i);
  }
  return Op::kReadModifyWrite;
}

// ---- Value sizes --------------------------------------------------------------------------------

Result<ValueSizeGenerator> ValueSizeGenerator::Create(std::string_view spec) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("value size '" + std::string(spec) + "': " + std::string(why) +
                                   " (valid: constant:N, uniform:A:B, udb, zippydb, up2x)");
  };
  struct Named {
    std::string_view name;
    double mean, sd;
  };
  // FAST'20 value-size means; SDs unverified (see doc/workloads.md).
  static constexpr Named kNamed[] = {{"udb", 126.7, 22}, {"zippydb", 42.9, 26}, {"up2x", 46.8, 12}};
  for (const auto& n : kNamed) {
    if (spec == n.name) {
      return ValueSizeGenerator(Kind::kNormal, 1, static_cast<uint64_t>(4 * n.mean), n.mean, n.sd);
    }
  }
  if (spec.rfind("constant:", 0) == 0) {
    uint64_t n = 0;
    if (!ParseUint(spec.substr(9), n)) return bad("N is not a non-negative integer");
    if (n > kMaxValueSize) return bad("N exceeds 1 GiB");
    return ValueSizeGenerator(Kind::kConstant, n, n, static_cast<double>(n), 0);
  }
  if (spec.rfind("uniform:", 0) == 0) {
    const std::string_view rest = spec.substr(8);
    const size_t colon = rest.find(':');
    uint64_t a = 0, b = 0;
    if (colon == std::string_view::npos || !ParseUint(rest.substr(0, colon), a) ||
        !ParseUint(rest.substr(colon + 1), b)) {
      return bad("expected uniform:A:B with non-negative integers");
    }
    if (a > b) return bad("A > B");
    if (b > kMaxValueSize) return bad("B exceeds 1 GiB");
    return ValueSizeGenerator(Kind::kUniform, a, b,
                              (static_cast<double>(a) + static_cast<double>(b)) / 2, 0);
  }
  return bad("unknown spec");
}

uint64_t ValueSizeGenerator::Next(Rng& rng) const {
  switch (kind_) {
    case Kind::kConstant:
      return a_;
    case Kind::kUniform:
      return rng.Uniform(a_, b_);
    case Kind::kNormal: {
      const double x = std::round(mean_ + sd_ * rng.NextGaussian());
      return static_cast<uint64_t>(std::clamp(x, static_cast<double>(a_), static_cast<double>(b_)));
    }
  }
  return a_;
}

}  // namespace asymnvm::workloads
