// Pool files: create/open with libpmem, the pool lock, persisters and the crash simulator.
// Byte layout and the crash-simulation model: doc/pm-layout.md.
#include <errno.h>
#include <fcntl.h>
#include <libpmem.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "asymnvm/pm.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "pm/persister_mode.h"
#include "pm/sync_metrics.h"

namespace asymnvm::pm {
namespace {

constexpr const char* kLog = "pm";

std::string Errno(int e) { return std::strerror(e); }

Status SysError(const std::string& what, const std::string& path, int e) {
  return Status(StatusCode::kIoError, "pool " + path + ": " + what + ": " + Errno(e), e);
}

[[noreturn]] void FatalPersist(const char* what, const void* addr, size_t len, int e) {
  LOG_ERROR(kLog, what << " failed for " << len << " bytes at " << addr << ": " << Errno(e)
                       << "; durability can no longer be guaranteed");
  CheckFailed(__FILE__, __LINE__, what);
}

metrics::LatencyHistogram& SyncLatencyHistogram() {
  static metrics::LatencyHistogram* h = new metrics::LatencyHistogram();
  return *h;
}

// Sync counters of one pool (Pool::sync_stats); the time of each sync goes to SyncLatency().
struct SyncCounter {
  std::atomic<uint64_t> syncs{0}, bytes{0};
  void Msync(const void* addr, size_t len) {
    const auto start = std::chrono::steady_clock::now();
    if (pmem_msync(addr, len) != 0) FatalPersist("pmem_msync", addr, len, errno);
    syncs.fetch_add(1, std::memory_order_relaxed);
    bytes.fetch_add(len, std::memory_order_relaxed);
    SyncLatencyHistogram().Record(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count()));
  }
};

// Makes [addr, addr+len) of a real file mapping durable in the resolved mode.
void PersistMedia(PersistMode mode, const void* addr, size_t len, SyncCounter* counter) {
  if (len == 0) return;
  if (mode == PersistMode::kMsync) {
    counter->Msync(addr, len);
  } else {
    pmem_persist(addr, len);
  }
}

// Shared by persisters: reports a flushed range to the observer.
class ObservedPersister : public Persister {
 public:
  ObservedPersister(const uint8_t* base, uint64_t size, PersistObserver* observer)
      : base_(base), size_(size), observer_(observer) {}

 protected:
  void Report(const void* addr, size_t length) {
    if (observer_ == nullptr || length == 0) return;
    auto p = static_cast<const uint8_t*>(addr);
    if (p < base_ || p > base_ + size_ || length > static_cast<uint64_t>(base_ + size_ - p)) {
      return;  // not ours; nothing to model
    }
    observer_->OnPersist(static_cast<uint64_t>(p - base_), length);
  }
  const uint8_t* base_;
  uint64_t size_;
  PersistObserver* observer_;
};

// kFlushOnly (and kAuto on DAX): CPU cache-line flush + fence through libpmem.
class FlushPersister final : public ObservedPersister {
 public:
  using ObservedPersister::ObservedPersister;
  void Flush(const void* addr, size_t length) override {
    Report(addr, length);
    pmem_flush(addr, length);
  }
  void Drain() override { pmem_drain(); }
};

// kMsync (and kAuto off DAX): Flush records the range for the calling thread; Drain syncs the
// calling thread's ranges with a group commit. The first thread to find no sync running becomes
// the leader: it takes every range queued so far (its own and those of threads that arrived while
// the previous sync ran), merges ranges closer than kMergeGap, msyncs each merged range and wakes
// the others; a thread whose ranges were queued after the leader took its batch waits and leads
// the next one. So N threads draining at once cost one sync per merged range, not N.
class MsyncPersister final : public ObservedPersister {
 public:
  static constexpr uint64_t kMergeGap = 64 * 1024;
  MsyncPersister(const uint8_t* base, uint64_t size, PersistObserver* observer,
                 SyncCounter* counter)
      : ObservedPersister(base, size, observer), counter_(counter) {}
  void Flush(const void* addr, size_t length) override {
    if (length == 0) return;
    Report(addr, length);
    auto p = reinterpret_cast<uintptr_t>(addr);
    MutexLock lock(pending_mu_);
    auto& v = pending_[std::this_thread::get_id()];
    if (!v.empty() && v.back().second == p) {
      v.back().second = p + length;  // sequential landings: extend
    } else {
      v.emplace_back(p, p + length);
    }
  }
  void Drain() override {
    std::vector<std::pair<uintptr_t, uintptr_t>> mine;
    {
      MutexLock lock(pending_mu_);
      auto it = pending_.find(std::this_thread::get_id());
      if (it == pending_.end()) return;
      mine.swap(it->second);
      pending_.erase(it);
    }
    if (mine.empty()) return;
    MutexLock lock(group_mu_);
    queue_.insert(queue_.end(), mine.begin(), mine.end());
    const uint64_t ticket = ++queued_;
    while (synced_ < ticket) {
      if (syncing_) {
        cv_.wait(lock.native());
        continue;
      }
      syncing_ = true;
      std::vector<std::pair<uintptr_t, uintptr_t>> batch;
      batch.swap(queue_);
      const uint64_t upto = queued_;
      lock.unlock();
      SyncAll(&batch);
      lock.lock();
      synced_ = upto;
      syncing_ = false;
      cv_.notify_all();
    }
  }

 private:
  void SyncAll(std::vector<std::pair<uintptr_t, uintptr_t>>* ranges) {
    std::sort(ranges->begin(), ranges->end());
    size_t i = 0;
    while (i < ranges->size()) {
      uintptr_t lo = (*ranges)[i].first, hi = (*ranges)[i].second;
      for (i++; i < ranges->size() && (*ranges)[i].first <= hi + kMergeGap; i++) {
        hi = std::max(hi, (*ranges)[i].second);
      }
      counter_->Msync(reinterpret_cast<const void*>(lo), hi - lo);
    }
  }

  SyncCounter* counter_;
  Mutex pending_mu_;
  std::unordered_map<std::thread::id, std::vector<std::pair<uintptr_t, uintptr_t>>> pending_
      ASYMNVM_GUARDED_BY(pending_mu_);
  Mutex group_mu_;
  std::condition_variable cv_;
  std::vector<std::pair<uintptr_t, uintptr_t>> queue_ ASYMNVM_GUARDED_BY(group_mu_);
  uint64_t queued_ ASYMNVM_GUARDED_BY(group_mu_) = 0;
  uint64_t synced_ ASYMNVM_GUARDED_BY(group_mu_) = 0;
  bool syncing_ ASYMNVM_GUARDED_BY(group_mu_) = false;
};

class PoolImpl;

// Crash simulation: Flush records this thread's lines as pending; Drain copies them from the DRAM
// copy to media and persists them there.
class CrashSimPersister final : public ObservedPersister {
 public:
  CrashSimPersister(PoolImpl* pool, const uint8_t* base, uint64_t size, PersistObserver* observer)
      : ObservedPersister(base, size, observer), pool_(pool) {}
  void Flush(const void* addr, size_t length) override;
  void Drain() override;
  void DropAllPending() {
    MutexLock lock(mu_);
    pending_.clear();
  }

 private:
  PoolImpl* pool_;
  Mutex mu_;
  // Per thread: flushed line ranges [first, last] not yet drained.
  std::unordered_map<std::thread::id, std::vector<std::pair<uint64_t, uint64_t>>> pending_
      ASYMNVM_GUARDED_BY(mu_);
};

class PoolImpl final : public Pool {
 public:
  PoolImpl(std::string path, int lock_fd, uint8_t* media, uint64_t size, bool is_pmem,
           PersistMode mode, const Superblock& sb, const PoolOptions& options)
      : path_(std::move(path)),
        lock_fd_(lock_fd),
        media_(media),
        size_(size),
        is_pmem_(is_pmem),
        mode_(mode),
        sb_(sb),
        crash_sim_(options.crash_sim) {}

  // Second phase: the DRAM copy (crash simulation) and the persister. Errors: kIoError.
  Status Init(const PoolOptions& options) {
    base_ = media_;
    if (crash_sim_) {
      void* copy = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (copy == MAP_FAILED) return SysError("mmap of the crash-simulation copy", path_, errno);
      copy_ = static_cast<uint8_t*>(copy);
      std::memcpy(copy_, media_, size_);
      base_ = copy_;
      persister_ = std::make_unique<CrashSimPersister>(this, base_, size_, options.observer);
    } else if (mode_ == PersistMode::kMsync) {
      persister_ = std::make_unique<MsyncPersister>(base_, size_, options.observer, &syncs_);
    } else {
      persister_ = std::make_unique<FlushPersister>(base_, size_, options.observer);
    }
    return Status::Ok();
  }

  ~PoolImpl() override {
    if (copy_ != nullptr) {
      // A clean close: the whole copy reaches the file, as the page cache would carry a real
      // mapping's stores. Only SimulateCrash loses data.
      std::memcpy(media_, copy_, size_);
      PersistMedia(mode_, media_, size_, &syncs_);
      munmap(copy_, size_);
    }
    if (media_ != nullptr) pmem_unmap(media_, size_);
    if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
  }

  uint8_t* base() const override { return base_; }
  uint64_t size() const override { return size_; }
  const Superblock& superblock() const override { return sb_; }
  const std::string& path() const override { return path_; }
  bool is_dax() const override { return is_pmem_; }
  PersistMode mode() const override { return mode_; }
  bool crash_sim() const override { return crash_sim_; }
  Persister* persister() override { return persister_.get(); }
  SyncStats sync_stats() const override {
    return {syncs_.syncs.load(std::memory_order_relaxed),
            syncs_.bytes.load(std::memory_order_relaxed)};
  }

  Status SimulateCrash(uint64_t seed, double keep_probability, uint64_t* dropped_lines,
                       uint64_t* kept_lines) override {
    if (!crash_sim_) {
      return Status::FailedPrecondition("pool " + path_ +
                                        ": SimulateCrash needs PoolOptions::crash_sim");
    }
    if (!(keep_probability >= 0.0 && keep_probability <= 1.0)) {
      return Status::InvalidArgument("SimulateCrash: keep_probability must be in [0, 1]");
    }
    std::mt19937_64 rng(seed);
    uint64_t kept = 0, dropped = 0;
    for (uint64_t off = 0; off < size_; off += kCacheLine) {
      size_t n = std::min<uint64_t>(kCacheLine, size_ - off);
      if (std::memcmp(copy_ + off, media_ + off, n) == 0) continue;
      double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      if (u < keep_probability) {
        std::memcpy(media_ + off, copy_ + off, n);
        ++kept;
      } else {
        ++dropped;
      }
    }
    if (kept != 0) PersistMedia(mode_, media_, size_, &syncs_);
    static_cast<CrashSimPersister*>(persister_.get())->DropAllPending();
    std::memcpy(copy_, media_, size_);
    if (dropped_lines != nullptr) *dropped_lines = dropped;
    if (kept_lines != nullptr) *kept_lines = kept;
    LOG_DEBUG(kLog, "pool " << path_ << ": simulated crash (seed " << seed << ", keep "
                            << keep_probability << "): kept " << kept << ", dropped " << dropped
                            << " lines");
    return Status::Ok();
  }

  // Copies lines [first, last] from the DRAM copy to media and persists them there. Concurrent
  // stores to the same lines by the program race with this copy by design (as with a real flush).
  __attribute__((no_sanitize("thread"))) void WriteBackLines(uint64_t first, uint64_t last) {
    uint64_t off = first * kCacheLine;
    uint64_t end = std::min<uint64_t>((last + 1) * kCacheLine, size_);
    if (off >= end) return;
    std::memcpy(media_ + off, copy_ + off, end - off);
    PersistMedia(mode_, media_ + off, end - off, &syncs_);
  }

 private:
  std::string path_;
  int lock_fd_;
  uint8_t* media_;
  uint64_t size_;
  bool is_pmem_;
  PersistMode mode_;
  Superblock sb_;
  bool crash_sim_;
  uint8_t* copy_ = nullptr;
  uint8_t* base_ = nullptr;
  SyncCounter syncs_;
  std::unique_ptr<Persister> persister_;
};

void CrashSimPersister::Flush(const void* addr, size_t length) {
  if (length == 0) return;
  auto p = static_cast<const uint8_t*>(addr);
  ASYMNVM_CHECK(p >= base_ && p < base_ + size_ &&
                length <= static_cast<uint64_t>(base_ + size_ - p));
  Report(addr, length);
  uint64_t off = static_cast<uint64_t>(p - base_);
  uint64_t first = off / kCacheLine;
  uint64_t last = (off + length - 1) / kCacheLine;
  MutexLock lock(mu_);
  auto& v = pending_[std::this_thread::get_id()];
  if (!v.empty() && v.back().second + 1 >= first && v.back().first <= last + 1) {
    v.back().first = std::min(v.back().first, first);
    v.back().second = std::max(v.back().second, last);
  } else {
    v.emplace_back(first, last);
  }
}

void CrashSimPersister::Drain() {
  std::vector<std::pair<uint64_t, uint64_t>> mine;
  {
    MutexLock lock(mu_);
    auto it = pending_.find(std::this_thread::get_id());
    if (it == pending_.end()) return;
    mine.swap(it->second);
    pending_.erase(it);
  }
  for (const auto& [first, last] : mine) pool_->WriteBackLines(first, last);
}

PersistMode Resolve(PersistMode requested, bool is_pmem) {
  if (requested != PersistMode::kAuto) return requested;
  return is_pmem ? PersistMode::kFlushOnly : PersistMode::kMsync;
}

// Opens `path` for the pool lock and takes an exclusive non-blocking flock.
Result<int> OpenAndLock(const std::string& path, int extra_flags) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | extra_flags, 0644);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      return Status(StatusCode::kNotFound, "pool " + path + ": no such file or directory", e);
    if (e == EEXIST) {
      return Status(StatusCode::kAlreadyExists, "pool " + path + ": file already exists", e);
    }
    return SysError("open", path, e);
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) {
      return Status(StatusCode::kFailedPrecondition,
                    "pool " + path + " is in use by another process (or another open Pool)", e);
    }
    return SysError("flock", path, e);
  }
  return fd;
}

Result<std::pair<uint8_t*, bool>> MapFile(const std::string& path, uint64_t expected_size) {
  size_t mapped_len = 0;
  int is_pmem = 0;
  void* addr = pmem_map_file(path.c_str(), 0, 0, 0, &mapped_len, &is_pmem);
  if (addr == nullptr) {
    int e = errno;
    return Status(StatusCode::kIoError, "pool " + path + ": pmem_map_file: " + pmem_errormsg(), e);
  }
  if (mapped_len != expected_size) {
    pmem_unmap(addr, mapped_len);
    return Status::Corruption("pool " + path + ": mapped " + std::to_string(mapped_len) +
                              " bytes, superblock records " + std::to_string(expected_size));
  }
  // pmem_map_file reports DAX for the file; pmem_is_pmem also honours PMEM_IS_PMEM_FORCE.
  bool dax = is_pmem != 0 || pmem_is_pmem(addr, mapped_len) != 0;
  return std::make_pair(static_cast<uint8_t*>(addr), dax);
}

Status RandomBytes(uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = getrandom(out + done, n - done, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("getrandom", errno);
    }
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

void SyncParentDir(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

}  // namespace

const metrics::LatencyHistogram& SyncLatency() { return SyncLatencyHistogram(); }

Result<std::unique_ptr<Pool>> Pool::Create(const std::string& path, uint64_t size,
                                           const PoolOptions& options) {
  if (path.empty()) return Status::InvalidArgument("pool path is empty");
  if (size < kMinPoolSize) {
    return Status::InvalidArgument("pool " + path + ": size " + std::to_string(size) +
                                   " is below the minimum " + std::to_string(kMinPoolSize));
  }
  if (size % kSuperblockSize != 0) {
    return Status::InvalidArgument("pool " + path + ": size " + std::to_string(size) +
                                   " is not a multiple of " + std::to_string(kSuperblockSize));
  }
  if (options.layout.size() > 31 || options.layout.find('\0') != std::string::npos) {
    return Status::InvalidArgument("pool " + path + ": layout name '" + options.layout +
                                   "' is longer than 31 characters or contains NUL");
  }
  Superblock sb;
  sb.layout_version = kLayoutVersion;
  sb.pool_size = size;
  sb.layout = options.layout;
  ASYMNVM_RETURN_IF_ERROR(RandomBytes(sb.uuid.data(), sb.uuid.size()));
  sb.uuid[6] = static_cast<uint8_t>((sb.uuid[6] & 0x0f) | 0x40);  // RFC 4122 version 4
  sb.uuid[8] = static_cast<uint8_t>((sb.uuid[8] & 0x3f) | 0x80);
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  sb.create_time_ns =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);

  ASYMNVM_ASSIGN_OR_RETURN(int fd, OpenAndLock(path, O_CREAT | O_EXCL));
  auto fail = [&](Status st, uint8_t* map) -> Status {
    if (map != nullptr) pmem_unmap(map, size);
    unlink(path.c_str());
    close(fd);
    return st;
  };
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return fail(SysError("ftruncate to " + std::to_string(size) + " bytes", path, errno), nullptr);
  }
  auto mapped = MapFile(path, size);
  if (!mapped.ok()) return fail(mapped.status(), nullptr);
  auto [media, dax] = mapped.value();
  PersistMode mode = Resolve(options.mode, dax);
  // The superblock is written last and persisted (power-loss safe whatever the mode), so a crash
  // during Create leaves a file without a valid superblock, which Open refuses.
  EncodeSuperblock(sb, media);
  if (dax) {
    pmem_persist(media, kSuperblockSize);
  } else if (pmem_msync(media, kSuperblockSize) != 0) {
    return fail(SysError("msync of the superblock", path, errno), media);
  }
  if (fsync(fd) != 0) return fail(SysError("fsync", path, errno), media);
  SyncParentDir(path);

  auto pool = std::make_unique<PoolImpl>(path, fd, media, size, dax, mode, sb, options);
  ASYMNVM_RETURN_IF_ERROR(pool->Init(options));  // the destructor unmaps and unlocks
  LOG_INFO(kLog, "created " << pool->Describe());
  return std::unique_ptr<Pool>(std::move(pool));
}

Result<std::unique_ptr<Pool>> Pool::Open(const std::string& path, const PoolOptions& options) {
  if (path.empty()) return Status::InvalidArgument("pool path is empty");
  ASYMNVM_ASSIGN_OR_RETURN(int fd, OpenAndLock(path, 0));
  auto fail = [&](Status st) -> Status {
    close(fd);
    return st;
  };
  struct stat st {};
  if (fstat(fd, &st) != 0) return fail(SysError("fstat", path, errno));
  if (!S_ISREG(st.st_mode))
    return fail(Status::InvalidArgument("pool " + path + ": not a regular file"));
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kSuperblockSize) {
    return fail(Status::Corruption(
        "pool " + path + ": truncated: the file has " + std::to_string(file_size) +
        " bytes, smaller than a superblock (" + std::to_string(kSuperblockSize) + ")"));
  }
  std::vector<uint8_t> raw(kSuperblockSize);
  size_t got = 0;
  while (got < raw.size()) {
    ssize_t r = pread(fd, raw.data() + got, raw.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail(SysError("read of the superblock", path, errno));
    if (r == 0) return fail(Status::Corruption("pool " + path + ": truncated while reading"));
    got += static_cast<size_t>(r);
  }
  Superblock sb;
  Status decoded = DecodeSuperblock(raw.data(), raw.size(), &sb);
  if (!decoded.ok()) return fail(decoded.WithContext("pool " + path));
  if (file_size < sb.pool_size) {
    return fail(Status::Corruption("pool " + path + ": truncated: the file has " +
                                   std::to_string(file_size) + " bytes, the superblock records " +
                                   std::to_string(sb.pool_size)));
  }
  if (file_size > sb.pool_size) {
    return fail(Status::Corruption("pool " + path + ": size mismatch: the file has " +
                                   std::to_string(file_size) + " bytes, the superblock records " +
                                   std::to_string(sb.pool_size)));
  }
  if (!options.layout.empty() && options.layout != sb.layout) {
    return fail(Status::InvalidArgument("pool " + path + ": layout '" + sb.layout +
                                        "' does not match the expected '" + options.layout + "'"));
  }
  auto mapped = MapFile(path, sb.pool_size);
  if (!mapped.ok()) return fail(mapped.status());
  auto [media, dax] = mapped.value();
  // pmem_map_file opens the path again: make sure it is still the file we validated and locked.
  if (std::memcmp(media, raw.data(), kSuperblockSize) != 0) {
    pmem_unmap(media, sb.pool_size);
    return fail(Status::Corruption("pool " + path + ": the superblock changed while opening"));
  }
  PersistMode mode = Resolve(options.mode, dax);
  auto pool = std::make_unique<PoolImpl>(path, fd, media, sb.pool_size, dax, mode, sb, options);
  ASYMNVM_RETURN_IF_ERROR(pool->Init(options));
  LOG_INFO(kLog, "opened " << pool->Describe());
  return std::unique_ptr<Pool>(std::move(pool));
}

Result<std::unique_ptr<Pool>> Pool::OpenOrCreate(const std::string& path, uint64_t size,
                                                 const PoolOptions& options) {
  if (access(path.c_str(), F_OK) == 0) return Open(path, options);
  auto created = Create(path, size, options);
  if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) {
    return Open(path, options);  // lost a race with another creator
  }
  return created;
}

uint64_t Pool::OffsetOf(const void* p) const {
  auto q = static_cast<const uint8_t*>(p);
  if (q < base() || q >= base() + size()) return UINT64_MAX;
  return static_cast<uint64_t>(q - base());
}

bool Pool::Contains(const void* p, size_t len) const {
  uint64_t off = OffsetOf(p);
  if (off == UINT64_MAX) return len == 0 && static_cast<const uint8_t*>(p) == base() + size();
  return len <= size() - off;
}

std::string Pool::Describe() const {
  char size_text[32];
  double mib = static_cast<double>(size()) / (1024.0 * 1024.0);
  std::snprintf(size_text, sizeof(size_text), "%.1f MiB", mib);
  std::string s = "pool " + path() + ": " + size_text + ", " + (is_dax() ? "DAX" : "not DAX") +
                  ", persist mode " + PersistModeName(mode()) + ", layout '" + superblock().layout +
                  "', uuid " + UuidToString(superblock().uuid);
  if (crash_sim()) s += ", crash simulation";
  return s;
}

PersistMode PersisterMode(const Persister* persister) {
  return dynamic_cast<const FlushPersister*>(persister) != nullptr ? PersistMode::kFlushOnly
                                                                   : PersistMode::kMsync;
}

}  // namespace asymnvm::pm
