// The Rowan-KV client library (include/asymnvm/kv.h; routing and retries in doc/kv.md §Client).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/kv.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/oq/oq.h"
#include "kv/format.h"
#include "kv/rdmp.h"
#include "kv/server.h"
#include "kv/shard_map.h"
#include "kv/store.h"
#include "kv/wire.h"

namespace asymnvm::kv {
namespace {

constexpr size_t kChunk = 56 * 1024;  // bytes of a large value per request

Status CheckKey(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("kv: empty key (keys are 1..1024 bytes)");
  if (key.size() > kMaxKeySize) {
    return Status::InvalidArgument("kv: key of " + std::to_string(key.size()) +
                                   " bytes is over the limit of " + std::to_string(kMaxKeySize));
  }
  return Status::Ok();
}

Status CheckValue(std::string_view value) {
  if (value.size() > kMaxValueSize) {
    return Status::InvalidArgument("kv: value of " + std::to_string(value.size()) +
                                   " bytes is over the limit of " + std::to_string(kMaxValueSize));
  }
  return Status::Ok();
}

bool NotPrimary(const Status& s) { return wire::RefusedBeforeApply(s); }

bool ConnectionLost(const Status& s) {
  return s.code() == StatusCode::kConnectionError || s.code() == StatusCode::kRnrRetryExceeded ||
         s.code() == StatusCode::kTimedOut || s.code() == StatusCode::kUnavailable;
}

// The OQ client's mark for a request that certainly never left (fabric/oq/oq.h, Submit): a
// connection error marked retryable. (A timeout is retryable too but its outcome is unknown.)
bool NeverSent(const Status& s) {
  return s.retryable() &&
         (s.code() == StatusCode::kConnectionError || s.code() == StatusCode::kRnrRetryExceeded);
}

std::span<const uint8_t> Bytes(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

// One server: its address and a (re)connectable OQ client shared by the calling threads.
struct Conn {
  std::string address;
  Mutex mu;
  std::shared_ptr<oq::Client> oq ASYMNVM_GUARDED_BY(mu);  // null: not connected / broken
  uint32_t workers ASYMNVM_GUARDED_BY(mu) = 0;
  // One connection attempt at a time, made without `mu`: the threads that need the server
  // meanwhile wait for that attempt's outcome (`connected` signalled) instead of each making
  // its own after it. To a stopped server (SIGSTOP: the kernel still accepts, nobody answers)
  // an attempt takes the whole timeout; made in turn under `mu`, N threads waited N timeouts
  // before any could re-read the map (pause-primary: 300 ms per probe thread, in series).
  bool connecting ASYMNVM_GUARDED_BY(mu) = false;
  uint64_t attempts ASYMNVM_GUARDED_BY(mu) = 0;  // finished attempts
  Status last_failure ASYMNVM_GUARDED_BY(mu);    // of the latest finished attempt
  // When an attempt last timed out: for one timeout after it, Connect answers that failure at
  // once (the server is stopped or overloaded; the caller re-reads the map meanwhile).
  std::chrono::steady_clock::time_point timed_out_at ASYMNVM_GUARDED_BY(mu);
  std::condition_variable connected;
  // RDMP (learned from the server's Info on first use; reset with the connection).
  bool info_known ASYMNVM_GUARDED_BY(mu) = false;
  std::string bypass_address ASYMNVM_GUARDED_BY(mu);  // empty: the server offers no bypass
  fabric::RegionDescriptor region ASYMNVM_GUARDED_BY(mu);
  // channels no thread is using
  std::vector<std::unique_ptr<BypassChannel>> idle ASYMNVM_GUARDED_BY(mu);
};

// The largest slot a bypass Put writes or a Get reads.
constexpr size_t kChannelBuffer =
    format::BypassFootprint(kMaxKeySize, kMaxValueSize) + format::kAlign;

class ClientImpl : public Client {
 public:
  explicit ClientImpl(const ClientOptions& o) : o_(o) {}

  Status Init() {
    if (o_.coordinator.empty() == o_.servers.empty()) {
      return Status::InvalidArgument(
          "kv client: give exactly one of coordinator (a URI) or servers (addresses)");
    }
    ASYMNVM_ASSIGN_OR_RETURN(fabric_, fabric::Fabric::Open(o_.fabric));
    ASYMNVM_ASSIGN_OR_RETURN(pd_, fabric_->AllocPd());
    const auto deadline = std::chrono::steady_clock::now() + o_.retry_deadline;
    if (!o_.coordinator.empty()) {
      // Cluster mode: routing follows the shard map the configuration manager keeps.
      cluster_ = true;
      map_path_ = "/asymnvm/kv/" + o_.cluster + "/map";
      for (;;) {
        Status st = RefreshMap();
        if (st.ok()) break;
        if (st.code() != StatusCode::kNotFound || std::chrono::steady_clock::now() >= deadline) {
          return Status::Unavailable("kv client: no shard map at " + map_path_ + " on " +
                                     o_.coordinator + ": " + st.ToString());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      ReaderMutexLock l(route_mu_);
      shards_ = map_.shards;
      return Status::Ok();
    }
    // Explicit servers: shard s is served by servers[s % n]; all must agree on the shard count.
    for (const auto& addr : o_.servers) {
      Conn& conn = GetConn(addr);
      Status last;
      for (;;) {
        auto oq = Connect(conn);
        if (oq.ok()) {
          std::vector<uint8_t> payload, resp;
          wire::EncodeRequest(wire::Request{}, &payload);
          last = (*oq)->Call(0, wire::kInfo, Bytes(payload), &resp);
          if (last.ok()) {
            auto r = wire::DecodeResponse(Bytes(resp));
            if (!r.ok()) return r.status();
            const uint32_t shards = static_cast<uint32_t>(r->arg);
            if (shards == 0) return Status::ProtocolError("kv client: server reports 0 shards");
            if (shards_ != 0 && shards != shards_) {
              return Status::InvalidArgument("kv client: servers disagree on the shard count (" +
                                             std::to_string(shards_) + " vs " +
                                             std::to_string(shards) + " at " + addr + ")");
            }
            shards_ = shards;
            if (r->flag == 1) cluster_member_ = true;
            break;
          }
          Broken(conn, *oq);
        } else {
          last = oq.status();
        }
        if (last.code() == StatusCode::kPermissionDenied ||
            last.code() == StatusCode::kProtocolError ||
            last.code() == StatusCode::kInvalidArgument ||
            std::chrono::steady_clock::now() >= deadline) {
          return last.WithContext("kv client: server " + addr);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return Status::Ok();
  }

  Status Put(std::string_view key, std::string_view value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    ASYMNVM_RETURN_IF_ERROR(CheckValue(value));
    if (value.size() >= o_.bypass_threshold) {
      bool done = false;
      Status st = PutBypass(key, value, &done);
      if (done) return st;
      rdmp_.fallbacks++;
    }
    if (value.size() > kMaxInlineValue) {
      auto r = PutLarge(key, value, false, 0);
      return r.ok() ? Status::Ok() : r.status();
    }
    const uint32_t shard = ShardOf(key);
    std::vector<uint8_t> payload;
    wire::EncodeRequest({wire::kPut, shard, 0, 0, 0, 0, key, value}, &payload);
    return Run(shard, false, [&](oq::Client& c, uint32_t workers) {
      if (Replicated(shard) || !o_.nilext_puts) {
        // Replicated shards: a PUT commits when durable on every backup, which only the
        // primary's software response can say (doc/kv.md §Commit points).
        std::vector<uint8_t> resp;
        return c.Call(Store::WorkerOf(shard, workers), wire::kPut, Bytes(payload), &resp);
      }
      return c.Submit(Store::WorkerOf(shard, workers), wire::kPut, Bytes(payload));
    });
  }

  std::vector<Status> PutMany(
      std::span<const std::pair<std::string_view, std::string_view>> kvs) override {
    std::vector<Status> out(kvs.size());
    // Runs of fast-path puts (inline, below the bypass threshold, unreplicated shard) are posted
    // together, grouped by server; any other put ends the run and goes alone, so that puts of
    // one key keep their order.
    std::map<std::string, std::vector<size_t>> run;
    auto flush = [&] {
      std::vector<size_t> again;
      for (auto& [address, items] : run) {
        Conn& c = GetConn(address);
        auto oq = Connect(c);
        if (!oq.ok()) {
          again.insert(again.end(), items.begin(), items.end());  // Put retries and reports
          continue;
        }
        uint32_t workers;
        {
          MutexLock l(c.mu);
          workers = c.workers;
        }
        std::vector<std::vector<uint8_t>> payloads(items.size());
        std::vector<oq::Client::Outgoing> reqs(items.size());
        for (size_t j = 0; j < items.size(); j++) {
          const auto& [key, value] = kvs[items[j]];
          const uint32_t shard = ShardOf(key);
          wire::EncodeRequest({wire::kPut, shard, 0, 0, 0, 0, key, value}, &payloads[j]);
          reqs[j] = {Store::WorkerOf(shard, workers), wire::kPut, Bytes(payloads[j])};
        }
        std::vector<Status> st = (*oq)->SubmitMany(reqs);
        bool broken = false;
        for (size_t j = 0; j < items.size(); j++) {
          out[items[j]] = st[j];
          if (st[j].ok()) continue;
          if (ConnectionLost(st[j])) broken = true;
          // Never sent or refused as "not primary": nothing was applied, Put may resend it
          // (on one connection, once a request is unsent so is every later one).
          if (NeverSent(st[j]) || NotPrimary(st[j])) again.push_back(items[j]);
        }
        if (broken) Broken(c, *oq);
      }
      run.clear();
      std::sort(again.begin(), again.end());
      for (size_t i : again) out[i] = Put(kvs[i].first, kvs[i].second);
    };
    for (size_t i = 0; i < kvs.size(); i++) {
      const auto& [key, value] = kvs[i];
      out[i] = CheckKey(key);
      if (out[i].ok()) out[i] = CheckValue(value);
      if (!out[i].ok()) continue;
      const uint32_t shard = ShardOf(key);
      const std::string address = Route(shard);
      if (value.size() > kMaxInlineValue || value.size() >= o_.bypass_threshold ||
          Replicated(shard) || !o_.nilext_puts || address.empty()) {
        flush();
        out[i] = Put(key, value);
      } else {
        run[address].push_back(i);
      }
    }
    flush();
    return out;
  }

  Result<GetReply> Get(std::string_view key) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    const uint32_t shard = ShardOf(key);
    if (o_.bypass_threshold != kNoBypass) {
      bool done = false;
      auto r = GetBypass(key, &done);
      if (done) return r;
    }
    for (int attempt = 0;; attempt++) {
      GetReply out;
      uint64_t total = 0;
      bool restart = false;
      do {
        std::vector<uint8_t> payload, resp;
        wire::EncodeRequest({wire::kGet,
                             shard,
                             0,
                             static_cast<uint32_t>(out.value.size()),
                             out.version,
                             0,
                             key,
                             {}},
                            &payload);
        ASYMNVM_RETURN_IF_ERROR(Run(shard, true, [&](oq::Client& c, uint32_t workers) {
          return c.Call(Store::WorkerOf(shard, workers), wire::kGet, Bytes(payload), &resp);
        }));
        ASYMNVM_ASSIGN_OR_RETURN(wire::Response r, wire::DecodeResponse(Bytes(resp)));
        if (r.flag == 0 && out.version == 0) return GetReply{};  // absent
        if (r.flag != 1 || (out.version != 0 && r.version != out.version)) {
          restart = true;  // changed between chunks: read again from the start
          break;
        }
        if (r.count != out.value.size() || r.body.size() + out.value.size() > r.arg ||
            r.arg > kMaxValueSize) {
          return Status::Corruption("kv get: reply chunk does not fit the value");
        }
        out.found = true;
        out.version = r.version;
        total = r.arg;
        out.value.append(r.body);
        if (r.body.empty() && out.value.size() < total) {
          return Status::Corruption("kv get: empty chunk before the end of the value");
        }
      } while (out.value.size() < total);
      if (!restart) return out;
      if (attempt > 100) return Status::Aborted("kv get: value kept changing while read");
    }
  }

  Result<DeleteReply> Delete(std::string_view key) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    const uint32_t shard = ShardOf(key);
    std::vector<uint8_t> payload, resp;
    wire::EncodeRequest({wire::kDelete, shard, 0, 0, 0, 0, key, {}}, &payload);
    ASYMNVM_RETURN_IF_ERROR(Run(shard, false, [&](oq::Client& c, uint32_t workers) {
      return c.Call(Store::WorkerOf(shard, workers), wire::kDelete, Bytes(payload), &resp);
    }));
    ASYMNVM_ASSIGN_OR_RETURN(wire::Response r, wire::DecodeResponse(Bytes(resp)));
    return DeleteReply{r.flag == 1, r.version};
  }

  Result<PutIfReply> PutIf(std::string_view key, std::string_view value,
                           uint64_t expected_version) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    ASYMNVM_RETURN_IF_ERROR(CheckValue(value));
    if (value.size() > kMaxInlineValue) return PutLarge(key, value, true, expected_version);
    const uint32_t shard = ShardOf(key);
    std::vector<uint8_t> payload, resp;
    wire::EncodeRequest({wire::kPutIf, shard, 0, 0, expected_version, 0, key, value}, &payload);
    ASYMNVM_RETURN_IF_ERROR(Run(shard, false, [&](oq::Client& c, uint32_t workers) {
      return c.Call(Store::WorkerOf(shard, workers), wire::kPutIf, Bytes(payload), &resp);
    }));
    ASYMNVM_ASSIGN_OR_RETURN(wire::Response r, wire::DecodeResponse(Bytes(resp)));
    return PutIfReply{r.flag == 1, r.version};
  }

  Result<IncrReply> Incr(std::string_view key, int64_t delta) override {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    const uint32_t shard = ShardOf(key);
    std::vector<uint8_t> payload, resp;
    wire::EncodeRequest({wire::kIncr, shard, 0, 0, static_cast<uint64_t>(delta), 0, key, {}},
                        &payload);
    ASYMNVM_RETURN_IF_ERROR(Run(shard, false, [&](oq::Client& c, uint32_t workers) {
      return c.Call(Store::WorkerOf(shard, workers), wire::kIncr, Bytes(payload), &resp);
    }));
    ASYMNVM_ASSIGN_OR_RETURN(wire::Response r, wire::DecodeResponse(Bytes(resp)));
    return IncrReply{static_cast<int64_t>(r.arg), r.version};
  }

  Result<BatchReply> Batch(const std::vector<BatchOp>& ops) override {
    if (ops.empty() || ops.size() > kMaxBatchOps) {
      return Status::InvalidArgument("kv batch: 1.." + std::to_string(kMaxBatchOps) +
                                     " operations");
    }
    const uint32_t shard = ShardOf(ops[0].key);
    std::vector<wire::BatchOpView> views;
    for (size_t i = 0; i < ops.size(); i++) {
      ASYMNVM_RETURN_IF_ERROR(CheckKey(ops[i].key));
      if (ShardOf(ops[i].key) != shard) {
        return Status::InvalidArgument(
                   "kv batch: keys in different shards (" + std::to_string(shard) + " and " +
                   std::to_string(ShardOf(ops[i].key)) + "); a batch is atomic within one shard")
            .WithSubCode(StatusSubCode::kCrossShard);
      }
      for (size_t j = 0; j < i; j++) {
        if (ops[j].key == ops[i].key)
          return Status::InvalidArgument("kv batch: a key appears twice");
      }
      wire::BatchOpView v;
      v.key = ops[i].key;
      v.is_delete = !ops[i].value;
      if (ops[i].value) v.value = *ops[i].value;
      v.conditional = ops[i].expected_version.has_value();
      v.check_only = ops[i].check_only;
      if (v.check_only) v.is_delete = false;
      if (v.check_only && !v.conditional) {
        return Status::InvalidArgument("kv batch: a check_only op needs expected_version");
      }
      v.expected_version = ops[i].expected_version.value_or(0);
      views.push_back(v);
    }
    std::string encoded;
    wire::EncodeBatch(views, &encoded);
    if (encoded.size() + wire::kRequestHeader > kMaxRequest) {
      return Status::InvalidArgument("kv batch: " + std::to_string(encoded.size()) +
                                     " bytes of keys and values; one batch carries at most " +
                                     std::to_string(kMaxRequest - wire::kRequestHeader));
    }
    std::vector<uint8_t> payload, resp;
    wire::EncodeRequest({wire::kBatch, shard, 0, 0, 0, 0, {}, encoded}, &payload);
    ASYMNVM_RETURN_IF_ERROR(Run(shard, false, [&](oq::Client& c, uint32_t workers) {
      return c.Call(Store::WorkerOf(shard, workers), wire::kBatch, Bytes(payload), &resp);
    }));
    ASYMNVM_ASSIGN_OR_RETURN(wire::Response r, wire::DecodeResponse(Bytes(resp)));
    if (r.count != ops.size() || r.body.size() != 8 * ops.size()) {
      return Status::Corruption("kv batch: reply does not match the batch");
    }
    BatchReply out;
    out.applied = r.flag == 1;
    for (size_t i = 0; i < ops.size(); i++) {
      out.versions.push_back(GetLe64(reinterpret_cast<const uint8_t*>(r.body.data()) + 8 * i));
    }
    return out;
  }

  Result<ScanReply> Scan(uint32_t shard, uint64_t cursor, uint32_t count) override {
    if (shard >= shards_) {
      return Status::InvalidArgument("kv scan: shard " + std::to_string(shard) + " out of range (" +
                                     std::to_string(shards_) + " shards)");
    }
    if (count == 0 || count > kMaxScanCount) {
      return Status::InvalidArgument("kv scan: count must be 1.." + std::to_string(kMaxScanCount));
    }
    std::vector<uint8_t> payload, resp;
    wire::EncodeRequest({wire::kScan, shard, 0, 0, cursor, count, {}, {}}, &payload);
    ASYMNVM_RETURN_IF_ERROR(Run(shard, true, [&](oq::Client& c, uint32_t workers) {
      return c.Call(0, wire::kScan, Bytes(payload), &resp);
    }));
    ASYMNVM_ASSIGN_OR_RETURN(wire::Response r, wire::DecodeResponse(Bytes(resp)));
    ScanReply out;
    out.done = r.flag == 1;
    out.next_cursor = r.arg;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(r.body.data());
    size_t left = r.body.size();
    for (uint32_t i = 0; i < r.count; i++) {
      if (left < wire::kScanItemHeader) return Status::Corruption("kv scan: short item");
      const size_t klen = p[0] | (p[1] << 8);
      const bool truncated = p[2] != 0;
      uint32_t vlen = 0;
      uint64_t ver = 0;
      for (int k = 0; k < 4; k++) vlen |= uint32_t{p[4 + k]} << (8 * k);
      for (int k = 0; k < 8; k++) ver |= uint64_t{p[8 + k]} << (8 * k);
      const size_t carried = truncated ? 0 : vlen;
      if (left < wire::kScanItemHeader + klen + carried) {
        return Status::Corruption("kv scan: item runs past the reply");
      }
      ScanItem item;
      item.key.assign(reinterpret_cast<const char*>(p + wire::kScanItemHeader), klen);
      item.value.assign(reinterpret_cast<const char*>(p + wire::kScanItemHeader + klen), carried);
      item.version = ver;
      p += wire::kScanItemHeader + klen + carried;
      left -= wire::kScanItemHeader + klen + carried;
      if (truncated) {
        // A large value: read it whole (it may have changed since; the scan then reports the
        // newer version, as if the key had been written just before this read).
        ASYMNVM_ASSIGN_OR_RETURN(GetReply g, Get(item.key));
        if (!g.found) continue;
        item.value = std::move(g.value);
        item.version = g.version;
      }
      out.items.push_back(std::move(item));
    }
    return out;
  }

  fabric::Counters counters() const override {
    fabric::Counters sum;
    MutexLock l(conns_mu_);
    for (auto& [addr, c] : conns_) {
      MutexLock cl(c->mu);
      if (c->oq) sum += c->oq->counters();
    }
    return sum;
  }

  RdmpCounters rdmp_counters() const override {
    return {rdmp_.bypass_puts.load(), rdmp_.bypass_gets.load(), rdmp_.fallbacks.load(),
            rdmp_.bypass_bytes.load(), rdmp_.round_trips.load()};
  }

  uint32_t shard_count() const override { return shards_; }
  uint32_t ShardOf(std::string_view key) const override { return kv::ShardOf(key, shards_); }

  Result<uint32_t> MinSyncedBackups() override {
    if (!cluster_) return uint32_t{0};
    ASYMNVM_RETURN_IF_ERROR(RefreshMap());
    ReaderMutexLock l(route_mu_);
    if (map_.assignment.empty()) return uint32_t{0};
    uint32_t min = UINT32_MAX;
    for (const auto& a : map_.assignment) {
      uint32_t synced = 0;
      for (const auto& b : a.backups) synced += b.synced ? 1 : 0;
      min = std::min(min, synced);
    }
    return min;
  }

 private:
  // The coordinator session, opened (with the map watch) on first use and again after it expired:
  // a client cut off from ZooKeeper longer than its session timeout otherwise never read a map
  // again (the partition campaign's clients, once their host was isolated, stalled for good).
  Result<std::shared_ptr<coord::Coordinator>> Coord() {
    MutexLock l(coord_mu_);
    if (coord_ && coord_->state() != coord::SessionState::kExpired) return coord_;
    if (coord_) LOG_WARN("kv", "client: coordinator session expired; opening a new one");
    coord_.reset();  // its watch thread ends here (the callback below touches only members
                     // declared before coord_)
    ASYMNVM_ASSIGN_OR_RETURN(std::shared_ptr<coord::Coordinator> c,
                             coord::Coordinator::Open(o_.coordinator));
    auto watch = c->Watch(map_path_, coord::WatchKind::kNode, [this](const auto&) {
      {
        MutexLock wl(map_wait_mu_);
        map_changes_++;
      }
      map_changed_cv_.notify_all();
    });
    if (!watch.ok()) return watch.status().WithContext("kv client: watching " + map_path_);
    coord_ = c;
    return c;
  }

  Status RefreshMap() {
    ASYMNVM_ASSIGN_OR_RETURN(std::shared_ptr<coord::Coordinator> coord, Coord());
    auto node = coord->Get(map_path_);
    if (!node.ok()) return node.status();
    ASYMNVM_ASSIGN_OR_RETURN(ShardMap m, ShardMap::Decode(node->data));
    WriterMutexLock l(route_mu_);
    if (m.epoch >= map_.epoch) map_ = std::move(m);
    return Status::Ok();
  }

  uint64_t MapChanges() {
    MutexLock l(map_wait_mu_);
    return map_changes_;
  }

  // Sleeps `backoff`, or less when the map changes after `seen` was read (cluster mode).
  void WaitBackoff(std::chrono::milliseconds backoff, uint64_t seen) {
    if (!cluster_) {
      std::this_thread::sleep_for(backoff);
      return;
    }
    MutexLock l(map_wait_mu_);
    map_changed_cv_.wait_for(l.native(), backoff,
                             [&]() ASYMNVM_REQUIRES(map_wait_mu_) { return map_changes_ != seen; });
  }

  // The address serving `shard` now ("" when the map names no reachable server).
  std::string Route(uint32_t shard) {
    ReaderMutexLock l(route_mu_);
    if (!cluster_) return o_.servers[shard % o_.servers.size()];
    if (shard >= map_.assignment.size()) return "";
    auto it = map_.servers.find(map_.assignment[shard].primary);
    return it == map_.servers.end() ? "" : it->second.oq;
  }

  // Whether a PUT to `shard` must take the software-response path (committed when durable on the
  // backups) rather than be nilext. Without a coordinator the client has no map: a server that
  // reported itself a cluster member may have backups for any shard. With rf > 1 a shard that
  // lost every backup for a while (two of three servers dead) gains them back and its primary may
  // then move (failover, resharding, spreading primaries back): a nilext PUT sent on a map that
  // showed no backups could reach the old primary after the move and be lost, so only rf 1
  // shards take nilext PUTs.
  bool Replicated(uint32_t shard) {
    if (!cluster_) return cluster_member_;
    ReaderMutexLock l(route_mu_);
    return shard < map_.assignment.size() &&
           (map_.rf > 1 || !map_.assignment[shard].backups.empty());
  }

  Conn& GetConn(const std::string& address) {
    MutexLock l(conns_mu_);
    auto& c = conns_[address];
    if (!c) {
      c = std::make_unique<Conn>();
      c->address = address;
    }
    return *c;
  }

  Result<std::shared_ptr<oq::Client>> Connect(Conn& c) {
    MutexLock l(c.mu);
    if (c.oq) return c.oq;
    if (c.connecting) {
      // Another thread is connecting: its outcome is this call's (a connection it made and
      // that broke at once: this thread makes the next attempt).
      const uint64_t attempt = c.attempts;
      c.connected.wait(l.native(), [&]() ASYMNVM_REQUIRES(c.mu) { return c.attempts != attempt; });
      if (c.oq) return c.oq;
      if (!c.last_failure.ok()) return c.last_failure;
      if (c.connecting) {
        return Status(StatusCode::kConnectionError,
                      "kv client: connection to " + c.address + " broke while connecting", 0,
                      /*retryable=*/true);
      }
    }
    if (c.last_failure.code() == StatusCode::kTimedOut &&
        std::chrono::steady_clock::now() - c.timed_out_at < o_.timeout) {
      return c.last_failure;
    }
    c.connecting = true;
    l.unlock();
    Result<std::shared_ptr<oq::Client>> r = ConnectOnce(c.address);
    l.lock();
    c.connecting = false;
    c.attempts++;
    if (r.ok()) {
      c.workers = (*r)->server().workers;
      c.oq = *r;
      c.last_failure = Status::Ok();
    } else {
      c.last_failure = r.status();
      if (r.status().code() == StatusCode::kTimedOut)
        c.timed_out_at = std::chrono::steady_clock::now();
    }
    c.connected.notify_all();
    return r;
  }

  Result<std::shared_ptr<oq::Client>> ConnectOnce(const std::string& address) {
    oq::ClientOptions co;
    co.fabric = fabric_.get();
    co.pd = pd_.get();
    co.server_address = address;
    co.durable = true;
    co.flush_calls = false;  // GET / conditional writes commit on their response (fabric/oq/oq.h)
    co.window = 16;
    co.timeout = o_.timeout;
    ASYMNVM_ASSIGN_OR_RETURN(std::unique_ptr<oq::Client> oq, oq::Client::Connect(co));
    if (!oq->server().durable) {
      return Status::ProtocolError("kv client: " + address + " is not a durable asymnvm-kv server");
    }
    return std::shared_ptr<oq::Client>(std::move(oq));
  }

  void Broken(Conn& c, const std::shared_ptr<oq::Client>& which) {
    MutexLock l(c.mu);
    if (c.oq == which) {
      c.oq.reset();
      c.info_known = false;  // a restarted server has a new bypass endpoint
      c.idle.clear();
    }
  }

  // ---- RDMP server-bypass (doc/kv.md §RDMP) ----

  // The connection to the shard's primary, its bypass endpoint learned, and a channel to it.
  // Null channel: no bypass now (the caller takes the server-reply path).
  struct BypassRoute {
    Conn* conn = nullptr;
    std::shared_ptr<oq::Client> oq;
    uint32_t workers = 0;
    std::unique_ptr<BypassChannel> chan;
    uint64_t doorbells0 = 0;  // the channel's count when this operation took it
  };
  BypassRoute RouteBypass(uint32_t shard) {
    BypassRoute r;
    const std::string address = Route(shard);
    if (address.empty()) return r;
    Conn& c = GetConn(address);
    auto oq = Connect(c);
    if (!oq.ok()) return r;
    std::string ep;
    fabric::RegionDescriptor region;
    {
      MutexLock l(c.mu);
      if (c.oq != *oq) return r;
      r.workers = c.workers;
      if (c.info_known) {
        if (c.bypass_address.empty()) return r;
        if (!c.idle.empty()) {
          r.chan = std::move(c.idle.back());
          c.idle.pop_back();
          r.doorbells0 = r.chan->doorbells();
          r.conn = &c;
          r.oq = *oq;
          return r;
        }
        ep = c.bypass_address;
        region = c.region;
      }
    }
    if (ep.empty()) {  // first use of this connection: ask for the bypass endpoint
      std::vector<uint8_t> payload, resp;
      wire::EncodeRequest(wire::Request{}, &payload);
      if (!(*oq)->Call(0, wire::kInfo, Bytes(payload), &resp).ok()) return r;
      auto info = wire::DecodeResponse(Bytes(resp));
      if (!info.ok()) return r;
      constexpr size_t kUuid = 36;
      const std::string_view body = info->body;
      MutexLock l(c.mu);
      if (c.oq != *oq) return r;
      c.info_known = true;
      if (body.size() > kUuid + fabric::RegionDescriptor::kEncodedSize) {
        auto d =
            fabric::RegionDescriptor::Decode(reinterpret_cast<const uint8_t*>(body.data()) + kUuid,
                                             fabric::RegionDescriptor::kEncodedSize);
        if (d.ok()) {
          c.region = *d;
          c.bypass_address.assign(body.substr(kUuid + fabric::RegionDescriptor::kEncodedSize));
        }
      }
      if (c.bypass_address.empty()) return r;
      ep = c.bypass_address;
      region = c.region;
    }
    auto chan =
        BypassChannel::Connect(fabric_.get(), pd_.get(), ep, region, kChannelBuffer, o_.timeout);
    if (!chan.ok()) {
      LOG_WARN("kv", "rdmp: " << chan.status().ToString() << "; using server-reply");
      return r;
    }
    r.conn = &c;
    r.oq = *oq;
    r.chan = std::move(chan).value();
    return r;
  }

  void ReturnChannel(BypassRoute& r) {
    if (!r.chan) return;
    rdmp_.round_trips += r.chan->doorbells() - r.doorbells0;
    if (r.chan->broken()) return;
    MutexLock l(r.conn->mu);
    if (r.conn->oq == r.oq) r.conn->idle.push_back(std::move(r.chan));
  }

  // *done = false: nothing was published and nothing will be that the caller's server-reply Put
  // does not supersede (the caller then takes that path).
  Status PutBypass(std::string_view key, std::string_view value, bool* done) {
    const uint32_t shard = ShardOf(key);
    if (Replicated(shard)) return Status::Ok();  // bypass is for unreplicated shards
    BypassRoute r = RouteBypass(shard);
    if (!r.chan) return Status::Ok();
    const uint32_t worker = Store::WorkerOf(shard, r.workers);
    const uint32_t crc = Crc32c(value.data(), value.size());
    std::vector<uint8_t> payload, resp;
    wire::EncodeRequest({wire::kReserve,
                         shard,
                         0,
                         0,
                         static_cast<uint64_t>(value.size()) | (uint64_t{crc} << 32),
                         r.chan->token(),
                         key,
                         {}},
                        &payload);
    Status st = r.oq->Call(worker, wire::kReserve, Bytes(payload), &resp);
    if (!st.ok()) {
      if (ConnectionLost(st)) Broken(*r.conn, r.oq);
      return Status::Ok();  // a reserved slot nobody writes is settled by the server
    }
    auto rr = wire::DecodeResponse(Bytes(resp));
    if (!rr.ok() || rr->flag != 1) return Status::Ok();
    const uint64_t slot = rr->arg, version = rr->version;
    const size_t flags = format::BypassFlagOffset(key.size(), value.size());
    if (rr->count != format::BypassFootprint(key.size(), value.size()) ||
        slot + rr->count > r.chan->region().length) {
      return Status::Ok();
    }
    // Value, durable; then the persist flag, durable (RDMP-KV §III-B: the flag is written only
    // once every other byte of the slot is persistent) — one doorbell (BypassChannel).
    const std::span<const uint8_t> bytes{reinterpret_cast<const uint8_t*>(value.data()),
                                         value.size()};
    const uint64_t value_at = slot + format::kEntryHeaderSize + key.size();
    if (o_.TEST_bypass_stop_after == 1) {
      if (r.chan->WriteDurable(value_at, bytes).ok()) {
        *done = true;
        return Status::Aborted("kv put: stopped after writing the value (test hook)");
      }
      return Status::Ok();
    }
    st = r.chan->WriteValueThenFlag(value_at, bytes, slot + flags, format::PersistWord(version));
    if (!st.ok()) return Status::Ok();  // flag maybe set: a later settle publishes the same value
    if (o_.TEST_bypass_stop_after == 2) {
      *done = true;
      return Status::Aborted("kv put: stopped after writing the persist flag (test hook)");
    }
    *done = true;
    payload.clear();
    wire::EncodeRequest({wire::kPublish, shard, 0, 0, slot, version, key, {}}, &payload);
    // The value is durable and flagged: from here on it is this Put's outcome (a lost publish
    // is completed by the server's settle or at its restart), so no fallback.
    st = r.oq->Submit(worker, wire::kPublish, Bytes(payload));
    if (!st.ok()) {
      if (ConnectionLost(st)) Broken(*r.conn, r.oq);
      return st;
    }
    rdmp_.bypass_puts++;
    rdmp_.bypass_bytes += value.size();
    ReturnChannel(r);
    return Status::Ok();
  }

  Result<GetReply> GetBypass(std::string_view key, bool* done) {
    const uint32_t shard = ShardOf(key);
    BypassRoute r = RouteBypass(shard);
    if (!r.chan) return GetReply{};
    const uint32_t worker = Store::WorkerOf(shard, r.workers);
    std::vector<uint8_t> payload, resp;
    const uint64_t threshold = o_.bypass_threshold;
    wire::EncodeRequest({wire::kGet, shard, wire::kFlagLocate, 0, 0, threshold, key, {}}, &payload);
    Status st = r.oq->Call(worker, wire::kGet, Bytes(payload), &resp);
    if (!st.ok()) {
      if (ConnectionLost(st)) Broken(*r.conn, r.oq);
      return GetReply{};  // the server-reply path retries
    }
    auto rr = wire::DecodeResponse(Bytes(resp));
    if (!rr.ok()) return GetReply{};
    if (rr->flag != wire::kFlagLocated) {
      // Small or absent: the reply is the ordinary one (a value within one reply, or not found).
      if (rr->flag == 0 || (rr->flag == 1 && rr->arg == rr->body.size())) {
        *done = true;
        ReturnChannel(r);
        GetReply g;
        g.found = rr->flag == 1;
        g.version = rr->version;
        g.value.assign(rr->body);
        return g;
      }
      ReturnChannel(r);
      return GetReply{};  // a large value on the reply path: read it in chunks
    }
    if (rr->body.size() != 12) return GetReply{};
    const uint64_t gen = GetLe64(reinterpret_cast<const uint8_t*>(rr->body.data()));
    auto bytes = r.chan->Read(rr->arg, rr->count);
    if (!bytes.ok()) {
      rdmp_.fallbacks++;
      return GetReply{};
    }
    // The entry may have moved since the server located it (cleaned, overwritten): it counts
    // only if it is the located version of this key, whole, and — for a bypass slot — flagged
    // persistent and published (valid flag). Anything else: ask the server.
    const uint8_t* e = bytes->data();
    format::EntryHeader h;
    const bool good = format::DecodeEntry(e, bytes->size(), gen, &h).ok() &&
                      h.version == rr->version && h.type != format::EntryType::kDelete &&
                      format::EntryKey(e, h) == key && h.persisted &&
                      (h.type != format::EntryType::kPutBypass ||
                       GetLe64(e + format::BypassFlagOffset(h.key_len, h.value_len) + 8) ==
                           format::ValidWord(h.version));
    if (!good) {
      rdmp_.fallbacks++;
      ReturnChannel(r);
      return GetReply{};
    }
    GetReply g;
    g.found = true;
    g.version = h.version;
    g.value.assign(format::EntryValue(e, h));
    rdmp_.bypass_gets++;
    rdmp_.bypass_bytes += g.value.size();
    *done = true;
    ReturnChannel(r);
    return g;
  }

  // Runs `f` against the shard's server. Reconnects when the connection is gone; retries until
  // retry_deadline while nothing was sent, and after a failure only when `safe` (a read).
  // Runs `f` against the shard's primary. Reconnects when the connection is gone; retries until
  // retry_deadline while nothing was applied: never sent, refused as "not primary" (the map is
  // re-read), and after a connection failure only when `safe` (a read).
  template <typename F>
  Status Run(uint32_t shard, bool safe, F&& f) {
    const auto deadline = std::chrono::steady_clock::now() + o_.retry_deadline;
    auto backoff = std::chrono::milliseconds(5);
    for (;;) {
      const uint64_t seen_changes = MapChanges();  // before the route is read
      const std::string address = Route(shard);
      Status st;
      if (address.empty()) {
        st = Status::Unavailable("kv: no server for shard " + std::to_string(shard));
      } else {
        Conn& c = GetConn(address);
        auto oq = Connect(c);
        if (oq.ok()) {
          uint32_t workers;
          {
            MutexLock l(c.mu);
            workers = c.workers;
          }
          st = f(**oq, workers);
          if (st.ok()) return st;
          if (!NotPrimary(st)) {
            if (!ConnectionLost(st)) return st;
            Broken(c, *oq);
            // The request may have reached the server (outcome unknown) unless the OQ client
            // knows it was never sent (retryable: the connection had failed before).
            if (!safe && !NeverSent(st)) {
              // Outcome unknown: returned as is. The server may be stopped and its shards moved
              // (a timeout): the caller's next request must not go to it again on the old map.
              if (cluster_) (void)RefreshMap();
              return st;
            }
          }
        } else {
          st = oq.status();
          if (!ConnectionLost(st) && st.code() != StatusCode::kIoError) return st;
        }
      }
      if (std::chrono::steady_clock::now() + backoff >= deadline) {
        return Status::Unavailable("kv: shard " + std::to_string(shard) + " unavailable (" +
                                   address + "): " + st.ToString());
      }
      WaitBackoff(backoff, seen_changes);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
      if (cluster_) (void)RefreshMap();
    }
  }

  Result<PutIfReply> PutLarge(std::string_view key, std::string_view value, bool conditional,
                              uint64_t expected) {
    const uint32_t shard = ShardOf(key);
    const auto deadline = std::chrono::steady_clock::now() + o_.retry_deadline;
    int restarts = 0;
    for (;;) {
      const uint64_t upload = next_upload_++;
      Status st;
      size_t off = 0;
      // Every chunk but the last: staged in the worker's DRAM (nothing is applied yet).
      while (value.size() - off > kChunk) {
        std::vector<uint8_t> payload, resp;
        wire::EncodeRequest({wire::kPutChunk,
                             shard,
                             0,
                             static_cast<uint32_t>(off),
                             upload,
                             value.size(),
                             {},
                             value.substr(off, kChunk)},
                            &payload);
        st = Run(shard, true, [&](oq::Client& c, uint32_t workers) {
          return c.Call(Store::WorkerOf(shard, workers), wire::kPutChunk, Bytes(payload), &resp);
        });
        if (!st.ok()) break;
        off += kChunk;
      }
      if (st.ok()) {
        std::vector<uint8_t> payload, resp;
        wire::EncodeRequest({wire::kPutLarge, shard,
                             static_cast<uint16_t>(conditional ? wire::kFlagConditional : 0),
                             static_cast<uint32_t>(off), upload, expected, key, value.substr(off)},
                            &payload);
        st = Run(shard, false, [&](oq::Client& c, uint32_t workers) {
          return c.Call(Store::WorkerOf(shard, workers), wire::kPutLarge, Bytes(payload), &resp);
        });
        if (st.ok()) {
          ASYMNVM_ASSIGN_OR_RETURN(wire::Response r, wire::DecodeResponse(Bytes(resp)));
          return PutIfReply{r.flag == 1, r.version};
        }
      }
      // A lost upload (server restarted, staging expired) applied nothing: start over.
      if (st.code() != StatusCode::kFailedPrecondition) return st;
      if (++restarts > 5 || std::chrono::steady_clock::now() >= deadline) return st;
    }
  }

  ClientOptions o_;
  std::unique_ptr<fabric::Fabric> fabric_;
  std::unique_ptr<fabric::ProtectionDomain> pd_;
  mutable Mutex conns_mu_;
  std::map<std::string, std::unique_ptr<Conn>> conns_ ASYMNVM_GUARDED_BY(conns_mu_);  // by address
  // Bumped by the map watch (cluster mode): a request waiting out its backoff to re-read the map
  // wakes at once when the map changes rather than after up to 200 ms. Declared before coord_,
  // whose watch thread signals them until it is destroyed.
  Mutex map_wait_mu_;
  std::condition_variable map_changed_cv_;
  uint64_t map_changes_ ASYMNVM_GUARDED_BY(map_wait_mu_) = 0;
  bool cluster_ = false;  // routed by the coordinator's shard map (else: servers by address)
  Mutex coord_mu_;
  std::shared_ptr<coord::Coordinator> coord_ ASYMNVM_GUARDED_BY(coord_mu_);  // see Coord()
  std::string map_path_;
  SharedMutex route_mu_;
  ShardMap map_ ASYMNVM_GUARDED_BY(route_mu_);
  uint32_t shards_ = 0;
  bool cluster_member_ = false;  // servers mode: a server reported it is in a cluster (kInfo)
  std::atomic<uint64_t> next_upload_{1};
  struct {
    std::atomic<uint64_t> bypass_puts{0}, bypass_gets{0}, fallbacks{0}, bypass_bytes{0},
        round_trips{0};
  } rdmp_;
};

}  // namespace

Result<std::unique_ptr<Client>> Client::Open(const ClientOptions& options) {
  auto c = std::make_unique<ClientImpl>(options);
  ASYMNVM_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace asymnvm::kv
