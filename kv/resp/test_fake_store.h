// TEST DOUBLE ONLY (never linked into the product): an in-memory Store for the parser, dispatch
// and server tests, with shards by key hash and a failure switch. The product's only Store is the
// adapter onto the KV client API (kv_store.cc).
#pragma once

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "asymnvm/kv.h"
#include "kv/resp/store.h"

namespace asymnvm::kv::resp::testing {

class FakeStore final : public Store {
 public:
  explicit FakeStore(uint32_t shards = 2) : shards_(shards) {}

  Result<std::optional<StoredValue>> Get(std::string_view key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_) return Status::Unavailable("fake store down");
    if (before_get_) before_get_(key);
    auto it = map_.find(key);
    if (it == map_.end()) return std::optional<StoredValue>();
    return std::optional<StoredValue>(it->second);
  }
  Result<uint64_t> Put(std::string_view key, std::string_view value) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_) return Status::Unavailable("fake store down");
    auto& e = map_[std::string(key)];
    e.value = std::string(value);
    e.version = ++clock_;
    ++puts_;
    return e.version;
  }
  Result<std::optional<uint64_t>> PutIf(std::string_view key, std::string_view value,
                                        uint64_t expected) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_) return Status::Unavailable("fake store down");
    if (before_put_if_) before_put_if_(key);
    auto it = map_.find(key);
    uint64_t have = it == map_.end() ? 0 : it->second.version;
    if (have != expected) return std::optional<uint64_t>();
    auto& e = map_[std::string(key)];
    e.value = std::string(value);
    e.version = ++clock_;
    return std::optional<uint64_t>(e.version);
  }
  Result<std::optional<int64_t>> Incr(std::string_view key, int64_t delta) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_) return Status::Unavailable("fake store down");
    auto it = map_.find(key);
    long long v = 0;
    if (it != map_.end()) {
      const std::string& s = it->second.value;
      char* end = nullptr;
      errno = 0;
      v = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || errno != 0 || *end != '\0' || s.size() > 20) return std::optional<int64_t>();
    }
    if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta)) {
      return std::optional<int64_t>();
    }
    auto& e = map_[std::string(key)];
    e.value = std::to_string(v + delta);
    e.version = ++clock_;
    ++incrs_;
    return std::optional<int64_t>(v + delta);
  }
  Result<bool> Delete(std::string_view key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_) return Status::Unavailable("fake store down");
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    map_.erase(it);
    return true;
  }
  Result<ScanPage> Scan(uint64_t cursor, size_t count) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_) return Status::Unavailable("fake store down");
    ScanPage page;
    auto it = map_.begin();
    std::advance(it, std::min<size_t>(cursor, map_.size()));
    uint64_t pos = cursor;
    for (; it != map_.end() && page.keys.size() < count; ++it, ++pos) {
      page.keys.push_back(it->first);
      page.values.push_back(it->second.value);
    }
    page.next_cursor = it == map_.end() ? 0 : pos;
    return page;
  }
  uint32_t CommitGroup(std::string_view key) override {
    return static_cast<uint32_t>(std::hash<std::string_view>()(kv::HashTag(key)) % shards_);
  }
  Result<bool> CommitBatch(const std::vector<BatchWrite>& writes) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_) return Status::Unavailable("fake store down");
    if (before_commit_) before_commit_();
    if (writes.empty() || writes.size() > kv::kMaxBatchOps) {  // as kv::Client::Batch
      return Status::InvalidArgument("kv batch: 1.." + std::to_string(kv::kMaxBatchOps) + " ops");
    }
    for (const auto& w : writes) {
      auto it = map_.find(w.key);
      uint64_t have = it == map_.end() ? 0 : it->second.version;
      if (!w.unconditional && have != w.expected_version) return false;
    }
    for (const auto& w : writes) {
      if (w.check_only) continue;
      if (w.value) {
        auto& e = map_[w.key];
        e.value = *w.value;
        e.version = ++clock_;
      } else {
        map_.erase(w.key);
      }
    }
    ++batches_;
    return true;
  }
  Result<int64_t> DurableReplicas() override { return replicas_; }

  void set_fail(bool f) {
    std::lock_guard<std::mutex> l(mu_);
    fail_ = f;
  }
  // Runs inside PutIf before the version check (under the lock): lets a test change a key
  // "concurrently" by writing map() directly.
  void set_before_put_if(std::function<void(std::string_view)> f) { before_put_if_ = std::move(f); }
  void set_before_commit(std::function<void()> f) { before_commit_ = std::move(f); }
  // Runs inside Get before the lookup (under the lock): lets a test move the whole map to a later
  // state between two reads of one command, as a concurrent writer would.
  void set_before_get(std::function<void(std::string_view)> f) { before_get_ = std::move(f); }
  std::map<std::string, StoredValue, std::less<>>& map() { return map_; }
  void Bump(const std::string& key) { map_[key].version = ++clock_; }
  int64_t puts() const { return puts_; }
  int64_t batches() const { return batches_; }
  int64_t incrs() const { return incrs_; }
  int64_t replicas_ = 2;

 private:
  std::mutex mu_;
  uint32_t shards_;
  bool fail_ = false;
  uint64_t clock_ = 0;
  int64_t puts_ = 0, batches_ = 0, incrs_ = 0;
  std::function<void(std::string_view)> before_put_if_;
  std::function<void()> before_commit_;
  std::function<void(std::string_view)> before_get_;
  std::map<std::string, StoredValue, std::less<>> map_;
};

// Forwards to one shared Store (a gateway gives each loop or worker thread its own Store
// object; tests share one FakeStore among them).
class SharedStore final : public Store {
 public:
  explicit SharedStore(Store* s) : s_(s) {}
  Result<std::optional<StoredValue>> Get(std::string_view k) override { return s_->Get(k); }
  Result<uint64_t> Put(std::string_view k, std::string_view v) override { return s_->Put(k, v); }
  Result<std::optional<uint64_t>> PutIf(std::string_view k, std::string_view v,
                                        uint64_t e) override {
    return s_->PutIf(k, v, e);
  }
  Result<bool> Delete(std::string_view k) override { return s_->Delete(k); }
  Result<std::optional<int64_t>> Incr(std::string_view k, int64_t d) override {
    return s_->Incr(k, d);
  }
  Result<ScanPage> Scan(uint64_t c, size_t n) override { return s_->Scan(c, n); }
  uint32_t CommitGroup(std::string_view k) override { return s_->CommitGroup(k); }
  Result<bool> CommitBatch(const std::vector<BatchWrite>& w) override { return s_->CommitBatch(w); }
  Result<int64_t> DurableReplicas() override { return s_->DurableReplicas(); }

 private:
  Store* s_;
};

}  // namespace asymnvm::kv::resp::testing
