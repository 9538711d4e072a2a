// Coordinator::Open (URI dispatch), path rules and the helpers built on the virtual calls.
#include <condition_variable>
#include <mutex>

#include "asymnvm/coord.h"
#include "common/thread_annotations.h"
#include "coord/internal.h"

namespace asymnvm::coord {

std::string_view SessionStateName(SessionState s) {
  switch (s) {
    case SessionState::kConnected:
      return "connected";
    case SessionState::kSuspended:
      return "suspended";
    case SessionState::kExpired:
      return "expired";
    case SessionState::kClosed:
      return "closed";
  }
  return "unknown";
}

std::string_view EventTypeName(EventType t) {
  switch (t) {
    case EventType::kCreated:
      return "created";
    case EventType::kChanged:
      return "changed";
    case EventType::kDeleted:
      return "deleted";
    case EventType::kChildrenChanged:
      return "children";
    case EventType::kSessionExpired:
      return "session-expired";
  }
  return "unknown";
}

Status ValidatePath(std::string_view path) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("coord: bad path '" + std::string(path) +
                                   "': " + std::string(why));
  };
  if (path.empty() || path[0] != '/') return bad("must start with '/'");
  if (path == "/") return Status::Ok();
  if (path.size() > 1024) return bad("longer than 1024 characters");
  if (path.back() == '/') return bad("trailing '/'");
  size_t i = 1;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view c = path.substr(i, j - i);
    if (c.empty()) return bad("empty component");
    if (c.size() > 200) return bad("component longer than 200 characters");
    if (c[0] == '.') return bad("component starts with '.'");
    for (char ch : c) {
      const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.' || ch == ':';
      if (!ok) return bad("character outside [A-Za-z0-9_.:-]");
    }
    i = j + 1;
  }
  return Status::Ok();
}

std::string ParentOf(const std::string& path) {
  const size_t at = path.rfind('/');
  return at == 0 ? "/" : path.substr(0, at);
}

std::string LeafOf(const std::string& path) { return path.substr(path.rfind('/') + 1); }

Result<std::unique_ptr<Coordinator>> Coordinator::Open(const std::string& uri,
                                                       const Options& options) {
  if (uri.empty()) {
    if (options.data_dir.empty()) {
      return Status::InvalidArgument(
          "coord: empty URI and no data directory (give dir:PATH, zk:HOST:PORT or a data dir)");
    }
    return OpenEmbedded(options.data_dir + "/coord", options);
  }
  if (uri.rfind("dir:", 0) == 0) {
    std::string dir = uri.substr(4);
    if (dir.rfind("//", 0) == 0) {
      return Status::NotSupported(
          "coord: '" + uri +
          "': the embedded coordinator serves the processes of one machine only (a local "
          "directory, dir:/PATH); use zk:HOST:PORT to coordinate several machines");
    }
    if (dir.empty()) return Status::InvalidArgument("coord: 'dir:' needs a directory");
    return OpenEmbedded(dir, options);
  }
  if (uri.rfind("zk:", 0) == 0) {
    std::string spec = uri.substr(3);
    if (spec.rfind("//", 0) == 0) spec = spec.substr(2);  // tolerate zk://host:port
    return OpenZooKeeper(spec, options);
  }
  return Status::InvalidArgument("coord: unknown URI '" + uri +
                                 "' (expected dir:PATH or zk:HOST:PORT[,HOST:PORT...][/chroot])");
}

Status Coordinator::EnsurePath(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  if (path == "/") return Status::Ok();
  size_t i = 1;
  while (true) {
    const size_t j = path.find('/', i);
    const std::string prefix = path.substr(0, j);
    auto exists = Exists(prefix);
    if (!exists.ok()) return exists.status();
    if (!*exists) {
      auto created = Create(prefix, "", kPersistent);
      if (!created.ok() && created.status().code() != StatusCode::kAlreadyExists) {
        return created.status();
      }
    }
    if (j == std::string::npos) return Status::Ok();
    i = j + 1;
  }
}

namespace {
// A one-shot "something changed" latch fed by a watch callback.
struct Latch {
  Mutex mu;
  std::condition_variable cv;
  uint64_t events ASYMNVM_GUARDED_BY(mu) = 0;
  bool expired ASYMNVM_GUARDED_BY(mu) = false;
};
}  // namespace

Result<std::optional<Node>> Coordinator::WaitForChange(const std::string& path,
                                                       int64_t known_version,
                                                       Clock::time_point deadline) {
  auto latch = std::make_shared<Latch>();
  auto watch = Watch(path, WatchKind::kNode, [latch](const WatchEvent& e) {
    MutexLock lock(latch->mu);
    ++latch->events;
    if (e.type == EventType::kSessionExpired) latch->expired = true;
    latch->cv.notify_all();
  });
  if (!watch.ok()) return watch.status();
  Result<std::optional<Node>> out =
      Status::TimedOut("coord: '" + path + "' did not change in time");
  uint64_t seen = 0;
  for (;;) {
    auto node = Get(path);
    if (node.ok()) {
      if (known_version == kNoNode || node->version != known_version) {
        out = std::optional<Node>(std::move(node).value());
        break;
      }
    } else if (node.status().code() == StatusCode::kNotFound) {
      if (known_version != kNoNode) {
        out = std::optional<Node>();
        break;
      }
    } else if (!node.status().retryable()) {
      out = node.status();
      break;
    }
    MutexLock lock(latch->mu);
    if (latch->expired) {
      out = Status::FailedPrecondition("coord: session expired while waiting for '" + path + "'");
      break;
    }
    if (!latch->cv.wait_until(lock.native(), deadline, [&]() ASYMNVM_REQUIRES(latch->mu) {
          return latch->events != seen;
        })) {
      break;
    }
    seen = latch->events;
  }
  (void)Unwatch(*watch);
  return out;
}

Result<std::vector<std::string>> Coordinator::WaitForChildrenChange(
    const std::string& path, const std::vector<std::string>& known, Clock::time_point deadline) {
  auto latch = std::make_shared<Latch>();
  auto watch = Watch(path, WatchKind::kChildren, [latch](const WatchEvent& e) {
    MutexLock lock(latch->mu);
    ++latch->events;
    if (e.type == EventType::kSessionExpired) latch->expired = true;
    latch->cv.notify_all();
  });
  if (!watch.ok()) return watch.status();
  Result<std::vector<std::string>> out =
      Status::TimedOut("coord: children of '" + path + "' did not change in time");
  uint64_t seen = 0;
  for (;;) {
    auto children = Children(path);
    if (children.ok()) {
      if (*children != known) {
        out = std::move(children).value();
        break;
      }
    } else if (children.status().code() == StatusCode::kNotFound) {
      if (!known.empty()) {
        out = std::vector<std::string>();
        break;
      }
    } else if (!children.status().retryable()) {
      out = children.status();
      break;
    }
    MutexLock lock(latch->mu);
    if (latch->expired) {
      out = Status::FailedPrecondition("coord: session expired while waiting for '" + path + "'");
      break;
    }
    if (!latch->cv.wait_until(lock.native(), deadline, [&]() ASYMNVM_REQUIRES(latch->mu) {
          return latch->events != seen;
        })) {
      break;
    }
    seen = latch->events;
  }
  (void)Unwatch(*watch);
  return out;
}

}  // namespace asymnvm::coord
