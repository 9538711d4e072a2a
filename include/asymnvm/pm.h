// The PM layer: pool files mapped with libpmem, persistence primitives, crash simulation and the
// XPLine write-combining model. Byte layout of the pool superblock: doc/pm-layout.md.
//
// A Pool is a file (on DAX or an ordinary file system) mapped into the process. Its first
// kSuperblockSize bytes hold a self-validating superblock; the rest ("user area") belongs to the
// component that created the pool (back-end, KV server, a fabric test, ...).
//
// Persistence: everything above this layer persists through a Persister. Flush(range) starts
// write-back of the cache lines covering the range; Drain() waits until every line flushed by this
// thread (pmem semantics) is durable; Persist = Flush + Drain. In msync mode Flush records the
// range for the calling thread and Drain syncs it with a group commit: one thread msyncs the
// ranges of every thread waiting in Drain at that moment (merged when close), the others wait for
// it. Every msync is counted (Pool::sync_stats). The observer (PoolOptions::observer) sees each
// range when it is flushed.
//
// Crash simulation (PoolOptions::crash_sim): the mapping the program uses is a private DRAM copy;
// the file ("media") only receives lines that were Flushed and then Drained. SimulateCrash() models
// a power loss: every line that differs between the copy and the media is independently kept or
// dropped (at 64 B granularity, seeded), the result is written to media and the copy is reloaded
// from it. Lines flushed but not drained count as "differing" and may survive or not. Pending
// (flushed, not drained) lines are tracked per thread: Drain() completes only the calling thread's
// flushes, and it writes the lines' contents as of the Drain. Destroying the Pool is a clean
// shutdown: the whole copy is written to the file (as the page cache would for a real mapping).
// Flush of a range outside the pool is a fatal error in this mode.
//
// Thread safety: Pool methods are safe to call concurrently except SimulateCrash and destruction
// (closing), which require that no other thread touches the pool. Persister methods are
// thread-safe. XPLineModel is internally synchronized.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::pm {

inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kSuperblockSize = 4096;
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr uint64_t kMinPoolSize = 1ull << 20;  // 1 MiB

// Observes every range made durable through a Persister (offset relative to the pool base).
class PersistObserver {
 public:
  virtual ~PersistObserver() = default;
  virtual void OnPersist(uint64_t offset, uint64_t length) = 0;
};

// How ranges become durable.
enum class PersistMode : uint8_t {
  kAuto,       // pmem_persist on DAX (pmem_is_pmem), pmem_msync otherwise. Power-loss safe.
               // Resolved at open: kFlushOnly on DAX, kMsync otherwise (Pool::mode()).
  kMsync,      // always pmem_msync. Power-loss safe on ordinary files; slow (~12 K/s on ext4).
  kFlushOnly,  // cache-line flush + fence only. Survives process crash on ordinary files
               // (page cache keeps MAP_SHARED data), NOT power loss unless the file is on DAX.
};

const char* PersistModeName(PersistMode mode);
Result<PersistMode> ParsePersistMode(const std::string& name);  // "auto" | "msync" | "flush"

class Persister {
 public:
  virtual ~Persister() = default;
  virtual void Flush(const void* addr, size_t length) = 0;
  virtual void Drain() = 0;
  void Persist(const void* addr, size_t length) {
    Flush(addr, length);
    Drain();
  }
};

// Counts of synchronous syncs to stable storage (msync calls) and the bytes of the ranges
// synced, since the pool was opened. Cache-line flushes (flush mode, DAX) are not syncs.
struct SyncStats {
  uint64_t syncs = 0;
  uint64_t bytes = 0;
};

// A Persister for ordinary DRAM (non-persistent regions): does nothing.
Persister* DramPersister();

// The superblock, decoded. On-media layout: doc/pm-layout.md (little-endian, CRC32C-protected).
struct Superblock {
  static constexpr char kMagic[8] = {'A', 'S', 'Y', 'M', 'N', 'V', 'M', '\0'};
  uint32_t layout_version = kLayoutVersion;
  uint64_t pool_size = 0;          // bytes, whole file
  std::array<uint8_t, 16> uuid{};  // random, fixed at creation
  std::string layout;              // creator's layout name (<= 31 chars), e.g. "asymnvm-backend"
  uint64_t create_time_ns = 0;     // CLOCK_REALTIME at creation
  uint64_t flags = 0;              // reserved for the creator
};

// Encodes `sb` into exactly kSuperblockSize bytes (checksum included).
void EncodeSuperblock(const Superblock& sb, uint8_t* out);
// Validates and decodes a superblock from `len` bytes. Errors: kCorruption (bad magic, checksum,
// field out of range, `len` too short), kNotSupported (layout version from another release).
Status DecodeSuperblock(const uint8_t* data, size_t len, Superblock* out);

struct PoolOptions {
  PersistMode mode = PersistMode::kAuto;
  bool crash_sim = false;               // see the header comment
  std::string layout = "asymnvm";       // Create: stored; Open: must match (empty = accept any)
  PersistObserver* observer = nullptr;  // optional; sees every persisted range
};

std::string UuidToString(const std::array<uint8_t, 16>& uuid);
// The inverse (8-4-4-4-12 lowercase or uppercase hex). kInvalidArgument otherwise.
Result<std::array<uint8_t, 16>> UuidFromString(std::string_view text);

class Pool {
 public:
  // Creates a new pool file of `size` bytes (>= kMinPoolSize, a multiple of kSuperblockSize) and
  // locks it. The superblock is written last and persisted, so a crash mid-create leaves a file
  // that Open refuses (kCorruption). Errors: kAlreadyExists if the file exists, kInvalidArgument
  // for a bad size or a layout name over 31 characters, kNotFound (missing directory), kIoError.
  static Result<std::unique_ptr<Pool>> Create(const std::string& path, uint64_t size,
                                              const PoolOptions& options);
  // Opens an existing pool and holds an exclusive flock on it until the Pool is destroyed.
  // Errors (messages name the path): kNotFound (no file), kCorruption (not ours, truncated,
  // checksum mismatch, size mismatch), kNotSupported (other layout version), kInvalidArgument
  // (layout name mismatch, not a regular file), kFailedPrecondition (the pool is open elsewhere,
  // in this or another process), kIoError.
  static Result<std::unique_ptr<Pool>> Open(const std::string& path, const PoolOptions& options);
  // Opens if the file exists, creates it otherwise (same errors as Open / Create).
  static Result<std::unique_ptr<Pool>> OpenOrCreate(const std::string& path, uint64_t size,
                                                    const PoolOptions& options);

  virtual ~Pool() = default;

  virtual uint8_t* base() const = 0;  // start of the mapping (superblock)
  virtual uint64_t size() const = 0;  // whole mapping
  uint8_t* user_base() const { return base() + kSuperblockSize; }
  uint64_t user_size() const { return size() - kSuperblockSize; }
  virtual const Superblock& superblock() const = 0;
  virtual const std::string& path() const = 0;
  virtual bool is_dax() const = 0;       // pmem_is_pmem() of the mapping
  virtual PersistMode mode() const = 0;  // resolved mode (never kAuto after open)
  virtual bool crash_sim() const = 0;
  virtual Persister* persister() = 0;  // persists ranges inside this pool
  virtual SyncStats sync_stats() const = 0;
  // Offset of `p` from base(), or UINT64_MAX when `p` is outside the pool.
  uint64_t OffsetOf(const void* p) const;
  bool Contains(const void* p, size_t len) const;

  // Crash simulation only (kFailedPrecondition otherwise): each 64 B line whose copy differs from
  // media is kept with probability keep_probability (else dropped), independently, drawn in
  // ascending line order from std::mt19937_64(seed); kept lines go to media, then the copy is
  // reloaded from media and every pending flush is forgotten. Reports how many differing lines
  // were dropped / kept when the pointers are non-null. kInvalidArgument if keep_probability is
  // outside [0, 1].
  virtual Status SimulateCrash(uint64_t seed, double keep_probability, uint64_t* dropped_lines,
                               uint64_t* kept_lines) = 0;

  // A one-line human description: path, size, DAX or not, mode.
  std::string Describe() const;
};

// The XPLine model of doc/pm-layout.md: a write-combining buffer (default 16 KiB = 64 lines of 256
// B, LRU) in front of media. Every persisted range marks bytes dirty in the lines it touches; a
// line evicted (or flushed by Finish) costs one full line of media write. DLWA = media / requested.
class XPLineModel : public PersistObserver {
 public:
  explicit XPLineModel(size_t buffer_bytes = 16 * 1024, size_t line_bytes = 256);
  void OnPersist(uint64_t offset, uint64_t length) override;
  void Finish();  // write back every buffered line (call before reading final figures)
  uint64_t requested_bytes() const;
  uint64_t media_bytes() const;
  double dlwa() const;  // media / requested; 0 when nothing was requested
  void Reset();

 private:
  struct Line {
    uint64_t line_no;
    uint64_t last_use;
  };
  mutable std::mutex mu_;
  size_t capacity_lines_;
  size_t line_bytes_;
  std::vector<Line> lines_;
  uint64_t clock_ = 0;
  uint64_t requested_ = 0;
  uint64_t media_ = 0;
};

// Parses "64M", "4G", "4096", "1k" (binary units K, M, G, T, either case, optionally followed by
// "B" or "iB"; a plain number may end in "B"). Errors: kInvalidArgument (empty, sign, garbage,
// overflow).
Result<uint64_t> ParseSize(const std::string& text);

}  // namespace asymnvm::pm
