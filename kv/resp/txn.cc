#include "kv/resp/txn.h"

namespace asymnvm::kv::resp {

Result<std::optional<StoredValue>> TxnStore::Load(std::string_view key) {
  auto w = writes_.find(key);
  if (w != writes_.end()) {
    if (!w->second.value) return std::optional<StoredValue>();
    return std::optional<StoredValue>(StoredValue{*w->second.value, w->second.version});
  }
  auto r = base_->Get(key);
  if (!r.ok()) return r.status();
  auto it = read_versions_.find(key);
  if (it == read_versions_.end()) {
    read_versions_.emplace(std::string(key), r->has_value() ? (*r)->version : 0);
  } else if ((r->has_value() ? (*r)->version : 0) != it->second) {
    // The key changed between two reads of this transaction: report the first state's version so
    // that Commit fails and the transaction re-runs.
    it->second = ~uint64_t{0};
  }
  return r;
}

Result<std::optional<StoredValue>> TxnStore::Get(std::string_view key) { return Load(key); }

Result<uint64_t> TxnStore::Put(std::string_view key, std::string_view value) {
  auto cur = Load(key);  // records the version the batch is conditional on
  if (!cur.ok()) return cur.status();
  uint64_t v = next_version_++;
  writes_[std::string(key)] = Written{std::string(value), v};
  return v;
}

Result<std::optional<uint64_t>> TxnStore::PutIf(std::string_view key, std::string_view value,
                                                uint64_t expected_version) {
  auto cur = Load(key);
  if (!cur.ok()) return cur.status();
  uint64_t have = cur->has_value() ? (*cur)->version : 0;
  if (have != expected_version) return std::optional<uint64_t>();
  uint64_t v = next_version_++;
  writes_[std::string(key)] = Written{std::string(value), v};
  return std::optional<uint64_t>(v);
}

Result<bool> TxnStore::Delete(std::string_view key) {
  auto cur = Load(key);
  if (!cur.ok()) return cur.status();
  bool existed = cur->has_value();
  writes_[std::string(key)] = Written{std::nullopt, next_version_++};
  return existed;
}

Result<bool> TxnStore::CommitBatch(const std::vector<BatchWrite>& writes) {
  for (const auto& w : writes) {
    auto cur = Load(w.key);
    if (!cur.ok()) return cur.status();  // also records the version EXEC's batch is conditional on
    if (w.unconditional) continue;       // a type's sub-record (store.h BatchWrite)
    if ((cur->has_value() ? (*cur)->version : 0) != w.expected_version) return false;
  }
  for (const auto& w : writes) {
    if (!w.check_only) writes_[w.key] = Written{w.value, next_version_++};
  }
  return true;
}

Result<bool> TxnStore::Commit() {
  if (writes_.empty()) return true;
  std::vector<BatchWrite> batch;
  batch.reserve(writes_.size());
  for (auto& [key, w] : writes_) {
    auto rv = read_versions_.find(key);
    uint64_t expected = rv == read_versions_.end() ? 0 : rv->second;
    if (expected == ~uint64_t{0}) return false;
    batch.push_back(BatchWrite{key, expected, w.value});
  }
  // The keys it only read: their versions are conditions too, so EXEC is serializable within
  // the shard (as Redis's MULTI/EXEC, which runs alone), not just atomic in its writes.
  for (const auto& [key, version] : read_versions_) {
    if (writes_.count(key) > 0) continue;
    if (version == ~uint64_t{0}) return false;
    batch.push_back(BatchWrite{key, version, std::nullopt, true});
  }
  return base_->CommitBatch(batch);
}

}  // namespace asymnvm::kv::resp
