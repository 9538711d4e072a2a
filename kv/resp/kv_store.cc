// The Store over the KV client API (include/asymnvm/kv.h). SCAN cursors: doc/resp.md §SCAN.
#include <algorithm>
#include <mutex>
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

class KvClientStore final : public Store {
 public:
  explicit KvClientStore(std::shared_ptr<KvClientSlot> slot) : slot_(std::move(slot)) {}

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
    auto r = cl->Scan(shard, hc, n);
    if (!r.ok()) return r.status();
    ScanPage page;
    page.keys.reserve(r->items.size());
    page.values.reserve(r->items.size());
    for (auto& it : r->items) {
      page.keys.push_back(std::move(it.key));
      page.values.push_back(std::move(it.value));
    }
    if (r->done) {
      page.next_cursor = shard + 1 < shards ? EncodeCursor(shard + 1, 0) : 0;
    } else {
      uint64_t next = r->next_cursor;
      if (((next >> 8) << 8) <= hc) {
        // More than a page of keys share the cursor's top 56 hash bits: step past them (they may
        // be missed by this scan; see doc/resp.md §SCAN).
        LOG_WARN("resp", "SCAN cursor precision: stepping past hash prefix " << (hc >> 8));
        next = ((hc >> 8) + 1) << 8;
        if (next == 0) {
          page.next_cursor = shard + 1 < shards ? EncodeCursor(shard + 1, 0) : 0;
          return page;
        }
      }
      page.next_cursor = EncodeCursor(shard, next);
    }
    return page;
  }
  uint32_t ShardOf(std::string_view key) override {
    auto c = C();
    return c.ok() ? (*c)->ShardOf(key) : 0;  // unreachable store: EXEC then fails on its calls
  }
  Result<bool> CommitBatch(const std::vector<BatchWrite>& writes) override {
    ASYMNVM_ASSIGN_OR_RETURN(kv::Client * cl, C());
    if (writes.empty()) return true;
    // One atomic, version-conditional batch (kv::Client::Batch): every write or none.
    std::vector<kv::BatchOp> ops;
    ops.reserve(writes.size());
    for (const auto& w : writes) ops.push_back({w.key, w.value, w.expected_version, w.check_only});
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
  std::shared_ptr<KvClientSlot> slot_;
  std::shared_ptr<kv::Client> held_;
};

}  // namespace

std::unique_ptr<Store> NewKvClientStore(std::shared_ptr<kv::Client> client) {
  return std::make_unique<KvClientStore>(std::make_shared<KvClientSlot>(std::move(client)));
}

Result<std::unique_ptr<Server>> StartKvGateway(KvGatewayOptions options) {
  // Workers share `kv_clients` clients round-robin (a client multiplexes its callers over one
  // connection per server worker); each opens on first use.
  int n = std::max(1, std::min(options.kv_clients, options.server.workers));
  std::vector<std::shared_ptr<KvClientSlot>> slots;
  for (int i = 0; i < n; ++i) slots.push_back(std::make_shared<KvClientSlot>(options.client));
  auto next = std::make_shared<size_t>(0);
  options.server.store_factory = [slots, next]() -> Result<std::unique_ptr<Store>> {
    return std::unique_ptr<Store>(new KvClientStore(slots[(*next)++ % slots.size()]));
  };
  return Server::Start(std::move(options.server));
}

}  // namespace asymnvm::kv::resp
