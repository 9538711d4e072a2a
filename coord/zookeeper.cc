// The ZooKeeper coordinator over the C client (zookeeper_mt), doc/coord.md §ZooKeeper.
//
// Every request is issued asynchronously and awaited with a deadline (operation_timeout), so no
// call can hang on a dead ensemble. A request that fails with ZCONNECTIONLOSS is retried once the
// client has reconnected (same session), and the retry's answer is interpreted knowing that the
// first attempt may have been applied (Set/Delete/Create of a non-sequential ephemeral node settle
// that; a sequential Create cannot and reports kConnectionError). Watches are one-shot in the C
// client: the WatchHub re-probes (and so re-arms) after every firing.
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "coord/internal.h"
#include "coord/watch_hub.h"

namespace asymnvm::coord {
namespace {

struct Reply {
  Mutex mu;
  std::condition_variable cv;
  bool done ASYMNVM_GUARDED_BY(mu) = false;
  int rc = 0;
  std::string value;
  bool has_stat = false;
  struct Stat stat {};
  std::vector<std::string> strings;
};
using ReplyPtr = std::shared_ptr<Reply>;

// Completion contexts own a heap shared_ptr so a reply arriving after the caller gave up is safe.
template <typename Fill>
void Complete(const void* data, int rc, Fill fill) {
  auto* holder = static_cast<ReplyPtr*>(const_cast<void*>(data));
  ReplyPtr r = *holder;
  delete holder;
  {
    MutexLock lock(r->mu);
    r->rc = rc;
    if (rc == ZOK) fill(*r);
    r->done = true;
  }
  r->cv.notify_all();
}

void StringDone(int rc, const char* value, const void* data) {
  Complete(data, rc, [&](Reply& r) {
    if (value != nullptr) r.value = value;
  });
}
void DataDone(int rc, const char* value, int len, const struct Stat* stat, const void* data) {
  Complete(data, rc, [&](Reply& r) {
    if (value != nullptr && len > 0) r.value.assign(value, static_cast<size_t>(len));
    if (stat != nullptr) {
      r.stat = *stat;
      r.has_stat = true;
    }
  });
}
void StatDone(int rc, const struct Stat* stat, const void* data) {
  Complete(data, rc, [&](Reply& r) {
    if (stat != nullptr) {
      r.stat = *stat;
      r.has_stat = true;
    }
  });
}
void VoidDone(int rc, const void* data) {
  Complete(data, rc, [](Reply&) {});
}
void StringsDone(int rc, const struct String_vector* strings, const void* data) {
  Complete(data, rc, [&](Reply& r) {
    if (strings == nullptr) return;
    for (int32_t i = 0; i < strings->count; ++i) r.strings.emplace_back(strings->data[i]);
  });
}

// The C client's own log lines (WARN and above) go through our logger ("zookeeper" component), so
// ASYMNVM_LOG_LEVEL governs them like every other line.
void ClientLog(const char* message) { LOG_WARN("zookeeper", (message != nullptr ? message : "")); }

constexpr int kLocalTimeout = -1000;  // our own: the deadline passed before the reply

class ZkCoordinator final : public Coordinator {
 public:
  explicit ZkCoordinator(const Options& options) : options_(options) {}
  ~ZkCoordinator() override { Close(); }

  Status Init(const std::string& hosts, const std::string& chroot);

  Result<std::string> Create(const std::string& path, std::string_view data,
                             uint32_t flags) override {
    return CreateImpl(path, data, flags, /*retry_sequential=*/false);
  }
  Result<Node> Get(const std::string& path) override;
  Result<int64_t> Set(const std::string& path, std::string_view data,
                      int64_t expected_version) override;
  Status Delete(const std::string& path, int64_t expected_version) override;
  Result<std::vector<std::string>> Children(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Result<uint64_t> AllocateId(const std::string& path) override;
  Result<WatchId> Watch(const std::string& path, WatchKind kind, WatchCallback callback) override;
  Status Unwatch(WatchId id) override;
  SessionState state() const override {
    MutexLock lock(state_mu_);
    return state_;
  }
  uint64_t session_id() const override { return session_.load(); }
  std::string_view kind() const override { return "zookeeper"; }
  std::chrono::milliseconds lease_timeout() const override {
    // Test-only switch (the partition suite's negative control, doc/partitions.md): no lease, so
    // nothing fenced by it (kv CheckLease, mirror primary role, front-end identity) is fenced.
    if (std::getenv("ASYMNVM_TEST_DISABLE_LEASES") != nullptr) return {};
    const int granted = granted_ms_.load();
    return granted > 0 ? std::chrono::milliseconds(granted) : options_.session_timeout;
  }
  void Close() override;

 private:
  static void GlobalWatcher(zhandle_t* zh, int type, int state, const char* path, void* ctx);
  static void PathWatcher(zhandle_t* zh, int type, int state, const char* path, void* ctx);

  std::string Full(const std::string& path) const {
    if (chroot_.empty()) return path;
    return path == "/" ? chroot_ : chroot_ + path;
  }
  Clock::time_point Deadline() const { return Clock::now() + options_.operation_timeout; }
  Status Usable() const;
  // Issues one request (issue(ctx) returns the submit rc) and waits for its reply.
  template <typename Issue>
  int Once(Issue issue, ReplyPtr* out, Clock::time_point deadline);
  // Runs Once, retrying after a lost connection until `deadline`; *retried tells whether an
  // earlier attempt may have been applied.
  template <typename Issue>
  int WithRetry(Issue issue, ReplyPtr* out, Clock::time_point deadline, bool* retried,
                bool may_retry = true);
  bool WaitConnected(Clock::time_point deadline);
  Status Error(int rc, std::string_view op, const std::string& path) const;
  Result<std::string> CreateImpl(const std::string& path, std::string_view data, uint32_t flags,
                                 bool retry_sequential);
  Snapshot Probe(const std::string& path, WatchKind kind);

  const Options options_;
  zhandle_t* zh_ = nullptr;
  std::string hosts_;
  std::string chroot_;
  mutable Mutex state_mu_;
  std::condition_variable state_cv_;
  SessionState state_ ASYMNVM_GUARDED_BY(state_mu_) = SessionState::kSuspended;
  std::atomic<uint64_t> session_{0};
  std::atomic<int> granted_ms_{0};  // the negotiated session timeout (zoo_recv_timeout)
  std::atomic<bool> closed_{false};
  std::unique_ptr<WatchHub> hub_;
};

void ZkCoordinator::GlobalWatcher(zhandle_t* zh, int type, int state, const char* path, void* ctx) {
  auto* self = static_cast<ZkCoordinator*>(ctx);
  if (type != ZOO_SESSION_EVENT) {
    if (self->hub_) self->hub_->Wake();
    return;
  }
  bool expired = false;
  {
    MutexLock lock(self->state_mu_);
    if (self->state_ == SessionState::kExpired || self->state_ == SessionState::kClosed) return;
    if (state == ZOO_CONNECTED_STATE) {
      self->state_ = SessionState::kConnected;
      const clientid_t* id = zoo_client_id(zh);
      if (id != nullptr) self->session_.store(static_cast<uint64_t>(id->client_id));
      self->granted_ms_.store(zoo_recv_timeout(zh));
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
      self->state_ = SessionState::kExpired;
      expired = true;
    } else {
      self->state_ = SessionState::kSuspended;
    }
  }
  self->state_cv_.notify_all();
  if (self->hub_) {
    if (expired) {
      LOG_WARN("coord", "zookeeper: session 0x" << std::hex << self->session_.load()
                                                << " expired; its ephemeral nodes are gone");
      self->hub_->Expire();
    } else {
      self->hub_->Wake();
    }
  }
}

void ZkCoordinator::PathWatcher(zhandle_t*, int, int, const char*, void* ctx) {
  auto* self = static_cast<ZkCoordinator*>(ctx);
  if (self->hub_) self->hub_->Wake();
}

Status ZkCoordinator::Init(const std::string& hosts, const std::string& chroot) {
  static std::once_flag debug_level_once;
  std::call_once(debug_level_once, [] { zoo_set_debug_level(ZOO_LOG_LEVEL_WARN); });
  hosts_ = hosts;
  WatchHubOptions ho;
  ho.probe = [this](const std::string& p, WatchKind k) { return Probe(p, k); };
  ho.short_tick = std::chrono::milliseconds(200);  // only while a probe failed
  ho.idle_tick = std::chrono::milliseconds(0);     // server watches wake us
  hub_ = std::make_unique<WatchHub>(std::move(ho));
  const int timeout_ms = static_cast<int>(options_.session_timeout.count());
  zh_ = zookeeper_init2(hosts.c_str(), &ZkCoordinator::GlobalWatcher, timeout_ms, nullptr, this, 0,
                        &ClientLog);
  if (zh_ == nullptr) {
    return Status::IoError("coord(zk): zookeeper_init('" + hosts + "') failed", errno);
  }
  {
    MutexLock lock(state_mu_);
    const bool up = state_cv_.wait_until(
        lock.native(), Clock::now() + options_.connect_timeout, [&]() ASYMNVM_REQUIRES(state_mu_) {
          return state_ == SessionState::kConnected || state_ == SessionState::kExpired;
        });
    if (!up || state_ != SessionState::kConnected) {
      lock.unlock();
      Close();
      return Status(StatusCode::kConnectionError,
                    "coord(zk): no ZooKeeper server of '" + hosts + "' answered within " +
                        std::to_string(options_.connect_timeout.count()) + " ms",
                    0, /*retryable=*/true);
    }
  }
  if (!chroot.empty()) {
    Status st = EnsurePath(chroot);  // chroot_ is still empty: absolute paths
    if (!st.ok()) {
      Close();
      return st.WithContext("coord(zk): creating the chroot");
    }
    chroot_ = chroot;
  }
  return Status::Ok();
}

void ZkCoordinator::Close() {
  if (closed_.exchange(true)) return;
  if (hub_) hub_->Stop();
  if (zh_ != nullptr) {
    zookeeper_close(zh_);  // ends the session: the server deletes its ephemeral nodes
    zh_ = nullptr;
  }
  {
    MutexLock lock(state_mu_);
    state_ = SessionState::kClosed;
  }
  state_cv_.notify_all();
}

Status ZkCoordinator::Usable() const {
  if (closed_.load()) return Status::FailedPrecondition("coord(zk): closed");
  if (state() == SessionState::kExpired) {
    return Status::FailedPrecondition(
        "coord(zk): session expired (its ephemeral nodes are gone); open a new Coordinator");
  }
  return Status::Ok();
}

bool ZkCoordinator::WaitConnected(Clock::time_point deadline) {
  MutexLock lock(state_mu_);
  state_cv_.wait_until(lock.native(), deadline, [&]() ASYMNVM_REQUIRES(state_mu_) {
    return state_ != SessionState::kSuspended;
  });
  return state_ == SessionState::kConnected;
}

template <typename Issue>
int ZkCoordinator::Once(Issue issue, ReplyPtr* out, Clock::time_point deadline) {
  auto r = std::make_shared<Reply>();
  auto* ctx = new ReplyPtr(r);
  const int rc = issue(static_cast<const void*>(ctx));
  if (rc != ZOK) {
    delete ctx;  // not queued: the completion will not run
    return rc;
  }
  MutexLock lock(r->mu);
  if (!r->cv.wait_until(lock.native(), deadline,
                        [&]() ASYMNVM_REQUIRES(r->mu) { return r->done; })) {
    return kLocalTimeout;
  }
  *out = r;
  return r->rc;
}

template <typename Issue>
int ZkCoordinator::WithRetry(Issue issue, ReplyPtr* out, Clock::time_point deadline, bool* retried,
                             bool may_retry) {
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    const int rc = Once(issue, out, deadline);
    if (rc != ZCONNECTIONLOSS || !may_retry) return rc;
    // The request (and maybe its effect) was lost with the connection: wait for the client to
    // reconnect within the same session, then ask again.
    *retried = true;
    std::this_thread::sleep_for(pause);  // the session event may trail the failed reply
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
    if (Clock::now() >= deadline || !WaitConnected(deadline)) return rc;
  }
}

Status ZkCoordinator::Error(int rc, std::string_view op, const std::string& path) const {
  const std::string what = "coord(zk): " + std::string(op) + " '" + path + "'";
  if (rc == ZNONODE) return Status::NotFound(what + ": no such node");
  if (rc == ZNODEEXISTS) return Status::AlreadyExists(what + ": exists");
  if (rc == ZBADVERSION) return Status::Aborted(what + ": version mismatch");
  if (rc == ZNOTEMPTY) return Status::FailedPrecondition(what + ": it has children");
  if (rc == ZNOCHILDRENFOREPHEMERALS) {
    return Status::FailedPrecondition(what + ": the parent is ephemeral (no children allowed)");
  }
  if (rc == ZCONNECTIONLOSS) {
    return Status(StatusCode::kConnectionError,
                  what + ": connection to ZooKeeper lost; the outcome is unknown", 0, true);
  }
  if (rc == kLocalTimeout || rc == ZOPERATIONTIMEOUT) {
    return Status::TimedOut(what + ": no answer within " +
                            std::to_string(options_.operation_timeout.count()) + " ms");
  }
  if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZSESSIONMOVED) {
    return Status::FailedPrecondition(what + ": session expired; open a new Coordinator");
  }
  if (rc == ZCLOSING) return Status::FailedPrecondition(what + ": closing");
  if (rc == ZBADARGUMENTS) return Status::InvalidArgument(what + ": bad arguments");
  if (rc == ZNOAUTH) return Status::PermissionDenied(what + ": not authorised");
  return Status::Internal(what + ": " + zerror(rc) + " (" + std::to_string(rc) + ")");
}

Result<std::string> ZkCoordinator::CreateImpl(const std::string& path, std::string_view data,
                                              uint32_t flags, bool retry_sequential) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  if ((flags & ~uint32_t{kEphemeral | kSequential}) != 0) {
    return Status::InvalidArgument("coord: unknown create flags " + std::to_string(flags));
  }
  if (path == "/") return Status::AlreadyExists("coord: '/' always exists");
  if (data.size() > (1u << 20))
    return Status::InvalidArgument("coord: node data larger than 1 MiB");
  const bool ephemeral = flags & kEphemeral, sequential = flags & kSequential;
  const int mode = ephemeral ? (sequential ? ZOO_EPHEMERAL_SEQUENTIAL : ZOO_EPHEMERAL)
                             : (sequential ? ZOO_PERSISTENT_SEQUENTIAL : ZOO_PERSISTENT);
  const std::string full = Full(path);
  ReplyPtr r;
  bool retried = false;
  const int rc = WithRetry(
      [&](const void* ctx) {
        return zoo_acreate(zh_, full.c_str(), data.data(), static_cast<int>(data.size()),
                           &ZOO_OPEN_ACL_UNSAFE, mode, StringDone, ctx);
      },
      &r, Deadline(), &retried, /*may_retry=*/!sequential || retry_sequential);
  if (rc == ZOK) {
    std::string created = r->value;
    if (!chroot_.empty()) created = created.substr(chroot_.size());
    return created;
  }
  if (rc == ZNODEEXISTS && retried && !sequential) {
    // Our first attempt may have created it before the connection dropped.
    auto n = Get(path);
    if (n.ok() && ephemeral && n->ephemeral && n->owner_session == session_id()) return path;
    return Status::AlreadyExists("coord(zk): create '" + path +
                                 "': exists (the connection was lost meanwhile: this call may "
                                 "have created it)");
  }
  if (rc == ZNONODE) {
    return Status::NotFound("coord(zk): cannot create '" + path + "': parent '" + ParentOf(path) +
                            "' does not exist");
  }
  return Error(rc, "create", path);
}

Result<Node> ZkCoordinator::Get(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  const std::string full = Full(path);
  ReplyPtr r;
  bool retried = false;
  const int rc =
      WithRetry([&](const void* ctx) { return zoo_aget(zh_, full.c_str(), 0, DataDone, ctx); }, &r,
                Deadline(), &retried);
  if (rc != ZOK) return Error(rc, "get", path);
  Node n;
  n.data = std::move(r->value);
  n.version = r->stat.version;
  n.ephemeral = r->stat.ephemeralOwner != 0;
  n.owner_session = static_cast<uint64_t>(r->stat.ephemeralOwner);
  n.creation_id = static_cast<uint64_t>(r->stat.czxid);
  return n;
}

Result<int64_t> ZkCoordinator::Set(const std::string& path, std::string_view data,
                                   int64_t expected_version) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  if (expected_version < kAnyVersion || expected_version > INT32_MAX) {
    return Status::InvalidArgument("coord: expected version " + std::to_string(expected_version));
  }
  if (data.size() > (1u << 20))
    return Status::InvalidArgument("coord: node data larger than 1 MiB");
  const std::string full = Full(path);
  ReplyPtr r;
  bool retried = false;
  const int rc = WithRetry(
      [&](const void* ctx) {
        return zoo_aset(zh_, full.c_str(), data.data(), static_cast<int>(data.size()),
                        static_cast<int>(expected_version), StatDone, ctx);
      },
      &r, Deadline(), &retried);
  if (rc == ZOK) return static_cast<int64_t>(r->stat.version);
  if (rc == ZBADVERSION && retried && expected_version != kAnyVersion) {
    // Applied by the attempt whose reply was lost? Then the node is exactly what we wrote, one
    // version on.
    auto n = Get(path);
    if (n.ok() && n->version == expected_version + 1 && n->data == data) return n->version;
  }
  return Error(rc, "set", path);
}

Status ZkCoordinator::Delete(const std::string& path, int64_t expected_version) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  if (path == "/") return Status::InvalidArgument("coord: cannot delete '/'");
  if (expected_version < kAnyVersion || expected_version > INT32_MAX) {
    return Status::InvalidArgument("coord: expected version " + std::to_string(expected_version));
  }
  const std::string full = Full(path);
  ReplyPtr r;
  bool retried = false;
  const int rc = WithRetry(
      [&](const void* ctx) {
        return zoo_adelete(zh_, full.c_str(), static_cast<int>(expected_version), VoidDone, ctx);
      },
      &r, Deadline(), &retried);
  if (rc == ZOK || (rc == ZNONODE && retried)) return Status::Ok();
  return Error(rc, "delete", path);
}

Result<std::vector<std::string>> ZkCoordinator::Children(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  const std::string full = Full(path);
  ReplyPtr r;
  bool retried = false;
  const int rc = WithRetry(
      [&](const void* ctx) { return zoo_aget_children(zh_, full.c_str(), 0, StringsDone, ctx); },
      &r, Deadline(), &retried);
  if (rc != ZOK) return Error(rc, "children", path);
  std::vector<std::string> out = std::move(r->strings);
  std::sort(out.begin(), out.end());
  return out;
}

Result<bool> ZkCoordinator::Exists(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  const std::string full = Full(path);
  ReplyPtr r;
  bool retried = false;
  const int rc =
      WithRetry([&](const void* ctx) { return zoo_aexists(zh_, full.c_str(), 0, StatDone, ctx); },
                &r, Deadline(), &retried);
  if (rc == ZOK) return true;
  if (rc == ZNONODE) return false;
  return Error(rc, "exists", path);
}

Result<uint64_t> ZkCoordinator::AllocateId(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(EnsurePath(path));
  // A persistent sequential child named by the parent's counter; deleted at once (a retry after
  // a lost connection may leave the first attempt's child behind: a gap, never a duplicate).
  const std::string prefix = (path == "/" ? "" : path) + "/id-";
  auto created = CreateImpl(prefix, "", kSequential, /*retry_sequential=*/true);
  if (!created.ok()) return created.status();
  const std::string digits = created->substr(prefix.size());
  char* end = nullptr;
  const uint64_t seq = std::strtoull(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0') {
    return Status::Internal("coord(zk): sequential node '" + *created + "' has no counter");
  }
  Status st = Delete(*created, kAnyVersion);
  if (!st.ok()) {
    LOG_WARN("coord",
             "zookeeper: could not delete id node '" << *created << "': " << st.ToString());
  }
  return seq + 1;
}

Snapshot ZkCoordinator::Probe(const std::string& path, WatchKind kind) {
  Snapshot s;
  if (closed_.load() || state() == SessionState::kExpired) {
    s.ok = false;
    return s;
  }
  const std::string full = Full(path);
  const auto deadline = Deadline();
  ReplyPtr r;
  // exists() arms a watch that fires on creation, data change and deletion.
  int rc = Once(
      [&](const void* ctx) {
        return zoo_awexists(zh_, full.c_str(), &ZkCoordinator::PathWatcher, this, StatDone, ctx);
      },
      &r, deadline);
  if (rc == ZNONODE) return s;
  if (rc != ZOK) {
    s.ok = false;
    return s;
  }
  s.exists = true;
  s.version = r->stat.version;
  s.creation_id = static_cast<uint64_t>(r->stat.czxid);
  if (kind == WatchKind::kChildren) {
    rc = Once(
        [&](const void* ctx) {
          return zoo_awget_children(zh_, full.c_str(), &ZkCoordinator::PathWatcher, this,
                                    StringsDone, ctx);
        },
        &r, deadline);
    if (rc == ZNONODE) return Snapshot{};
    if (rc != ZOK) {
      s.ok = false;
      return s;
    }
    s.children = std::move(r->strings);
    std::sort(s.children.begin(), s.children.end());
  }
  return s;
}

Result<WatchId> ZkCoordinator::Watch(const std::string& path, WatchKind kind,
                                     WatchCallback callback) {
  ASYMNVM_RETURN_IF_ERROR(Usable());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  return hub_->Add(path, kind, std::move(callback));
}

Status ZkCoordinator::Unwatch(WatchId id) {
  if (closed_.load()) return Status::FailedPrecondition("coord(zk): closed");
  return hub_->Remove(id);
}

}  // namespace

Result<std::unique_ptr<Coordinator>> OpenZooKeeper(const std::string& spec,
                                                   const Options& options) {
  const size_t slash = spec.find('/');
  const std::string hosts = spec.substr(0, slash);
  std::string chroot = slash == std::string::npos ? "" : spec.substr(slash);
  if (chroot == "/") chroot.clear();
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("coord: bad ZooKeeper URI 'zk:" + spec + "': " + why +
                                   " (expected zk:HOST:PORT[,HOST:PORT...][/chroot])");
  };
  if (hosts.empty()) return bad("no host");
  size_t i = 0;
  while (i <= hosts.size()) {
    size_t j = hosts.find(',', i);
    if (j == std::string::npos) j = hosts.size();
    const std::string hp = hosts.substr(i, j - i);
    const size_t colon = hp.rfind(':');
    if (hp.empty() || colon == std::string::npos || colon == 0)
      return bad("'" + hp + "' is not HOST:PORT");
    const std::string port = hp.substr(colon + 1);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535) return bad("bad port in '" + hp + "'");
    i = j + 1;
  }
  if (!chroot.empty()) {
    Status st = ValidatePath(chroot);
    if (!st.ok()) return bad("chroot: " + st.message());
  }
  auto c = std::make_unique<ZkCoordinator>(options);
  Status st = c->Init(hosts, chroot);
  if (!st.ok()) return st;
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace asymnvm::coord
