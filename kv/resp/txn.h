// MULTI/EXEC's transaction overlay: a Store that reads through to the real store (remembering the
// version of each key it read first) and buffers writes; Commit() applies the buffered writes as
// one conditional batch on those versions, so the transaction is atomic and takes effect only if no
// key it wrote changed since it read it. Used by one EXEC on one thread, then discarded.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "kv/resp/store.h"

namespace asymnvm::kv::resp {

class TxnStore final : public Store {
 public:
  explicit TxnStore(Store* base) : base_(base) {}

  Result<std::optional<StoredValue>> Get(std::string_view key) override;
  Result<uint64_t> Put(std::string_view key, std::string_view value) override;
  Result<std::optional<uint64_t>> PutIf(std::string_view key, std::string_view value,
                                        uint64_t expected_version) override;
  Result<bool> Delete(std::string_view key) override;
  // Inside a transaction INCR goes through the overlay's read-modify-write.
  Result<std::optional<int64_t>> Incr(std::string_view, int64_t) override {
    return std::optional<int64_t>();
  }
  Result<ScanPage> Scan(uint64_t, size_t) override {
    return Status::NotSupported("SCAN inside MULTI");
  }
  uint32_t CommitGroup(std::string_view key) override { return base_->CommitGroup(key); }
  // A multi-key command inside EXEC (its own overlay committing into this one): the writes join
  // this transaction's, each conditional on the version it names.
  Result<bool> CommitBatch(const std::vector<BatchWrite>& writes) override;
  Result<int64_t> DurableReplicas() override { return base_->DurableReplicas(); }

  // Applies the buffered writes atomically. false: a key changed since it was read (re-run).
  Result<bool> Commit();
  bool has_writes() const { return !writes_.empty(); }

 private:
  struct Written {
    std::optional<std::string> value;  // nullopt: deleted
    uint64_t version;                  // overlay version (never a real one)
  };
  // Reads through and remembers the first version seen.
  Result<std::optional<StoredValue>> Load(std::string_view key);

  Store* base_;
  std::map<std::string, uint64_t, std::less<>> read_versions_;  // 0: absent when read
  std::map<std::string, Written, std::less<>> writes_;
  uint64_t next_version_ = (uint64_t{1} << 63) + 1;
};

}  // namespace asymnvm::kv::resp
