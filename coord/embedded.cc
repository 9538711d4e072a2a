// The embedded coordinator: a directory, no server process (doc/coord.md §Embedded).
//
//   DIR/FORMAT            "asymnvm-coord-embedded 1"
//   DIR/.lock             flock'd exclusively around every mutation; holds nothing
//   DIR/.ids              creation-id counter (decimal), replaced by rename
//   DIR/tree/             the root node "/"; node "/a/b" is the directory DIR/tree/a/b/ holding
//       .node             header + data (embedded_format.h), replaced atomically by rename
//       .owner            ephemeral nodes only: the holder keeps an exclusive flock on it
//       .seq              per-parent counter for sequential children and AllocateId (decimal)
//   DIR/tmp/, DIR/trash/  staging for atomic creation (rename in) and deletion (rename out)
//
// Readers take no lock: every visible file is complete because it arrived by rename. A reader that
// finds an ephemeral node whose .owner is not locked treats it as gone and removes it (under the
// mutation lock, after checking again).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "coord/embedded_format.h"
#include "coord/internal.h"
#include "coord/watch_hub.h"

namespace asymnvm::coord {
namespace {

namespace fs = std::filesystem;

Status Errno(const std::string& what, int e) {
  return Status::IoError("coord(embedded): " + what + ": " + std::strerror(e), e);
}

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + dir, errno);
  int r = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (r != 0) return Errno("fsync " + dir, e);
  return Status::Ok();
}

// Reads a whole small file. kNotFound if it (or a directory above it) does not exist.
Result<std::string> ReadFile(const std::string& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::NotFound(file);
    return Errno("open " + file, errno);
  }
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return Errno("read " + file, e);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxNodeData + kNodeHeaderSize) break;
  }
  ::close(fd);
  return out;
}

Status WriteAll(int fd, std::string_view bytes, const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write " + what, errno);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Writes `bytes` to dir/name through dir/name.tmp + rename.
Status ReplaceFile(const std::string& dir, const std::string& name, std::string_view bytes,
                   bool sync) {
  const std::string tmp = dir + "/" + name + ".tmp", final_name = dir + "/" + name;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create " + tmp, errno);
  Status st = WriteAll(fd, bytes, tmp);
  if (st.ok() && sync && ::fsync(fd) != 0) st = Errno("fsync " + tmp, errno);
  ::close(fd);
  if (!st.ok()) return st;
  if (::rename(tmp.c_str(), final_name.c_str()) != 0) return Errno("rename " + tmp, errno);
  if (sync) return FsyncDir(dir);
  return Status::Ok();
}

Result<uint64_t> ReadCounter(const std::string& file) {
  auto bytes = ReadFile(file);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) return uint64_t{0};
    return bytes.status();
  }
  char* end = nullptr;
  errno = 0;
  const uint64_t v = std::strtoull(bytes->c_str(), &end, 10);
  if (bytes->empty() || errno != 0 || end == bytes->c_str() || (*end != '\n' && *end != '\0')) {
    return Status::Corruption("coord(embedded): counter file '" + file + "' is not a number");
  }
  return v;
}

bool IsNetworkFs(const std::string& dir) {
  struct statfs s;
  if (::statfs(dir.c_str(), &s) != 0) return false;
  switch (static_cast<uint64_t>(s.f_type)) {
    case 0x6969:      // NFS
    case 0x517B:      // SMB
    case 0xFF534D42:  // CIFS
    case 0xFE534D42:  // SMB2
    case 0x564C:      // NCP
    case 0x00C36400:  // Ceph
    case 0x47504653:  // GPFS
      return true;
    default:
      return false;
  }
}

class EmbeddedCoordinator final : public Coordinator {
 public:
  EmbeddedCoordinator(std::string root, const Options& options)
      : root_(std::move(root)), tree_(root_ + "/tree"), options_(options) {}
  ~EmbeddedCoordinator() override { Close(); }

  Status Init();

  Result<std::string> Create(const std::string& path, std::string_view data,
                             uint32_t flags) override;
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
    return closed_.load() ? SessionState::kClosed : SessionState::kConnected;
  }
  uint64_t session_id() const override { return session_; }
  std::string_view kind() const override { return "embedded"; }
  std::chrono::milliseconds lease_timeout() const override { return {}; }
  void Close() override;

 private:
  // Holds mu_ (this object's threads) and the flock on .lock (other processes).
  class MutationLock {
   public:
    explicit MutationLock(EmbeddedCoordinator* c) : lock_(c->mu_), fd_(c->lock_fd_) {
      while (::flock(fd_, LOCK_EX) != 0) {
        if (errno != EINTR) {
          status_ = Errno("flock " + c->root_ + "/.lock", errno);
          return;
        }
      }
      held_ = true;
    }
    ~MutationLock() {
      if (held_) ::flock(fd_, LOCK_UN);
    }
    const Status& status() const { return status_; }

   private:
    MutexLock lock_;
    int fd_;
    bool held_ = false;
    Status status_;
  };

  std::string DirOf(const std::string& path) const { return path == "/" ? tree_ : tree_ + path; }
  Status CheckOpen() const {
    if (closed_.load()) return Status::FailedPrecondition("coord(embedded): closed");
    return Status::Ok();
  }
  // Reads a node; a dead ephemeral node is removed (taking the mutation lock unless `locked`)
  // and reported kNotFound.
  Result<NodeFile> Load(const std::string& path, bool locked);
  // True if the holder of the ephemeral node in `dir` still holds its .owner lock.
  bool OwnerAlive(const std::string& dir) const;
  // Moves a node directory out of the tree and deletes it. Mutation lock held.
  Status RemoveDir(const std::string& path);
  // Live children names; `any_ephemeral` set if one of them is ephemeral.
  Result<std::vector<std::string>> ListLive(const std::string& path, bool locked,
                                            bool* any_ephemeral);
  Result<uint64_t> BumpCounter(const std::string& file);  // mutation lock held; returns old value
  std::string StagingName();
  Snapshot Probe(const std::string& path, WatchKind kind);
  void AddInotify(const std::string& path);
  void DrainInotify();

  const std::string root_, tree_;
  const Options options_;
  int lock_fd_ = -1;
  int inotify_fd_ = -1;
  uint64_t session_ = 0;
  std::atomic<uint64_t> staging_seq_{0};
  std::atomic<bool> closed_{false};
  Mutex mu_;  // this object's mutations (the flock is per file description)
  Mutex owned_mu_;
  std::map<std::string, int> owned_
      ASYMNVM_GUARDED_BY(owned_mu_);  // ephemeral node path → .owner fd holding LOCK_EX
  std::unique_ptr<WatchHub> hub_;
};

Status EmbeddedCoordinator::Init() {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) return Errno("create directory " + root_, ec.value());
  if (IsNetworkFs(root_)) {
    return Status::NotSupported(
        "coord(embedded): '" + root_ +
        "' is on a network file system; the embedded coordinator serves the processes of one "
        "machine on a local directory; use zk:HOST:PORT to coordinate several machines");
  }
  for (const char* sub : {"/tree", "/tmp", "/trash"}) {
    fs::create_directories(root_ + sub, ec);
    if (ec) return Errno("create directory " + root_ + sub, ec.value());
  }
  lock_fd_ = ::open((root_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return Errno("open " + root_ + "/.lock", errno);
  std::random_device rd;
  session_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
  if (session_ == 0) session_ = 1;
  {
    MutationLock lock(this);
    ASYMNVM_RETURN_IF_ERROR(lock.status());
    auto format = ReadFile(root_ + "/FORMAT");
    if (format.ok()) {
      if (*format != "asymnvm-coord-embedded 1\n") {
        return Status::NotSupported("coord(embedded): '" + root_ +
                                    "/FORMAT' names a format this build does not read");
      }
    } else if (format.status().code() == StatusCode::kNotFound) {
      ASYMNVM_RETURN_IF_ERROR(
          ReplaceFile(root_, "FORMAT", "asymnvm-coord-embedded 1\n", options_.sync_writes));
    } else {
      return format.status();
    }
    auto root_node = ReadFile(tree_ + "/.node");
    if (!root_node.ok()) {
      if (root_node.status().code() != StatusCode::kNotFound) return root_node.status();
      ASYMNVM_RETURN_IF_ERROR(
          ReplaceFile(tree_, ".node", EncodeNodeFile(NodeFile{}), options_.sync_writes));
    }
    // Leftovers of operations a crash cut short (nobody else is mid-operation: we hold the lock).
    for (const char* sub : {"/tmp", "/trash"}) {
      for (const auto& e : fs::directory_iterator(root_ + sub, ec)) fs::remove_all(e.path(), ec);
    }
  }
  const char* no_inotify = std::getenv("ASYMNVM_COORD_NO_INOTIFY");
  if (no_inotify == nullptr || std::string_view(no_inotify) != "1") {
    inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) {
      LOG_WARN("coord",
               "embedded: inotify unavailable (errno " << errno << "); watches poll with backoff");
    }
  }
  WatchHubOptions ho;
  ho.probe = [this](const std::string& p, WatchKind k) { return Probe(p, k); };
  ho.short_tick = options_.poll_interval;
  if (inotify_fd_ >= 0) {
    ho.notify_fd = inotify_fd_;
    ho.drain = [this] { DrainInotify(); };
    ho.idle_tick = std::chrono::milliseconds(1000);
  } else {
    ho.backoff = true;
    ho.idle_tick = std::max(options_.poll_interval, std::chrono::milliseconds(1000));
  }
  hub_ = std::make_unique<WatchHub>(std::move(ho));
  return Status::Ok();
}

void EmbeddedCoordinator::Close() {
  if (closed_.exchange(true)) return;
  if (hub_) hub_->Stop();
  std::map<std::string, int> owned;
  {
    MutexLock lock(owned_mu_);
    owned.swap(owned_);
  }
  if (!owned.empty() && lock_fd_ >= 0) {
    MutationLock lock(this);
    for (const auto& [path, fd] : owned) {
      auto node = ReadFile(DirOf(path) + "/.node");
      if (node.ok()) {
        auto decoded = DecodeNodeFile(*node, path);
        if (decoded.ok() && decoded->ephemeral && decoded->owner_session == session_) {
          (void)RemoveDir(path);
        }
      }
      ::close(fd);
    }
  } else {
    for (const auto& [path, fd] : owned) ::close(fd);
  }
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  inotify_fd_ = lock_fd_ = -1;
}

bool EmbeddedCoordinator::OwnerAlive(const std::string& dir) const {
  int fd = ::open((dir + "/.owner").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  int r;
  do {
    r = ::flock(fd, LOCK_SH | LOCK_NB);
  } while (r != 0 && errno == EINTR);
  const bool alive = (r != 0 && errno == EWOULDBLOCK);
  ::close(fd);  // drops our shared lock, if we got it
  return alive;
}

Result<NodeFile> EmbeddedCoordinator::Load(const std::string& path, bool locked) {
  const std::string file = DirOf(path) + "/.node";
  auto bytes = ReadFile(file);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) {
      return Status::NotFound("coord: no node '" + path + "'");
    }
    return bytes.status();
  }
  auto node = DecodeNodeFile(*bytes, file);
  if (!node.ok() || !node->ephemeral || OwnerAlive(DirOf(path))) return node;
  // The holder died: the node is gone. Remove it (checking again under the lock).
  auto reap = [&]() -> Status {
    auto again = ReadFile(file);
    if (!again.ok()) return Status::Ok();
    auto n = DecodeNodeFile(*again, file);
    if (n.ok() && n->ephemeral && n->creation_id == node->creation_id && !OwnerAlive(DirOf(path))) {
      return RemoveDir(path);
    }
    return Status::Ok();
  };
  if (locked) {
    ASYMNVM_RETURN_IF_ERROR(reap());
  } else {
    MutationLock lock(this);
    ASYMNVM_RETURN_IF_ERROR(lock.status());
    ASYMNVM_RETURN_IF_ERROR(reap());
  }
  return Status::NotFound("coord: no node '" + path + "' (its holder died)");
}

std::string EmbeddedCoordinator::StagingName() {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64 "-%" PRIu64, session_, staging_seq_.fetch_add(1));
  return buf;
}

Status EmbeddedCoordinator::RemoveDir(const std::string& path) {
  const std::string trash = root_ + "/trash/" + StagingName();
  if (::rename(DirOf(path).c_str(), trash.c_str()) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Errno("rename " + DirOf(path), errno);
  }
  if (options_.sync_writes) ASYMNVM_RETURN_IF_ERROR(FsyncDir(DirOf(ParentOf(path))));
  std::error_code ec;
  fs::remove_all(trash, ec);
  return Status::Ok();
}

Result<uint64_t> EmbeddedCoordinator::BumpCounter(const std::string& file) {
  auto v = ReadCounter(file);
  if (!v.ok()) return v.status();
  const size_t slash = file.rfind('/');
  ASYMNVM_RETURN_IF_ERROR(ReplaceFile(file.substr(0, slash), file.substr(slash + 1),
                                      std::to_string(*v + 1) + "\n", options_.sync_writes));
  return *v;
}

Result<std::vector<std::string>> EmbeddedCoordinator::ListLive(const std::string& path, bool locked,
                                                               bool* any_ephemeral) {
  auto self = Load(path, locked);
  if (!self.ok()) return self.status();
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(DirOf(path), ec);
  if (ec) {
    if (ec.value() == ENOENT) return Status::NotFound("coord: no node '" + path + "'");
    return Errno("list " + DirOf(path), ec.value());
  }
  for (const auto& e : it) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    const std::string child = path == "/" ? "/" + name : path + "/" + name;
    auto n = Load(child, locked);
    if (n.ok()) {
      out.push_back(name);
      if (n->ephemeral && any_ephemeral != nullptr) *any_ephemeral = true;
    } else if (n.status().code() != StatusCode::kNotFound) {
      return n.status();
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> EmbeddedCoordinator::Create(const std::string& path, std::string_view data,
                                                uint32_t flags) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  if ((flags & ~uint32_t{kEphemeral | kSequential}) != 0) {
    return Status::InvalidArgument("coord: unknown create flags " + std::to_string(flags));
  }
  if (path == "/") return Status::AlreadyExists("coord: '/' always exists");
  if (data.size() > kMaxNodeData) {
    return Status::InvalidArgument("coord: node data larger than 1 MiB");
  }
  MutationLock lock(this);
  ASYMNVM_RETURN_IF_ERROR(lock.status());
  const std::string parent = ParentOf(path);
  auto p = Load(parent, true);
  if (!p.ok()) {
    if (p.status().code() == StatusCode::kNotFound) {
      return Status::NotFound("coord: cannot create '" + path + "': parent '" + parent +
                              "' does not exist");
    }
    return p.status();
  }
  if (p->ephemeral) {
    return Status::FailedPrecondition("coord: cannot create '" + path + "': parent '" + parent +
                                      "' is ephemeral (ephemeral nodes have no children)");
  }
  std::string name = path;
  if (flags & kSequential) {
    auto seq = BumpCounter(DirOf(parent) + "/.seq");
    if (!seq.ok()) return seq.status();
    char buf[24];
    std::snprintf(buf, sizeof(buf), "%010" PRIu64, *seq);
    name += buf;
    ASYMNVM_RETURN_IF_ERROR(ValidatePath(name));
  }
  auto existing = Load(name, true);
  if (existing.ok()) return Status::AlreadyExists("coord: '" + name + "' exists");
  if (existing.status().code() != StatusCode::kNotFound) return existing.status();
  auto creation = BumpCounter(root_ + "/.ids");
  if (!creation.ok()) return creation.status();

  const std::string staging = root_ + "/tmp/" + StagingName();
  if (::mkdir(staging.c_str(), 0755) != 0) return Errno("mkdir " + staging, errno);
  NodeFile n;
  n.ephemeral = (flags & kEphemeral) != 0;
  n.creation_id = *creation + 1;
  n.owner_session = n.ephemeral ? session_ : 0;
  n.data.assign(data);
  int owner_fd = -1;
  auto fail = [&](Status st) {
    if (owner_fd >= 0) ::close(owner_fd);
    std::error_code ec;
    fs::remove_all(staging, ec);
    return st;
  };
  Status st = ReplaceFile(staging, ".node", EncodeNodeFile(n), options_.sync_writes);
  if (!st.ok()) return fail(st);
  if (n.ephemeral) {
    owner_fd = ::open((staging + "/.owner").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (owner_fd < 0) return fail(Errno("create " + staging + "/.owner", errno));
    if (::flock(owner_fd, LOCK_EX | LOCK_NB) != 0) {
      return fail(Errno("flock " + staging + "/.owner", errno));
    }
    const std::string who = "pid " + std::to_string(::getpid()) + "\n";
    st = WriteAll(owner_fd, who, staging + "/.owner");
    if (!st.ok()) return fail(st);
  }
  if (::rename(staging.c_str(), DirOf(name).c_str()) != 0) {
    return fail(Errno("rename " + staging + " to " + DirOf(name), errno));
  }
  if (options_.sync_writes) {
    st = FsyncDir(DirOf(parent));
    if (!st.ok()) {
      if (owner_fd >= 0) ::close(owner_fd);
      return st;
    }
  }
  if (owner_fd >= 0) {
    MutexLock g(owned_mu_);
    owned_[name] = owner_fd;
  }
  return name;
}

Result<Node> EmbeddedCoordinator::Get(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  auto n = Load(path, false);
  if (!n.ok()) return n.status();
  Node out;
  out.data = std::move(n->data);
  out.version = n->version;
  out.ephemeral = n->ephemeral;
  out.owner_session = n->owner_session;
  out.creation_id = n->creation_id;
  return out;
}

Result<int64_t> EmbeddedCoordinator::Set(const std::string& path, std::string_view data,
                                         int64_t expected_version) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  if (data.size() > kMaxNodeData) {
    return Status::InvalidArgument("coord: node data larger than 1 MiB");
  }
  if (expected_version < kAnyVersion) {
    return Status::InvalidArgument("coord: expected version " + std::to_string(expected_version));
  }
  MutationLock lock(this);
  ASYMNVM_RETURN_IF_ERROR(lock.status());
  auto n = Load(path, true);
  if (!n.ok()) return n.status();
  if (expected_version != kAnyVersion && n->version != expected_version) {
    return Status::Aborted("coord: set '" + path + "': version is " + std::to_string(n->version) +
                           ", expected " + std::to_string(expected_version));
  }
  n->version += 1;
  n->data.assign(data);
  ASYMNVM_RETURN_IF_ERROR(
      ReplaceFile(DirOf(path), ".node", EncodeNodeFile(*n), options_.sync_writes));
  return n->version;
}

Status EmbeddedCoordinator::Delete(const std::string& path, int64_t expected_version) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  if (path == "/") return Status::InvalidArgument("coord: cannot delete '/'");
  MutationLock lock(this);
  ASYMNVM_RETURN_IF_ERROR(lock.status());
  auto n = Load(path, true);
  if (!n.ok()) return n.status();
  if (expected_version != kAnyVersion && n->version != expected_version) {
    return Status::Aborted("coord: delete '" + path + "': version is " +
                           std::to_string(n->version) + ", expected " +
                           std::to_string(expected_version));
  }
  auto children = ListLive(path, true, nullptr);
  if (!children.ok()) return children.status();
  if (!children->empty()) {
    return Status::FailedPrecondition("coord: delete '" + path + "': it has " +
                                      std::to_string(children->size()) + " children");
  }
  ASYMNVM_RETURN_IF_ERROR(RemoveDir(path));
  MutexLock g(owned_mu_);
  auto it = owned_.find(path);
  if (it != owned_.end()) {
    ::close(it->second);
    owned_.erase(it);
  }
  return Status::Ok();
}

Result<std::vector<std::string>> EmbeddedCoordinator::Children(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  return ListLive(path, false, nullptr);
}

Result<bool> EmbeddedCoordinator::Exists(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  auto n = Load(path, false);
  if (n.ok()) return true;
  if (n.status().code() == StatusCode::kNotFound) return false;
  return n.status();
}

Result<uint64_t> EmbeddedCoordinator::AllocateId(const std::string& path) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(EnsurePath(path));
  MutationLock lock(this);
  ASYMNVM_RETURN_IF_ERROR(lock.status());
  auto n = Load(path, true);
  if (!n.ok()) return n.status();
  auto v = BumpCounter(DirOf(path) + "/.seq");
  if (!v.ok()) return v.status();
  return *v + 1;
}

void EmbeddedCoordinator::AddInotify(const std::string& path) {
  if (inotify_fd_ < 0) return;
  constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                             IN_MOVE_SELF | IN_ONLYDIR;
  // The node's own directory (data and children) and its nearest existing ancestor (creation).
  std::string p = path;
  bool first = true;
  for (;;) {
    const int wd = ::inotify_add_watch(inotify_fd_, DirOf(p).c_str(), kMask);
    if (wd >= 0 && !first) return;
    if (p == "/") return;
    p = ParentOf(p);
    first = false;
  }
}

void EmbeddedCoordinator::DrainInotify() {
  alignas(inotify_event) char buf[16384];
  while (::read(inotify_fd_, buf, sizeof(buf)) > 0) {
  }
}

Snapshot EmbeddedCoordinator::Probe(const std::string& path, WatchKind kind) {
  Snapshot s;
  AddInotify(path);
  auto n = Load(path, false);
  if (!n.ok()) {
    if (n.status().code() != StatusCode::kNotFound) s.ok = false;
    return s;
  }
  s.exists = true;
  s.version = n->version;
  s.creation_id = n->creation_id;
  s.volatile_state = n->ephemeral;
  if (kind == WatchKind::kChildren) {
    bool any_ephemeral = false;
    auto c = ListLive(path, false, &any_ephemeral);
    if (!c.ok()) {
      if (c.status().code() == StatusCode::kNotFound) return Snapshot{};
      s.ok = false;
      return s;
    }
    s.children = std::move(c).value();
    s.volatile_state = s.volatile_state || any_ephemeral;
  }
  return s;
}

Result<WatchId> EmbeddedCoordinator::Watch(const std::string& path, WatchKind kind,
                                           WatchCallback callback) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  ASYMNVM_RETURN_IF_ERROR(ValidatePath(path));
  return hub_->Add(path, kind, std::move(callback));
}

Status EmbeddedCoordinator::Unwatch(WatchId id) {
  ASYMNVM_RETURN_IF_ERROR(CheckOpen());
  return hub_->Remove(id);
}

}  // namespace

Result<std::unique_ptr<Coordinator>> OpenEmbedded(const std::string& dir, const Options& options) {
  if (dir.empty() || dir[0] != '/') {
    // Relative directories are fine for people, but two processes with different working
    // directories would silently use two coordinators: make it absolute now.
    std::error_code ec;
    auto abs = fs::absolute(dir, ec);
    if (ec || dir.empty()) return Status::InvalidArgument("coord: bad directory '" + dir + "'");
    return OpenEmbedded(abs.string(), options);
  }
  auto c = std::make_unique<EmbeddedCoordinator>(dir, options);
  Status st = c->Init();
  if (!st.ok()) return st;
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace asymnvm::coord
