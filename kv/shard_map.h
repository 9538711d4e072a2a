// The Rowan-KV shard map kept on the coordinator (doc/kv.md §Configuration manager) and the
// configuration manager's pure decision function.
//
// Node /asymnvm/kv/<cluster>/map (persistent, text, replaced with a versioned compare-and-set):
//   epoch <E>
//   shards <S>
//   rf <R>
//   server <uuid> <oq-address> <rowan-address>      (one line per server the map names)
//   shard <i> <primary-uuid> [<backup-uuid>:<s|j>,...]
// A backup is `s` (synced: holds every acknowledged write of the shard; may be promoted) or `j`
// (joining: receives new writes while the primary streams it the shard; not promotable).
//
// Thread safety: pure functions / values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::kv {

struct ServerAddr {
  std::string oq;     // client requests (OQ worker 0)
  std::string rowan;  // b-log (Rowan receiver) for replication
  std::string base;   // remote-log endpoint of the rpc/rwrite/batch/share baselines ("" none)
};

struct ShardAssignment {
  std::string primary;
  struct Backup {
    std::string uuid;
    bool synced = false;
  };
  std::vector<Backup> backups;
};

struct ShardMap {
  uint64_t epoch = 0;
  uint32_t shards = 0;
  uint32_t rf = 1;
  std::map<std::string, ServerAddr> servers;  // uuid -> addresses
  std::vector<ShardAssignment> assignment;    // one per shard

  std::string Encode() const;
  static Result<ShardMap> Decode(const std::string& text);  // kCorruption naming the line
};

// The manager's step: from the current map (epoch 0 = none yet) and the live servers, the next
// map. Returns false when nothing changes. Rules: a dead primary is replaced by its first live
// synced backup (kept when none is alive: the shard waits for it, e.g. a cold start); dead
// backups are dropped; live servers not in a shard join it as `j` backups until it has rf - 1;
// addresses of live servers are refreshed. A new map (epoch 0) spreads primaries round-robin over
// the live servers in uuid order, each with the next rf - 1 as synced backups.
bool NextMap(const ShardMap& current, const std::map<std::string, ServerAddr>& live,
             uint32_t shards, uint32_t rf, ShardMap* next);

}  // namespace asymnvm::kv
