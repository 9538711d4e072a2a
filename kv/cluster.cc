// The cluster agent's core (doc/kv.md §Cluster): start, stop, the lease, the map edits, and the
// follower that adopts the coordinator's map. Replication and catch-up: cluster_replication.cc;
// the manager and primary moves: cluster_manager.cc.
#include "kv/cluster.h"

#include <algorithm>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::kv {

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
  const std::string data = EncodeServerNode(o_.self);
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

void ClusterAgent::Fence(const Status& why) {
  if (self_fenced_.exchange(true)) return;
  LOG_ERROR("kv", "fenced: " << why.message() << "; this server serves nothing more");
  if (o_.on_fenced) o_.on_fenced(why);
}

Status ClusterAgent::CheckLease() const {
  if (self_fenced_.load(std::memory_order_relaxed)) {
    return Status::Unavailable(
               "kv: fenced: this server stopped serving (its coordinator session expired, or it "
               "could not record a failed backup)")
        .WithSubCode(StatusSubCode::kFenced);
  }
  if (coord_->state() == coord::SessionState::kExpired) {
    return Status::Unavailable(
               "kv: fenced: this server's coordinator session expired (its shards have moved)")
        .WithSubCode(StatusSubCode::kFenced);
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
             " ms session timeout passed): its shards may have moved")
      .WithSubCode(StatusSubCode::kFenced);
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
                             std::to_string(map_.epoch) + ")")
      .WithSubCode(StatusSubCode::kNotPrimary);
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
      Fence(Status::Unavailable("the coordinator session expired"));
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
    WaitWake(std::chrono::milliseconds(200), &seen);
  }
}

void ClusterAgent::WaitWake(std::chrono::milliseconds period, uint64_t* seen) {
  const auto lease = coord_->lease_timeout();
  if (lease.count() > 0) period = std::min(period, lease / 6);
  MutexLock l(wake_mu_);
  wake_cv_.wait_for(l.native(), period,
                    [&]() ASYMNVM_REQUIRES(wake_mu_) { return wake_seq_ != *seen || stop_; });
  *seen = wake_seq_;
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

}  // namespace asymnvm::kv
