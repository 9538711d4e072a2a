// The Store over the KV client API (include/asymnvm/kv.h). SCAN cursors: doc/resp.md §SCAN.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "kv/resp/gateway.h"

namespace asymnvm::kv::resp {
namespace {

constexpr int kShardBits = 7;  // SCAN cursor: [0][shard:7][hash cursor >> 8 : 56] + 1
constexpr uint64_t kHashMask = (uint64_t{1} << 56) - 1;

uint64_t EncodeCursor(uint32_t shard, uint64_t hash_cursor) {
  return 1 + ((static_cast<uint64_t>(shard) << 56) | (hash_cursor >> 8));
}

}  // namespace

// The gateway's KV client, opened on first use and reopened after a failed open, so that a server
// serves RESP at once even while its cluster is still forming (the first commands then wait for
// it, bounded by ClientOptions::retry_deadline, or get -TRYAGAIN).
class KvClientSlot {
 public:
  explicit KvClientSlot(kv::ClientOptions o) : options_(std::move(o)) {}
  explicit KvClientSlot(std::shared_ptr<kv::Client> c) : client_(std::move(c)) {}
  Result<std::shared_ptr<kv::Client>> Get() {
    MutexLock l(mu_);
    if (client_) return client_;
    auto c = kv::Client::Open(options_);
    if (!c.ok()) {
      return Status(StatusCode::kUnavailable, "RESP gateway: KV client: " + c.status().ToString(),
                    0, true);
    }
    client_ = std::shared_ptr<kv::Client>(std::move(c).value());
    return client_;
  }

 private:
  Mutex mu_;
  kv::ClientOptions options_ ASYMNVM_GUARDED_BY(mu_);
  std::shared_ptr<kv::Client> client_ ASYMNVM_GUARDED_BY(mu_);
};

namespace {

// The gateway's batch as the KV API's: each write conditional on its version unless marked
// unconditional (a type's sub-record).
std::vector<kv::BatchOp> ToBatchOps(const std::vector<BatchWrite>& writes) {
  std::vector<kv::BatchOp> ops;
  ops.reserve(writes.size());
  for (const auto& w : writes) {
    std::optional<uint64_t> expected;
    if (!w.unconditional) expected = w.expected_version;
    ops.push_back({w.key, w.value, expected, w.check_only});
  }
  return ops;
}

class KvClientStore final : public Store {
 public:
  // local: the KV server of this process, which commits batches across shards while it leads
  // every shard unreplicated (kv::Server::CommitsAcrossShards); null: batches go through the
  // client, within one shard.
  explicit KvClientStore(std::shared_ptr<KvClientSlot> slot, kv::Server* local = nullptr)
      : slot_(std::move(slot)), local_(local) {}

  Result<std::optional<StoredValue>> Get(std::string_view key) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    auto r = cl->Get(key);
    if (!r.ok()) return r.status();
    if (!r->found) return std::optional<StoredValue>();
    return std::optional<StoredValue>(StoredValue{std::move(r->value), r->version});
  }
  Result<uint64_t> Put(std::string_view key, std::string_view value) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    ASYMNVM_RETURN_IF_ERROR(cl->Put(key, value));
    return uint64_t{0};
  }
  std::vector<Status> PutMany(
      const std::vector<std::pair<std::string_view, std::string_view>>& kvs) override {
    auto cl = C();
    if (!cl.ok()) return std::vector<Status>(kvs.size(), cl.status());
    return (*cl)->PutMany(kvs);
  }
  Result<std::optional<uint64_t>> PutIf(std::string_view key, std::string_view value,
                                        uint64_t expected) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    auto r = cl->PutIf(key, value, expected);
    if (!r.ok()) return r.status();
    if (!r->applied) return std::optional<uint64_t>();
    return std::optional<uint64_t>(r->version);
  }
  Result<std::optional<int64_t>> Incr(std::string_view key, int64_t delta) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    auto r = cl->Incr(key, delta);
    if (!r.ok()) {
      // Not a plain decimal (a TTL frame, text) or overflow: the caller's read-modify-write
      // decides and words the error.
      if (r.status().code() == StatusCode::kInvalidArgument) return std::optional<int64_t>();
      return r.status();
    }
    return std::optional<int64_t>(r->value);
  }
  Result<bool> Delete(std::string_view key) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    auto r = cl->Delete(key);
    if (!r.ok()) return r.status();
    return r->existed;
  }
  Result<ScanPage> Scan(uint64_t cursor, size_t count) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    uint32_t shards = cl->shard_count();
    if (shards > (1u << kShardBits)) {
      return Status::NotSupported("SCAN over more than 128 shards");
    }
    uint32_t shard = 0;
    uint64_t hc = 0;
    if (cursor != 0) {
      uint64_t v = cursor - 1;
      shard = static_cast<uint32_t>(v >> 56);
      hc = (v & kHashMask) << 8;
      if (shard >= shards) return Status::InvalidArgument("invalid cursor");
    }
    uint32_t n = static_cast<uint32_t>(std::min<size_t>(std::max<size_t>(count, 1), kMaxScanCount));
    // The KV cursor is the next key hash (64 bits); ours keeps its top 56. A page therefore ends
    // at a hash boundary the cursor can name exactly: items at or past the last item's 256-hash
    // bucket are left for the next page, so no key is returned twice on a static keyspace
    // (doc/resp.md §SCAN). A page whose every item shares one bucket asks for more.
    for (;;) {
      auto r = cl->Scan(shard, hc, n);
      if (!r.ok()) return r.status();
      ScanPage page;
      uint64_t boundary = 0;  // items with a hash below it go out now
      bool whole = r->done;
      if (!whole) {
        boundary = (r->next_cursor >> 8) << 8;
        if (boundary <= hc) {
          if (n < kMaxScanCount) {
            n = static_cast<uint32_t>(std::min<size_t>(size_t{n} * 4, kMaxScanCount));
            continue;
          }
          // More than kMaxScanCount keys in one bucket of 256 hashes: step past it (they may be
          // missed by this scan; never seen with 64-bit hashes).
          LOG_WARN("resp", "SCAN cursor precision: stepping past hash prefix " << (hc >> 8));
          whole = true;
          boundary = ((hc >> 8) + 1) << 8;
          if (boundary == 0) boundary = UINT64_MAX;
        }
      }
      page.keys.reserve(r->items.size());
      page.values.reserve(r->items.size());
      for (auto& it : r->items) {
        if (!r->done && !whole && kv::KeyHash(it.key) >= boundary) continue;
        page.keys.push_back(std::move(it.key));
        page.values.push_back(std::move(it.value));
      }
      if (r->done || (whole && boundary == UINT64_MAX)) {
        page.next_cursor = shard + 1 < shards ? EncodeCursor(shard + 1, 0) : 0;
      } else {
        page.next_cursor = EncodeCursor(shard, boundary);
      }
      return page;
    }
  }
  uint32_t CommitGroup(std::string_view key) override {
    // This process leads every shard, unreplicated: any keys commit together.
    if (local_ != nullptr && local_->CommitsAcrossShards()) return 0;
    auto c = C();
    return c.ok() ? (*c)->ShardOf(key) : 0;  // unreachable store: EXEC then fails on its calls
  }
  Result<bool> CommitBatch(const std::vector<BatchWrite>& writes) override {
    if (writes.empty()) return true;
    // One atomic, version-conditional batch (kv::Client::Batch): every write or none.
    std::vector<kv::BatchOp> ops = ToBatchOps(writes);
    if (local_ != nullptr && local_->CommitsAcrossShards()) {
      const uint32_t shards = local_->geometry().shards;
      for (const auto& op : ops) {
        if (kv::ShardOf(op.key, shards) != kv::ShardOf(ops[0].key, shards)) return CommitLocal(ops);
      }
    }
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    ASYMNVM_ASSIGN_OR_RETURN(kv::BatchReply r, cl->Batch(ops));
    return r.applied;
  }

  Result<int64_t> DurableReplicas() override {
    // Every acknowledged write is on at least this many backups (kv::Client::MinSyncedBackups).
    auto cl = C();
    if (!cl.ok()) return cl.status();
    auto n = (*cl)->MinSyncedBackups();
    if (!n.ok()) return n.status();
    return static_cast<int64_t>(*n);
  }

 private:
  // The client, opened on first use (see KvClientSlot).
  Result<kv::Client*> C() {
    auto c = slot_->Get();
    if (!c.ok()) return c.status();
    held_ = *c;
    return held_.get();
  }
  // A batch across shards, on this process's server itself (doc/resp.md §Transactions across
  // shards): one section holds every OQ worker, writes the batch as one multi-shard batch
  // (kv::LocalSection::Batch, atomic across a crash) and syncs it before the reply. A shard whose
  // OQ worker has executed requests it has not synced yet is not served by a section (their
  // results must not be read or overwritten before they are durable); that worker syncs before
  // it replies, so the section is simply tried again.
  Result<bool> CommitLocal(const std::vector<kv::BatchOp>& ops) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (uint32_t attempt = 0;; attempt++) {
      std::unique_ptr<kv::LocalSection> section = local_->BeginLocal();
      bool served = true;
      for (const auto& op : ops) served = served && section->Serves(section->ShardOf(op.key));
      if (served) {
        auto r = section->Batch(ops);
        Status synced = section->Commit();
        if (!r.ok()) return r.status();
        ASYMNVM_RETURN_IF_ERROR(synced);
        return r->applied;
      }
      ASYMNVM_RETURN_IF_ERROR(section->Commit());  // nothing written: releases the workers
      section.reset();
      if (!local_->CommitsAcrossShards()) {  // the map changed: a shard moved or got a backup
        ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
        ASYMNVM_ASSIGN_OR_RETURN(kv::BatchReply r, cl->Batch(ops));  // within one shard, or refused
        return r.applied;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return Status(StatusCode::kUnavailable,
                      "RESP gateway: the shards' workers kept results unsynced for 10 s", 0, true);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20u << std::min<uint32_t>(attempt, 6)));
    }
  }

  std::shared_ptr<KvClientSlot> slot_;
  std::shared_ptr<kv::Client> held_;
  kv::Server* local_ = nullptr;
};

// The resp::Store view of a section of the co-located KV server (kv::LocalSection).
class LocalSectionStore final : public Store {
 public:
  explicit LocalSectionStore(kv::LocalSection* s) : s_(s) {}

  Result<std::optional<StoredValue>> Get(std::string_view key) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::GetReply r, s_->Get(key));
    if (!r.found) return std::optional<StoredValue>();
    return std::optional<StoredValue>(StoredValue{std::move(r.value), r.version});
  }
  Result<uint64_t> Put(std::string_view key, std::string_view value) override {
    ASYMNVM_RETURN_IF_ERROR(s_->Put(key, value));
    return uint64_t{0};
  }
  Result<std::optional<uint64_t>> PutIf(std::string_view key, std::string_view value,
                                        uint64_t expected) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::PutIfReply r, s_->PutIf(key, value, expected));
    if (!r.applied) return std::optional<uint64_t>();
    return std::optional<uint64_t>(r.version);
  }
  Result<std::optional<int64_t>> Incr(std::string_view key, int64_t delta) override {
    auto r = s_->Incr(key, delta);
    if (!r.ok()) {
      // As KvClientStore: not a plain decimal or overflow; the read-modify-write words it.
      if (r.status().code() == StatusCode::kInvalidArgument) return std::optional<int64_t>();
      return r.status();
    }
    return std::optional<int64_t>(r->value);
  }
  Result<bool> Delete(std::string_view key) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::DeleteReply r, s_->Delete(key));
    return r.existed;
  }
  // The loops send only commands on keys to the fast path (server.cc FastCandidate): these
  // whole-keyspace and transaction calls never reach it.
  Result<ScanPage> Scan(uint64_t, size_t) override {
    return Status::NotSupported("RESP fast path: SCAN takes the KV client");
  }
  // As KvClientStore's: any keys commit together while the server leads every shard
  // unreplicated.
  uint32_t CommitGroup(std::string_view key) override {
    return s_->CommitsAcrossShards() ? 0 : s_->ShardOf(key);
  }
  // One atomic batch in the section (kv::LocalSection::Batch): durable with the section's sync.
  Result<bool> CommitBatch(const std::vector<BatchWrite>& writes) override {
    if (writes.empty()) return true;
    ASYMNVM_ASSIGN_OR_RETURN(kv::BatchReply r, s_->Batch(ToBatchOps(writes)));
    return r.applied;
  }
  Result<int64_t> DurableReplicas() override {
    return Status::NotSupported("RESP fast path: WAIT takes the KV client");
  }

 private:
  kv::LocalSection* s_;
};

class LocalFastPath;

class LocalFastSection final : public FastSection {
 public:
  LocalFastSection(std::unique_ptr<kv::LocalSection> s, LocalFastPath* path)
      : s_(std::move(s)), store_(s_.get()), path_(path) {}
  bool Serves(std::string_view key) override;
  Store& store() override { return store_; }
  Status Commit() override { return s_->Commit(); }

 private:
  std::unique_ptr<kv::LocalSection> s_;
  LocalSectionStore store_;
  LocalFastPath* path_;
};

class LocalFastPath final : public FastPath {
 public:
  explicit LocalFastPath(kv::Server* server)
      : server_(server),
        shards_(server->geometry().shards),
        remote_until_(std::make_unique<std::atomic<int64_t>[]>(shards_)) {}

  bool Likely(std::string_view key) override {
    return NowMs() >= remote_until_[kv::ShardOf(key, shards_)].load(std::memory_order_relaxed);
  }
  std::unique_ptr<FastSection> Begin() override {
    return std::make_unique<LocalFastSection>(server_->BeginLocal(), this);
  }
  // A section's verdict on a shard: a shard not served here is not tried again for a while (a
  // failover or rejoin may make it ours later, so the hint expires).
  void Note(uint32_t shard, bool served) {
    if (shard >= shards_) return;
    remote_until_[shard].store(served ? 0 : NowMs() + kRemoteHintMs, std::memory_order_relaxed);
  }

 private:
  static constexpr int64_t kRemoteHintMs = 100;
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  kv::Server* server_;
  uint32_t shards_;
  std::unique_ptr<std::atomic<int64_t>[]> remote_until_;  // per shard: steady ms
};

bool LocalFastSection::Serves(std::string_view key) {
  const uint32_t shard = s_->ShardOf(key);
  const bool served = s_->Serves(shard);
  path_->Note(shard, served);
  return served;
}

}  // namespace

std::shared_ptr<FastPath> NewLocalFastPath(kv::Server* server) {
  return std::make_shared<LocalFastPath>(server);
}

std::unique_ptr<Store> NewKvClientStore(std::shared_ptr<kv::Client> client) {
  return std::make_unique<KvClientStore>(std::make_shared<KvClientSlot>(std::move(client)));
}

Result<std::unique_ptr<Server>> StartKvGateway(KvGatewayOptions options) {
  if (options.local != nullptr) {
    options.server.fast_path = NewLocalFastPath(options.local);
    // The fast path executes outside the server's Ordered Queue: a PUT this gateway sends through
    // the queue must therefore be executed (and durable) before it is acknowledged, never a
    // nilext request or a server-bypass publish the server has not executed yet.
    options.client.nilext_puts = false;
    options.client.bypass_threshold = kv::kNoBypass;
  }
  // Workers share `kv_clients` clients round-robin (a client multiplexes its callers over one
  // connection per server worker); each opens on first use.
  int n = std::max(1, std::min(options.kv_clients, options.server.workers));
  std::vector<std::shared_ptr<KvClientSlot>> slots;
  for (int i = 0; i < n; ++i) slots.push_back(std::make_shared<KvClientSlot>(options.client));
  auto next = std::make_shared<size_t>(0);
  // A server that leads every shard unreplicated commits batches across shards itself
  // (KvClientStore::CommitLocal); its gateway sends no nilext PUT (above), which a section could
  // otherwise overtake.
  kv::Server* across = options.local;
  options.server.store_factory = [slots, next, across]() -> Result<std::unique_ptr<Store>> {
    return std::unique_ptr<Store>(new KvClientStore(slots[(*next)++ % slots.size()], across));
  };
  return Server::Start(std::move(options.server));
}

}  // namespace asymnvm::kv::resp
