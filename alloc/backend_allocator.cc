// Back-end slab allocator: persistent A/B-copied bitmap chunks (doc/alloc.md).
#include "alloc/backend_allocator.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/checksum.h"
#include "common/coding.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::alloc {
namespace {

constexpr char kMagic[8] = {'A', 'S', 'Y', 'M', 'B', 'M', 'A', 'P'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 256;  // header line, intent line, reserved
constexpr uint64_t kIntentOffset = 64;
constexpr uint64_t kLineBytes = 64;
constexpr uint64_t kCopyBytes = 256;
constexpr uint64_t kCopyHeader = 8;                           // crc32c, generation
constexpr uint64_t kPayloadBytes = kCopyBytes - kCopyHeader;  // 248
constexpr uint64_t kHalfPayload = kPayloadBytes / 2;          // 124: alloc bits, then head bits
constexpr uint64_t kBlocksPerChunk = kHalfPayload * 8;        // 992
constexpr uint8_t kOpAlloc = 1;
constexpr uint8_t kOpFree = 2;
constexpr const char* kLog = "alloc";

uint64_t ChunksFor(uint64_t nblocks) { return (nblocks + kBlocksPerChunk - 1) / kBlocksPerChunk; }

uint8_t* CopyAt(uint8_t* area, uint64_t chunk, int copy) {
  return area + kHeaderBytes + chunk * 2 * kCopyBytes + static_cast<uint64_t>(copy) * kCopyBytes;
}

uint32_t CopyCrc(uint64_t chunk, const uint8_t* copy) {
  uint8_t idx[8];
  PutLe64(idx, chunk);
  uint32_t crc = Crc32c(idx, sizeof(idx));
  return Crc32c(copy + 4, kCopyBytes - 4, crc);
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != 0) return false;
  }
  return true;
}

// True when a is newer than b in serial-number arithmetic.
bool Newer(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

std::string ChunkName(uint64_t c) { return "alloc bitmap chunk " + std::to_string(c); }

}  // namespace

uint64_t BackendAllocator::BitmapBytes(uint64_t data_size, uint32_t block_size) {
  if (block_size == 0) return kHeaderBytes;
  return kHeaderBytes + ChunksFor(data_size / block_size) * 2 * kCopyBytes;
}

BackendAllocator::BackendAllocator(const BackendOptions& o, uint64_t nblocks)
    : data_begin_(o.data_begin),
      block_size_(o.block_size),
      nblocks_(nblocks),
      nchunks_(ChunksFor(nblocks)),
      area_(o.bitmap),
      persister_(o.persister),
      format_if_empty_(o.format_if_empty),
      bits_(nchunks_ * kPayloadBytes, 0),
      chunks_(nchunks_) {
  stats_.blocks_total = nblocks_;
}

BackendAllocator::~BackendAllocator() = default;

Result<std::unique_ptr<BackendAllocator>> BackendAllocator::Open(const BackendOptions& o) {
  if (o.bitmap == nullptr || o.persister == nullptr) {
    return Status::InvalidArgument("alloc: bitmap and persister are required");
  }
  if (o.block_size < 64 || o.block_size > (1u << 30) || (o.block_size & (o.block_size - 1)) != 0) {
    return Status::InvalidArgument("alloc: block_size " + std::to_string(o.block_size) +
                                   " is not a power of two in [64, 1 GiB]");
  }
  if (o.data_begin == 0 || o.data_begin % 64 != 0) {
    return Status::InvalidArgument("alloc: data_begin " + std::to_string(o.data_begin) +
                                   " must be a non-zero multiple of 64");
  }
  uint64_t nblocks = o.data_size / o.block_size;
  if (nblocks == 0) {
    return Status::InvalidArgument("alloc: data area of " + std::to_string(o.data_size) +
                                   " bytes holds no block of " + std::to_string(o.block_size));
  }
  if (o.data_begin + nblocks * o.block_size < o.data_begin) {
    return Status::InvalidArgument("alloc: data area wraps around the address space");
  }
  if (reinterpret_cast<uintptr_t>(o.bitmap) % 64 != 0) {
    return Status::InvalidArgument("alloc: bitmap area is not 64-byte aligned");
  }
  uint64_t need = BitmapBytes(o.data_size, o.block_size);
  if (o.bitmap_size < need) {
    return Status::InvalidArgument("alloc: bitmap area of " + std::to_string(o.bitmap_size) +
                                   " bytes is too small; this geometry needs " +
                                   std::to_string(need));
  }
  std::unique_ptr<BackendAllocator> a(new BackendAllocator(o, nblocks));
  MutexLock lock(a->mu_);
  if (AllZero(a->area_, kLineBytes)) {
    // No header: formatting was never finished, so nothing was ever allocated. Refuse if any chunk
    // copy records an allocation (that is a lost header, not a fresh area).
    if (!AllZero(a->area_ + kIntentOffset, kLineBytes)) {
      return Status::Corruption("alloc bitmap: header missing but an intent record is present");
    }
    for (uint64_t c = 0; c < a->nchunks_; c++) {
      for (int k = 0; k < 2; k++) {
        if (!AllZero(CopyAt(a->area_, c, k) + kCopyHeader, kPayloadBytes)) {
          return Status::Corruption("alloc bitmap: header missing but " + ChunkName(c) +
                                    " records allocations");
        }
      }
    }
    if (!a->format_if_empty_) {
      return Status::Corruption("alloc bitmap: area is not formatted (all zero header)");
    }
    ASYMNVM_RETURN_IF_ERROR(a->Format());
  } else {
    ASYMNVM_RETURN_IF_ERROR(a->Recover());
  }
  ASYMNVM_RETURN_IF_ERROR(a->ValidateAndBuild());
  return a;
}

Status BackendAllocator::Format() {
  // Chunks first (A = generation 1, B = generation 0, both empty and valid), header last.
  for (uint64_t c = 0; c < nchunks_; c++) {
    for (int k = 0; k < 2; k++) {
      uint8_t* p = CopyAt(area_, c, k);
      std::memset(p, 0, kCopyBytes);
      PutLe32(p + 4, k == 0 ? 1 : 0);
      PutLe32(p, CopyCrc(c, p));
    }
    chunks_[c] = {1, 0};
  }
  std::memset(area_ + kIntentOffset, 0, kHeaderBytes - kIntentOffset);
  persister_->Flush(area_ + kIntentOffset,
                    BitmapBytes(nblocks_ * block_size_, block_size_) - kIntentOffset);
  persister_->Drain();
  uint8_t* h = area_;
  std::memset(h, 0, kLineBytes);
  std::memcpy(h, kMagic, 8);
  PutLe32(h + 8, kVersion);
  PutLe32(h + 12, block_size_);
  PutLe64(h + 16, data_begin_);
  PutLe64(h + 24, nblocks_);
  PutLe64(h + 32, nchunks_);
  PutLe32(h + 40, static_cast<uint32_t>(kBlocksPerChunk));
  PutLe32(h + 44, static_cast<uint32_t>(kCopyBytes));
  PutLe32(h + 60, Crc32c(h, 60));
  persister_->Persist(h, kLineBytes);
  LOG_INFO(kLog, "formatted bitmap: " << nblocks_ << " blocks of " << block_size_ << " B at "
                                      << data_begin_ << ", " << nchunks_ << " chunks");
  return Status::Ok();
}

Status BackendAllocator::Recover() {
  const uint8_t* h = area_;
  if (std::memcmp(h, kMagic, 8) != 0) {
    return Status::Corruption("alloc bitmap: bad magic in header");
  }
  if (GetLe32(h + 60) != Crc32c(h, 60)) {
    return Status::Corruption("alloc bitmap: header checksum mismatch");
  }
  if (GetLe32(h + 8) != kVersion) {
    return Status::NotSupported("alloc bitmap: layout version " + std::to_string(GetLe32(h + 8)) +
                                " (this release reads " + std::to_string(kVersion) + ")");
  }
  if (GetLe32(h + 40) != kBlocksPerChunk || GetLe32(h + 44) != kCopyBytes ||
      GetLe64(h + 32) != ChunksFor(GetLe64(h + 24)) || !AllZero(h + 48, 12)) {
    return Status::Corruption("alloc bitmap: header fields inconsistent");
  }
  uint32_t bs = GetLe32(h + 12);
  uint64_t begin = GetLe64(h + 16);
  uint64_t n = GetLe64(h + 24);
  if (bs != block_size_ || begin != data_begin_ || n != nblocks_) {
    return Status::InvalidArgument(
        "alloc bitmap was formatted for " + std::to_string(n) + " blocks of " + std::to_string(bs) +
        " B at " + std::to_string(begin) + ", not " + std::to_string(nblocks_) + " blocks of " +
        std::to_string(block_size_) + " B at " + std::to_string(data_begin_));
  }
  if (!AllZero(area_ + 128, kHeaderBytes - 128)) {
    return Status::Corruption("alloc bitmap: reserved header bytes are not zero");
  }
  for (uint64_t c = 0; c < nchunks_; c++) {
    const uint8_t* cp[2] = {CopyAt(area_, c, 0), CopyAt(area_, c, 1)};
    bool valid[2];
    uint32_t gen[2];
    for (int k = 0; k < 2; k++) {
      valid[k] = GetLe32(cp[k]) == CopyCrc(c, cp[k]);
      gen[k] = GetLe32(cp[k] + 4);
    }
    int pick;
    if (valid[0] && valid[1]) {
      pick = Newer(gen[1], gen[0]) ? 1 : 0;
    } else if (valid[0] || valid[1]) {
      pick = valid[0] ? 0 : 1;
      stats_.torn_copies_recovered++;
      LOG_WARN(kLog, ChunkName(c) << ": copy " << (1 - pick)
                                  << " fails its checksum (torn write); using generation "
                                  << gen[pick]);
    } else {
      return Status::Corruption(ChunkName(c) + ": both copies fail their checksum");
    }
    chunks_[c] = {gen[pick], static_cast<uint8_t>(pick)};
    std::memcpy(bits_.data() + c * kPayloadBytes, cp[pick] + kCopyHeader, kPayloadBytes);
  }
  // An interrupted multi-chunk operation: clear its range (rolls back an alloc that was never
  // acknowledged, completes a free).
  const uint8_t* in = area_ + kIntentOffset;
  if (!AllZero(in, kLineBytes)) {
    if (GetLe32(in + 60) != Crc32c(in, 60) || GetLe64(in) == 0) {
      LOG_WARN(kLog, "alloc bitmap: torn intent record ignored (no chunk was written under it)");
      ClearIntent();
    } else {
      uint64_t start = GetLe64(in + 8), cnt = GetLe64(in + 16);
      uint8_t op = in[24];
      if ((op != kOpAlloc && op != kOpFree) || cnt < 2 || start >= nblocks_ ||
          cnt > nblocks_ - start || !AllZero(in + 25, 35)) {
        return Status::Corruption("alloc bitmap: intent record out of range");
      }
      intent_seq_ = GetLe64(in);
      LOG_WARN(kLog, "alloc bitmap: " << (op == kOpAlloc ? "rolling back alloc" : "completing free")
                                      << " of blocks [" << start << ", " << start + cnt
                                      << ") interrupted by a crash");
      SetBits(false, start, cnt);
      for (uint64_t c = start / kBlocksPerChunk; c <= (start + cnt - 1) / kBlocksPerChunk; c++) {
        WriteChunk(c);
      }
      ClearIntent();
      stats_.intents_recovered++;
    }
  }
  return Status::Ok();
}

bool BackendAllocator::Allocated(uint64_t b) const {
  uint64_t c = b / kBlocksPerChunk, j = b % kBlocksPerChunk;
  return (bits_[c * kPayloadBytes + j / 8] >> (j % 8)) & 1;
}

bool BackendAllocator::Head(uint64_t b) const {
  uint64_t c = b / kBlocksPerChunk, j = b % kBlocksPerChunk;
  return (bits_[c * kPayloadBytes + kHalfPayload + j / 8] >> (j % 8)) & 1;
}

Status BackendAllocator::ValidateAndBuild() {
  // Padding bits past the last block must be zero.
  for (uint64_t j = nblocks_ - (nchunks_ - 1) * kBlocksPerChunk; j < kBlocksPerChunk; j++) {
    uint64_t c = nchunks_ - 1;
    const uint8_t* p = bits_.data() + c * kPayloadBytes;
    if (((p[j / 8] >> (j % 8)) & 1) || ((p[kHalfPayload + j / 8] >> (j % 8)) & 1)) {
      return Status::Corruption(ChunkName(c) + ": bit set past the last block");
    }
  }
  free_by_start_.clear();
  free_by_len_.clear();
  stats_.blocks_used = 0;
  stats_.extents_used = 0;
  uint64_t run_start = 0, run_len = 0;
  for (uint64_t b = 0; b < nblocks_; b++) {
    bool a = Allocated(b), h = Head(b);
    if (h && !a) {
      return Status::Corruption(ChunkName(b / kBlocksPerChunk) + ": block " + std::to_string(b) +
                                " is an extent head but not allocated");
    }
    if (a && !h && (b == 0 || !Allocated(b - 1))) {
      return Status::Corruption(ChunkName(b / kBlocksPerChunk) + ": block " + std::to_string(b) +
                                " continues an extent that has no head");
    }
    if (a) {
      stats_.blocks_used++;
      if (h) stats_.extents_used++;
      if (run_len > 0) InsertFreeRun(run_start, run_len);
      run_len = 0;
    } else {
      if (run_len == 0) run_start = b;
      run_len++;
    }
  }
  if (run_len > 0) InsertFreeRun(run_start, run_len);
  return Status::Ok();
}

void BackendAllocator::WriteChunk(uint64_t c) {
  ChunkState& st = chunks_[c];
  int target = 1 - st.current;
  uint32_t gen = st.generation + 1;
  uint8_t* p = CopyAt(area_, c, target);
  std::memcpy(p + kCopyHeader, bits_.data() + c * kPayloadBytes, kPayloadBytes);
  PutLe32(p + 4, gen);
  PutLe32(p, CopyCrc(c, p));
  persister_->Persist(p, kCopyBytes);
  st.generation = gen;
  st.current = static_cast<uint8_t>(target);
  stats_.bitmap_writes++;
  ASYMNVM_CRASH_POINT("alloc.chunk_written");
}

void BackendAllocator::WriteIntent(uint8_t op, uint64_t start, uint64_t n) {
  uint8_t* p = area_ + kIntentOffset;
  uint8_t line[kLineBytes] = {};
  PutLe64(line, ++intent_seq_);
  PutLe64(line + 8, start);
  PutLe64(line + 16, n);
  line[24] = op;
  PutLe32(line + 60, Crc32c(line, 60));
  std::memcpy(p, line, kLineBytes);
  persister_->Persist(p, kLineBytes);
  ASYMNVM_CRASH_POINT("alloc.intent_written");
}

void BackendAllocator::ClearIntent() {
  uint8_t* p = area_ + kIntentOffset;
  std::memset(p, 0, kLineBytes);
  persister_->Persist(p, kLineBytes);
}

void BackendAllocator::SetBits(bool alloc, uint64_t start, uint64_t n) {
  for (uint64_t b = start; b < start + n; b++) {
    uint64_t c = b / kBlocksPerChunk, j = b % kBlocksPerChunk;
    uint8_t* p = bits_.data() + c * kPayloadBytes;
    uint8_t mask = static_cast<uint8_t>(1u << (j % 8));
    if (alloc) {
      p[j / 8] |= mask;
      if (b == start) {
        p[kHalfPayload + j / 8] |= mask;
      } else {
        p[kHalfPayload + j / 8] &= static_cast<uint8_t>(~mask);
      }
    } else {
      p[j / 8] &= static_cast<uint8_t>(~mask);
      p[kHalfPayload + j / 8] &= static_cast<uint8_t>(~mask);
    }
  }
}

void BackendAllocator::Apply(bool alloc, uint64_t start, uint64_t n) {
  uint64_t first = start / kBlocksPerChunk, last = (start + n - 1) / kBlocksPerChunk;
  if (first == last) {
    SetBits(alloc, start, n);
    WriteChunk(first);
    return;
  }
  WriteIntent(alloc ? kOpAlloc : kOpFree, start, n);
  SetBits(alloc, start, n);
  for (uint64_t c = first; c <= last; c++) WriteChunk(c);
  ClearIntent();
}

void BackendAllocator::InsertFreeRun(uint64_t start, uint64_t n) {
  free_by_start_.emplace(start, n);
  free_by_len_.emplace(n, start);
}

void BackendAllocator::EraseFreeRun(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_len_.erase({it->second, it->first});
  free_by_start_.erase(it);
}

Result<uint64_t> BackendAllocator::AllocBlocks(uint64_t n, bool large) {
  MutexLock lock(mu_);
  auto best = free_by_len_.lower_bound({n, 0});
  if (best == free_by_len_.end()) {
    stats_.failed_allocs++;
    return Status::ResourceExhausted("alloc: no free run of " + std::to_string(n) + " block(s) (" +
                                     std::to_string(nblocks_ - stats_.blocks_used) + " of " +
                                     std::to_string(nblocks_) + " blocks free)");
  }
  uint64_t start = best->second, len = best->first;
  EraseFreeRun(free_by_start_.find(start));
  if (len > n) InsertFreeRun(start + n, len - n);
  Apply(true, start, n);
  stats_.blocks_used += n;
  stats_.extents_used++;
  (large ? stats_.large_allocs : stats_.slab_allocs)++;
  return data_begin_ + start * block_size_;
}

Result<uint64_t> BackendAllocator::AllocSlab() { return AllocBlocks(1, false); }

Result<uint64_t> BackendAllocator::AllocLarge(uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("alloc: AllocLarge of 0 bytes");
  if (bytes > nblocks_ * block_size_) {
    return Status::InvalidArgument("alloc: AllocLarge of " + std::to_string(bytes) +
                                   " bytes exceeds the whole data area (" +
                                   std::to_string(nblocks_ * block_size_) + " bytes)");
  }
  return AllocBlocks((bytes + block_size_ - 1) / block_size_, true);
}

Status BackendAllocator::CheckAddr(uint64_t addr, uint64_t* block) const {
  if (addr < data_begin_ || addr >= data_end()) {
    return Status::InvalidArgument("alloc: address " + std::to_string(addr) +
                                   " is outside the data area [" + std::to_string(data_begin_) +
                                   ", " + std::to_string(data_end()) + ")");
  }
  if ((addr - data_begin_) % block_size_ != 0) {
    return Status::InvalidArgument("alloc: address " + std::to_string(addr) +
                                   " is not at a block boundary");
  }
  uint64_t b = (addr - data_begin_) / block_size_;
  if (!Allocated(b)) {
    return Status::FailedPrecondition("alloc: address " + std::to_string(addr) +
                                      " is not allocated (double free?)");
  }
  if (!Head(b)) {
    return Status::InvalidArgument("alloc: address " + std::to_string(addr) +
                                   " is inside an extent, not at its start");
  }
  *block = b;
  return Status::Ok();
}

uint64_t BackendAllocator::ExtentBlocks(uint64_t head) const {
  uint64_t e = head + 1;
  while (e < nblocks_ && Allocated(e) && !Head(e)) e++;
  return e - head;
}

Status BackendAllocator::Free(uint64_t addr) {
  MutexLock lock(mu_);
  uint64_t b = 0;
  ASYMNVM_RETURN_IF_ERROR(CheckAddr(addr, &b));
  uint64_t n = ExtentBlocks(b);
  Apply(false, b, n);
  // Coalesce with the neighbouring free runs.
  uint64_t start = b, len = n;
  auto next = free_by_start_.find(b + n);
  if (next != free_by_start_.end()) {
    len += next->second;
    EraseFreeRun(next);
  }
  auto it = free_by_start_.lower_bound(b);
  if (it != free_by_start_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == b) {
      start = prev->first;
      len += prev->second;
      EraseFreeRun(prev);
    }
  }
  InsertFreeRun(start, len);
  stats_.blocks_used -= n;
  stats_.extents_used--;
  stats_.frees++;
  return Status::Ok();
}

Result<uint64_t> BackendAllocator::ExtentBytes(uint64_t addr) const {
  MutexLock lock(mu_);
  uint64_t b = 0;
  ASYMNVM_RETURN_IF_ERROR(CheckAddr(addr, &b));
  return ExtentBlocks(b) * block_size_;
}

std::vector<Extent> BackendAllocator::Extents() const {
  MutexLock lock(mu_);
  std::vector<Extent> out;
  for (uint64_t b = 0; b < nblocks_; b++) {
    if (Head(b)) out.push_back({data_begin_ + b * block_size_, ExtentBlocks(b) * block_size_});
  }
  return out;
}

BackendStats BackendAllocator::stats() const {
  MutexLock lock(mu_);
  BackendStats s = stats_;
  s.largest_free_run = free_by_len_.empty() ? 0 : free_by_len_.rbegin()->first;
  return s;
}

}  // namespace asymnvm::alloc
