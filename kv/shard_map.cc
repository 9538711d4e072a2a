#include "kv/shard_map.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace asymnvm::kv {

std::string EncodeServerNode(const ServerAddr& a) {
  std::string data = "oq " + a.oq + "\nrowan " + a.rowan + "\n";
  if (!a.base.empty()) data += "base " + a.base + "\n";
  return data;
}

bool DecodeServerNode(const std::string& data, ServerAddr* a) {
  std::istringstream in(data);
  std::string k, v;
  while (in >> k >> v) {
    if (k == "oq") a->oq = v;
    if (k == "rowan") a->rowan = v;
    if (k == "base") a->base = v;
  }
  return !a->oq.empty() && !a->rowan.empty();
}

std::string ShardMap::Encode() const {
  std::ostringstream o;
  o << "epoch " << epoch << "\nshards " << shards << "\nrf " << rf << "\n";
  for (const auto& [uuid, a] : servers)
    o << "server " << uuid << " " << a.oq << " " << a.rowan << (a.base.empty() ? "" : " ") << a.base
      << "\n";
  for (uint32_t i = 0; i < assignment.size(); i++) {
    o << "shard " << i << " " << assignment[i].primary;
    std::string sep = " ";
    for (const auto& b : assignment[i].backups) {
      o << sep << b.uuid << ":" << (b.synced ? "s" : "j");
      sep = ",";
    }
    if (!assignment[i].move_to.empty()) o << " move=" << assignment[i].move_to;
    o << "\n";
  }
  return o.str();
}

Result<ShardMap> ShardMap::Decode(const std::string& text) {
  ShardMap m;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto bad = [&](const std::string& why) {
    return Status::Corruption("kv shard map line " + std::to_string(n) + ": " + why);
  };
  while (std::getline(in, line)) {
    n++;
    if (line.empty()) continue;
    std::istringstream l(line);
    std::string tag;
    l >> tag;
    if (tag == "epoch") {
      if (!(l >> m.epoch)) return bad("epoch");
    } else if (tag == "shards") {
      if (!(l >> m.shards) || m.shards == 0 || m.shards > 65535) return bad("shards");
      m.assignment.resize(m.shards);
    } else if (tag == "rf") {
      if (!(l >> m.rf) || m.rf == 0) return bad("rf");
    } else if (tag == "server") {
      std::string uuid;
      ServerAddr a;
      if (!(l >> uuid >> a.oq >> a.rowan)) return bad("server");
      l >> a.base;  // optional
      m.servers[uuid] = a;
    } else if (tag == "shard") {
      uint32_t i;
      std::string primary, backups;
      if (!(l >> i >> primary) || i >= m.assignment.size()) return bad("shard");
      m.assignment[i].primary = primary;
      while (l >> backups) {
        if (backups.rfind("move=", 0) == 0) {
          m.assignment[i].move_to = backups.substr(5);
          if (m.assignment[i].move_to.empty()) return bad("move");
          continue;
        }
        std::istringstream b(backups);
        std::string item;
        while (std::getline(b, item, ',')) {
          auto colon = item.rfind(':');
          if (colon == std::string::npos || colon + 2 != item.size() ||
              (item[colon + 1] != 's' && item[colon + 1] != 'j')) {
            return bad("backup " + item);
          }
          m.assignment[i].backups.push_back({item.substr(0, colon), item[colon + 1] == 's'});
        }
      }
    } else {
      return bad("unknown field " + tag);
    }
  }
  if (m.shards == 0) return Status::Corruption("kv shard map: no shards line");
  for (uint32_t i = 0; i < m.shards; i++) {
    if (m.assignment[i].primary.empty()) return bad("shard " + std::to_string(i) + " missing");
  }
  return m;
}

bool NextMap(const ShardMap& cur, const std::map<std::string, ServerAddr>& live, uint32_t shards,
             uint32_t rf, ShardMap* next, const JoinHold& held) {
  if (cur.epoch == 0) {
    if (live.empty()) return false;
    ShardMap m;
    m.epoch = 1;
    m.shards = shards;
    m.rf = std::max<uint32_t>(1, std::min<uint32_t>(rf, static_cast<uint32_t>(live.size())));
    m.servers = live;
    std::vector<std::string> ids;
    for (auto& [u, a] : live) ids.push_back(u);
    m.assignment.resize(shards);
    for (uint32_t i = 0; i < shards; i++) {
      m.assignment[i].primary = ids[i % ids.size()];
      for (uint32_t k = 1; k < m.rf; k++) {
        m.assignment[i].backups.push_back({ids[(i + k) % ids.size()], true});
      }
    }
    *next = m;
    return true;
  }
  ShardMap m = cur;
  bool changed = false;
  for (auto& [u, a] : live) {
    auto it = m.servers.find(u);
    if (it == m.servers.end() || it->second.oq != a.oq || it->second.rowan != a.rowan ||
        it->second.base != a.base) {
      m.servers[u] = a;
      changed = true;
    }
  }
  for (uint32_t shard = 0; shard < m.assignment.size(); shard++) {
    ShardAssignment& s = m.assignment[shard];
    const std::string primary = s.primary;
    if (!live.count(s.primary)) {
      for (size_t k = 0; k < s.backups.size(); k++) {
        if (s.backups[k].synced && live.count(s.backups[k].uuid)) {
          s.primary = s.backups[k].uuid;
          s.backups.erase(s.backups.begin() + static_cast<long>(k));
          changed = true;
          break;
        }
      }
    }
    const size_t before = s.backups.size();
    s.backups.erase(
        std::remove_if(s.backups.begin(), s.backups.end(),
                       [&](const ShardAssignment::Backup& b) { return !live.count(b.uuid); }),
        s.backups.end());
    if (s.backups.size() != before) changed = true;
    if (!s.move_to.empty()) {
      // Rollback of a planned move that can no longer commit: its target died or left the shard
      // (a failed replication removes it), or the primary it was to replace is gone.
      bool member = false;
      for (auto& b : s.backups) member |= b.uuid == s.move_to;
      if (!member || s.primary != primary || !live.count(s.move_to)) {
        s.move_to.clear();
        changed = true;
      }
    }
    if (!live.count(s.primary)) continue;  // waits for its primary (or a synced backup)
    for (auto& [u, a] : live) {
      if (s.backups.size() + 1 >= m.rf) break;
      if (u == s.primary || held.count({shard, u})) continue;
      bool member = false;
      for (auto& b : s.backups) member |= b.uuid == u;
      if (!member) {
        s.backups.push_back({u, false});
        changed = true;
      }
    }
  }
  if (!changed) return false;
  m.epoch = cur.epoch + 1;
  *next = m;
  return true;
}

std::vector<std::pair<std::string, RejoinBackoff::Clock::duration>> RejoinBackoff::Observe(
    const ShardMap& prev, const ShardMap& cur, const std::set<std::string>& live,
    Clock::time_point now) {
  std::vector<std::pair<std::string, Clock::duration>> found;
  if (prev.epoch == 0 || cur.epoch <= prev.epoch) return found;
  const size_t n = std::min(prev.assignment.size(), cur.assignment.size());
  for (uint32_t shard = 0; shard < n; shard++) {
    const ShardAssignment& was = prev.assignment[shard];
    const ShardAssignment& is = cur.assignment[shard];
    // A move's commit drops surplus backups on purpose (SwapPrimary): not a failure.
    if (was.primary != is.primary) continue;
    for (const auto& b : was.backups) {
      if (!live.count(b.uuid) || b.uuid == is.primary) continue;
      bool still = false;
      for (const auto& c : is.backups) still |= c.uuid == b.uuid;
      if (still) continue;
      Entry& e = held_[{shard, b.uuid}];
      e.next = (e.next == Clock::duration{} || now - e.last > o_.reset_after)
                   ? o_.first
                   : std::min(o_.max, e.next * 2);
      e.last = now;
      e.until = now + e.next;
      removals_++;
      found.emplace_back(std::to_string(shard) + ":" + b.uuid, e.next);
    }
  }
  return found;
}

JoinHold RejoinBackoff::Held(Clock::time_point now) const {
  JoinHold out;
  for (const auto& [key, e] : held_) {
    if (now < e.until) out.insert(key);
  }
  return out;
}

Status RebalanceOptions::Validate() const {
  if (threshold == 0) return Status::Ok();
  if (!(threshold > 1) || threshold > 1000) {
    return Status::InvalidArgument("rebalance threshold must be 0 (off) or in (1, 1000]");
  }
  if (period_ms < 10 || period_ms > 3600000) {
    return Status::InvalidArgument("rebalance period must be 10 ms .. 1 h");
  }
  if (move_timeout_ms < period_ms) {
    return Status::InvalidArgument("rebalance move timeout must be at least one period");
  }
  return Status::Ok();
}

std::string LoadReport::Encode() const {
  std::ostringstream o;
  o << "epoch " << epoch << "\n";
  for (const auto& [s, n] : ops_per_sec) o << "shard " << s << " " << n << "\n";
  return o.str();
}

Result<LoadReport> LoadReport::Decode(const std::string& text) {
  LoadReport r;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream l(line);
    std::string tag;
    l >> tag;
    uint32_t s;
    uint64_t n;
    if (tag == "epoch" && (l >> r.epoch)) continue;
    if (tag == "shard" && (l >> s >> n)) {
      r.ops_per_sec[s] = n;
      continue;
    }
    return Status::Corruption("kv load report: bad line '" + line + "'");
  }
  return r;
}

bool PlanMove(const ShardMap& cur, const std::set<std::string>& live,
              const std::map<std::string, LoadReport>& load, const RebalanceOptions& o,
              const std::set<uint32_t>& cooling, ShardMap* next, std::string* why) {
  if (!o.enabled() || cur.epoch == 0 || cur.rf < 2 || live.size() < 2) return false;
  for (const auto& a : cur.assignment) {
    if (!a.move_to.empty()) return false;  // one move at a time
  }
  // A shard's rate is what its current primary reported for it; a server's load the sum over
  // the shards it is primary of.
  std::vector<uint64_t> rate(cur.assignment.size(), 0);
  std::map<std::string, uint64_t> server;
  for (const auto& u : live) server[u] = 0;
  uint64_t total = 0;
  for (uint32_t s = 0; s < cur.assignment.size(); s++) {
    const std::string& p = cur.assignment[s].primary;
    if (!live.count(p)) continue;
    auto r = load.find(p);
    if (r == load.end()) continue;
    auto n = r->second.ops_per_sec.find(s);
    if (n == r->second.ops_per_sec.end()) continue;
    rate[s] = n->second;
    server[p] += n->second;
    total += n->second;
  }
  if (total < o.min_ops_per_sec) return false;
  const double mean = static_cast<double>(total) / static_cast<double>(server.size());
  std::string hot, cold;
  for (const auto& [u, l] : server) {
    if (hot.empty() || l > server[hot]) hot = u;
  }
  if (static_cast<double>(server[hot]) <= o.threshold * mean) return false;
  for (const auto& [u, l] : server) {
    if (u != hot && (cold.empty() || l < server[cold])) cold = u;
  }
  const uint64_t from = server[hot], to = server[cold];
  int best = -1;
  uint64_t best_peak = from;
  bool best_synced = false;
  for (uint32_t s = 0; s < cur.assignment.size(); s++) {
    const auto& a = cur.assignment[s];
    // A shard without backups may still be taking nilext PUTs from clients whose map says so:
    // after the swap its old primary could not apply them.
    if (a.primary != hot || rate[s] == 0 || cooling.count(s) || a.backups.empty()) continue;
    const uint64_t peak = std::max(from - rate[s], to + rate[s]);
    bool synced = false;
    for (const auto& b : a.backups) synced |= b.uuid == cold && b.synced;
    if (peak < best_peak || (best >= 0 && peak == best_peak && synced && !best_synced)) {
      best = static_cast<int>(s);
      best_peak = peak;
      best_synced = synced;
    }
  }
  if (best < 0) return false;
  ShardMap m = cur;
  auto& a = m.assignment[static_cast<uint32_t>(best)];
  bool member = false;
  for (const auto& b : a.backups) member |= b.uuid == cold;
  if (!member) a.backups.push_back({cold, false});
  a.move_to = cold;
  m.epoch = cur.epoch + 1;
  *next = m;
  if (why != nullptr) {
    std::ostringstream w;
    w << "shard " << best << " (" << rate[static_cast<uint32_t>(best)] << " ops/s) from " << hot
      << " (" << from << " ops/s, mean " << static_cast<uint64_t>(mean) << ") to " << cold << " ("
      << to << " ops/s" << (member ? "" : ", joins as a backup first") << ")";
    *why = w.str();
  }
  return true;
}

std::map<std::string, uint32_t> LeaderCounts(const ShardMap& m, const std::set<std::string>& live) {
  std::map<std::string, uint32_t> n;
  for (const auto& u : live) n[u] = 0;
  for (const auto& a : m.assignment) {
    if (live.count(a.primary)) n[a.primary]++;
  }
  return n;
}

bool PlanSpread(const ShardMap& cur, const std::set<std::string>& live, uint32_t limit,
                ShardMap* next, std::string* why) {
  if (cur.epoch == 0 || cur.rf < 2 || live.size() < 2 || cur.assignment.empty()) return false;
  for (const auto& a : cur.assignment) {
    if (!a.move_to.empty()) return false;  // one move at a time
  }
  const auto n = static_cast<uint32_t>(live.size());
  const auto shards = static_cast<uint32_t>(cur.assignment.size());
  if (limit == 0) limit = (shards + n - 1) / n;
  auto leads = LeaderCounts(cur, live);
  std::string hot;
  for (const auto& [u, c] : leads) {
    if (hot.empty() || c > leads[hot]) hot = u;
  }
  if (leads[hot] <= limit) return false;
  const std::vector<std::string> order(live.begin(), live.end());  // uuid order
  int best = -1;
  std::string target;
  bool best_preferred = false;
  for (uint32_t s = 0; s < shards; s++) {
    const auto& a = cur.assignment[s];
    if (a.primary != hot) continue;
    const std::string& preferred = order[s % n];
    for (const auto& b : a.backups) {
      if (!b.synced || !live.count(b.uuid) || leads[b.uuid] + 1 > limit) continue;
      const bool pref = b.uuid == preferred;
      if (best < 0 || (pref && !best_preferred) ||
          (pref == best_preferred && leads[b.uuid] < leads[target])) {
        best = static_cast<int>(s);
        target = b.uuid;
        best_preferred = pref;
      }
    }
  }
  if (best < 0) return false;
  ShardMap m = cur;
  m.assignment[static_cast<uint32_t>(best)].move_to = target;
  m.epoch = cur.epoch + 1;
  *next = m;
  if (why != nullptr) {
    std::ostringstream w;
    w << "shard " << best << " from " << hot << " (leads " << leads[hot] << " > " << limit
      << ") to " << target << " (leads " << leads[target]
      << (best_preferred ? ", its preferred primary" : "") << ")";
    *why = w.str();
  }
  return true;
}

bool SwapPrimary(ShardMap* m, uint32_t shard, const std::string& self) {
  if (shard >= m->assignment.size()) return false;
  auto& a = m->assignment[shard];
  if (a.primary != self || a.move_to.empty()) return false;
  auto it = std::find_if(a.backups.begin(), a.backups.end(),
                         [&](const ShardAssignment::Backup& b) { return b.uuid == a.move_to; });
  if (it == a.backups.end() || !it->synced) return false;
  a.backups.erase(it);
  // The old primary holds every acknowledged write (it wrote them all and stopped writing before
  // this map exists): synced, so that if the target dies before it re-marks its backups, the
  // shard fails back to it.
  a.backups.insert(a.backups.begin(), {self, true});
  a.primary = a.move_to;
  a.move_to.clear();
  while (a.backups.size() + 1 > m->rf && a.backups.size() > 1) {
    auto drop = std::find_if(a.backups.begin() + 1, a.backups.end(),
                             [](const ShardAssignment::Backup& b) { return !b.synced; });
    a.backups.erase(drop != a.backups.end() ? drop : a.backups.end() - 1);
  }
  return true;
}

}  // namespace asymnvm::kv
