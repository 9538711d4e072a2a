#include "coord/watch_hub.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::coord {

bool Snapshot::SameAs(const Snapshot& o, WatchKind kind) const {
  if (!ok || !o.ok) return true;  // a failed probe says nothing; compare the next good one
  if (exists != o.exists) return false;
  if (!exists) return true;
  if (creation_id != o.creation_id) return false;
  if (kind == WatchKind::kNode) return version == o.version;
  return children == o.children;
}

WatchHub::WatchHub(WatchHubOptions options) : options_(std::move(options)) {
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) {
    LOG_ERROR("coord", "watch hub: eventfd failed (errno " << errno << "); watches unavailable");
    return;
  }
  thread_ = std::thread([this] { Run(); });
}

WatchHub::~WatchHub() {
  Stop();
  if (event_fd_ >= 0) ::close(event_fd_);
}

void WatchHub::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) {
    ASYMNVM_CHECK(std::this_thread::get_id() != thread_.get_id());  // Close() from a callback
    thread_.join();
  }
}

void WatchHub::Wake() {
  if (event_fd_ < 0) return;
  const uint64_t one = 1;
  ssize_t n = ::write(event_fd_, &one, sizeof(one));
  (void)n;  // EAGAIN: the counter is already non-zero, a wake-up is pending anyway
}

void WatchHub::Expire() {
  expire_pending_.store(true);
  Wake();
}

Result<WatchId> WatchHub::Add(const std::string& path, WatchKind kind, WatchCallback callback) {
  if (event_fd_ < 0) return Status::IoError("watch: the watch thread could not start (eventfd)");
  if (!callback) return Status::InvalidArgument("watch: empty callback");
  auto e = std::make_shared<Entry>();
  e->path = path;
  e->kind = kind;
  e->callback = std::move(callback);
  e->last = options_.probe(path, kind);
  WatchId id;
  {
    MutexLock lock(mu_);
    if (stopping_ || expired_) {
      return Status::FailedPrecondition("watch: the session has ended");
    }
    id = next_id_++;
    entries_.emplace(id, std::move(e));
  }
  Wake();  // a change between the probe and the registration is caught by the next probe
  return id;
}

Status WatchHub::Remove(WatchId id) {
  MutexLock lock(mu_);
  if (entries_.erase(id) == 0)
    return Status::NotFound("watch: no watch with id " + std::to_string(id));
  if (std::this_thread::get_id() == thread_id_) return Status::Ok();
  idle_cv_.wait(lock.native(), [&]() ASYMNVM_REQUIRES(mu_) { return running_ != id; });
  return Status::Ok();
}

EventType WatchHub::Difference(const Snapshot& before, const Snapshot& after, WatchKind kind) {
  if (before.exists && !after.exists) return EventType::kDeleted;
  if (!before.exists && after.exists) return EventType::kCreated;
  if (before.creation_id != after.creation_id) return EventType::kCreated;  // deleted + re-created
  return kind == WatchKind::kNode ? EventType::kChanged : EventType::kChildrenChanged;
}

void WatchHub::Run() {
  {
    MutexLock lock(mu_);
    thread_id_ = std::this_thread::get_id();
  }
  auto interval = options_.short_tick;
  bool changed_last_round = false;
  for (;;) {
    bool need_short = false;
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      for (const auto& [id, e] : entries_) {
        if (e->last.volatile_state || !e->last.ok) need_short = true;
      }
      if (options_.backoff && !entries_.empty()) need_short = true;
    }
    if (options_.backoff) {
      interval =
          changed_last_round ? options_.short_tick : std::min(interval * 2, options_.idle_tick);
    } else {
      interval = options_.short_tick;
    }
    int timeout_ms = -1;
    if (need_short) {
      timeout_ms = static_cast<int>(interval.count());
    } else if (options_.idle_tick.count() > 0) {
      timeout_ms = static_cast<int>(options_.idle_tick.count());
    }
    pollfd fds[2] = {{event_fd_, POLLIN, 0}, {options_.notify_fd, POLLIN, 0}};
    const int nfds = options_.notify_fd >= 0 ? 2 : 1;
    int r = ::poll(fds, nfds, timeout_ms);
    if (r < 0 && errno != EINTR) {
      LOG_ERROR("coord", "watch hub: poll failed (errno " << errno << ")");
    }
    uint64_t counter;
    while (::read(event_fd_, &counter, sizeof(counter)) > 0) {
    }
    if (nfds == 2 && (fds[1].revents & POLLIN) && options_.drain) options_.drain();
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    if (expire_pending_.load()) {
      std::map<WatchId, std::shared_ptr<Entry>> all;
      {
        MutexLock lock(mu_);
        expired_ = true;
        all.swap(entries_);
      }
      for (auto& [id, e] : all) {
        {
          MutexLock lock(mu_);
          running_ = id;
        }
        e->callback(WatchEvent{EventType::kSessionExpired, e->path});
        {
          MutexLock lock(mu_);
          running_ = 0;
        }
        idle_cv_.notify_all();
      }
      expire_pending_.store(false);
      continue;
    }
    changed_last_round = false;
    std::vector<std::pair<WatchId, std::shared_ptr<Entry>>> todo;
    {
      MutexLock lock(mu_);
      todo.assign(entries_.begin(), entries_.end());
    }
    for (auto& [id, e] : todo) {
      Snapshot now = options_.probe(e->path, e->kind);
      if (!now.ok) {
        e->last.ok = false;  // ask for the short tick; keep the last good state to compare with
        continue;
      }
      Snapshot before = e->last;
      before.ok = true;
      if (before.SameAs(now, e->kind)) {
        e->last = std::move(now);
        continue;
      }
      const EventType type = Difference(before, now, e->kind);
      e->last = std::move(now);
      changed_last_round = true;
      {
        MutexLock lock(mu_);
        if (stopping_) return;
        if (entries_.count(id) == 0) continue;  // removed meanwhile
        running_ = id;
      }
      e->callback(WatchEvent{type, e->path});
      {
        MutexLock lock(mu_);
        running_ = 0;
      }
      idle_cv_.notify_all();
    }
  }
}

}  // namespace asymnvm::coord
