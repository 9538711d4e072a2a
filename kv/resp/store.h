// The RESP gateway's view of the key-value store: the few calls its commands are built from. The
// product's only implementation forwards to the KV client API (include/asymnvm/kv.h, kv_store.cc);
// tests substitute a double to exercise parsing and dispatch without servers.
//
// Versions: every stored key has a version > 0 that changes on each write; 0 means "absent" in a
// conditional write. Thread safety: one Store per event-loop thread; calls are synchronous.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::kv::resp {

struct StoredValue {
  std::string value;
  uint64_t version = 0;
};

// One write of an atomic batch: applied only if the key's version equals `expected_version`
// (0 = must be absent); `value` empty-optional deletes.
struct BatchWrite {
  std::string key;
  uint64_t expected_version = 0;
  std::optional<std::string> value;
  bool check_only = false;     // writes nothing: only the version condition (a read it depends on)
  bool unconditional = false;  // no version condition (a type's sub-record: doc/types.md)
};

class Store {
 public:
  virtual ~Store() = default;

  // nullopt when the key is absent.
  virtual Result<std::optional<StoredValue>> Get(std::string_view key) = 0;
  // Unconditional write; the nilext path (commits on the queue's acknowledgement). Returns the
  // new version when the store reports one, else 0.
  virtual Result<uint64_t> Put(std::string_view key, std::string_view value) = 0;
  // Writes iff the key's version equals expected_version (0: must be absent). nullopt when the
  // condition failed (nothing written), else the new version.
  virtual Result<std::optional<uint64_t>> PutIf(std::string_view key, std::string_view value,
                                                uint64_t expected_version) = 0;
  // Atomic add to a decimal int64 value (absent = 0). nullopt when the stored bytes are not a
  // plain decimal or the sum overflows: the caller then falls back to read-modify-write, which
  // reports the precise error.
  virtual Result<std::optional<int64_t>> Incr(std::string_view key, int64_t delta) = 0;
  // Several unconditional writes, each with its own outcome (a pipeline's run of SETs): the
  // store may send them together. Writes of one key keep their order.
  virtual std::vector<Status> PutMany(
      const std::vector<std::pair<std::string_view, std::string_view>>& kvs) {
    std::vector<Status> out;
    for (const auto& [k, v] : kvs) out.push_back(Put(k, v).status());
    return out;
  }
  // Returns whether the key existed.
  virtual Result<bool> Delete(std::string_view key) = 0;

  struct ScanPage {
    std::vector<std::string> keys;
    std::vector<std::string> values;  // parallel to keys (lets SCAN hide expired keys)
    uint64_t next_cursor = 0;         // 0: the scan is complete
  };
  // Keys in an order stable across calls, about `count` per page; cursor 0 starts. A key present
  // for the whole scan is returned at least once.
  virtual Result<ScanPage> Scan(uint64_t cursor, size_t count) = 0;

  // Keys of one commit group can be written by one CommitBatch (MULTI/EXEC, RENAME, ...): in a
  // cluster the group is the key's shard (keys sharing a hash tag `{...}` share it); a store
  // that commits across shards (a stand-alone server, which holds every shard) puts every key
  // in group 0, as a stand-alone Redis.
  virtual uint32_t CommitGroup(std::string_view key) = 0;
  // Applies every write or none, atomically; all keys must be in one commit group. false when a
  // version condition failed (nothing written). NotSupported when the store cannot.
  virtual Result<bool> CommitBatch(const std::vector<BatchWrite>& writes) = 0;
  // How many copies besides the primary hold every write this Store acknowledged (WAIT).
  virtual Result<int64_t> DurableReplicas() = 0;
};

// The co-located fast path (doc/resp.md §Fast path): the primary of some shards runs in the
// gateway's process, and an event loop executes commands on those shards itself, all the commands
// of one loop pass inside one section, which it then commits once (group commit) before any of
// their replies leaves.
class FastSection {
 public:
  virtual ~FastSection() = default;
  // Whether the key's shard is executed here in this section (else the command takes the
  // ordinary path).
  virtual bool Serves(std::string_view key) = 0;
  // Runs calls on keys Serves() accepted, on the calling thread. Their results may only be
  // released after Commit returned OK.
  virtual Store& store() = 0;
  // Makes every write of the section durable with the acknowledgement rule of the ordinary path;
  // an error leaves their outcome unknown.
  virtual Status Commit() = 0;
};

class FastPath {
 public:
  virtual ~FastPath() = default;
  // A cheap hint, without a section: false when the key's shard was recently found not served
  // here (its commands then go straight to the ordinary path).
  virtual bool Likely(std::string_view key) = 0;
  // Blocks while the primary executes another request; the section excludes other sections.
  virtual std::unique_ptr<FastSection> Begin() = 0;
};

}  // namespace asymnvm::kv::resp
