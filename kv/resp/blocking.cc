#include "kv/resp/blocking.h"

#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <functional>

namespace asymnvm::kv::resp {

BlockingKeys::BlockingKeys() {
  for (auto& s : seq_) s.store(0, std::memory_order_relaxed);
}

size_t BlockingKeys::Bucket(std::string_view key) {
  return std::hash<std::string_view>()(key) % kSeqBuckets;
}

uint64_t BlockingKeys::Seq(std::string_view key) const { return seq_[Bucket(key)].load(); }

void BlockingKeys::Bump(std::string_view key) {
  // Sequentially consistent with Park's count: a client that parks after this bump sees it
  // (its re-check), one that parked before is found by the caller.
  seq_[Bucket(key)].fetch_add(1);
}

void BlockingKeys::Signal(std::string_view key) {
  Bump(key);
  if (parked_.load() == 0) return;
  MutexLock l(mu_);
  auto it = lines_.find(std::string(key));
  if (it == lines_.end() || it->second.empty() || it->second.front()->claimed) return;
  it->second.front()->wake(WakeReason::kRetry);
}

std::shared_ptr<Parked> BlockingKeys::ClaimFirst(std::string_view key) {
  if (parked_.load() == 0) return nullptr;
  MutexLock l(mu_);
  auto it = lines_.find(std::string(key));
  if (it == lines_.end() || it->second.empty() || it->second.front()->claimed) return nullptr;
  it->second.front()->claimed = true;
  return it->second.front();
}

bool BlockingKeys::TryClaim(const std::shared_ptr<Parked>& p) {
  MutexLock l(mu_);
  auto id = by_id_.find(p->client_id);
  if (id == by_id_.end() || id->second != p || p->claimed) return false;
  p->claimed = true;
  return true;
}

void BlockingKeys::Release(const std::shared_ptr<Parked>& p) {
  MutexLock l(mu_);
  p->claimed = false;
}

void BlockingKeys::Park(const std::shared_ptr<Parked>& p) {
  MutexLock l(mu_);
  if (!by_id_.emplace(p->client_id, p).second) return;
  for (const auto& k : p->keys) {
    auto& line = lines_[k];
    if (std::find(line.begin(), line.end(), p) == line.end()) line.push_back(p);
  }
  parked_.fetch_add(1);
}

void BlockingKeys::Unpark(const std::shared_ptr<Parked>& p) {
  MutexLock l(mu_);
  auto id = by_id_.find(p->client_id);
  if (id == by_id_.end() || id->second != p) return;
  by_id_.erase(id);
  for (const auto& k : p->keys) {
    auto it = lines_.find(k);
    if (it == lines_.end()) continue;
    auto& line = it->second;
    line.erase(std::remove(line.begin(), line.end(), p), line.end());
    if (line.empty()) lines_.erase(it);
  }
  parked_.fetch_sub(1);
}

bool BlockingKeys::IsFirst(const Parked& p) const {
  MutexLock l(mu_);
  for (const auto& k : p.keys) {
    auto it = lines_.find(k);
    if (it != lines_.end() && !it->second.empty() && it->second.front().get() == &p) return true;
  }
  return false;
}

bool BlockingKeys::Unblock(uint64_t client_id, WakeReason why) {
  MutexLock l(mu_);
  auto it = by_id_.find(client_id);
  if (it == by_id_.end() || it->second->unblocked) return false;
  it->second->unblocked = true;
  it->second->wake(why);
  return true;
}

bool BlockingKeys::IsBlocked(uint64_t client_id) const {
  MutexLock l(mu_);
  return by_id_.count(client_id) != 0;
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string ParseBlockTimeout(std::string_view arg, int64_t* ms) {
  // As Redis's getTimeoutFromObjectOrReply: strtold over the whole argument (no spaces, no NaN).
  static const std::string kNotFloat = "ERR timeout is not a float or out of range";
  if (arg.empty() || arg.size() > 256 || std::isspace(static_cast<unsigned char>(arg[0]))) {
    return kNotFloat;
  }
  std::string s(arg);
  char* end = nullptr;
  errno = 0;
  long double v = std::strtold(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || std::isnan(v)) return kNotFloat;
  v *= 1000.0L;
  if (v > static_cast<long double>(LLONG_MAX)) return "ERR timeout is out of range";
  const long double r = std::ceil(v);
  if (r < 0) return "ERR timeout is negative";
  // Redis also refuses a deadline past LLONG_MAX ms of Unix time.
  if (r > static_cast<long double>(LLONG_MAX - 4'000'000'000'000LL)) {
    return "ERR timeout is out of range";
  }
  *ms = static_cast<int64_t>(r);
  return "";
}

std::vector<std::string> WrittenKeys(std::string_view name, const std::vector<std::string>& argv,
                                     const std::vector<std::string_view>& spec_keys) {
  std::vector<std::string> keys;
  const bool mpop = name.size() >= 4 && (name.substr(name.size() - 4) == "mpop" ||
                                         name.substr(name.size() - 4) == "MPOP");
  if (mpop) {
    // [B]LMPOP / [B]ZMPOP [timeout] numkeys key...: the word before the first key is numkeys.
    const size_t blocking = (name[0] == 'b' || name[0] == 'B') ? 1 : 0;
    const size_t nk = 1 + blocking;
    if (argv.size() > nk) {
      char* end = nullptr;
      long n = std::strtol(argv[nk].c_str(), &end, 10);
      for (long i = 0; n > 0 && i < n && nk + 1 + static_cast<size_t>(i) < argv.size(); ++i) {
        keys.push_back(argv[nk + 1 + static_cast<size_t>(i)]);
      }
    }
    return keys;
  }
  for (auto k : spec_keys) keys.emplace_back(k);
  if (name == "sort" || name == "SORT") {
    // SORT ... STORE destination: the last STORE counts; the arguments of LIMIT (2), GET and BY
    // (1) are skipped, so a value spelled "store" is not taken for the option (sortGetKeys).
    size_t store = 0;
    for (size_t i = 2; i < argv.size(); ++i) {
      auto is = [&](const char* w) { return strcasecmp(argv[i].c_str(), w) == 0; };
      if (is("limit")) {
        i += 2;
      } else if (is("get") || is("by")) {
        i += 1;
      } else if (is("store") && i + 1 < argv.size()) {
        store = ++i;
      }
    }
    if (store != 0) keys.push_back(argv[store]);
  }
  return keys;
}

}  // namespace asymnvm::kv::resp
