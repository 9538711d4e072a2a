#include "kv/cluster.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::kv {

namespace {
constexpr uint16_t kReplicaEntryType = 1;

uint64_t EntryVersion(std::span<const uint8_t> e) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= uint64_t{e[16 + i]} << (8 * i);
  return v;
}

bool ParseServerNode(const std::string& data, ServerAddr* a) {
  std::istringstream in(data);
  std::string k, v;
  while (in >> k >> v) {
    if (k == "oq") a->oq = v;
    if (k == "rowan") a->rowan = v;
    if (k == "base") a->base = v;
  }
  return !a->oq.empty() && !a->rowan.empty();
}
}  // namespace

Result<std::unique_ptr<ClusterAgent>> ClusterAgent::Start(const AgentOptions& o) {
  if (o.store == nullptr || o.fabric == nullptr || o.pd == nullptr || o.receiver == nullptr ||
      o.uuid.empty() || o.coordinator.empty()) {
    return Status::InvalidArgument(
        "kv cluster: store, fabric, pd, receiver, uuid, coordinator "
        "are required");
  }
  std::unique_ptr<ClusterAgent> a(new ClusterAgent(o));
  ASYMNVM_RETURN_IF_ERROR(a->Init());
  return a;
}

Status ClusterAgent::Init() {
  coord::Options co;
  co.session_timeout = o_.session_timeout;
  ASYMNVM_ASSIGN_OR_RETURN(coord_, coord::Coordinator::Open(o_.coordinator, co));
  base_ = "/asymnvm/kv/" + o_.cluster;
  map_path_ = base_ + "/map";
  ASYMNVM_RETURN_IF_ERROR(coord_->EnsurePath(base_ + "/servers"));
  roles_.assign(o_.store->geometry().shards, Role::kNone);
  served_ = std::make_unique<std::atomic<uint64_t>[]>(o_.store->geometry().shards);
  if (o_.rejoin_backoff_ms > 0) {
    RejoinBackoff::Options ro;
    ro.first = std::chrono::milliseconds(o_.rejoin_backoff_ms);
    ro.max = ro.first * 8;
    ro.reset_after = std::chrono::seconds(30);
    rejoin_ = RejoinBackoff(ro);
  }
  if (o_.rebalance.enabled()) ASYMNVM_RETURN_IF_ERROR(coord_->EnsurePath(base_ + "/load"));
  reps_.resize(o_.store->geometry().workers);
  const std::string node = base_ + "/servers/" + o_.uuid;
  std::string data = "oq " + o_.self.oq + "\nrowan " + o_.self.rowan + "\n";
  if (!o_.self.base.empty()) data += "base " + o_.self.base + "\n";
  const auto deadline = coord::Clock::now() + std::chrono::seconds(30);
  for (;;) {
    auto created = coord_->Create(node, data, coord::kEphemeral);
    if (created.ok()) break;
    if (created.status().code() != StatusCode::kAlreadyExists || coord::Clock::now() >= deadline) {
      return created.status().WithContext("kv cluster: register " + node);
    }
    auto old = coord_->Get(node);
    if (!old.ok()) continue;
    (void)coord_->WaitForChange(node, old->version,
                                std::min(deadline, coord::Clock::now() + std::chrono::seconds(1)));
  }
  auto wake = [this](const coord::WatchEvent&) {
    MutexLock l(wake_mu_);
    wake_seq_++;
    wake_cv_.notify_all();
  };
  auto w1 = coord_->Watch(base_ + "/servers", coord::WatchKind::kChildren, wake);
  if (w1.ok()) w1_ = *w1;
  auto w2 = coord_->Watch(map_path_, coord::WatchKind::kNode, wake);
  if (w2.ok()) w2_ = *w2;
  manager_ = std::thread([this] { ManagerLoop(); });
  follower_ = std::thread([this] { FollowLoop(); });
  digester_ = std::thread([this] { DigestLoop(); });
  if (o_.rebalance.enabled()) loader_ = std::thread([this] { LoadLoop(); });
  return Status::Ok();
}

ClusterAgent::~ClusterAgent() { Stop(); }

void ClusterAgent::Stop() {
  if (stop_.exchange(true)) return;
  {
    MutexLock l(wake_mu_);
    wake_seq_++;
  }
  wake_cv_.notify_all();
  for (auto* t : {&manager_, &follower_, &digester_, &loader_}) {
    if (t->joinable()) t->join();
  }
  std::vector<std::thread> ts;
  {
    MutexLock l(catch_mu_);
    ts.swap(catch_threads_);
  }
  for (auto& t : ts) t.join();
  if (coord_) {
    if (w1_) (void)coord_->Unwatch(w1_);
    if (w2_) (void)coord_->Unwatch(w2_);
    (void)coord_->Delete(base_ + "/servers/" + o_.uuid);
    if (o_.rebalance.enabled()) (void)coord_->Delete(base_ + "/load/" + o_.uuid);
    coord_->Close();
  }
}

uint64_t ClusterAgent::epoch() const {
  std::shared_lock l(mu_);
  return map_.epoch;
}

void ClusterAgent::WaitForAdoption(std::chrono::milliseconds timeout) {
  MutexLock l(adopt_mu_);
  const uint64_t seen = adopt_seq_;
  adopt_cv_.wait_for(l.native(), timeout,
                     [&]() ASYMNVM_REQUIRES(adopt_mu_) { return adopt_seq_ != seen || stop_; });
}

Status ClusterAgent::CheckLease() const {
  if (coord_->state() == coord::SessionState::kExpired) {
    return Status::Unavailable(
        "kv: fenced: this server's coordinator session expired (its shards have moved)");
  }
  const auto lease = coord_->lease_timeout();
  if (lease.count() <= 0) return Status::Ok();
  const auto age = std::chrono::steady_clock::now().time_since_epoch() -
                   std::chrono::nanoseconds(confirmed_ns_.load());
  if (age * 3 < lease * 2) return Status::Ok();
  fenced_refusals_.fetch_add(1, std::memory_order_relaxed);
  return Status::Unavailable(
      "kv: fenced: the coordinator last confirmed this server's shard map " +
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(age).count()) +
      " ms ago (2/3 of its " + std::to_string(lease.count()) +
      " ms session timeout passed): its shards may have moved");
}

std::chrono::milliseconds ClusterAgent::lease_age() const {
  if (coord_->lease_timeout().count() <= 0) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now().time_since_epoch() -
      std::chrono::nanoseconds(confirmed_ns_.load()));
}

std::vector<std::pair<uint32_t, uint32_t>> ClusterAgent::LedShards() const {
  std::shared_lock l(mu_);
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t s = 0; s < map_.assignment.size() && s < roles_.size(); s++) {
    if (roles_[s] != Role::kPrimary) continue;
    uint32_t synced = 0;
    for (const auto& b : map_.assignment[s].backups) synced += b.synced ? 1 : 0;
    out.push_back({s, synced});
  }
  return out;
}

Status ClusterAgent::CheckPrimary(uint32_t shard) const {
  if (shard < roles_.size() && roles_[shard] == Role::kPrimary) {
    Status st = CheckLease();
    if (st.ok()) served_[shard].fetch_add(1, std::memory_order_relaxed);
    return st;
  }
  return Status::Unavailable("kv: not primary for shard " + std::to_string(shard) + " (map epoch " +
                             std::to_string(map_.epoch) + ")");
}

bool ClusterAgent::HasBackups(uint32_t shard) const {
  return shard < map_.assignment.size() && !map_.assignment[shard].backups.empty();
}

Status ClusterAgent::EditMap(const std::function<bool(ShardMap*)>& edit, uint64_t* epoch) {
  for (int attempt = 0; attempt < 50; attempt++) {
    auto node = coord_->Get(map_path_);
    if (!node.ok()) return node.status();
    ASYMNVM_ASSIGN_OR_RETURN(ShardMap m, ShardMap::Decode(node->data));
    if (epoch != nullptr) *epoch = m.epoch;
    if (!edit(&m)) return Status::Ok();
    m.epoch++;
    auto set = coord_->Set(map_path_, m.Encode(), node->version);
    if (set.ok()) {
      if (epoch != nullptr) *epoch = m.epoch;
      return Status::Ok();
    }
    if (set.status().code() != StatusCode::kAborted) return set.status();
  }
  return Status::Aborted("kv cluster: the shard map kept changing");
}

Status ClusterAgent::Replicate(uint32_t worker, uint32_t shard, std::span<const uint8_t> entry) {
  // Called with Lock() held (the handler holds it for the whole request).
  if (shard >= map_.assignment.size()) return Status::Ok();
  const auto& backups = map_.assignment[shard].backups;
  if (backups.empty()) return Status::Ok();
  if (o_.mode != ReplicationMode::kRowan) return ReplicateBaseline(worker, shard, entry);
  WorkerReplication& rep = reps_[worker];
  if (!rep.cq) {
    auto cq = o_.fabric->CreateCq({.capacity = 8192});
    if (!cq.ok()) return cq.status().WithContext("kv replication: completion queue");
    rep.cq = std::move(cq).value();
  }
  const rowan::EntryMeta meta{kReplicaEntryType, static_cast<uint16_t>(shard), EntryVersion(entry)};
  struct Pending {
    std::string uuid;
    uint64_t token;
    rowan::Sender* sender;
  };
  std::vector<Pending> pending;
  std::vector<std::pair<std::string, Status>> failed;
  // Post to every backup at once (SEND blocks + FLUSH per backup, one doorbell each).
  for (const auto& b : backups) {
    if (Removed(b.uuid, shard)) {
      VoidCatchUp(shard, b.uuid);  // this write misses it: a catch-up of it must not count
      continue;
    }
    Status st;
    auto it = rep.senders.find(b.uuid);
    if (it == rep.senders.end()) {
      auto addr = map_.servers.find(b.uuid);
      if (addr == map_.servers.end()) {
        st = Status::NotFound("no address for backup " + b.uuid);
      } else {
        rowan::SenderOptions so;
        so.fabric = o_.fabric;
        so.pd = o_.pd;
        so.address = addr->second.rowan;
        so.timeout = BackupConnectTimeout();
        so.cq = rep.cq.get();
        so.max_inline = 4096;   // every block of the default 4 KiB MTU goes inline
        so.max_send_wr = 2048;  // a 1 MiB entry is 257 blocks + a FLUSH
        auto s = rowan::Sender::Connect(so);
        if (s.ok()) {
          it = rep.senders.emplace(b.uuid, std::move(s).value()).first;
        } else {
          st = s.status();
        }
      }
    }
    if (st.ok()) {
      const uint64_t token = rep.next_token++;
      st = it->second->PostAppend(meta, entry, token);
      if (st.ok()) pending.push_back({b.uuid, token, it->second.get()});
    }
    if (!st.ok()) failed.push_back({b.uuid, st});
  }
  // Wait for every FLUSH ack (or an error completion of that connection) up to the backup bound:
  // a backup that has not acknowledged by then (stopped, swapping, stalled) leaves the shard as a
  // dead one does, and the write is acknowledged without it (doc/kv.md §Failure model).
  const auto deadline = std::chrono::steady_clock::now() + BackupBound();
  fabric::Completion cs[64];
  while (!pending.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      for (auto& p : pending) failed.push_back({p.uuid, Status::TimedOut("no FLUSH ack in time")});
      pending.clear();
      break;
    }
    auto n =
        rep.cq->Wait(cs, std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
    if (!n.ok()) {
      for (auto& p : pending) failed.push_back({p.uuid, n.status()});
      pending.clear();
      break;
    }
    for (size_t i = 0; i < *n; i++) {
      for (size_t k = 0; k < pending.size(); k++) {
        Pending& p = pending[k];
        if (cs[i].connection_id != p.sender->connection().id()) continue;
        if (cs[i].status != fabric::CompletionStatus::kSuccess) {
          failed.push_back(
              {p.uuid, Status::ConnectionError(std::string("rowan SEND/FLUSH completed with ") +
                                               fabric::CompletionStatusName(cs[i].status))});
        } else if (!p.sender->IsAck(cs[i], p.token)) {
          continue;  // an older round's completion
        }
        pending.erase(pending.begin() + static_cast<long>(k));
        break;
      }
    }
  }
  // A backup that failed must leave the shard before this write is acknowledged, or it could be
  // promoted without it.
  repl_writes_++;
  for (auto& [uuid, s] : rep.senders) Count(rep, s.get(), s->connection().counters());
  for (auto& [gone, st] : failed) {
    auto it = rep.senders.find(gone);
    if (it != rep.senders.end()) rep.counted.erase(it->second.get());
    rep.senders.erase(gone);
    const std::set<uint32_t> shards = BackedBy(gone, shard);
    for (uint32_t s : shards) VoidCatchUp(s, gone);
    ASYMNVM_RETURN_IF_ERROR(RemoveBackup(gone, shards, st, shard));
  }
  return Status::Ok();
}

void ClusterAgent::Count(WorkerReplication& rep, const void* sender, const fabric::Counters& now) {
  fabric::Counters& seen = rep.counted[sender];
  const fabric::Counters d = now - seen;
  repl_round_trips_ += d.round_trips;
  repl_bytes_ += d.bytes_out + d.bytes_in;
  seen = now;
}

std::chrono::milliseconds ClusterAgent::BackupBound() const {
  return o_.backup_timeout.count() > 0 ? std::min(o_.backup_timeout, o_.replicate_timeout)
                                       : o_.replicate_timeout;
}

std::chrono::milliseconds ClusterAgent::BackupConnectTimeout() const {
  // A connection takes a few round trips and a registration: four times the ack bound, at least
  // a second (a loaded machine), never more than replicate_timeout.
  return std::min(o_.replicate_timeout,
                  std::max(4 * BackupBound(), std::chrono::milliseconds(1000)));
}

bool ClusterAgent::Removed(const std::string& backup, uint32_t shard) const {
  if (!any_removed_.load(std::memory_order_acquire)) return false;
  MutexLock l(removed_mu_);
  auto it = removed_.find(backup);
  return it != removed_.end() && it->second.shards.count(shard) != 0;
}

std::set<uint32_t> ClusterAgent::BackedBy(const std::string& backup, uint32_t shard) const {
  // Called with Lock() held. A backup that failed one write would fail the next write of every
  // other shard it backs, each after the bound: it leaves them all in one map edit.
  std::set<uint32_t> shards{shard};
  for (uint32_t s = 0; s < map_.assignment.size(); s++) {
    if (s >= roles_.size() || roles_[s] != Role::kPrimary) continue;
    for (const auto& b : map_.assignment[s].backups) {
      if (b.uuid == backup) shards.insert(s);
    }
  }
  return shards;
}

void ClusterAgent::VoidCatchUp(uint32_t shard, const std::string& backup) {
  MutexLock l(catch_mu_);
  catch_void_[{shard, backup}]++;
}

Status ClusterAgent::RemoveBackup(const std::string& gone, const std::set<uint32_t>& shards,
                                  const Status& why, uint32_t write_shard) {
  LOG_WARN("kv", "replication to " << gone << " failed (" << why.ToString()
                                   << "); removing it from " << shards.size() << " shard(s)");
  const std::string self = o_.uuid;
  std::set<uint32_t> led;  // of `shards`, those the coordinator's map says this server leads
  uint64_t epoch = 0;
  Status e = EditMap(
      [&](ShardMap* m) {
        bool changed = false;
        led.clear();
        for (uint32_t shard : shards) {
          if (shard >= m->assignment.size() || m->assignment[shard].primary != self) continue;
          led.insert(shard);
          auto& bs = m->assignment[shard].backups;
          const size_t n = bs.size();
          bs.erase(std::remove_if(bs.begin(), bs.end(),
                                  [&](const ShardAssignment::Backup& x) { return x.uuid == gone; }),
                   bs.end());
          changed |= bs.size() != n;
        }
        return changed;
      },
      &epoch);
  if (!e.ok()) {
    return Status::Unavailable("kv: backup " + gone +
                               " failed and the shard map could not be updated: " + e.ToString());
  }
  if (!led.empty()) {
    backups_removed_.fetch_add(1, std::memory_order_relaxed);
    // The coordinator's map no longer lists it for these shards: the writes that follow skip it
    // until that map (or a later one) is adopted here.
    MutexLock l(removed_mu_);
    RemovedBackup& r = removed_[gone];
    r.epoch = std::max(r.epoch, epoch);
    r.shards.insert(led.begin(), led.end());
    any_removed_.store(true, std::memory_order_release);
  }
  if (shards.count(write_shard) != 0 && led.count(write_shard) == 0) {
    // The shard moved (a failover or a handoff) while this write waited for the backup: its new
    // primary may lack the write, which therefore must not be acknowledged. Nor may it be refused
    // as "not primary" (that says nothing was applied, and the client would resend it): the
    // backups that acknowledged it hold it, so its outcome is unknown.
    return Status::Unavailable("kv: shard " + std::to_string(write_shard) +
                               " moved while this write waited for a failed backup (the "
                               "coordinator's map, epoch " +
                               std::to_string(epoch) +
                               ", names another primary): its outcome is unknown");
  }
  return Status::Ok();
}

RemoteLogSender* ClusterAgent::BaseSender(uint32_t worker, const std::string& uuid, Status* st) {
  WorkerReplication& rep = reps_[worker];
  std::shared_ptr<SharedRing> ring;
  if (o_.mode == ReplicationMode::kShare) {
    MutexLock l(rings_mu_);
    auto& r = rings_[uuid];
    bool broken = r == nullptr;
    if (r != nullptr) {
      MutexLock rl(r->mu);
      broken = r->broken;
    }
    if (broken) {
      r = std::make_shared<SharedRing>();
      std::random_device rd;
      r->nonce = (uint64_t{rd()} << 32 | rd()) | 1;
    }
    ring = r;
  }
  auto it = rep.base.find(uuid);
  if (it != rep.base.end() && it->second.ring == ring) return it->second.sender.get();
  if (it != rep.base.end()) {
    rep.counted.erase(it->second.sender.get());
    rep.base.erase(it);
  }
  auto addr = map_.servers.find(uuid);
  if (addr == map_.servers.end() || addr->second.base.empty()) {
    *st = Status::NotFound("backup " + uuid + " offers no remote logs (same --replication?)");
    return nullptr;
  }
  RemoteLogSenderOptions so;
  so.fabric = o_.fabric;
  so.pd = o_.pd;
  so.address = addr->second.base;
  so.mode = o_.mode;
  so.self_uuid = o_.uuid;
  so.thread = worker;
  so.shared = ring;
  so.timeout = BackupConnectTimeout();
  auto s = RemoteLogSender::Connect(so);
  if (!s.ok()) {
    *st = s.status();
    if (ring) {
      MutexLock rl(ring->mu);
      ring->broken = true;
    }
    return nullptr;
  }
  auto& b = rep.base[uuid];
  b.sender = std::move(s).value();
  b.ring = ring;
  return b.sender.get();
}

Status ClusterAgent::ReplicateBaseline(uint32_t worker, uint32_t shard,
                                       std::span<const uint8_t> entry) {
  WorkerReplication& rep = reps_[worker];
  std::vector<std::pair<std::string, Status>> failed;
  std::vector<std::pair<std::string, RemoteLogSender*>> posted;
  for (const auto& b : map_.assignment[shard].backups) {
    if (Removed(b.uuid, shard)) {
      VoidCatchUp(shard, b.uuid);  // this write misses it: a catch-up of it must not count
      continue;
    }
    Status st;
    RemoteLogSender* s = BaseSender(worker, b.uuid, &st);
    if (s != nullptr) st = s->Post(entry);
    if (!st.ok()) {
      failed.push_back({b.uuid, st});
    } else if (o_.mode == ReplicationMode::kBatch) {
      rep.staged[b.uuid].insert(shard);
    } else {
      posted.push_back({b.uuid, s});
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + BackupBound();
  for (auto& [uuid, s] : posted) {
    Status st = s->Await(deadline);
    if (!st.ok()) failed.push_back({uuid, st});
  }
  repl_writes_++;
  for (auto& [uuid, s] : posted) Count(rep, s, s->counters());
  for (auto& [gone, st] : failed) {
    std::set<uint32_t> shards = BackedBy(gone, shard);
    for (uint32_t s : rep.staged[gone]) shards.insert(s);  // batch: also what it staged earlier
    auto it = rep.base.find(gone);
    if (it != rep.base.end()) rep.counted.erase(it->second.sender.get());
    rep.base.erase(gone);
    rep.staged.erase(gone);
    for (uint32_t s : shards) VoidCatchUp(s, gone);
    ASYMNVM_RETURN_IF_ERROR(RemoveBackup(gone, shards, st, shard));
  }
  return Status::Ok();
}

void ClusterAgent::FlushBatch(uint32_t worker) {
  if (o_.mode != ReplicationMode::kBatch || worker >= reps_.size()) return;
  WorkerReplication& rep = reps_[worker];
  if (rep.staged.empty()) return;
  const auto deadline = std::chrono::steady_clock::now() + BackupBound();
  std::map<std::string, std::set<uint32_t>> staged;
  staged.swap(rep.staged);
  for (auto& [uuid, shards] : staged) {
    auto it = rep.base.find(uuid);
    if (it == rep.base.end()) continue;
    Status st = it->second.sender->Await(deadline);
    Count(rep, it->second.sender.get(), it->second.sender->counters());
    if (st.ok()) continue;
    rep.counted.erase(it->second.sender.get());
    rep.base.erase(it);
    for (uint32_t s : shards) VoidCatchUp(s, uuid);
    Status e = RemoveBackup(uuid, shards, st);
    if (!e.ok()) {
      LOG_ERROR("kv", "batch replication: " << e.ToString()
                                            << "; stopping (replies of unreplicated writes are "
                                               "decided)");
      std::abort();
    }
  }
}

void ClusterAgent::ManagerLoop() {
  const std::string manager_node = base_ + "/manager";
  bool manager = false;
  uint64_t seen = 0;
  while (!stop_) {
    if (!manager) {
      auto c = coord_->Create(manager_node, o_.uuid, coord::kEphemeral);
      manager = c.ok();
      if (manager) LOG_INFO("kv", "configuration manager of cluster " << o_.cluster);
    }
    if (manager) {
      std::map<std::string, ServerAddr> live;
      auto names = coord_->Children(base_ + "/servers");
      if (names.ok()) {
        for (auto& n : *names) {
          auto node = coord_->Get(base_ + "/servers/" + n);
          ServerAddr a;
          if (node.ok() && ParseServerNode(node->data, &a)) live[n] = a;
        }
        ShardMap cur;
        int64_t version = coord::Coordinator::kNoNode;
        auto node = coord_->Get(map_path_);
        bool ok = true;
        if (node.ok()) {
          auto m = ShardMap::Decode(node->data);
          if (m.ok()) {
            cur = *m;
            version = node->version;
          } else {
            LOG_ERROR("kv", "manager: " << m.status().ToString());
            ok = false;
          }
        } else if (node.status().code() != StatusCode::kNotFound) {
          ok = false;
        }
        JoinHold held;
        if (ok && o_.rejoin_backoff_ms > 0) {
          const auto now = std::chrono::steady_clock::now();
          std::set<std::string> live_ids;
          for (auto& [u, a] : live) live_ids.insert(u);
          for (const auto& [who, delay] : rejoin_.Observe(last_seen_, cur, live_ids, now)) {
            rejoin_holds_++;
            LOG_WARN("kv",
                     "manager: shard:backup "
                         << who
                         << " was removed by its primary while alive; "
                            "it may rejoin that shard in "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(delay).count()
                         << " ms");
          }
          if (cur.epoch >= last_seen_.epoch) last_seen_ = cur;
          held = rejoin_.Held(now);
        }
        ShardMap next;
        const bool ready = cur.epoch != 0 || live.size() >= o_.initial_servers;
        if (ok && ready &&
            NextMap(cur, live, o_.store->geometry().shards, o_.rf == 0 ? 3 : o_.rf, &next, held)) {
          Status st = version == coord::Coordinator::kNoNode
                          ? coord_->Create(map_path_, next.Encode()).status()
                          : coord_->Set(map_path_, next.Encode(), version).status();
          if (st.ok()) LOG_INFO("kv", "manager: shard map epoch " << next.epoch);
          if (st.ok() || st.code() == StatusCode::kAborted ||
              st.code() == StatusCode::kAlreadyExists) {
            continue;  // re-read at once (also after losing a race)
          }
          LOG_WARN("kv", "manager: writing the shard map: " << st.ToString());
        } else if (ok && cur.epoch != 0) {
          std::set<std::string> live_set;
          for (auto& [u, a] : live) live_set.insert(u);
          const bool spreading = o_.spread_primaries && Spread(cur, version, live_set);
          if (!spreading && o_.rebalance.enabled()) Rebalance(cur, version, live_set);
        }
      }
    }
    auto period = std::chrono::milliseconds(200);
    if (o_.rebalance.enabled()) {
      period = std::min(period, std::chrono::milliseconds(o_.rebalance.period_ms));
    }
    const auto lease = coord_->lease_timeout();
    if (lease.count() > 0) period = std::min(period, lease / 6);  // renew well inside 2/3
    MutexLock l(wake_mu_);
    wake_cv_.wait_for(l.native(), period,
                      [&]() ASYMNVM_REQUIRES(wake_mu_) { return wake_seq_ != seen || stop_; });
    seen = wake_seq_;
  }
}

void ClusterAgent::FollowLoop() {
  int64_t adopted = -1;
  uint64_t seen = 0;
  while (!stop_) {
    const auto sent = std::chrono::steady_clock::now();
    auto node = coord_->Get(map_path_);
    if (node.ok() && (node->version != adopted || readopt_)) {
      auto m = ShardMap::Decode(node->data);
      if (m.ok()) {
        Adopt(*m);
        adopted = node->version;
        readopt_ = false;
      } else {
        LOG_ERROR("kv", "shard map: " << m.status().ToString());
      }
    }
    // The lease runs from when this read was sent, and only once its map is adopted: a request
    // that passes CheckLease afterwards is served under a map at least that recent.
    if (node.ok()) confirmed_ns_ = sent.time_since_epoch().count();
    if (coord_->state() == coord::SessionState::kExpired) {
      // Its ephemeral node is gone and the manager moves its shards; a new session would make it
      // a new member, which a restart does properly (it rejoins as a backup). Every request is
      // refused from now on (CheckLease); the owner decides what the process does.
      LOG_ERROR("kv", "fenced: the coordinator session expired; this server serves nothing more");
      if (o_.on_session_expired) o_.on_session_expired();
      return;
    }
    if (node.ok()) HandoffReady();
    // (Re)start catch-ups of joining backups of our shards.
    {
      std::shared_lock l(mu_);
      for (uint32_t s = 0; s < map_.assignment.size(); s++) {
        if (roles_[s] != Role::kPrimary) continue;
        for (const auto& b : map_.assignment[s].backups) {
          if (b.synced) continue;
          MutexLock cl(catch_mu_);
          if (catching_.insert({s, b.uuid}).second) {
            const uint64_t gen = catch_void_[{s, b.uuid}];
            catch_threads_.emplace_back(
                [this, s, u = b.uuid, e = map_.epoch, gen] { CatchUp(s, u, e, gen); });
          }
        }
      }
    }
    auto period = std::chrono::milliseconds(200);
    const auto lease = coord_->lease_timeout();
    if (lease.count() > 0) period = std::min(period, lease / 6);  // renew well inside 2/3
    MutexLock l(wake_mu_);
    wake_cv_.wait_for(l.native(), period,
                      [&]() ASYMNVM_REQUIRES(wake_mu_) { return wake_seq_ != seen || stop_; });
    seen = wake_seq_;
  }
}

void ClusterAgent::Adopt(const ShardMap& m) {
  const auto& g = o_.store->geometry();
  if (m.shards != g.shards) {
    LOG_ERROR("kv",
              "shard map has " << m.shards << " shards, this pool " << g.shards << "; not serving");
    return;
  }
  if (m.epoch < handoff_floor_) {
    // Read before this server's own handoff map was written (see handoff_floor_).
    LOG_INFO("kv", "shard map epoch " << m.epoch << " predates this server's handoff (epoch "
                                      << handoff_floor_ << "); not adopted");
    return;
  }
  std::vector<uint32_t> promoted;
  {
    std::shared_lock l(mu_);
    for (uint32_t s = 0; s < m.shards; s++) {
      if (m.assignment[s].primary == o_.uuid && roles_[s] != Role::kPrimary) promoted.push_back(s);
    }
  }
  if (!promoted.empty()) {
    promotions_.fetch_add(promoted.size(), std::memory_order_relaxed);
    // Finish digesting what the old primary replicated here, then let versions continue above
    // anything an earlier epoch issued.
    DigestLive();
    for (uint32_t s : promoted) o_.store->RaiseVersionFloor(s, m.epoch << 40);
  }
  std::unique_lock l(mu_);
  {
    // A backup being caught up that this map drops (or a shard this server no longer leads):
    // writes stop going to it, so that catch-up cannot mark it synced even if it is added back.
    MutexLock cl(catch_mu_);
    for (const auto& [s, u] : catching_) {
      bool listed = false;
      if (s < m.shards && m.assignment[s].primary == o_.uuid) {
        for (const auto& b : m.assignment[s].backups) listed |= b.uuid == u;
      }
      if (!listed) catch_void_[{s, u}]++;
    }
  }
  DropStaleSenders(m);
  map_ = m;
  for (uint32_t s = 0; s < m.shards; s++) {
    roles_[s] = m.assignment[s].primary == o_.uuid ? Role::kPrimary : Role::kNone;
  }
  {
    // This map reflects every removal up to its epoch (a later edit may have added the backup
    // back as joining: it is then replicated to again).
    MutexLock rl(removed_mu_);
    std::erase_if(removed_, [&](const auto& kv) { return kv.second.epoch <= m.epoch; });
    any_removed_.store(!removed_.empty(), std::memory_order_release);
  }
  l.unlock();
  {
    MutexLock al(adopt_mu_);
    adopt_seq_++;
  }
  adopt_cv_.notify_all();
  if (!promoted.empty()) {
    // The old primary may have died between its appends to different backups: they can differ
    // in writes it never acknowledged. Until each backup has been caught up from this (new)
    // primary it is only `joining` — never promoted — so a value once read cannot revert.
    const std::string self = o_.uuid;
    Status st = EditMap([&](ShardMap* mm) {
      bool changed = false;
      for (uint32_t s : promoted) {
        if (s >= mm->assignment.size() || mm->assignment[s].primary != self) continue;
        for (auto& b : mm->assignment[s].backups) {
          changed |= b.synced;
          b.synced = false;
        }
      }
      return changed;
    });
    if (!st.ok()) LOG_WARN("kv", "re-syncing backups of promoted shards: " << st.ToString());
  }
  LOG_INFO("kv", "adopted shard map epoch " << m.epoch << " (" << promoted.size()
                                            << " shards promoted here)");
}

void ClusterAgent::DropStaleSenders(const ShardMap& next) {
  std::set<std::string> added;
  for (uint32_t s = 0; s < next.assignment.size(); s++) {
    if (next.assignment[s].primary != o_.uuid) continue;
    for (const auto& b : next.assignment[s].backups) {
      bool listed = false;
      if (s < map_.assignment.size() && map_.assignment[s].primary == o_.uuid) {
        for (const auto& o : map_.assignment[s].backups) listed |= o.uuid == b.uuid;
      }
      if (!listed) added.insert(b.uuid);
    }
  }
  for (auto& rep : reps_) {
    for (const auto& u : added) {
      if (auto it = rep.senders.find(u); it != rep.senders.end()) {
        rep.counted.erase(it->second.get());
        rep.senders.erase(it);
      }
      auto it = rep.base.find(u);
      if (it != rep.base.end() && rep.staged.count(u) == 0) {
        rep.counted.erase(it->second.sender.get());
        rep.base.erase(it);
      }
    }
  }
}

void ClusterAgent::CatchUp(uint32_t shard, std::string backup, uint64_t epoch,
                           uint64_t generation) {
  auto done = [&] {
    MutexLock l(catch_mu_);
    catching_.erase({shard, backup});
  };
  std::string address;
  {
    std::shared_lock l(mu_);
    auto it = map_.servers.find(backup);
    if (it != map_.servers.end()) address = it->second.rowan;
  }
  rowan::SenderOptions so;
  so.fabric = o_.fabric;
  so.pd = o_.pd;
  so.address = address;
  so.timeout = o_.replicate_timeout;
  so.max_send_wr = 1024;
  auto sender = rowan::Sender::Connect(so);
  if (!sender.ok()) {
    LOG_WARN("kv", "catch-up of shard " << shard << " to " << backup << ": "
                                        << sender.status().ToString());
    done();
    return;
  }
  uint64_t n = 0, bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = o_.store->ForEachEntry(shard, [&](std::span<const uint8_t> e) {
    if (stop_) return Status::Aborted("stopping");
    n++;
    bytes += e.size();
    return (*sender)->Append({kReplicaEntryType, static_cast<uint16_t>(shard), EntryVersion(e)}, e);
  });
  // The streaming time (the migration rate of a resharding move, doc/kv.md §Resharding).
  const int64_t us = std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - t0)
                                              .count());
  bool marked = false;
  if (st.ok()) {
    // Test hooks (tests/kv/kv_fence_test.cc KvRejoin): hold a finished stream before marking, and
    // (negative control) mark without the check below.
    if (const char* hold = std::getenv("ASYMNVM_TEST_CATCHUP_HOLD_MS")) {
      for (int i = std::atoi(hold) / 10; i > 0 && !stop_; i--) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    const bool check = std::getenv("ASYMNVM_TEST_DISABLE_CATCHUP_VOID") == nullptr;
    const std::string self = o_.uuid;
    st = EditMap([&](ShardMap* m) {
      marked = false;
      if (shard >= m->assignment.size() || m->assignment[shard].primary != self) return false;
      {
        // A write since the start that did not reach the backup (it failed, or the backup left
        // the shard meanwhile and came back): the stream may lack it.
        MutexLock l(catch_mu_);
        if (check && catch_void_[{shard, backup}] != generation) return false;
      }
      for (auto& b : m->assignment[shard].backups) {
        if (b.uuid == backup && !b.synced) {
          b.synced = true;
          marked = true;
          return true;
        }
      }
      return false;
    });
  }
  if (st.ok() && !marked) {
    LOG_INFO("kv", "catch-up of shard " << shard << " to " << backup
                                        << ": not marked synced (it left the shard, or a write "
                                           "missed it meanwhile); the next map round retries");
  } else if (st.ok()) {
    catchups_done_++;
    LOG_INFO("kv", "catch-up of shard " << shard << " to " << backup << ": " << n << " entries ("
                                        << bytes << " B) in " << us / 1000 << " ms ("
                                        << n * 1000000 / static_cast<uint64_t>(us)
                                        << " entries/s); synced (from epoch " << epoch << ")");
  } else {
    LOG_WARN("kv", "catch-up of shard " << shard << " to " << backup << ": " << st.ToString());
  }
  done();
}

void ClusterAgent::DigestLoop() {
  // Segments scanned but not committed: while an entry begun in them is incomplete (a multi-block
  // entry may span segments, and the scanner yields it only where its last block lands), they
  // stay live, so a restart of this server (which rebuilds from the live segments) still finds
  // the entry's first blocks. Committing them as soon as they were scanned lost such an entry if
  // the server died before its last block was digested.
  std::vector<uint32_t> held;
  constexpr size_t kMaxHeld = 8;
  // An entry that could not be applied (the store full even after the cleaner ran, or bytes that
  // do not validate): this server no longer holds everything its primaries acknowledged, so it
  // must not be promoted. It marks itself unsynced in the map (its primaries catch it up again)
  // before any segment is committed; until the mark is on the coordinator, every segment stays
  // live, so a restart finds the entry again.
  Status unapplied;
  while (!stop_) {
    if (!unapplied.ok()) {
      Status u = MarkSelfUnsynced(unapplied);
      if (u.ok()) {
        unapplied = Status::Ok();
      } else {
        LOG_WARN("kv", "digest: marking this backup unsynced: " << u.ToString());
      }
    }
    // Wait for data without digest_mu_: a promotion (DigestLive, the follower thread) needs it,
    // and holding it across this wait, releasing it and taking it again at once let this thread
    // win it back every time (issue 29: 1.4 s median, 6.7 s max from map written to serving).
    // The segment stays live (used, not committed) until this thread commits it under the lock,
    // so a DigestLive in between applies it too; applying twice is idempotent (by version).
    auto seg = o_.receiver->NextUsed(std::chrono::milliseconds(100));
    if (!seg.ok()) continue;
    MutexLock l(digest_mu_);
    rowan::Scanner& scanner = digest_scanner_;
    scanner.ScanSegment(seg->bytes, seg->post_seq, [&](const rowan::ScannedEntry& e) {
      Status st = o_.store->ApplyReplica(e.payload);
      if (!st.ok()) {
        LOG_ERROR("kv", "digest: an entry could not be applied: " << st.ToString());
        digest_failures_++;
        if (unapplied.ok()) unapplied = st;
      } else {
        digested_++;
      }
    });
    held.push_back(seg->index);
    if (!unapplied.ok()) continue;  // marked first (the top of the loop), committed after
    // The scanner remembers every entry it yielded (duplicate suppression) and the blocks of
    // entries still incomplete. Applying is idempotent, so only the latter must survive: start
    // afresh whenever no entry is half-seen — and only then commit the held segments.
    rowan::Scanner probe = scanner;
    probe.Finish();
    const bool whole = probe.report().incomplete_entries == scanner.report().incomplete_entries;
    while (!held.empty() && (whole || held.size() > kMaxHeld)) {
      if (!whole) {
        // An entry begun this many segments ago never completed: its sender died mid-entry (such
        // an entry was never acknowledged). Do not let it hold the whole area.
        LOG_WARN("kv", "digest: an entry begun " << held.size()
                                                 << " segments ago is incomplete; releasing the "
                                                    "oldest held segment");
      }
      Status c = o_.receiver->Commit(held.front());
      if (!c.ok()) LOG_WARN("kv", "digest commit: " << c.ToString());
      held.erase(held.begin());
      if (!whole) break;
    }
    if (whole) scanner = rowan::Scanner();
  }
}

void ClusterAgent::LoadLoop() {
  const std::string node = base_ + "/load/" + o_.uuid;
  const uint32_t shards = o_.store->geometry().shards;
  std::vector<uint64_t> last(shards, 0);
  auto start = std::chrono::steady_clock::now();
  uint64_t start_epoch = epoch();
  bool created = false;
  while (!stop_) {
    {
      MutexLock l(wake_mu_);
      wake_cv_.wait_for(l.native(), std::chrono::milliseconds(o_.rebalance.period_ms),
                        [&]() ASYMNVM_REQUIRES(wake_mu_) { return stop_.load(); });
    }
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    const int64_t us = std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::microseconds>(now - start).count());
    LoadReport r;
    r.epoch = start_epoch;
    {
      std::shared_lock l(mu_);
      for (uint32_t s = 0; s < shards; s++) {
        const uint64_t n = served_[s].load(std::memory_order_relaxed);
        const uint64_t delta = n - last[s];
        last[s] = n;
        if (roles_[s] == Role::kPrimary) {
          r.ops_per_sec[s] = delta * 1000000 / static_cast<uint64_t>(us);
        }
      }
      start_epoch = map_.epoch;  // the next period begins under this map
    }
    start = now;
    // Ephemeral: a dead server's statistics vanish with it.
    Status st =
        created ? coord_->Set(node, r.Encode(), coord::kAnyVersion).status() : Status::NotFound("");
    if (st.code() == StatusCode::kNotFound) {
      (void)coord_->Delete(node);  // a previous incarnation's node (same session: ours)
      st = coord_->Create(node, r.Encode(), coord::kEphemeral).status();
      created = st.ok();
    }
    if (!st.ok()) LOG_WARN("kv", "publishing load statistics: " << st.ToString());
  }
}

bool ClusterAgent::MovePending(const ShardMap& cur, int64_t version) {
  const RebalanceOptions& ro = o_.rebalance;
  const auto now = std::chrono::steady_clock::now();
  int pending = -1;
  for (uint32_t s = 0; s < cur.assignment.size(); s++) {
    if (!cur.assignment[s].move_to.empty()) pending = static_cast<int>(s);
  }
  if (pending >= 0) {
    if (move_started_ == std::chrono::steady_clock::time_point{}) move_started_ = now;
    if (now - move_started_ < std::chrono::milliseconds(ro.move_timeout_ms)) return true;
    // The target never became synced (or the primary never swapped): roll back.
    ShardMap next = cur;
    next.assignment[static_cast<uint32_t>(pending)].move_to.clear();
    next.epoch = cur.epoch + 1;
    Status st = coord_->Set(map_path_, next.Encode(), version).status();
    if (st.ok()) {
      LOG_WARN("kv", "manager: resharding: the move of shard "
                         << pending << " did not commit in " << ro.move_timeout_ms
                         << " ms; rolled back (map epoch " << next.epoch << ")");
    }
    return true;
  }
  // Without resharding nothing else reads the last move's start: the next pending move (perhaps
  // planned by an earlier manager) is timed from when this manager first sees it.
  if (!o_.rebalance.enabled()) move_started_ = {};
  return false;
}

bool ClusterAgent::Spread(const ShardMap& cur, int64_t version, const std::set<std::string>& live) {
  if (MovePending(cur, version)) return true;
  // With load-based resharding on, its moves may leave a server above the even share: spread
  // only beyond ceil(shards / servers) + 1, so that the two do not undo each other's moves.
  uint32_t limit = 0;
  if (o_.rebalance.enabled() && !live.empty()) {
    const auto n = static_cast<uint32_t>(live.size());
    limit = (static_cast<uint32_t>(cur.assignment.size()) + n - 1) / n + 1;
  }
  ShardMap next;
  std::string why;
  if (!PlanSpread(cur, live, limit, &next, &why)) return false;
  Status st = coord_->Set(map_path_, next.Encode(), version).status();
  if (!st.ok()) return true;  // lost a race: decided again on the next round
  move_started_ = std::chrono::steady_clock::now();
  spread_moves_++;
  LOG_INFO("kv",
           "manager: spreading primaries: moving " << why << " (map epoch " << next.epoch << ")");
  return true;
}

void ClusterAgent::Rebalance(const ShardMap& cur, int64_t version,
                             const std::set<std::string>& live) {
  const RebalanceOptions& ro = o_.rebalance;
  const auto now = std::chrono::steady_clock::now();
  if (MovePending(cur, version)) return;
  if (move_started_ != std::chrono::steady_clock::time_point{}) {
    // The last move committed or rolled back: statistics of periods begun before now mix the
    // old placement with the new.
    move_started_ = {};
    reports_from_epoch_ = cur.epoch;
  }
  if (now < next_rebalance_) return;
  next_rebalance_ = now + std::chrono::milliseconds(ro.period_ms);
  std::map<std::string, LoadReport> load;
  for (const auto& u : live) {
    auto node = coord_->Get(base_ + "/load/" + u);
    if (!node.ok()) return;  // not every server reported yet
    auto r = LoadReport::Decode(node->data);
    if (!r.ok()) {
      LOG_WARN("kv", "manager: load of " << u << ": " << r.status().ToString());
      return;
    }
    if (r->epoch < reports_from_epoch_) return;  // wait for a period under the current placement
    load[u] = *r;
  }
  const auto cooldown =
      std::chrono::milliseconds(ro.cooldown_ms != 0 ? ro.cooldown_ms : 10 * ro.period_ms);
  std::set<uint32_t> cooling;
  for (const auto& [s, t] : moved_at_) {
    if (now - t < cooldown) cooling.insert(s);
  }
  ShardMap next;
  std::string why;
  if (!PlanMove(cur, live, load, ro, cooling, &next, &why)) {
    overloaded_.clear();
    overloaded_periods_ = 0;
    return;
  }
  // Statistics are per-server windows that are not aligned, and a load that just shifted shows
  // in one window before the others: the same server must be overloaded in kConfirmPeriods
  // consecutive decisions before anything moves.
  constexpr int kConfirmPeriods = 3;
  std::string hot;
  for (uint32_t s = 0; s < next.assignment.size(); s++) {
    if (!next.assignment[s].move_to.empty()) hot = next.assignment[s].primary;
  }
  overloaded_periods_ = hot == overloaded_ ? overloaded_periods_ + 1 : 1;
  overloaded_ = hot;
  if (overloaded_periods_ < kConfirmPeriods) return;
  overloaded_.clear();
  overloaded_periods_ = 0;
  Status st = coord_->Set(map_path_, next.Encode(), version).status();
  if (!st.ok()) return;  // lost a race: decided again on the next period
  for (uint32_t s = 0; s < next.assignment.size(); s++) {
    if (!next.assignment[s].move_to.empty()) moved_at_[s] = now;
  }
  move_started_ = now;
  LOG_INFO("kv", "manager: resharding: moving " << why << " (map epoch " << next.epoch << ")");
}

void ClusterAgent::HandoffReady() {
  std::vector<uint32_t> ready;
  {
    std::shared_lock l(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (uint32_t s = 0; s < map_.assignment.size(); s++) {
      const auto& a = map_.assignment[s];
      bool synced = false;
      for (const auto& b : a.backups) synced |= b.uuid == a.move_to && b.synced;
      if (roles_[s] != Role::kPrimary || a.move_to.empty() || !synced) {
        swap_ready_since_.erase(s);
        continue;
      }
      auto it = swap_ready_since_.try_emplace(s, now).first;
      if (now - it->second >= std::chrono::milliseconds(o_.rebalance.swap_delay_ms)) {
        ready.push_back(s);
      }
    }
  }
  const std::string self = o_.uuid;
  for (uint32_t s : ready) {
    // The commit point of a move is the map write below. The exclusive lock waits for every
    // request in flight (each holds the shared lock) and holds new ones until this server has
    // stopped serving the shard: every PUT it acknowledged is already in the target's b-log
    // (replicated before the reply), and no request it serves can follow a write the target
    // accepts, since the target serves only once it adopted the map written here.
    std::unique_lock l(mu_);
    if (roles_[s] != Role::kPrimary) continue;
    uint64_t written = 0;
    Status st = EditMap([&](ShardMap* m) {
      written = 0;
      if (!SwapPrimary(m, s, self)) return false;
      written = m->epoch + 1;
      return true;
    });
    if (st.ok() && written == 0) continue;  // rolled back meanwhile: this server stays primary
    // Written or unknown (an error may hide a write that landed): serve the shard no more; on an
    // error the next map read decides (readopt_).
    roles_[s] = Role::kNone;
    swap_ready_since_.erase(s);
    if (st.ok()) {
      handoff_floor_ = std::max(handoff_floor_, written);
      handoffs_++;
      LOG_INFO("kv", "resharding: handed shard " << s << " over (map epoch " << written << ")");
    } else {
      readopt_ = true;
      LOG_WARN("kv", "resharding: handing shard " << s << " over: " << st.ToString());
    }
  }
}

Status ClusterAgent::MarkSelfUnsynced(const Status& why) {
  return EditMap([&](ShardMap* m) {
    bool changed = false;
    for (uint32_t s = 0; s < m->assignment.size(); s++) {
      for (auto& b : m->assignment[s].backups) {
        if (b.uuid == o_.uuid && b.synced) {
          b.synced = false;
          changed = true;
          LOG_WARN("kv", "backup of shard " << s << " marked unsynced (" << why.ToString()
                                            << "); its primary catches it up again");
        }
      }
    }
    return changed;
  });
}

void ClusterAgent::DigestLive() {
  if (o_.remote_logs != nullptr) o_.remote_logs->DigestAll();
  MutexLock l(digest_mu_);
  // From the digest thread's scanner: it holds the first blocks of an entry whose earlier segment
  // it already committed (recycled); a fresh scanner would miss that entry although the old
  // primary had it acknowledged (seen with 1 MiB values: KvReplication/rowan).
  rowan::Scanner scanner = digest_scanner_;
  for (const auto& v : o_.receiver->LiveSegments()) {
    scanner.ScanSegment(v.bytes, v.post_seq, [&](const rowan::ScannedEntry& e) {
      Status st = o_.store->ApplyReplica(e.payload);
      if (st.ok()) {
        digested_++;
      } else {
        digest_failures_++;
        LOG_ERROR("kv", "promotion digest: an entry could not be applied: " << st.ToString());
      }
    });
  }
}

}  // namespace asymnvm::kv
