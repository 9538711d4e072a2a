#include "frontend/group_watch.h"

#include "common/logging.h"

namespace asymnvm::frontend {

std::unique_ptr<GroupWatch> GroupWatch::Start(coord::Coordinator& c, const std::string& path,
                                              const std::string& connected_via) {
  std::string base = connected_via;
  if (base.empty()) {
    auto node = c.Get(path);
    if (!node.ok()) return nullptr;
    base = node->data;
  }
  std::unique_ptr<GroupWatch> w(new GroupWatch(c, path, base));
  GroupWatch* p = w.get();
  auto id = c.Watch(path, coord::WatchKind::kNode, [p](const coord::WatchEvent&) { p->OnEvent(); });
  if (!id.ok()) {
    LOG_WARN("frontend", "watching " << path << ": " << id.status().ToString()
                                     << " (a failover is noticed by a failed call only)");
    return nullptr;
  }
  w->id_ = *id;
  w->watching_ = true;
  // A change between the Get and the Watch would be missed by the watch: look once more.
  p->OnEvent();
  return w;
}

GroupWatch::~GroupWatch() {
  if (watching_) (void)c_.Unwatch(id_);
}

void GroupWatch::OnEvent() {
  if (moves_.load() != 0) return;  // already moved: the Session reconnects with a new watch
  auto node = c_.Get(path_);
  if (node.ok() && node->data == data_) return;
  if (!node.ok() && node.status().code() != StatusCode::kNotFound) return;  // unknown: not a move
  moves_.fetch_add(1, std::memory_order_acq_rel);
  LOG_INFO("frontend", path_ << (node.ok() ? " now names another primary" : " is gone")
                             << ": calls in flight are not trusted; the session reconnects");
}

}  // namespace asymnvm::frontend
