// The client API of the bundled KV server, Rowan-KV (`asymnvm-kv`, doc/kv.md).
//
// Data model: byte-string keys of 1..kMaxKeySize bytes and values of 0..kMaxValueSize bytes. Keys
// are hashed to shards (ShardOf); each shard is served by one primary server. Every key has a
// version: a number > 0 that a shard assigns to each write (strictly increasing per shard, so
// also per key, across restarts and failovers); 0 means "absent" (never written, or deleted).
// Every reply that reads state says which version it read.
//
// Operations and their commit points:
//   Put       nilext: no reply. A value up to kMaxInlineValue bytes travels as one nilext Ordered
//             Queue request and commits on the NIC acknowledgement of the durable SEND + FLUSH
//             (doc/kv.md §Commit points); a larger value is uploaded in chunks and its last
//             request takes the software-response path. A value of at least
//             ClientOptions::bypass_threshold bytes to an unreplicated shard is written into the
//             server's PM one-sidedly and commits on the NIC acknowledgement of its nilext
//             Publish (RDMP server-bypass, doc/kv.md §RDMP).
//   Get       value + version (found = false, version 0 for an absent key).
//   Delete    whether the key existed and the version it deleted.
//   PutIf     conditional put: applies only when the key's current version equals
//             `expected_version` (0 = the key must be absent); says whether it applied and the
//             version now current (the new one, or the one that made it fail).
//   Incr      atomic add to a counter: the value is a decimal int64 in ASCII ("-12"), an absent
//             key counts as 0; returns the new value and its version.
//   Scan      one shard, in key-hash order, resumable with a cursor; every item with its version.
//
// Errors (every call): kInvalidArgument (key empty or over kMaxKeySize, value over kMaxValueSize,
// count 0 or over kMaxScanCount, shard out of range; Incr on a value that is not a decimal int64
// or whose result overflows), kTimedOut (no commit within ClientOptions::timeout; a write's
// outcome is then unknown), kUnavailable (no server for the shard answered within
// ClientOptions::retry_deadline; retryable), kConnectionError (the connection failed mid-request;
// a write's outcome is unknown), kCorruption (a reply or stored entry failed its checksum),
// kPermissionDenied (wrong cluster secret). The client retries by itself on a stale shard map or a
// restarting server until retry_deadline, and only for requests that are safe to repeat (reads,
// and writes that never reached a server).
//
// Thread safety: a Client may be used from any number of threads at once; it multiplexes them on
// one connection per server worker. Close/destruction must not race other calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/status.h"

namespace asymnvm::kv {

inline constexpr size_t kMaxKeySize = 1024;
inline constexpr size_t kMaxValueSize = size_t{1} << 20;  // 1 MiB
// Values up to this size are written by one request (nilext Put); larger ones are chunked.
inline constexpr size_t kMaxInlineValue = 48 * 1024;
inline constexpr uint32_t kMaxScanCount = 10000;
// ClientOptions::bypass_threshold: never bypass.
inline constexpr size_t kNoBypass = SIZE_MAX;

struct ClientOptions {
  // Where the cluster is. Exactly one of the two:
  //  * coordinator: a coordinator URI (dir:PATH | zk:HOST:PORT[,...][/chroot]); the client reads
  //    the shard map and server addresses the servers publish there under /asymnvm/kv/<cluster>.
  //  * servers: explicit addresses of asymnvm-kv servers (the "listening" line each prints).
  std::string coordinator;
  std::vector<std::string> servers;
  std::string cluster = "default";  // the cluster name under the coordinator
  // Fabric: provider and the cluster secret, exactly as the other tools take it
  // (fabric.secret_file, else ASYMNVM_SECRET_FILE / ASYMNVM_SECRET, else the built-in default).
  fabric::FabricOptions fabric;
  std::chrono::milliseconds timeout{5000};          // each request (connect included)
  std::chrono::milliseconds retry_deadline{10000};  // retries on stale map / restarting server
  // RDMP-KV (doc/kv.md §RDMP): a Put value or a Get result of at least bypass_threshold bytes
  // moves one-sidedly through the server's PM (server-bypass: the client writes the value and a
  // persist flag into a slot the server reserved, then asks it to publish; a Get reads the entry
  // the server located and checks it, falling back to the server's reply when the check fails);
  // smaller ones travel inside requests and replies (server-reply). 0: always bypass; kNoBypass:
  // never. Used only where the server offers it (asymnvm-kv --rdmp on, the default) and, for
  // Put, on shards without backups; otherwise the server-reply path is taken.
  size_t bypass_threshold = 16 * 1024;
  // false: a Put to an unreplicated shard also waits for the server's response (after it is
  // executed and durable) instead of committing on the NIC acknowledgement of a nilext request.
  // A front end that also executes requests in the server's process (the RESP gateway's fast
  // path, doc/resp.md) needs it: an acknowledged nilext Put the server has not executed yet
  // would otherwise be invisible to, or overwritten by, a later request that bypasses the queue.
  bool nilext_puts = true;
  // Test hook: a server-bypass Put stops (kAborted) after writing the value (1) or after writing
  // the persist flag (2), like a client that died there. 0: off.
  int TEST_bypass_stop_after = 0;
};

// What the server-bypass path did for this client (cumulative).
struct RdmpCounters {
  uint64_t bypass_puts = 0;   // Puts committed through a reserved slot
  uint64_t bypass_gets = 0;   // Gets answered by a one-sided read
  uint64_t fallbacks = 0;     // bypass attempts that ended on the server-reply path
  uint64_t bypass_bytes = 0;  // value bytes written or read one-sidedly
  uint64_t round_trips = 0;   // doorbells on the bypass connections (not in counters())
};

struct GetReply {
  bool found = false;
  std::string value;
  uint64_t version = 0;  // 0 when !found
};

struct DeleteReply {
  bool existed = false;
  uint64_t version = 0;  // the version deleted (0 when !existed)
};

struct PutIfReply {
  bool applied = false;
  uint64_t version = 0;  // applied: the new version; else the current one (0 = absent)
};

struct IncrReply {
  int64_t value = 0;
  uint64_t version = 0;
};

// One operation of an atomic batch (Client::Batch): a put (value set) or a delete (no value),
// applied only if the key's current version equals expected_version when that is set (0 = the key
// must be absent). check_only: writes nothing, only requires expected_version (which must be set)
// — a read the batch depends on (MULTI/EXEC's reads).
struct BatchOp {
  std::string key;
  std::optional<std::string> value;
  std::optional<uint64_t> expected_version;
  bool check_only = false;
};

struct BatchReply {
  bool applied = false;  // false: a condition failed and nothing was written
  // applied: the version each op wrote; else each key's current version (0 = absent).
  std::vector<uint64_t> versions;
};
inline constexpr size_t kMaxBatchOps = 64;

struct ScanItem {
  std::string key;
  std::string value;
  uint64_t version = 0;
};

struct ScanReply {
  std::vector<ScanItem> items;
  uint64_t next_cursor = 0;  // pass to the next Scan of the same shard
  bool done = false;         // true: the shard has no items after these
};

class Client {
 public:
  // Connects (to every server of the explicit list, or to those the coordinator names).
  // Errors: kInvalidArgument (neither or both of coordinator/servers, bad address), kUnavailable /
  // kConnectionError / kTimedOut (no server reachable), kPermissionDenied, kProtocolError (the
  // peer is not an asymnvm-kv server).
  static Result<std::unique_ptr<Client>> Open(const ClientOptions& options);
  virtual ~Client() = default;

  virtual Status Put(std::string_view key, std::string_view value) = 0;
  // Several Puts at once, each with its own outcome (as Put would return it), not atomic
  // together: nilext PUTs to unreplicated shards are posted together (one doorbell per server
  // worker) and awaited together; the others run one by one. Puts of one key keep their order.
  virtual std::vector<Status> PutMany(
      std::span<const std::pair<std::string_view, std::string_view>> kvs) {
    std::vector<Status> out;
    for (const auto& [k, v] : kvs) out.push_back(Put(k, v));
    return out;
  }
  virtual Result<GetReply> Get(std::string_view key) = 0;
  virtual Result<DeleteReply> Delete(std::string_view key) = 0;
  virtual Result<PutIfReply> PutIf(std::string_view key, std::string_view value,
                                   uint64_t expected_version) = 0;
  virtual Result<IncrReply> Incr(std::string_view key, int64_t delta) = 0;
  // Every op or none, atomically also across a crash of the server, and in the ops' order (a
  // reader never sees some of them applied). All keys in one shard (kInvalidArgument otherwise,
  // "keys in different shards"), distinct, 1..kMaxBatchOps of them, the whole batch within one
  // request (about 60 KiB of keys and values). Takes the software-response path: a connection lost
  // mid-call leaves the outcome unknown, as for PutIf.
  virtual Result<BatchReply> Batch(const std::vector<BatchOp>& ops) = 0;
  // Items of `shard` whose key hash is >= cursor (start with 0), at most `count` of them (a few
  // more when keys share a hash). Keys written during a scan may or may not appear; a key present
  // for the whole scan appears exactly once.
  virtual Result<ScanReply> Scan(uint32_t shard, uint64_t cursor, uint32_t count) = 0;

  // Fabric counters summed over this client's current connections (round trips = doorbells,
  // bytes, ...); a connection replaced after a failure starts again from zero.
  virtual fabric::Counters counters() const { return {}; }
  virtual RdmpCounters rdmp_counters() const { return {}; }

  virtual uint32_t shard_count() const = 0;
  virtual uint32_t ShardOf(std::string_view key) const = 0;

  // How many backups hold every acknowledged write, whichever shard it went to: the smallest
  // number of synced backups over all shards of the current shard map (re-read from the
  // coordinator first). A write is acknowledged only once every live backup of its shard holds
  // it, and a synced backup holds every acknowledged write of its shard, so each acknowledged
  // write is on at least this many backups. 0 without a coordinator (no replication).
  virtual Result<uint32_t> MinSyncedBackups() { return uint32_t{0}; }
};

// Redis Cluster's hash tag rule: the bytes between the first '{' and the first '}' after it, when
// there are any; else the whole key. Keys with the same tag are in one shard (doc/kv.md §Shards).
inline std::string_view HashTag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}
// A routed key: kRoutedKeyMagic, then 8 little-endian bytes R, then anything. It lives in shard
// R % shards instead of its own hash's (the RESP gateway's sub-records of a hash, list, set or
// sorted set carry RouteHash of their Redis key, so a command's records share one shard and commit
// as one batch: doc/types.md). Such keys are internal: SCAN and DBSIZE of the gateway skip them.
inline constexpr std::string_view kRoutedKeyMagic =
    "\xFF\xFE"
    "AS";
inline bool IsRoutedKey(std::string_view key) {
  return key.size() >= kRoutedKeyMagic.size() + 8 &&
         key.substr(0, kRoutedKeyMagic.size()) == kRoutedKeyMagic;
}
// The 64-bit value ShardOf takes modulo the shard count: for a routed key its 8 bytes R, else
// KeyHash(HashTag(key)).
uint64_t RouteHash(std::string_view key);
// The shard of `key` among `shards` shards (the same function the servers use): RouteHash(key)
// modulo shards, so the hash of its hash tag for an ordinary key.
uint32_t ShardOf(std::string_view key, uint32_t shards);
// The 64-bit key hash Scan orders by.
uint64_t KeyHash(std::string_view key);

}  // namespace asymnvm::kv
