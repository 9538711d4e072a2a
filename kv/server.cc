#include "kv/server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "asymnvm/kv.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/oq/oq.h"
#include "kv/cluster.h"
#include "kv/rdmp.h"
#include "kv/wire.h"

namespace asymnvm::kv {

namespace {

struct Upload {
  std::string data;
  uint64_t total = 0;
  std::chrono::steady_clock::time_point touched;
};

// Per-worker state the handler keeps; touched only by that worker's thread.
struct WorkerState {
  std::map<std::pair<uint64_t, uint64_t>, Upload> uploads;  // (client id, upload id)
  size_t staged = 0;
};

Status CheckKey(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("kv: empty key");
  if (key.size() > kMaxKeySize) {
    return Status::InvalidArgument("kv: key of " + std::to_string(key.size()) +
                                   " bytes is over the limit of " + std::to_string(kMaxKeySize));
  }
  return Status::Ok();
}

}  // namespace

std::string DerivedAddress(const std::string& listen, const std::string& tag) {
  if (listen.rfind("unix://", 0) == 0) return listen + "." + tag;
  if (listen.rfind("tcp://", 0) == 0) {
    const std::string hostport = listen.substr(6);
    return "tcp://" + hostport.substr(0, hostport.rfind(':')) + ":0";
  }
  return listen + "-" + tag;
}

namespace {
// The OQ worker whose request this thread is executing (-1: none yet).
thread_local int tls_worker = -1;

// The syncs of ended LocalSections still running: a section releases its locks before it syncs
// (so that the next section, or an OQ worker, executes meanwhile), so whoever may have read its
// writes — a later section, an OQ worker's responses — waits for that sync before replying.
class LocalSyncs {
 public:
  // The newest ticket issued (a reader that starts now waits for every ticket up to it).
  uint64_t Latest() {
    MutexLock l(mu_);
    return next_ - 1;
  }
  uint64_t Issue() {
    MutexLock l(mu_);
    outstanding_.insert(next_);
    pending_.store(true, std::memory_order_relaxed);
    return next_++;
  }
  void Done(uint64_t ticket) {
    {
      MutexLock l(mu_);
      outstanding_.erase(ticket);
      pending_.store(!outstanding_.empty(), std::memory_order_relaxed);
    }
    cv_.notify_all();
  }
  // Blocks until every ticket <= upto is done.
  void WaitUpTo(uint64_t upto) {
    if (!pending_.load(std::memory_order_relaxed)) return;
    MutexLock l(mu_);
    cv_.wait(l.native(), [&]() ASYMNVM_REQUIRES(mu_) {
      return outstanding_.empty() || *outstanding_.begin() > upto;
    });
  }
  void WaitAll() {
    if (!pending_.load(std::memory_order_relaxed)) return;
    WaitUpTo(Latest());
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ ASYMNVM_GUARDED_BY(mu_) = 1;
  std::set<uint64_t> outstanding_ ASYMNVM_GUARDED_BY(mu_);
  // Set by Issue before its section unlocks; read without mu_ by WaitUpTo only as a shortcut:
  // a waiter's read happens after it took an execution lock that the issuer held while issuing.
  std::atomic<bool> pending_{false};
};

// Persists the OQ's ReqToExecute word only after the worker's deferred t-log entries are
// durable: a word persisted past a nilext PUT whose entry is still unsynced would let a crash
// lose it (recovery starts after it). Flush syncs the t-log first, then records the word.
class RtePersister final : public pm::Persister {
 public:
  RtePersister(pm::Persister* base, std::atomic<Store*>* store, Mutex* exec, LocalSyncs* syncs)
      : base_(base), store_(store), exec_(exec), syncs_(syncs) {}
  void Flush(const void* addr, size_t length) override {
    Store* s = store_->load();
    if (s != nullptr && tls_worker >= 0) {
      // The worker's own entries may lie behind a LocalSection's in the same log: those must be
      // durable too before a nilext request is forgotten (a torn entry ends a log's recovery).
      syncs_->WaitAll();
      MutexLock l(exec_[tls_worker]);
      s->SyncDeferred(static_cast<uint32_t>(tls_worker));
    }
    base_->Flush(addr, length);
  }
  void Drain() override { base_->Drain(); }

 private:
  pm::Persister* base_;
  std::atomic<Store*>* store_;
  Mutex* exec_;  // Server::Impl::exec
  LocalSyncs* syncs_;
};
}  // namespace

struct Server::Impl {
  ServerOptions o;
  std::unique_ptr<pm::Pool> pool;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<Store> store;
  std::unique_ptr<rowan::Receiver> receiver;
  std::unique_ptr<RemoteLogs> remote_logs;
  ReplicationMode replication = ReplicationMode::kRowan;
  std::unique_ptr<oq::Server> oq;
  std::unique_ptr<ClusterAgent> agent;
  std::unique_ptr<BypassTarget> bypass;
  std::atomic<Store*> store_ptr{nullptr};
  std::unique_ptr<RtePersister> rte_persister;
  std::atomic<uint64_t> rdmp_published{0}, rdmp_located{0};
  std::atomic<ClusterAgent*> agent_ptr{nullptr};
  bool cluster_mode = false;
  std::vector<WorkerState> workers;
  // Per worker: held while the worker executes a request or syncs its deferred writes, and by a
  // LocalSection (all of them) — the store's "one thread per worker at a time" rule with a
  // co-located front end executing too.
  std::unique_ptr<Mutex[]> exec;
  std::unique_ptr<LocalSyncs> local_syncs = std::make_unique<LocalSyncs>();
  std::atomic<uint64_t> requests{0}, rejected{0}, nilext_dropped{0};
  // Per request type counts, bytes and latency (the metrics endpoint, doc/operations.md).
  metrics::RequestMetrics request_metrics{{{wire::kPut, "put"},
                                           {wire::kGet, "get"},
                                           {wire::kDelete, "delete"},
                                           {wire::kPutIf, "put_if"},
                                           {wire::kIncr, "incr"},
                                           {wire::kScan, "scan"},
                                           {wire::kInfo, "info"},
                                           {wire::kPutChunk, "put_chunk"},
                                           {wire::kPutLarge, "put_large"},
                                           {wire::kReserve, "reserve"},
                                           {wire::kPublish, "publish"},
                                           {wire::kBatch, "batch"}}};
  std::thread cleaner;
  Mutex mu;
  std::condition_variable cv;
  bool stopping ASYMNVM_GUARDED_BY(mu) = false;
  bool stopped = false;  // Stop's (the owner's thread)

  Status Handle(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                std::vector<uint8_t>* response);
  Status Execute(const oq::RequestContext& ctx, const wire::Request& r,
                 std::vector<uint8_t>* response);
  void CleanerLoop();
};

Status Server::Impl::Handle(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                            std::vector<uint8_t>* response) {
  requests++;
  tls_worker = static_cast<int>(ctx.worker);
  const auto t0 = std::chrono::steady_clock::now();
  MutexLock exec_lock(exec[ctx.worker]);
  Status st;
  auto r = wire::DecodeRequest(ctx.type, payload);
  if (!r.ok()) {
    st = r.status();
  } else {
    st = Execute(ctx, *r, response);
  }
  if (!st.ok()) {
    rejected++;
    response->clear();
    if (ctx.nilext) {
      nilext_dropped++;
      LOG_WARN("kv", "nilext request (type " << ctx.type << ", worker " << ctx.worker
                                             << ") failed: " << st.ToString());
    }
  }
  request_metrics.Record(
      ctx.type,
      static_cast<uint64_t>(
          std::chrono::nanoseconds(std::chrono::steady_clock::now() - t0).count()),
      payload.size(), response->size(), st.ok());
  return st;
}

Status Server::Impl::Execute(const oq::RequestContext& ctx, const wire::Request& r,
                             std::vector<uint8_t>* response) {
  const auto& g = store->geometry();
  const bool keyed = r.type != wire::kScan && r.type != wire::kInfo && r.type != wire::kPutChunk &&
                     r.type != wire::kBatch;
  if (r.type == wire::kBatch &&
      (r.shard >= g.shards || Store::WorkerOf(r.shard, g.workers) != ctx.worker)) {
    return Status::InvalidArgument("kv batch: shard " + std::to_string(r.shard) +
                                   " out of range or not served by worker " +
                                   std::to_string(ctx.worker));
  }
  if ((r.type == wire::kReserve || r.type == wire::kPublish) && !bypass) {
    return Status::NotSupported("kv: server-bypass (RDMP) is off on this server");
  }
  if (keyed) {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(r.key));
    if (r.shard >= g.shards || ShardOf(r.key, g.shards) != r.shard) {
      return Status::InvalidArgument(
          "kv: request names shard " + std::to_string(r.shard) + "; the key belongs to shard " +
          std::to_string(ShardOf(r.key, g.shards)) + " of " + std::to_string(g.shards));
    }
    const uint32_t w = Store::WorkerOf(r.shard, g.workers);
    // A request re-executed by recovery may have landed at another worker: the worker of a key
    // was chosen by its hash before it was by its shard (a pool of an older version). Recovery
    // runs on one thread before any worker serves, so it is applied to the right partition.
    if (w != ctx.worker && !(ctx.recovering && r.type == wire::kPut)) {
      return Status::InvalidArgument("kv: request for worker " + std::to_string(w) +
                                     " arrived at worker " + std::to_string(ctx.worker));
    }
  }
  // Cluster mode: only a shard's primary serves it, and the map cannot change during a request.
  // OQ recovery re-applies landed nilext PUTs (acknowledged: they are applied whatever the map).
  std::shared_lock<std::shared_mutex> map_lock;
  if (cluster_mode && !ctx.recovering && r.type != wire::kInfo && r.type != wire::kPutChunk) {
    if (ctx.nilext) {
      // Already acknowledged (durable in our receive buffer): it must be applied here. A client
      // sends nilext PUTs only to the primary of an unreplicated shard, whose primary never
      // moves; all that can lag is this server taking up its role (start-up).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      for (;;) {
        ClusterAgent* agent = agent_ptr.load();
        if (agent != nullptr) {
          map_lock = agent->Lock();
          Status st = agent->CheckPrimary(r.shard);
          if (st.ok()) break;
          map_lock.unlock();
          if (std::chrono::steady_clock::now() >= deadline) return st;
          agent->WaitForAdoption(std::chrono::milliseconds(100));
        } else {
          if (std::chrono::steady_clock::now() >= deadline) {
            return Status::Unavailable("kv: not primary (server starting)")
                .WithSubCode(StatusSubCode::kNotPrimary);
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    } else {
      ClusterAgent* agent = agent_ptr.load();
      if (agent == nullptr) {
        return Status::Unavailable("kv: not primary (server starting)")
            .WithSubCode(StatusSubCode::kNotPrimary);
      }
      map_lock = agent->Lock();
      ASYMNVM_RETURN_IF_ERROR(agent->CheckPrimary(r.shard));
    }
  }
  const uint64_t position = (uint64_t{ctx.worker} << 56) | ctx.position;
  wire::Response resp;
  std::string body;
  switch (r.type) {
    case wire::kPut: {
      if (r.value.size() > kMaxInlineValue) {
        return Status::InvalidArgument("kv put: inline value of " + std::to_string(r.value.size()) +
                                       " bytes over " + std::to_string(kMaxInlineValue));
      }
      const uint32_t sw = Store::WorkerOf(r.shard, g.workers);
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t v,
                               store->Put(sw, r.shard, r.key, r.value, position, ctx.recovering));
      // Misrouted (see above): durable before the OQ persists ReqToExecute past it, which syncs
      // only the arrival worker's writes.
      if (sw != ctx.worker) store->SyncDeferred(sw);
      resp.flag = 1;
      resp.version = v;
      break;
    }
    case wire::kGet: {
      // One index lookup: with the locate flag a value of at least arg2 bytes comes back as its
      // location (the client reads it one-sidedly), a smaller one as bytes.
      const uint64_t locate_from =
          (r.flags & wire::kFlagLocate) && bypass ? r.arg2 : std::numeric_limits<uint64_t>::max();
      ReadResult rr = store->Get(ctx.worker, r.shard, r.key, r.offset,
                                 kMaxResponse - wire::kResponseHeader, locate_from);
      if (rr.located) {
        rdmp_located++;
        resp.flag = wire::kFlagLocated;
        resp.version = rr.version;
        resp.arg = rr.log_offset;
        resp.count = rr.footprint;
        body.resize(12);
        PutLe64(reinterpret_cast<uint8_t*>(body.data()), rr.generation);
        PutLe32(reinterpret_cast<uint8_t*>(body.data()) + 8, static_cast<uint32_t>(rr.total_len));
        break;
      }
      if (rr.found && r.arg1 != 0 && rr.version != r.arg1) {
        resp.flag = 2;  // the version the caller was reading changed
        resp.version = rr.version;
        break;
      }
      resp.flag = rr.found ? 1 : 0;
      resp.version = rr.version;
      resp.arg = rr.total_len;
      resp.count = r.offset;
      body = std::move(rr.bytes);
      break;
    }
    case wire::kDelete: {
      ASYMNVM_ASSIGN_OR_RETURN(DeleteReply d, store->Delete(ctx.worker, r.shard, r.key, position));
      resp.flag = d.existed ? 1 : 0;
      resp.version = d.version;
      break;
    }
    case wire::kPutIf: {
      if (r.value.size() > kMaxInlineValue) {
        return Status::InvalidArgument("kv put-if: inline value over " +
                                       std::to_string(kMaxInlineValue) + " bytes");
      }
      ASYMNVM_ASSIGN_OR_RETURN(PutIfReply p,
                               store->PutIf(ctx.worker, r.shard, r.key, r.value, r.arg1, position));
      resp.flag = p.applied ? 1 : 0;
      resp.version = p.version;
      break;
    }
    case wire::kIncr: {
      ASYMNVM_ASSIGN_OR_RETURN(IncrReply i, store->Incr(ctx.worker, r.shard, r.key,
                                                        static_cast<int64_t>(r.arg1), position));
      resp.flag = 1;
      resp.version = i.version;
      resp.arg = static_cast<uint64_t>(i.value);
      break;
    }
    case wire::kScan: {
      if (r.shard >= g.shards) {
        return Status::InvalidArgument("kv scan: shard " + std::to_string(r.shard) +
                                       " out of range (" + std::to_string(g.shards) + " shards)");
      }
      if (r.arg2 == 0 || r.arg2 > kMaxScanCount) {
        return Status::InvalidArgument("kv scan: count must be 1.." +
                                       std::to_string(kMaxScanCount));
      }
      const size_t budget = kMaxResponse - wire::kResponseHeader - 2048;
      ScanOut s = store->Scan(r.shard, r.arg1, static_cast<uint32_t>(r.arg2), budget - 17 * 1024,
                              16 * 1024);
      resp.flag = s.done ? 1 : 0;
      resp.arg = s.next_cursor;
      resp.count = static_cast<uint32_t>(s.items.size());
      for (const auto& it : s.items) {
        uint8_t h[wire::kScanItemHeader] = {};
        h[0] = static_cast<uint8_t>(it.key.size());
        h[1] = static_cast<uint8_t>(it.key.size() >> 8);
        h[2] = it.truncated ? 1 : 0;
        for (int k = 0; k < 4; k++) h[4 + k] = static_cast<uint8_t>(it.value_len >> (8 * k));
        for (int k = 0; k < 8; k++) h[8 + k] = static_cast<uint8_t>(it.version >> (8 * k));
        body.append(reinterpret_cast<const char*>(h), sizeof h);
        body += it.key;
        body += it.value;
      }
      break;
    }
    case wire::kBatch: {
      ASYMNVM_ASSIGN_OR_RETURN(std::vector<wire::BatchOpView> views, wire::DecodeBatch(r.value));
      std::vector<WriteOp> ops;
      ops.reserve(views.size());
      for (const auto& v : views) {
        WriteOp op;
        op.key = v.key;
        if (!v.is_delete) op.value = v.value;
        op.conditional = v.conditional;
        op.check_only = v.check_only;
        op.expected_version = v.expected_version;
        ops.push_back(op);
      }
      ASYMNVM_ASSIGN_OR_RETURN(BatchResult b, store->Batch(ctx.worker, r.shard, ops, position));
      resp.flag = b.applied ? 1 : 0;
      resp.count = static_cast<uint32_t>(b.versions.size());
      body.resize(8 * b.versions.size());
      for (size_t i = 0; i < b.versions.size(); i++) {
        PutLe64(reinterpret_cast<uint8_t*>(body.data()) + 8 * i, b.versions[i]);
      }
      break;
    }
    case wire::kInfo: {
      resp.arg = g.shards;
      resp.count = g.workers;
      // 1: a cluster member (its shards may have backups and may move): a client that reaches it
      // by address must not send nilext PUTs, which only an unreplicated primary may take.
      resp.flag = cluster_mode ? 1 : 0;
      body = pm::UuidToString(pool->superblock().uuid);
      if (bypass) {  // + the bypass region and endpoint (doc/kv.md §Wire)
        uint8_t d[fabric::RegionDescriptor::kEncodedSize];
        bypass->region().EncodeTo(d);
        body.append(reinterpret_cast<const char*>(d), sizeof d);
        body += bypass->address();
      }
      break;
    }
    case wire::kReserve: {
      if (cluster_mode && agent_ptr.load()->HasBackups(r.shard)) {
        return Status::FailedPrecondition(
            "kv reserve: shard " + std::to_string(r.shard) +
            " is replicated; server-bypass is for unreplicated shards (send the value inline)");
      }
      const uint64_t value_len = r.arg1 & 0xffffffffu;
      if (value_len > kMaxValueSize) {
        return Status::InvalidArgument("kv put: value of " + std::to_string(value_len) +
                                       " bytes is over the limit of " +
                                       std::to_string(kMaxValueSize));
      }
      ASYMNVM_ASSIGN_OR_RETURN(
          BypassSlot slot,
          store->Reserve(ctx.worker, r.shard, r.key, static_cast<uint32_t>(value_len),
                         static_cast<uint32_t>(r.arg1 >> 32)));
      Status ts = bypass->Track(r.arg2, slot.log_offset);
      if (!ts.ok()) {
        store->Settle(slot.log_offset);  // nobody can write it: abandoned at once
        return ts;
      }
      resp.flag = 1;
      resp.version = slot.version;
      resp.arg = slot.log_offset;
      resp.count = slot.footprint;
      break;
    }
    case wire::kPublish: {
      auto v = store->Publish(ctx.worker, r.shard, r.key, r.arg1, r.arg2);
      if (!v.ok()) return v.status();  // still tracked: the reaper settles it
      bypass->Untrack(r.arg1);
      rdmp_published++;
      resp.flag = 1;
      resp.version = *v;
      break;
    }
    case wire::kPutChunk: {
      WorkerState& ws = workers[ctx.worker];
      const auto now = std::chrono::steady_clock::now();
      for (auto it = ws.uploads.begin(); it != ws.uploads.end();) {
        if (now - it->second.touched > o.staging_timeout) {
          ws.staged -= it->second.data.size();
          it = ws.uploads.erase(it);
        } else {
          ++it;
        }
      }
      if (r.arg2 == 0 || r.arg2 > kMaxValueSize) {
        return Status::InvalidArgument("kv put: value of " + std::to_string(r.arg2) +
                                       " bytes is over the limit of " +
                                       std::to_string(kMaxValueSize));
      }
      auto key = std::make_pair(ctx.client_id, r.arg1);
      auto it = ws.uploads.find(key);
      if (r.offset == 0) {
        if (it != ws.uploads.end()) {
          ws.staged -= it->second.data.size();
          ws.uploads.erase(it);
        }
        if (ws.staged + r.arg2 > o.staging_bytes) {
          return Status::ResourceExhausted("kv put: staging area of worker " +
                                           std::to_string(ctx.worker) + " is full");
        }
        it = ws.uploads.emplace(key, Upload{}).first;
        it->second.total = r.arg2;
        it->second.data.reserve(r.arg2);
      } else if (it == ws.uploads.end() || it->second.data.size() != r.offset ||
                 it->second.total != r.arg2) {
        return Status::FailedPrecondition("kv put: upload " + std::to_string(r.arg1) +
                                          " unknown or out of order (expired, or the server "
                                          "restarted); start over");
      }
      if (r.offset + r.value.size() > it->second.total) {
        return Status::InvalidArgument("kv put: chunk runs past the announced length");
      }
      it->second.data.append(r.value);
      it->second.touched = now;
      ws.staged += r.value.size();
      break;
    }
    case wire::kPutLarge: {
      WorkerState& ws = workers[ctx.worker];
      Upload up;
      if (r.offset == 0) {
        up.data.assign(r.value);  // the whole value in this request
      } else {
        auto it = ws.uploads.find({ctx.client_id, r.arg1});
        if (it == ws.uploads.end() || it->second.data.size() != r.offset ||
            it->second.total != r.offset + r.value.size()) {
          return Status::FailedPrecondition("kv put: upload " + std::to_string(r.arg1) +
                                            " unknown or incomplete (expired, or the server "
                                            "restarted); start over");
        }
        up = std::move(it->second);
        ws.uploads.erase(it);
        ws.staged -= up.data.size();
        up.data.append(r.value);
      }
      if (r.flags & wire::kFlagConditional) {
        ASYMNVM_ASSIGN_OR_RETURN(
            PutIfReply p, store->PutIf(ctx.worker, r.shard, r.key, up.data, r.arg2, position));
        resp.flag = p.applied ? 1 : 0;
        resp.version = p.version;
      } else {
        ASYMNVM_ASSIGN_OR_RETURN(uint64_t v,
                                 store->Put(ctx.worker, r.shard, r.key, up.data, position, false));
        resp.flag = 1;
        resp.version = v;
      }
      break;
    }
    default:
      return Status::InvalidArgument("kv: unknown request type " + std::to_string(r.type));
  }
  if (!ctx.nilext) {
    wire::EncodeResponseHeader(resp, response);
    response->insert(response->end(), body.begin(), body.end());
  }
  return Status::Ok();
}

void Server::Impl::CleanerLoop() {
  auto wait = std::chrono::milliseconds(10);
  MutexLock l(mu);
  while (!stopping) {
    cv.wait_for(l.native(), wait, [&]() ASYMNVM_REQUIRES(mu) { return stopping; });
    if (stopping) break;
    l.unlock();
    uint32_t freed = 0;
    if (store->NeedsCleaning()) {
      auto r = store->CleanOnce();
      if (!r.ok()) {
        LOG_WARN("kv", "cleaner: " << r.status().ToString());
      } else {
        freed = *r;
      }
    }
    l.lock();
    wait = freed > 0 ? std::chrono::milliseconds(1)
                     : std::min(wait * 2, std::chrono::milliseconds(100));
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  const ServerOptions& o = impl->o;
  if (o.pool_path.empty()) return Status::InvalidArgument("kv server: pool_path is required");
  if (o.workers == 0 || o.workers > format::kMaxWorkers) {
    return Status::InvalidArgument("kv server: workers must be 1..32");
  }
  if (o.segment_size < 2 * (kMaxValueSize + kMaxKeySize + 4096) || o.segment_size % 4096 != 0) {
    return Status::InvalidArgument(
        "kv server: segment_size must be a multiple of 4 KiB holding two of the largest entries "
        "(>= 2 MiB + 12 KiB)");
  }
  if (o.oq_buffer_size < kMaxRequest || o.oq_buffer_size % 4096 != 0 || o.oq_buffers < 2) {
    return Status::InvalidArgument(
        "kv server: oq_buffer_size must be >= 64 KiB (multiple of 4 KiB)"
        " and oq_buffers >= 2");
  }
  pm::PoolOptions po;
  po.mode = o.pm_mode;
  po.layout = "asymnvm-kv";
  po.observer = o.observer;
  auto pool = pm::Pool::OpenOrCreate(o.pool_path, o.pool_size, po);
  if (!pool.ok()) return pool.status().WithContext("kv server: pool " + o.pool_path);
  impl->pool = std::move(pool).value();
  uint8_t* ua = impl->pool->user_base();
  const size_t usize = impl->pool->user_size();
  // The stored geometry wins for an existing pool.
  format::ServerHeader geo;
  Status hs = format::DecodeServerHeader(ua, &geo);
  if (hs.code() == StatusCode::kNotFound) {
    geo = format::ServerHeader{};
    geo.workers = o.workers;
    geo.shards = o.shards;
    geo.segment_size = o.segment_size;
    geo.oq_buffers = o.oq_buffers;
    geo.oq_buffer_size = o.oq_buffer_size;
    size_t oq_bytes = oq::DurableAreaSize(geo.workers, geo.oq_buffers, geo.oq_buffer_size);
    oq_bytes = (oq_bytes + 4095) / 4096 * 4096;
    if (format::kHeaderPage + oq_bytes >= usize) {
      return Status::InvalidArgument("kv server: pool " + o.pool_path + " too small");
    }
    geo.blog_bytes = (o.blog_size + 4095) / 4096 * 4096;
    geo.replication = static_cast<uint32_t>(o.replication);
    if (format::kHeaderPage + oq_bytes + geo.blog_bytes >= usize) {
      return Status::InvalidArgument("kv server: pool " + o.pool_path + " too small");
    }
    geo.segments = static_cast<uint32_t>((usize - format::kHeaderPage - oq_bytes - geo.blog_bytes) /
                                         geo.segment_size);
    if (geo.segments < geo.workers + 3) {
      return Status::InvalidArgument("kv server: pool " + o.pool_path + " of " +
                                     std::to_string(impl->pool->size()) + " bytes holds " +
                                     std::to_string(geo.segments) + " segments; needs at least " +
                                     std::to_string(geo.workers + 3));
    }
  } else if (!hs.ok()) {
    return hs.WithContext("kv server: pool " + o.pool_path);
  }
  size_t oq_bytes = oq::DurableAreaSize(geo.workers, geo.oq_buffers, geo.oq_buffer_size);
  oq_bytes = (oq_bytes + 4095) / 4096 * 4096;
  if (format::kHeaderPage + oq_bytes + geo.blog_bytes + size_t{geo.segments} * geo.segment_size >
      usize) {
    return Status::Corruption("kv server: pool " + o.pool_path + " is smaller than its layout");
  }
  if (geo.replication != static_cast<uint32_t>(o.replication)) {
    return Status::InvalidArgument(
        std::string("kv server: pool ") + o.pool_path + " was created for --replication " +
        ReplicationModeName(static_cast<ReplicationMode>(geo.replication)) + ", not " +
        ReplicationModeName(o.replication));
  }
  impl->replication = o.replication;
  // Baselines: the b-log area is a Rowan b-log for catch-up, then the remote-log area.
  const size_t rowan_bytes = o.replication == ReplicationMode::kRowan
                                 ? geo.blog_bytes
                                 : std::min<size_t>(geo.blog_bytes, remotelog::kRowanPart);
  if (o.replication != ReplicationMode::kRowan &&
      geo.blog_bytes < rowan_bytes + remotelog::kTableBytes + 2 * remotelog::kRingBytes) {
    return Status::InvalidArgument("kv server: --replication " +
                                   std::string(ReplicationModeName(o.replication)) +
                                   " needs a b-log area of at least 7 MiB (--blog-size)");
  }
  impl->cluster_mode = !o.coordinator.empty();
  if (impl->cluster_mode && geo.blog_bytes == 0) {
    return Status::InvalidArgument("kv server: pool " + o.pool_path +
                                   " has no b-log area; it cannot join a replicated cluster");
  }
  Impl* raw = impl.get();
  StoreOptions so;
  so.header_page = ua;
  so.log_base = ua + format::kHeaderPage + oq_bytes + geo.blog_bytes;
  if (impl->cluster_mode) {
    so.replicate = [raw](uint32_t worker, uint32_t shard, std::span<const uint8_t> e) {
      ClusterAgent* a = raw->agent_ptr.load();
      return a == nullptr ? Status::Ok() : a->Replicate(worker, shard, e);
    };
  }
  so.persister = impl->pool->persister();
  // Group commit: a worker's writes are synced once per batch of requests it executed, before
  // their responses leave (before_respond below), before the OQ's ReqToExecute passes a nilext
  // PUT (RtePersister) and before a receive buffer is recycled (doc/kv.md §Write path).
  so.group_commit = true;
  so.geometry = geo;
  so.gc_threshold = o.gc_threshold;
  auto store = Store::Open(so);
  if (!store.ok()) return store.status().WithContext("kv server: pool " + o.pool_path);
  impl->store = std::move(store).value();
  impl->workers.resize(geo.workers);
  impl->exec = std::make_unique<Mutex[]>(geo.workers);

  auto fab = fabric::Fabric::Open(o.fabric);
  if (!fab.ok()) return fab.status();
  impl->fabric = std::move(fab).value();
  auto pd = impl->fabric->AllocPd();
  if (!pd.ok()) return pd.status();
  impl->pd = std::move(pd).value();

  if (o.rdmp) {
    BypassTargetOptions bo;
    bo.fabric = impl->fabric.get();
    bo.pd = impl->pd.get();
    bo.listen_address =
        o.rdmp_listen.empty() ? DerivedAddress(o.listen_address, "rdmp") : o.rdmp_listen;
    bo.base = impl->store->log_base();
    bo.length = impl->store->log_bytes();
    bo.persister = impl->pool->persister();
    bo.reservation_timeout = o.rdmp_reservation_timeout;
    bo.settle = [raw](uint64_t log_offset) {
      // A settle may publish: in cluster mode under the map lock, as a worker's request.
      std::shared_lock<std::shared_mutex> map_lock;
      if (ClusterAgent* a = raw->agent_ptr.load()) map_lock = a->Lock();
      raw->store->Settle(log_offset);
    };
    auto t = BypassTarget::Start(bo);
    if (!t.ok()) return t.status().WithContext("kv server: rdmp");
    impl->bypass = std::move(t).value();
  }

  if (geo.blog_bytes > 0) {
    rowan::ReceiverOptions ro;
    ro.fabric = impl->fabric.get();
    ro.pd = impl->pd.get();
    ro.area = ua + format::kHeaderPage + oq_bytes;
    ro.area_size = rowan_bytes;
    ro.persister = impl->pool->persister();
    ro.listen_address = o.rowan_listen;
    ro.segment_size = 1u << 20;
    auto rec = rowan::Receiver::Open(ro);
    if (!rec.ok()) return rec.status().WithContext("kv server: b-log");
    impl->receiver = std::move(rec).value();
  }
  if (o.replication != ReplicationMode::kRowan) {
    RemoteLogsOptions rl;
    rl.fabric = impl->fabric.get();
    rl.pd = impl->pd.get();
    rl.area = ua + format::kHeaderPage + oq_bytes + rowan_bytes;
    rl.area_size = geo.blog_bytes - rowan_bytes;
    rl.persister = impl->pool->persister();
    rl.listen_address = o.remote_log_listen.empty() ? DerivedAddress(o.listen_address, "rlog")
                                                    : o.remote_log_listen;
    rl.mode = o.replication;
    rl.rpc_threads = geo.workers;
    rl.apply = [raw](std::span<const uint8_t> e) { return raw->store->ApplyReplica(e); };
    auto logs = RemoteLogs::Open(rl);
    if (!logs.ok()) return logs.status().WithContext("kv server: remote logs");
    impl->remote_logs = std::move(logs).value();
  }

  oq::ServerOptions qo;
  qo.fabric = impl->fabric.get();
  qo.pd = impl->pd.get();
  qo.listen_address = o.listen_address;
  qo.worker_listen_addresses = o.oq_worker_listen;
  qo.workers = geo.workers;
  qo.buffer_size = geo.oq_buffer_size;
  qo.buffers_per_worker = geo.oq_buffers;
  qo.max_request = kMaxRequest + oq::kRequestHeaderSize;
  qo.max_response = kMaxResponse;
  qo.policy = o.oq_policy;
  qo.durable = true;
  qo.pm_area = ua + format::kHeaderPage;
  qo.pm_area_size = oq_bytes;
  qo.persister = impl->pool->persister();
  impl->store_ptr = impl->store.get();
  impl->rte_persister = std::make_unique<RtePersister>(impl->pool->persister(), &impl->store_ptr,
                                                       impl->exec.get(), impl->local_syncs.get());
  qo.rte_persister = impl->rte_persister.get();
  qo.before_recycle = [raw](uint32_t worker, uint64_t) {
    raw->local_syncs->WaitAll();  // as RtePersister
    MutexLock l(raw->exec[worker]);
    raw->store->SyncDeferred(worker);
  };
  qo.before_respond = [raw](uint32_t worker) {
    // A response may show a LocalSection's write whose sync still runs (LocalSyncs), and the
    // worker's entries may lie behind such a write in the same log (a torn entry ends a log's
    // recovery): either way that sync must be over first.
    raw->local_syncs->WaitAll();
    MutexLock l(raw->exec[worker]);
    raw->store->SyncDeferred(worker);
    if (raw->replication == ReplicationMode::kBatch) {
      if (ClusterAgent* a = raw->agent_ptr.load()) return a->FlushBatch(worker).ok();
    }
    return true;
  };
  auto server = oq::Server::Start(
      qo, [raw](const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                std::vector<uint8_t>* response) { return raw->Handle(ctx, payload, response); });
  if (!server.ok()) return server.status().WithContext("kv server: ordered queue");
  impl->oq = std::move(server).value();
  impl->store->EndRecovery();
  impl->cleaner = std::thread([raw] { raw->CleanerLoop(); });
  if (impl->cluster_mode) {
    AgentOptions ao;
    ao.coordinator = o.coordinator;
    ao.cluster = o.cluster;
    ao.uuid = pm::UuidToString(impl->pool->superblock().uuid);
    ao.self = {impl->oq->address(), impl->receiver->address(),
               impl->remote_logs ? impl->remote_logs->address() : std::string()};
    ao.mode = o.replication;
    ao.remote_logs = impl->remote_logs.get();
    ao.rf = o.rf;
    ao.initial_servers = o.initial_servers;
    ao.rebalance = o.rebalance;
    ao.rejoin_backoff_ms = o.rejoin_backoff_ms;
    ao.backup_timeout = std::chrono::milliseconds(o.backup_timeout_ms);
    ao.session_timeout = std::chrono::milliseconds(o.session_timeout_ms);
    ao.spread_primaries = o.spread_primaries;
    ao.on_fenced = o.on_fenced;
    ao.store = impl->store.get();
    ao.fabric = impl->fabric.get();
    ao.pd = impl->pd.get();
    ao.receiver = impl->receiver.get();
    auto agent = ClusterAgent::Start(ao);
    if (!agent.ok()) {
      std::unique_ptr<Server> tmp(new Server(std::move(impl)));
      tmp->Stop();
      return agent.status().WithContext("kv server: coordinator " + o.coordinator);
    }
    impl->agent = std::move(agent).value();
    impl->agent_ptr = impl->agent.get();
    // Ready means serving: unless the first map waits for more servers, return once a map is
    // adopted (else the first requests would be refused "not primary" and retried).
    if (o.initial_servers <= 1) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (impl->agent->epoch() == 0 && std::chrono::steady_clock::now() < deadline) {
        impl->agent->WaitForAdoption(std::chrono::milliseconds(100));
      }
    }
  }
  LOG_INFO("kv", "serving " << o.pool_path << ": " << geo.workers << " workers, " << geo.shards
                            << " shards, " << geo.segments << " segments of " << geo.segment_size
                            << " B; recovered " << raw->store->stats().recovered_entries
                            << " entries");
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

namespace {

// Whether this server is the primary of every shard and none has a backup (the map lock held):
// then nothing is replicated and a batch may span shards (Server::CommitsAcrossShards).
bool LeadsEveryShardUnreplicated(const ClusterAgent* agent, uint32_t shards) {
  if (agent == nullptr) return false;
  for (uint32_t shard = 0; shard < shards; shard++) {
    if (!agent->CheckPrimary(shard).ok() || agent->HasBackups(shard)) return false;
  }
  return true;
}

// Server::BeginLocal's section: every worker's execution lock (in worker order: two sections
// never deadlock; an OQ worker takes only its own) and then the map's shared lock (the order an
// OQ request takes them in).
class LocalSectionImpl final : public LocalSection {
 public:
  LocalSectionImpl(Store* store, Mutex* exec, LocalSyncs* syncs, ClusterAgent* agent,
                   bool cluster_mode, bool batch_replication) ASYMNVM_NO_THREAD_SAFETY_ANALYSIS
      : store_(store),
        exec_(exec),
        syncs_(syncs),
        agent_(agent),
        cluster_mode_(cluster_mode),
        batch_replication_(batch_replication),
        geo_(store->geometry()) {
    for (uint32_t w = 0; w < geo_.workers; w++) exec_[w].lock();
    if (agent_ != nullptr) map_lock_ = agent_->Lock();
    // Earlier sections whose syncs may still run: what this one reads may be their writes.
    wait_for_ = syncs_->Latest();
    // Writes an OQ worker made and has not synced yet (its batch of requests is between
    // execution and response): this section must not read or overwrite them before they are
    // durable, so their shards take the OQ path until that worker syncs.
    others_deferred_.resize(geo_.workers);
    for (uint32_t w = 0; w < geo_.workers; w++) others_deferred_[w] = store_->Deferred(w);
    // Every write of the section lands in one t-log: one contiguous range, one msync (each
    // worker's own log would be a sync of its own). Not a log whose worker left unsynced entries
    // at its end: ours would follow them, and a torn entry ends a log's recovery.
    for (uint32_t w = 0; w < geo_.workers; w++) {
      if (!others_deferred_[w]) {
        store_->SetSharedLog(w);
        break;
      }
    }
  }
  ~LocalSectionImpl() override {
    if (!committed_) {
      Status st = Commit();
      if (!st.ok()) LOG_ERROR("kv", "local section: " << st.ToString());
    }
  }

  bool Serves(uint32_t shard) const override {
    if (shard >= geo_.shards || others_deferred_[Store::WorkerOf(shard, geo_.workers)]) {
      return false;
    }
    if (!cluster_mode_) return true;
    return agent_ != nullptr && agent_->CheckPrimary(shard).ok();
  }
  uint32_t ShardOf(std::string_view key) const override { return kv::ShardOf(key, geo_.shards); }

  Status Put(std::string_view key, std::string_view value) override {
    ASYMNVM_ASSIGN_OR_RETURN(uint32_t shard, Check(key, value.size()));
    uncommitted_ = true;
    writes_++;
    auto v = store_->Put(Store::WorkerOf(shard, geo_.workers), shard, key, value, 0, false);
    return v.status();
  }
  Result<GetReply> Get(std::string_view key) override {
    ASYMNVM_ASSIGN_OR_RETURN(uint32_t shard, Check(key, 0));
    ReadResult r = store_->Get(Store::WorkerOf(shard, geo_.workers), shard, key, 0, SIZE_MAX);
    GetReply out;
    out.found = r.found;
    out.version = r.version;
    out.value = std::move(r.bytes);
    return out;
  }
  Result<DeleteReply> Delete(std::string_view key) override {
    ASYMNVM_ASSIGN_OR_RETURN(uint32_t shard, Check(key, 0));
    uncommitted_ = true;
    writes_++;
    return store_->Delete(Store::WorkerOf(shard, geo_.workers), shard, key, 0);
  }
  Result<PutIfReply> PutIf(std::string_view key, std::string_view value,
                           uint64_t expected_version) override {
    ASYMNVM_ASSIGN_OR_RETURN(uint32_t shard, Check(key, value.size()));
    uncommitted_ = true;
    writes_++;
    return store_->PutIf(Store::WorkerOf(shard, geo_.workers), shard, key, value, expected_version,
                         0);
  }
  Result<IncrReply> Incr(std::string_view key, int64_t delta) override {
    ASYMNVM_ASSIGN_OR_RETURN(uint32_t shard, Check(key, 0));
    uncommitted_ = true;
    writes_++;
    return store_->Incr(Store::WorkerOf(shard, geo_.workers), shard, key, delta, 0);
  }

  Result<BatchReply> Batch(const std::vector<BatchOp>& ops) override {
    if (ops.empty() || ops.size() > kMaxBatchOps) {
      return Status::InvalidArgument("kv batch: 1.." + std::to_string(kMaxBatchOps) +
                                     " operations");
    }
    std::vector<WriteOp> wops;
    wops.reserve(ops.size());
    uint32_t first = 0;
    bool across = false;
    for (size_t i = 0; i < ops.size(); i++) {
      const auto& op = ops[i];
      ASYMNVM_ASSIGN_OR_RETURN(uint32_t shard, Check(op.key, op.value ? op.value->size() : 0));
      if (i == 0) first = shard;
      across = across || shard != first;
      WriteOp w;
      w.key = op.key;
      if (op.value && !op.check_only) w.value = *op.value;
      w.conditional = op.expected_version.has_value();
      w.expected_version = op.expected_version.value_or(0);
      w.check_only = op.check_only;
      wops.push_back(w);
    }
    // Across shards only where nothing is replicated: a backup receives a batch of its own shard
    // (Replicate ships one shard's range), so a shard with backups keeps batches to itself.
    if (across && !CommitsAcrossShards()) {
      return Status::InvalidArgument(
                 "kv batch: keys in different shards of a replicated server; "
                 "a batch is atomic within one shard")
          .WithSubCode(StatusSubCode::kCrossShard);
    }
    uncommitted_ = true;
    writes_++;
    auto r = across ? store_->BatchAcrossShards(wops)
                    : store_->Batch(Store::WorkerOf(first, geo_.workers), first, wops, 0);
    if (!r.ok()) return r.status();
    return BatchReply{r->applied, std::move(r->versions)};
  }

  bool CommitsAcrossShards() const override {
    return !cluster_mode_ || LeadsEveryShardUnreplicated(agent_, geo_.shards);  // map lock held
  }

  Status Commit() override ASYMNVM_NO_THREAD_SAFETY_ANALYSIS {
    if (committed_) return Status::Ok();
    committed_ = true;
    // Replication already happened write by write, except in batch mode, whose staged records go
    // now (under the locks: per-worker state). The local sync comes after the locks are released,
    // so that the OQ workers and the next section run meanwhile; the ticket makes whoever reads
    // these writes in between wait for it before replying.
    store_->SetSharedLog(UINT32_MAX);
    uint64_t ticket = 0;
    Status replicated;  // batch mode: the first failure (the server has fenced itself)
    if (uncommitted_) {
      for (uint32_t w = 0; w < geo_.workers; w++) {
        if (others_deferred_[w]) continue;
        store_->HandOffDeferred(w);
        if (batch_replication_ && agent_ != nullptr) {
          Status st = agent_->FlushBatch(w);
          if (replicated.ok()) replicated = std::move(st);
        }
      }
      ticket = syncs_->Issue();
    }
    if (map_lock_.owns_lock()) map_lock_.unlock();
    for (uint32_t w = geo_.workers; w-- > 0;) exec_[w].unlock();
    if (ticket != 0) {
      store_->SyncThread();  // this thread's flushed ranges: every write of the section
      syncs_->Done(ticket);
    }
    syncs_->WaitUpTo(wait_for_);
    return replicated;
  }

 private:
  Result<uint32_t> Check(std::string_view key, size_t value_size) const {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(key));
    if (value_size > kMaxValueSize) {
      return Status::InvalidArgument("kv: value of " + std::to_string(value_size) +
                                     " bytes is over the limit of " +
                                     std::to_string(kMaxValueSize));
    }
    const uint32_t shard = ShardOf(key);
    if (!Serves(shard)) {
      return Status::FailedPrecondition("kv local: shard " + std::to_string(shard) +
                                        " is not served by this section");
    }
    return shard;
  }

  Store* store_;
  Mutex* exec_;
  LocalSyncs* syncs_;
  ClusterAgent* agent_;
  bool cluster_mode_;
  bool batch_replication_;
  const format::ServerHeader& geo_;
  std::shared_lock<std::shared_mutex> map_lock_;
  std::vector<bool> others_deferred_;
  uint64_t wait_for_ = 0;
  bool uncommitted_ = false;  // wrote something
  bool committed_ = false;    // Commit ran: the locks are released
};

}  // namespace

std::unique_ptr<LocalSection> Server::BeginLocal() {
  return std::make_unique<LocalSectionImpl>(
      impl_->store.get(), impl_->exec.get(), impl_->local_syncs.get(),
      impl_->cluster_mode ? impl_->agent_ptr.load() : nullptr, impl_->cluster_mode,
      impl_->replication == ReplicationMode::kBatch);
}

bool Server::CommitsAcrossShards() const {
  if (!impl_->cluster_mode) return true;
  ClusterAgent* agent = impl_->agent_ptr.load();
  if (agent == nullptr) return false;
  auto lock = agent->Lock();
  return LeadsEveryShardUnreplicated(agent, impl_->store->geometry().shards);
}

std::string Server::address() const { return impl_->oq->address(); }
std::string Server::rowan_address() const {
  return impl_->receiver ? impl_->receiver->address() : std::string();
}
std::string Server::rdmp_address() const {
  return impl_->bypass ? impl_->bypass->address() : std::string();
}
std::string Server::remote_log_address() const {
  return impl_->remote_logs ? impl_->remote_logs->address() : std::string();
}
std::string Server::pool_uuid() const { return pm::UuidToString(impl_->pool->superblock().uuid); }
const format::ServerHeader& Server::geometry() const { return impl_->store->geometry(); }

const metrics::RequestMetrics& Server::request_metrics() const { return impl_->request_metrics; }

ServerStats Server::stats() const {
  ServerStats s;
  s.store = impl_->store->stats();
  s.requests = impl_->requests;
  s.rejected = impl_->rejected;
  s.nilext_dropped = impl_->nilext_dropped;
  const pm::SyncStats ss = impl_->pool->sync_stats();
  s.pm_syncs = ss.syncs;
  s.pm_sync_bytes = ss.bytes;
  if (impl_->agent) {
    s.map_epoch = impl_->agent->epoch();
    s.digested = impl_->agent->digested() +
                 (impl_->remote_logs ? impl_->remote_logs->digested() : uint64_t{0});
    s.catchups = impl_->agent->catchups_done();
    s.replicated_writes = impl_->agent->replicated_writes();
    s.replication_round_trips = impl_->agent->replication_round_trips();
    s.replication_bytes = impl_->agent->replication_bytes();
    s.promotions = impl_->agent->promotions();
    s.fenced_refusals = impl_->agent->fenced_refusals();
    s.backups_removed = impl_->agent->backups_removed();
    s.lease_age_ms = static_cast<uint64_t>(impl_->agent->lease_age().count());
    s.led_shards = impl_->agent->LedShards();
  }
  if (impl_->bypass) {
    const auto b = impl_->bypass->stats();
    s.rdmp_reserved = b.reservations;
    s.rdmp_settled = b.settled;
    s.rdmp_revoked = b.revoked;
  }
  s.rdmp_published = impl_->rdmp_published;
  s.rdmp_located = impl_->rdmp_located;
  return s;
}

void Server::Stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  if (impl_->agent) impl_->agent->Stop();  // unregisters: the manager moves our shards
  if (impl_->oq) impl_->oq->Stop();
  if (impl_->bypass) impl_->bypass->Stop();
  if (impl_->receiver) impl_->receiver->Close();
  if (impl_->remote_logs) impl_->remote_logs->Close();
  {
    MutexLock l(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->cleaner.joinable()) impl_->cleaner.join();
}

}  // namespace asymnvm::kv
