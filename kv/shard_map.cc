#include "kv/shard_map.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace asymnvm::kv {

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
      if (l >> backups) {
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
             uint32_t rf, ShardMap* next) {
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
  for (auto& s : m.assignment) {
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
    if (!live.count(s.primary)) continue;  // waits for its primary (or a synced backup)
    for (auto& [u, a] : live) {
      if (s.backups.size() + 1 >= m.rf) break;
      if (u == s.primary) continue;
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

}  // namespace asymnvm::kv
