// The back-end tier of AsymNVM's two-tier allocator (AsymNVM paper §5.1, doc/architecture.md
// "Allocation"): hands out fixed-size slabs (one *block* each) and contiguous multi-block *large*
// extents from a data area, and records which blocks are allocated in a persistent, self-validating
// bitmap. Byte layout of the bitmap area and the recovery rules: doc/alloc.md.
//
// Addresses are plain numbers chosen by the caller's geometry — in the back-end they are pool
// offsets (`data_begin` is a pool offset), so they stay valid across restarts. The allocator never
// reads or writes the data area itself; it only owns the bitmap area.
//
// Durability: every call that returns OK has persisted its effect through the Persister before it
// returns — an address is handed out only after its blocks are marked allocated in PM, and a Free
// is durable when it returns. A crash in the middle of a call leaves either the old or the new
// state of that call (never a mix: see doc/alloc.md "Crash consistency"). Open() rebuilds the
// slab-level state (free runs, extents) from the bitmap alone.
//
// Thread safety: all methods are thread-safe (one internal mutex; the persist happens under it, so
// calls are serialized). The bitmap area must not be written by anyone else while the object lives.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"

namespace asymnvm::alloc {

struct BackendOptions {
  // Data area: blocks [data_begin, data_begin + n * block_size) with n = data_size / block_size
  // (a tail shorter than a block is unused). data_begin must be non-zero (0 is the null address)
  // and a multiple of 64.
  uint64_t data_begin = 0;
  uint64_t data_size = 0;
  // Block (= slab) size in bytes: a power of two in [64, 1 GiB].
  uint32_t block_size = 4096;
  // Bitmap area: mapped PM (e.g. inside a pm::Pool), at least BitmapBytes(data_size, block_size)
  // bytes, 64-byte aligned. Persisted through `persister`.
  uint8_t* bitmap = nullptr;
  size_t bitmap_size = 0;
  pm::Persister* persister = nullptr;  // required
  // When the whole bitmap area is zero (fresh pool), format it. Otherwise an unformatted area is
  // kCorruption. A non-zero area is never reformatted.
  bool format_if_empty = true;
};

struct BackendStats {
  uint64_t blocks_total = 0;
  uint64_t blocks_used = 0;
  uint64_t extents_used = 0;      // live allocations (slabs + large extents)
  uint64_t largest_free_run = 0;  // blocks
  uint64_t slab_allocs = 0;       // successful AllocSlab calls since Open
  uint64_t large_allocs = 0;      // successful AllocLarge calls since Open
  uint64_t frees = 0;             // successful Free calls since Open
  uint64_t failed_allocs = 0;     // kResourceExhausted answers since Open
  uint64_t bitmap_writes = 0;     // chunk copies written since Open
  // Found by Open: chunks whose newer copy was torn (the older copy was used), and whether an
  // interrupted multi-chunk operation was rolled back / completed.
  uint64_t torn_copies_recovered = 0;
  uint64_t intents_recovered = 0;
};

// One live allocation: its first address and its length in bytes (a multiple of block_size).
struct Extent {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  bool operator==(const Extent&) const = default;
  bool operator<(const Extent& o) const { return addr < o.addr; }
};

class BackendAllocator {
 public:
  // Bytes of bitmap area needed for this geometry (header + two 256 B copies per 992 blocks).
  static uint64_t BitmapBytes(uint64_t data_size, uint32_t block_size);

  // Validates the options, then formats (fresh zeroed area, format_if_empty) or recovers the
  // bitmap: picks the newest valid copy of every chunk, finishes an interrupted multi-chunk
  // operation, checks the structural rules and rebuilds the free runs. Errors: kInvalidArgument
  // (missing field, bad block size, misaligned or too small area, data area of zero blocks, or a
  // bitmap formatted for another geometry — the message says which), kCorruption (bad header
  // checksum or magic, a chunk with no valid copy, bits that break the rules — the message names
  // the chunk / block — or an unformatted area when format_if_empty is false), kNotSupported
  // (bitmap layout version from another release).
  static Result<std::unique_ptr<BackendAllocator>> Open(const BackendOptions& options);

  BackendAllocator(const BackendAllocator&) = delete;
  BackendAllocator& operator=(const BackendAllocator&) = delete;
  ~BackendAllocator();

  // One block. kResourceExhausted (retryable) when no block is free.
  Result<uint64_t> AllocSlab();
  // ceil(bytes / block_size) contiguous blocks (best fit among free runs). kInvalidArgument for 0
  // or for more than the whole data area; kResourceExhausted (retryable) when no free run is long
  // enough (full or fragmented).
  Result<uint64_t> AllocLarge(uint64_t bytes);
  // Frees the allocation that starts at `addr`. kInvalidArgument: `addr` outside the data area, not
  // block-aligned, or inside (not at the start of) a live extent. kFailedPrecondition: the block at
  // `addr` is free (double free, or never allocated).
  Status Free(uint64_t addr);

  // Size in bytes of the live allocation starting at `addr` (errors as Free, without freeing).
  Result<uint64_t> ExtentBytes(uint64_t addr) const;
  // Every live allocation in address order (slab-level state, as recovery sees it).
  std::vector<Extent> Extents() const;
  BackendStats stats() const;

  uint32_t block_size() const { return block_size_; }
  uint64_t data_begin() const { return data_begin_; }
  uint64_t data_end() const { return data_begin_ + nblocks_ * block_size_; }
  uint64_t blocks_total() const { return nblocks_; }

 private:
  struct ChunkState {
    uint32_t generation = 0;  // of the current copy
    uint8_t current = 0;      // 0 = copy A, 1 = copy B
  };

  BackendAllocator(const BackendOptions& o, uint64_t nblocks);
  Status Format() ASYMNVM_REQUIRES(mu_);
  Status Recover() ASYMNVM_REQUIRES(mu_);
  Status ValidateAndBuild() ASYMNVM_REQUIRES(mu_);
  // Writes chunk `c` (from the DRAM bits) into its older copy with generation + 1 and persists it.
  void WriteChunk(uint64_t c) ASYMNVM_REQUIRES(mu_);
  void WriteIntent(uint8_t op, uint64_t start, uint64_t n) ASYMNVM_REQUIRES(mu_);
  void ClearIntent() ASYMNVM_REQUIRES(mu_);
  // Sets (alloc) or clears (free) the bits of [start, start+n) and persists: one chunk directly,
  // several chunks under an intent record.
  void Apply(bool alloc, uint64_t start, uint64_t n) ASYMNVM_REQUIRES(mu_);
  void SetBits(bool alloc, uint64_t start, uint64_t n) ASYMNVM_REQUIRES(mu_);
  Result<uint64_t> AllocBlocks(uint64_t n, bool large) ASYMNVM_EXCLUDES(mu_);
  void InsertFreeRun(uint64_t start, uint64_t n) ASYMNVM_REQUIRES(mu_);
  void EraseFreeRun(std::map<uint64_t, uint64_t>::iterator it) ASYMNVM_REQUIRES(mu_);
  bool Allocated(uint64_t b) const ASYMNVM_REQUIRES(mu_);
  bool Head(uint64_t b) const ASYMNVM_REQUIRES(mu_);
  uint64_t ExtentBlocks(uint64_t head) const
      ASYMNVM_REQUIRES(mu_);  // length of the extent starting at head
  Status CheckAddr(uint64_t addr, uint64_t* block) const ASYMNVM_REQUIRES(mu_);

  const uint64_t data_begin_;
  const uint32_t block_size_;
  const uint64_t nblocks_;
  const uint64_t nchunks_;
  uint8_t* const area_;
  pm::Persister* const persister_;
  const bool format_if_empty_;

  mutable Mutex mu_;
  // DRAM image of every chunk's 248-byte payload (alloc bits, then head bits; doc/alloc.md).
  std::vector<uint8_t> bits_ ASYMNVM_GUARDED_BY(mu_);
  std::vector<ChunkState> chunks_ ASYMNVM_GUARDED_BY(mu_);
  uint64_t intent_seq_ ASYMNVM_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, uint64_t> free_by_start_ ASYMNVM_GUARDED_BY(mu_);  // start block -> run length
  std::set<std::pair<uint64_t, uint64_t>> free_by_len_ ASYMNVM_GUARDED_BY(mu_);  // (length, start)
  BackendStats stats_ ASYMNVM_GUARDED_BY(mu_);
};

}  // namespace asymnvm::alloc
