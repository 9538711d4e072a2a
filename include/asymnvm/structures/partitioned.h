// Partitioned maps: one map spread over several back-ends by key hash
// (AsymNVM paper §8 "Data Structure Partition"; doc/structures.md §Partitioning).
//
// A partitioned map of kind K named `name` is P ordinary structures of kind K, `name#0` ..
// `name#P-1`, each on one back-end of a frontend::Cluster, each with its own writer lock, op-log
// stream and recovery. Key k lives in partition PartitionOf(k, P). The partition map (kind, P,
// value size, shape parameter, and for every partition the uuid of the pool that holds it) is a
// self-validating block in each involved back-end's data area, published under `name` in that
// back-end's naming space (type kPartitionMapType); every copy is identical. Back-ends are named
// by pool uuid, so the map survives back-end restarts at other addresses and detects a pool
// swapped for another.
//
// Creation (writers): the first creator publishes the map at the involved back-end with the
// smallest pool uuid (remote CAS on the root word decides a race), then copies the winner's map to
// the others. Partition i is placed on back-end i mod n of the cluster (in cluster order) at
// creation and stays there.
//
// Every Map operation goes to one partition, except Count (sum), Scan (a merge of every
// partition's scan), Sync and Verify (all; Verify also checks, for ordered kinds, that every key
// is in the partition its hash names). When one back-end fails, operations on its partitions
// return its errors while the other partitions keep working; frontend::Cluster::Reconnect(i)
// re-opens them and replays their op logs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "asymnvm/cluster.h"
#include "asymnvm/structures/structure.h"

namespace asymnvm::structures {

inline constexpr uint32_t kPartitionMapType = 0x50;  // naming type of a partition map entry
inline constexpr uint32_t kMaxPartitions = 256;

// The partition of `key` among `partitions` (XXH3-64 of the 8 key bytes of an integer key, or of a
// byte key's bytes, with a seed of its own, so it is independent of the hash table's bucket hash).
uint32_t PartitionOf(const Key& key, uint32_t partitions);
// The smallest key greater than `key` (integers: + 1; byte strings: `key` followed by a zero byte),
// to continue a Scan after the last key it returned.
Key Successor(const Key& key);

struct PartitionOptions {
  // Partitions at creation (0: one per back-end of the cluster). An existing map keeps its own.
  uint32_t partitions = 0;
};

// Create-or-open (writers with options.create) or open (readers) the partitioned map `name`.
// Errors: kInvalidArgument (a sequence kind, partitions > kMaxPartitions, a name too long for the
// partition suffixes), kNotFound (reader or !create and no map), kFailedPrecondition ("type
// mismatch": the name holds something else or a partitioned map of another kind; a partition's
// pool is not among the cluster's back-ends), kCorruption (a map copy fails its checksum or two
// copies differ), and the partitions' Open errors with the partition named.
Result<std::unique_ptr<Map>> OpenPartitioned(frontend::Cluster& cluster, Kind kind,
                                             const std::string& name, const Options& options = {},
                                             const PartitionOptions& partition_options = {});

}  // namespace asymnvm::structures
