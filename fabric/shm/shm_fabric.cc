// The shm provider: the soft NIC plus a direct path (fabric/shm/shm_fabric.h, doc/fabric.md §shm).
//
// Target side (ShmExtension): every region registered with a remote right whose memory is a shared
// mapping gets a slot in the fabric's status page (a memfd peers map read-only; the slot holds the
// rkey while the region is registered) and is served by the region server: an abstract unix socket
// whose clients authenticate with the cluster secret (fabric/bootstrap.h) and then ask for regions
// by (protection-domain token, rkey). The token is the one this side offered in the handshake of a
// connection of that protection domain, so a peer reaches only the regions its connection could.
// Initiator side (ShmDirect): per connection, the grants it mapped and the ranges it wrote since
// its last FLUSH.
#include "fabric/shm/shm_fabric.h"

#include <fcntl.h>
#include <libpmem.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "asymnvm/pm.h"
#include "asymnvm/shared_memory.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/bootstrap.h"
#include "fabric/soft/soft_fabric.h"
#include "pm/persister_mode.h"

namespace asymnvm::fabric::shm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kLog = "fabric.shm";
constexpr uint32_t kOfferMagic = 0x314D4853;  // "SHM1"
// The status page: a process-shared robust mutex the target's region server thread holds for the
// fabric's lifetime (its futex word is the liveness word: the kernel marks it FUTEX_OWNER_DIED the
// moment the target process dies, and it is 0 once the fabric closed), then one 8-byte slot per
// shared region holding its rkey while it is registered.
constexpr size_t kSlotsAt = 64;
constexpr uint32_t kSlots = 8192;
constexpr size_t kStatusBytes = kSlotsAt + size_t{kSlots} * 8;
static_assert(sizeof(pthread_mutex_t) <= kSlotsAt);
constexpr uint32_t kFutexTidMask = 0x3fffffff;
constexpr uint32_t kFutexOwnerDied = 0x40000000;
constexpr uint32_t kOpGrant = 1;
constexpr size_t kRequestSize = 24;  // op u32, rkey u32, token[16]
constexpr size_t kReplySize = 40;    // status u32, access u32, base u64, length u64, slot u32,
                                     // mode u32, file offset u64
constexpr std::chrono::milliseconds kControlTimeout{3000};
using Token = std::array<uint8_t, 16>;

enum class Mode : uint32_t { kNone = 0, kFlush = 1, kMsync = 2 };

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

size_t PageSize() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// ---------------------------------------------------------------------------------------------
// Finding the shared backing of a registered range

struct Backing {
  int fd = -1;  // owned
  uint64_t offset = 0;
};

struct MapsLine {
  uintptr_t start = 0, end = 0;
  bool shared = false;
  uint64_t offset = 0;
  unsigned dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  std::string path;
};

std::vector<MapsLine> ReadMaps() {
  std::vector<MapsLine> out;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    MapsLine m;
    char perms[8] = {};
    unsigned long start = 0, end = 0, inode = 0;
    unsigned long long off = 0;
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %llx %x:%x %lu %n", &start, &end, perms, &off,
                    &m.dev_major, &m.dev_minor, &inode, &consumed) < 7) {
      continue;
    }
    m.start = start;
    m.end = end;
    m.shared = perms[3] == 's';
    m.offset = off;
    m.inode = inode;
    if (consumed > 0 && static_cast<size_t>(consumed) <= line.size())
      m.path = line.substr(consumed);
    out.push_back(std::move(m));
  }
  return out;
}

// The file behind [addr, addr + len) when it is a shared mapping of a regular file (a pool) or a
// SharedMemory; fd -1 otherwise (private or anonymous memory: served through the channel).
Backing FindBacking(void* addr, size_t len) {
  Backing b;
  int fd = -1;
  uint64_t off = 0;
  if (SharedMemory::Find(addr, len, &fd, &off)) {
    b.fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    b.offset = off;
    return b;
  }
  const auto a = reinterpret_cast<uintptr_t>(addr);
  const auto maps = ReadMaps();
  for (size_t i = 0; i < maps.size(); i++) {
    const MapsLine& m = maps[i];
    if (a < m.start || a >= m.end) continue;
    if (!m.shared || m.inode == 0 || m.path.empty() || m.path[0] != '/' ||
        m.path.find(" (deleted)") != std::string::npos) {
      return b;
    }
    // The range may span consecutive lines of the same file (split by mprotect and the like).
    uintptr_t end = m.end;
    for (size_t j = i + 1; end < a + len && j < maps.size(); j++) {
      const MapsLine& n = maps[j];
      if (n.start != end || !n.shared || n.inode != m.inode || n.path != m.path ||
          n.offset != m.offset + (n.start - m.start)) {
        break;
      }
      end = n.end;
    }
    if (end < a + len) return b;
    int f = ::open(m.path.c_str(), O_RDWR | O_CLOEXEC);
    if (f < 0) return b;
    struct stat st {};
    if (::fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != m.inode ||
        major(st.st_dev) != m.dev_major || minor(st.st_dev) != m.dev_minor) {
      ::close(f);
      return b;
    }
    b.fd = f;
    b.offset = m.offset + (a - m.start);
    return b;
  }
  return b;
}

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// ---------------------------------------------------------------------------------------------
// fd passing

bool SendWithFds(int sock, const uint8_t* data, size_t len, const int* fds, int nfds) {
  iovec iov{const_cast<uint8_t*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)] = {};
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return false;
  if (static_cast<size_t>(n) < len) {
    return WriteFull(sock, data + n, len - n, Clock::now() + kControlTimeout).ok();
  }
  return true;
}

// Reads exactly len bytes; descriptors that arrive with them go to fds (up to 2).
bool RecvWithFds(int sock, uint8_t* data, size_t len, int* fds, int* nfds) {
  *nfds = 0;
  size_t got = 0;
  const auto deadline = Clock::now() + kControlTimeout;
  while (got < len) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{sock, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    iovec iov{data + got, len - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (*nfds < 2) {
          fds[(*nfds)++] = fd;
        } else {
          ::close(fd);
        }
      }
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof(sa.sun_path) - 1);
  std::memcpy(sa.sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return sa;
}

// ---------------------------------------------------------------------------------------------
// Initiator: the direct path of one connection

class ShmDirect final : public soft::DirectConn {
 public:
  ShmDirect(std::string server, const Token& token, std::string secret)
      : server_(std::move(server)), token_(token), secret_(std::move(secret)) {}
  ~ShmDirect() override {
    for (auto& [k, g] : grants_) ::munmap(g.map, g.map_len);
    if (status_ != nullptr) ::munmap(const_cast<uint8_t*>(status_), kStatusBytes);
    if (fd_ >= 0) ::close(fd_);
  }

  bool Execute(const WorkRequest& w, bool channel_dirty, uint32_t* byte_len) override {
    *byte_len = 0;
    switch (w.opcode) {
      case Opcode::kFlush: {
        PersistPending();
        if (channel_dirty) return false;
        if (w.rkey != 0 && Check(w.rkey, w.remote_addr, 1, kRemoteRead) == nullptr) return false;
        return true;
      }
      case Opcode::kWrite: {
        Grant* g = Check(w.rkey, w.remote_addr, w.length, kRemoteWrite);
        if (g == nullptr) return false;
        uint8_t* dst = g->At(w.remote_addr);
        soft::internal::DmaCopy(dst, w.local_addr, w.length);
        Landed(*g, dst, w.length);
        return true;
      }
      case Opcode::kRead: {
        Grant* g = Check(w.rkey, w.remote_addr, w.length, kRemoteRead);
        if (g == nullptr) return false;
        soft::internal::DmaCopy(w.local_addr, g->At(w.remote_addr), w.length);
        *byte_len = w.length;
        return true;
      }
      case Opcode::kCompareSwap:
      case Opcode::kFetchAdd: {
        if ((w.length != 0 && w.length != 8) || w.remote_addr % 8 != 0) return false;
        Grant* g = Check(w.rkey, w.remote_addr, 8, kRemoteAtomic);
        if (g == nullptr) return false;
        auto* word = reinterpret_cast<uint64_t*>(g->At(w.remote_addr));
        uint64_t orig;
        if (w.opcode == Opcode::kCompareSwap) {
          orig = w.compare_add;
          __atomic_compare_exchange_n(word, &orig, w.swap, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST);
        } else {
          orig = __atomic_fetch_add(word, w.compare_add, __ATOMIC_SEQ_CST);
        }
        if (w.local_addr != nullptr) std::memcpy(w.local_addr, &orig, 8);
        Landed(*g, reinterpret_cast<uint8_t*>(word), 8);
        *byte_len = 8;
        return true;
      }
      default:
        return false;  // SEND: through the channel
    }
  }

 private:
  struct Grant {
    uint8_t* map = nullptr;  // our mapping (page-aligned)
    size_t map_len = 0;
    uint8_t* data = nullptr;  // the region's first byte in our mapping
    uint64_t base = 0;        // the region's first byte in the target's address space
    uint64_t length = 0;
    uint32_t access = 0;
    uint32_t slot = 0;
    Mode mode = Mode::kNone;
    uint8_t* At(uint64_t remote) const { return data + (remote - base); }
  };
  struct Range {
    uint8_t* addr;
    size_t len;
    Mode mode;
  };

  // The grant covering [addr, addr + len) with `right`, checked against revocation; null sends
  // the request through the channel.
  Grant* Check(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t right) {
    Grant* g = GetGrant(rkey);
    if (g == nullptr) return nullptr;
    // A dead (or closed) target: the channel reports it, as on the other providers.
    const uint32_t alive =
        __atomic_load_n(reinterpret_cast<const uint32_t*>(status_), __ATOMIC_ACQUIRE);
    if ((alive & kFutexTidMask) == 0 || (alive & kFutexOwnerDied) != 0) return nullptr;
    if (__atomic_load_n(Slot(g->slot), __ATOMIC_ACQUIRE) != rkey) {  // deregistered
      ::munmap(g->map, g->map_len);
      grants_.erase(rkey);
      denied_.insert(rkey);
      return nullptr;
    }
    if (!(g->access & right)) return nullptr;
    if (addr < g->base || len > g->length || addr - g->base > g->length - len) return nullptr;
    return g;
  }

  const uint64_t* Slot(uint32_t i) const {
    return reinterpret_cast<const uint64_t*>(reinterpret_cast<const uint8_t*>(status_) + kSlotsAt) +
           i;
  }

  void Landed(const Grant& g, uint8_t* p, size_t len) {
    if (g.mode == Mode::kNone || len == 0) return;
    if (!pending_.empty() && pending_.back().addr + pending_.back().len == p &&
        pending_.back().mode == g.mode) {
      pending_.back().len += len;
      return;
    }
    pending_.push_back({p, len, g.mode});
  }

  void PersistPending() {
    bool drain = false;
    for (const Range& r : pending_) {
      if (r.mode == Mode::kFlush) {
        pmem_flush(r.addr, r.len);
        drain = true;
      } else {
        auto a = reinterpret_cast<uintptr_t>(r.addr);
        uintptr_t start = a & ~(uintptr_t{PageSize()} - 1);
        if (::msync(reinterpret_cast<void*>(start), a + r.len - start, MS_SYNC) != 0) {
          // As the pool's own msync (pm/pool.cc): durability can no longer be guaranteed.
          LOG_ERROR(kLog, "msync of a granted region failed: " << std::strerror(errno));
          CheckFailed(__FILE__, __LINE__, "msync of a granted region");
        }
      }
    }
    if (drain) pmem_drain();
    pending_.clear();
  }

  Grant* GetGrant(uint32_t rkey) {
    auto it = grants_.find(rkey);
    if (it != grants_.end()) return &it->second;
    if (broken_ || denied_.count(rkey) != 0) return nullptr;
    if (fd_ < 0 && !Open()) return Broken("cannot reach the peer's region server");
    uint8_t req[kRequestSize];
    Put32(req, kOpGrant);
    Put32(req + 4, rkey);
    std::memcpy(req + 8, token_.data(), token_.size());
    if (!WriteFull(fd_, req, sizeof req, Clock::now() + kControlTimeout).ok()) {
      return Broken("region server closed the control socket");
    }
    uint8_t rep[kReplySize];
    int fds[2] = {-1, -1};
    int nfds = 0;
    if (!RecvWithFds(fd_, rep, sizeof rep, fds, &nfds)) {
      for (int i = 0; i < nfds; i++) ::close(fds[i]);
      return Broken("no answer from the region server");
    }
    auto close_fds = [&] {
      for (int i = 0; i < nfds; i++) ::close(fds[i]);
    };
    if (Get32(rep) != 0 || nfds != 2) {
      close_fds();
      denied_.insert(rkey);  // not shared (private memory), unknown or of another domain
      return nullptr;
    }
    Grant g;
    g.access = Get32(rep + 4);
    g.base = Get64(rep + 8);
    g.length = Get64(rep + 16);
    g.slot = Get32(rep + 24);
    g.mode = static_cast<Mode>(Get32(rep + 28));
    const uint64_t off = Get64(rep + 32);
    if (g.slot >= kSlots || g.length == 0) {
      close_fds();
      return Broken("malformed grant");
    }
    if (status_ == nullptr) {
      void* s = ::mmap(nullptr, kStatusBytes, PROT_READ, MAP_SHARED, fds[1], 0);
      if (s == MAP_FAILED) {
        close_fds();
        return Broken("cannot map the status page");
      }
      status_ = static_cast<const uint8_t*>(s);
    }
    const uint64_t aligned = off & ~uint64_t{PageSize() - 1};
    const uint64_t delta = off - aligned;
    g.map_len = (delta + g.length + PageSize() - 1) & ~uint64_t{PageSize() - 1};
    const bool writable = (g.access & (kRemoteWrite | kRemoteAtomic)) != 0;
    void* m = ::mmap(nullptr, g.map_len, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                     fds[0], static_cast<off_t>(aligned));
    close_fds();
    if (m == MAP_FAILED) {
      LOG_WARN(kLog, "mapping granted region rkey " << rkey << " failed: " << std::strerror(errno)
                                                    << "; using the channel for it");
      denied_.insert(rkey);
      return nullptr;
    }
    g.map = static_cast<uint8_t*>(m);
    g.data = g.map + delta;
    return &grants_.emplace(rkey, g).first->second;
  }

  bool Open() {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    socklen_t len = 0;
    sockaddr_un sa = AbstractAddress(server_, &len);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
      ::close(fd);
      return false;
    }
    const uint8_t blob[4] = {'S', 'H', 'M', 'C'};
    std::vector<uint8_t> peer;
    Status st = HandshakeClient(fd, secret_, blob, &peer, kControlTimeout);
    if (!st.ok()) {
      LOG_WARN(kLog, "region server handshake: " << st.ToString());
      ::close(fd);
      return false;
    }
    fd_ = fd;
    return true;
  }

  Grant* Broken(const char* why) {
    LOG_WARN(kLog, "direct path off for this connection (" << why << "); using the channel");
    broken_ = true;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return nullptr;
  }

  const std::string server_;
  const Token token_;
  const std::string secret_;
  int fd_ = -1;
  bool broken_ = false;
  const uint8_t* status_ = nullptr;
  std::unordered_map<uint32_t, Grant> grants_;
  std::unordered_set<uint32_t> denied_;
  std::vector<Range> pending_;
};

// ---------------------------------------------------------------------------------------------
// Target: shared regions, the status page, the region server

class ShmExtension final : public soft::Extension {
 public:
  explicit ShmExtension(std::string secret) : secret_(std::move(secret)) {}
  ~ShmExtension() override { Stop(); }

  Status Start() {
    status_fd_ = ::memfd_create("asymnvm-shm-status", MFD_CLOEXEC);
    if (status_fd_ < 0) return Status::IoError("shm fabric: memfd_create", errno);
    if (::ftruncate(status_fd_, kStatusBytes) != 0) {
      return Status::IoError("shm fabric: ftruncate", errno);
    }
    void* s = ::mmap(nullptr, kStatusBytes, PROT_READ | PROT_WRITE, MAP_SHARED, status_fd_, 0);
    if (s == MAP_FAILED) return Status::IoError("shm fabric: mmap status page", errno);
    status_ = static_cast<uint8_t*>(s);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    int e = pthread_mutex_init(Alive(), &attr);
    pthread_mutexattr_destroy(&attr);
    if (e != 0) return Status::IoError("shm fabric: pthread_mutex_init", e);
    {
      MutexLock lock(mu_);
      for (uint32_t i = kSlots; i > 0; i--) free_slots_.push_back(i - 1);
    }
    std::random_device rd;
    char name[64];
    std::snprintf(name, sizeof name, "asymnvm-shm/%d/%08x%08x", static_cast<int>(::getpid()), rd(),
                  rd());
    name_ = name;
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return Status::IoError("shm fabric: socket", errno);
    socklen_t len = 0;
    sockaddr_un sa = AbstractAddress(name_, &len);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), len) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      return Status::IoError("shm fabric: bind/listen of the region server", errno);
    }
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (stop_fd_ < 0) return Status::IoError("shm fabric: eventfd", errno);
    server_ = std::thread([this] { Serve(); });
    return Status::Ok();
  }

  std::string provider() const override { return "shm"; }

  void OnRegister(uint64_t pd_id, uint32_t key, void* addr, size_t length, uint32_t access,
                  pm::Persister* persister) override {
    if (!(access & (kRemoteRead | kRemoteWrite | kRemoteAtomic))) return;  // local only
    Backing b = FindBacking(addr, length);
    if (b.fd < 0) return;  // private memory: the channel serves it
    Region r;
    r.pd_id = pd_id;
    r.fd = b.fd;
    r.offset = b.offset;
    r.base = reinterpret_cast<uint64_t>(addr);
    r.length = length;
    r.access = access;
    if (persister == nullptr || persister == pm::DramPersister()) {
      r.mode = Mode::kNone;
    } else {
      r.mode =
          pm::PersisterMode(persister) == pm::PersistMode::kFlushOnly ? Mode::kFlush : Mode::kMsync;
    }
    MutexLock lock(mu_);
    if (free_slots_.empty()) {
      ::close(b.fd);
      return;  // more shared regions than slots: the rest use the channel
    }
    r.slot = free_slots_.back();
    free_slots_.pop_back();
    __atomic_store_n(Slot(r.slot), uint64_t{key}, __ATOMIC_RELEASE);
    regions_[key] = r;
  }

  void OnDeregister(uint32_t key) override {
    MutexLock lock(mu_);
    auto it = regions_.find(key);
    if (it == regions_.end()) return;
    __atomic_store_n(Slot(it->second.slot), uint64_t{0}, __ATOMIC_RELEASE);
    ::close(it->second.fd);
    free_slots_.push_back(it->second.slot);
    regions_.erase(it);
  }

  std::vector<uint8_t> Offer(uint64_t pd_id) override {
    Token token;
    {
      MutexLock lock(mu_);
      auto it = tokens_.find(pd_id);
      if (it == tokens_.end()) {
        std::random_device rd;
        for (size_t i = 0; i < token.size(); i += 4) {
          uint32_t v = rd();
          std::memcpy(token.data() + i, &v, 4);
        }
        it = tokens_.emplace(pd_id, token).first;
      }
      token = it->second;
    }
    const std::string host = HostId();
    std::vector<uint8_t> out(4 + 16 + 2 + host.size() + 2 + name_.size());
    uint8_t* p = out.data();
    Put32(p, kOfferMagic);
    std::memcpy(p + 4, token.data(), 16);
    p += 20;
    p[0] = static_cast<uint8_t>(host.size());
    p[1] = static_cast<uint8_t>(host.size() >> 8);
    std::memcpy(p + 2, host.data(), host.size());
    p += 2 + host.size();
    p[0] = static_cast<uint8_t>(name_.size());
    p[1] = static_cast<uint8_t>(name_.size() >> 8);
    std::memcpy(p + 2, name_.data(), name_.size());
    return out;
  }

  std::unique_ptr<soft::DirectConn> Connect(std::span<const uint8_t> offer) override {
    if (offer.size() < 22 || Get32(offer.data()) != kOfferMagic) return nullptr;
    Token token;
    std::memcpy(token.data(), offer.data() + 4, 16);
    size_t at = 20;
    auto field = [&](std::string* out) {
      if (offer.size() < at + 2) return false;
      size_t n = offer[at] | (size_t{offer[at + 1]} << 8);
      if (offer.size() < at + 2 + n) return false;
      out->assign(reinterpret_cast<const char*>(offer.data()) + at + 2, n);
      at += 2 + n;
      return true;
    };
    std::string host, server;
    if (!field(&host) || !field(&server) || server.empty()) return nullptr;
    if (host != HostId()) return nullptr;  // another host (or namespace): the channel only
    return std::make_unique<ShmDirect>(server, token, secret_);
  }

 private:
  struct Region {
    uint64_t pd_id = 0;
    int fd = -1;
    uint64_t offset = 0;
    uint64_t base = 0;
    uint64_t length = 0;
    uint32_t access = 0;
    uint32_t slot = 0;
    Mode mode = Mode::kNone;
  };

  void Stop() {
    if (server_.joinable()) {
      uint64_t one = 1;
      ssize_t w = ::write(stop_fd_, &one, sizeof one);
      (void)w;
      server_.join();
    }
    std::vector<std::thread> clients;
    {
      MutexLock lock(clients_mu_);
      stopping_ = true;
      for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
      clients.swap(clients_);
    }
    for (auto& t : clients) t.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    MutexLock lock(mu_);
    for (auto& [k, r] : regions_) ::close(r.fd);
    regions_.clear();
    if (status_ != nullptr) {
      pthread_mutex_destroy(Alive());
      ::munmap(status_, kStatusBytes);
    }
    status_ = nullptr;
    if (status_fd_ >= 0) ::close(status_fd_);
    status_fd_ = -1;
  }

  pthread_mutex_t* Alive() { return reinterpret_cast<pthread_mutex_t*>(status_); }
  uint64_t* Slot(uint32_t i) { return reinterpret_cast<uint64_t*>(status_ + kSlotsAt) + i; }

  // The region server thread holds the liveness mutex while it runs (fabric/shm: status page).
  void Serve() {
    pthread_mutex_lock(Alive());
    ServeLoop();
    pthread_mutex_unlock(Alive());
  }

  void ServeLoop() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      int r = ::poll(p, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p[1].revents & POLLIN)) return;
      if (!(p[0].revents & POLLIN)) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      MutexLock lock(clients_mu_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      client_fds_.insert(fd);
      clients_.emplace_back([this, fd] { ServeClient(fd); });
    }
  }

  void ServeClient(int fd) {
    const uint8_t blob[4] = {'S', 'H', 'M', 'S'};
    std::vector<uint8_t> peer;
    if (HandshakeServer(fd, secret_, blob, &peer, kControlTimeout).ok()) {
      for (;;) {
        uint8_t req[kRequestSize];
        if (!ReadFull(fd, req, sizeof req, Clock::now() + std::chrono::hours(24 * 365)).ok()) {
          break;
        }
        if (Get32(req) != kOpGrant || !Answer(fd, req)) break;
      }
    }
    MutexLock lock(clients_mu_);
    client_fds_.erase(fd);
    ::close(fd);
  }

  bool Answer(int fd, const uint8_t* req) {
    const uint32_t rkey = Get32(req + 4);
    Token token;
    std::memcpy(token.data(), req + 8, 16);
    uint8_t rep[kReplySize] = {};
    int fds[2] = {-1, -1};
    {
      MutexLock lock(mu_);
      auto it = regions_.find(rkey);
      auto tok = it == regions_.end() ? tokens_.end() : tokens_.find(it->second.pd_id);
      if (it == regions_.end() || tok == tokens_.end() || tok->second != token) {
        Put32(rep, 1);
        return SendWithFds(fd, rep, sizeof rep, nullptr, 0);
      }
      const Region& r = it->second;
      // Only what the region grants: a read-only region is sent read-only.
      if (r.access & (kRemoteWrite | kRemoteAtomic)) {
        fds[0] = ::fcntl(r.fd, F_DUPFD_CLOEXEC, 0);
      } else {
        fds[0] = ::open(("/proc/self/fd/" + std::to_string(r.fd)).c_str(), O_RDONLY | O_CLOEXEC);
      }
      fds[1] =
          ::open(("/proc/self/fd/" + std::to_string(status_fd_)).c_str(), O_RDONLY | O_CLOEXEC);
      Put32(rep, 0);
      Put32(rep + 4, r.access);
      Put64(rep + 8, r.base);
      Put64(rep + 16, r.length);
      Put32(rep + 24, r.slot);
      Put32(rep + 28, static_cast<uint32_t>(r.mode));
      Put64(rep + 32, r.offset);
    }
    bool ok;
    if (fds[0] < 0 || fds[1] < 0) {
      Put32(rep, 1);
      ok = SendWithFds(fd, rep, sizeof rep, nullptr, 0);
    } else {
      ok = SendWithFds(fd, rep, sizeof rep, fds, 2);
    }
    for (int f : fds) {
      if (f >= 0) ::close(f);
    }
    return ok;
  }

  const std::string secret_;
  std::string name_;
  int status_fd_ = -1;
  uint8_t* status_ = nullptr;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::thread server_;
  Mutex mu_;
  std::unordered_map<uint32_t, Region> regions_ ASYMNVM_GUARDED_BY(mu_);
  std::map<uint64_t, Token> tokens_ ASYMNVM_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ASYMNVM_GUARDED_BY(mu_);
  Mutex clients_mu_;
  bool stopping_ ASYMNVM_GUARDED_BY(clients_mu_) = false;
  std::unordered_set<int> client_fds_ ASYMNVM_GUARDED_BY(clients_mu_);
  std::vector<std::thread> clients_ ASYMNVM_GUARDED_BY(clients_mu_);
};

}  // namespace

std::string HostId() {
  static const std::string id = [] {
    std::string boot = ReadFirstLine("/proc/sys/kernel/random/boot_id");
    char ns[128] = {};
    ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    return boot + "/" + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : std::string("?"));
  }();
  return id;
}

Result<std::unique_ptr<Fabric>> OpenShmFabric(const FabricOptions& options) {
  ASYMNVM_ASSIGN_OR_RETURN(std::string secret, ResolveClusterSecret(options));
  auto ext = std::make_shared<ShmExtension>(secret);
  ASYMNVM_RETURN_IF_ERROR(ext->Start());
  return soft::OpenSoftFabric(options, std::move(ext));
}

}  // namespace asymnvm::fabric::shm
