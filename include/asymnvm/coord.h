// Coordinator: the small, strongly consistent tree of named nodes that AsymNVM processes use to
// find each other, to prove they are alive and to fence stale incarnations (doc/coord.md).
//
// A node is named by an absolute path ("/asymnvm/frontends/7"), holds a byte string and a version,
// and is either persistent (lives until deleted) or ephemeral (lives while the session that created
// it is alive). Two implementations sit behind this one interface and pass one conformance suite
// (coord/coord_conformance_test.cc):
//
//   dir:PATH                     embedded: a directory on this machine, no server process. A
//                                session is the Coordinator object; an ephemeral node vanishes the
//                                instant its holder process dies (the kernel drops its flock).
//                                It serves the processes of ONE machine only.
//   zk:H:P[,H:P...][/chroot]     ZooKeeper over the C client. A session is a ZooKeeper session;
//                                ephemeral nodes vanish one session timeout after the holder stops
//                                answering. Several machines.
//
// Paths: "/" or "/c1/c2/...", each component 1..200 characters of [A-Za-z0-9_.:-], not starting
// with '.'; no trailing '/'. Anything else is kInvalidArgument. A node's parent must exist before
// the node is created (EnsurePath creates missing ancestors); ephemeral nodes have no children.
//
// Versions: a node has version 0 after Create; every successful Set adds 1. Set and Delete take an
// expected version (kAnyVersion matches anything) and are compare-and-set operations: on mismatch
// they change nothing and return kAborted.
//
// Errors common to every call: kInvalidArgument (bad path or flag), kFailedPrecondition (the
// session has expired or the Coordinator is closed — open a new one; ephemeral nodes of the old
// session are gone), kConnectionError with retryable() (ZooKeeper: the connection was lost and
// the operation's outcome could not be settled within operation_timeout), kTimedOut (no answer
// within operation_timeout), kIoError (embedded: the OS refused; errno set), kCorruption
// (embedded: a node file failed its checksum).
//
// Thread safety: every method may be called from any thread concurrently, except Close() and the
// destructor, which must not race other calls on the same object. Watch callbacks run on one
// internal thread per Coordinator, one at a time; they may call any method of the Coordinator
// (including Unwatch of themselves, but not Close) and should not block for long.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::coord {

using Clock = std::chrono::steady_clock;

// Create flags (bitwise OR).
enum CreateFlags : uint32_t {
  kPersistent = 0,
  kEphemeral = 1u << 0,   // deleted when the creating session ends (process death, expiry)
  kSequential = 1u << 1,  // a 10-digit, zero-padded, per-parent increasing counter is appended
};

inline constexpr int64_t kAnyVersion = -1;

// A node as read by Get.
struct Node {
  std::string data;
  int64_t version = 0;  // 0 after Create, +1 per Set
  bool ephemeral = false;
  uint64_t owner_session = 0;  // the session holding an ephemeral node; 0 if persistent
  uint64_t creation_id = 0;    // differs between two incarnations of one path (ZooKeeper: czxid)
};

enum class SessionState : uint8_t {
  kConnected,  // operations proceed
  kSuspended,  // ZooKeeper only: connection lost, reconnecting; the session (and its ephemeral
               // nodes) may still be alive. Operations wait up to operation_timeout.
  kExpired,    // terminal: the session is gone and so are its ephemeral nodes. Every call returns
               // kFailedPrecondition; the caller opens a new Coordinator and re-creates its
               // ephemeral nodes itself (nothing is re-created automatically).
  kClosed,     // Close() was called
};
std::string_view SessionStateName(SessionState s);

enum class WatchKind : uint8_t {
  kNode,      // the node's existence and data (created, changed, deleted)
  kChildren,  // the set of the node's children (and the node's own creation / deletion)
};

enum class EventType : uint8_t {
  kCreated,
  kChanged,
  kDeleted,
  kChildrenChanged,
  kSessionExpired,  // delivered once to every watch; no further events follow
};
std::string_view EventTypeName(EventType t);

struct WatchEvent {
  EventType type;
  std::string path;  // the watched path
};
using WatchCallback = std::function<void(const WatchEvent&)>;
using WatchId = uint64_t;

struct Options {
  // Used when the URI is empty: the embedded coordinator in `data_dir`/coord.
  std::string data_dir;
  // ZooKeeper: the session timeout asked of the server (the server clamps it to
  // [2, 20] × its tickTime unless configured otherwise).
  std::chrono::milliseconds session_timeout{4000};
  // Open waits this long for the first connection (ZooKeeper) before failing with kConnectionError.
  std::chrono::milliseconds connect_timeout{10000};
  // Every call waits at most this long, reconnecting included.
  std::chrono::milliseconds operation_timeout{10000};
  // Embedded: how often watches of ephemeral nodes (whose holder may die without touching the
  // file system) are re-checked; also the first interval of the polling fallback used when inotify
  // is unavailable (backing off ×2 up to 1 s while nothing changes).
  std::chrono::milliseconds poll_interval{50};
  // Embedded: fsync every change (file and directory) before returning.
  bool sync_writes = true;
};

class Coordinator {
 public:
  // Opens a session. `uri`: "dir:PATH" | "zk:HOST:PORT[,HOST:PORT...][/chroot]" | "" (embedded in
  // options.data_dir + "/coord"; kInvalidArgument if data_dir is empty too). The embedded directory
  // is created if missing. A ZooKeeper chroot is created (persistent) if missing.
  // Errors: kInvalidArgument (unknown scheme, malformed host list), kNotSupported (embedded asked
  // to serve another machine, e.g. "dir://host/..." or a directory on a network file system),
  // kConnectionError (no ZooKeeper server reachable within connect_timeout), kIoError.
  static Result<std::unique_ptr<Coordinator>> Open(const std::string& uri,
                                                   const Options& options = {});

  virtual ~Coordinator() = default;  // implementations Close() in their destructors

  // Creates `path` holding `data`. Returns the created path (with the counter appended when
  // kSequential). Errors: kAlreadyExists, kNotFound (the parent does not exist),
  // kFailedPrecondition (the parent is ephemeral).
  virtual Result<std::string> Create(const std::string& path, std::string_view data,
                                     uint32_t flags = kPersistent) = 0;

  // Reads a node. Errors: kNotFound.
  virtual Result<Node> Get(const std::string& path) = 0;

  // Replaces the node's data if its version equals `expected_version` (or kAnyVersion); returns
  // the new version. Errors: kNotFound, kAborted (version mismatch: nothing changed).
  virtual Result<int64_t> Set(const std::string& path, std::string_view data,
                              int64_t expected_version) = 0;

  // Deletes a node if its version matches. Errors: kNotFound, kAborted (version mismatch),
  // kFailedPrecondition (the node has children).
  virtual Status Delete(const std::string& path, int64_t expected_version = kAnyVersion) = 0;

  // Names (not paths) of the node's live children, sorted. Errors: kNotFound.
  virtual Result<std::vector<std::string>> Children(const std::string& path) = 0;

  virtual Result<bool> Exists(const std::string& path) = 0;

  // Returns an id >= 1 not returned before by any AllocateId(path) of any process or session on
  // this coordinator; creates `path` (and its ancestors) if missing. Ids increase but may have
  // gaps (ZooKeeper: a retry after a lost connection skips one).
  virtual Result<uint64_t> AllocateId(const std::string& path) = 0;

  // Registers a watch: `callback` runs (on the Coordinator's watch thread) after the watched state
  // of `path` changes; the watch stays armed until Unwatch (ZooKeeper's one-shot watches are
  // re-armed internally). Delivery is level-triggered and may coalesce: after any change that
  // happens once Watch has returned, the callback runs at least once, reporting the latest
  // difference; read the node again to learn the state. `path` need not exist. When the session
  // expires every watch gets kSessionExpired once.
  virtual Result<WatchId> Watch(const std::string& path, WatchKind kind,
                                WatchCallback callback) = 0;

  // Removes a watch. After it returns the callback is not running and will not run again (called
  // from inside that callback, it returns at once and the current run is the last). kNotFound for
  // an unknown id.
  virtual Status Unwatch(WatchId id) = 0;

  virtual SessionState state() const = 0;
  // How long this session's ephemeral nodes outlive its last contact with the coordinator: the
  // ZooKeeper session timeout the server granted (Options::session_timeout until connected); 0 for
  // the embedded coordinator, whose ephemeral nodes live exactly as long as the holding process
  // (a stopped process keeps them). A holder that acts on its ephemeral node without a
  // coordinator round trip (a lease) must stop trusting it once this long has passed since the
  // last call that reached the coordinator (frontend::FrontendIdentity::CheckLease).
  virtual std::chrono::milliseconds lease_timeout() const = 0;
  // Embedded: random per Coordinator object; ZooKeeper: the server's session id.
  virtual uint64_t session_id() const = 0;
  // "embedded" or "zookeeper".
  virtual std::string_view kind() const = 0;

  // Ends the session: ephemeral nodes it holds are deleted (embedded: released), watches stop.
  // Idempotent; later calls fail with kFailedPrecondition.
  virtual void Close() = 0;

  // ---- Helpers built on the calls above (same errors) ----

  // Creates every missing component of `path` as an empty persistent node (racing creators are
  // fine).
  Status EnsurePath(const std::string& path);

  // Blocks until the node's version differs from `known_version` or its existence changes
  // (known_version = kNoNode waits for the node to appear), then returns it (nullopt: it no longer
  // exists). kTimedOut when `deadline` passes first.
  static constexpr int64_t kNoNode = -1;
  Result<std::optional<Node>> WaitForChange(const std::string& path, int64_t known_version,
                                            Clock::time_point deadline);

  // Blocks until the sorted children of `path` differ from `known` (a missing node counts as no
  // children), then returns them. kTimedOut when `deadline` passes first.
  Result<std::vector<std::string>> WaitForChildrenChange(const std::string& path,
                                                         const std::vector<std::string>& known,
                                                         Clock::time_point deadline);
};

// Validates a coordinator path (rules above). OK or kInvalidArgument naming the problem.
Status ValidatePath(std::string_view path);

}  // namespace asymnvm::coord
