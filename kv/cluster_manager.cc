// The cluster agent's configuration manager (doc/kv.md §Cluster, §Spreading primaries back,
// §Resharding): the one server holding the manager node edits the map for dead primaries, new
// backups, spreading and load-based moves; HandoffReady is the old primary's side of a move.
#include <algorithm>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "kv/cluster.h"

namespace asymnvm::kv {

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
          if (node.ok() && DecodeServerNode(node->data, &a)) live[n] = a;
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
    WaitWake(period, &seen);
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

}  // namespace asymnvm::kv
