#include "backend/naming.h"

#include <atomic>
#include <cstring>

#include "common/checksum.h"
#include "common/coding.h"
#include "common/thread_annotations.h"

namespace asymnvm::backend {
namespace {

constexpr uint32_t kFree = 0;
constexpr uint32_t kLive = 1;
constexpr uint32_t kTombstone = 2;
constexpr size_t kCrcBegin = 8;
constexpr size_t kCrcEnd = 128;

Status CheckName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return Status::InvalidArgument("naming: name must be 1.." + std::to_string(kMaxNameLength) +
                                   " bytes, got " + std::to_string(name.size()));
  }
  if (name.find('\0') != std::string::npos) {
    return Status::InvalidArgument("naming: name contains a NUL byte");
  }
  return Status::Ok();
}

uint64_t NameHash(const std::string& name) { return Hash64(name.data(), name.size(), 0x6e616d65); }

}  // namespace

Result<std::unique_ptr<NamingSpace>> NamingSpace::Open(uint8_t* base, uint64_t area_offset,
                                                       uint64_t area_size, pm::Persister* persister,
                                                       bool format, bool strict) {
  if (base == nullptr || persister == nullptr) {
    return Status::InvalidArgument("naming: no mapping or no persister");
  }
  if (area_offset % 64 != 0 || area_size < kNamingSlotSize || area_size % kNamingSlotSize != 0 ||
      area_size / kNamingSlotSize > UINT32_MAX) {
    return Status::InvalidArgument("naming: area [" + std::to_string(area_offset) + ", +" +
                                   std::to_string(area_size) +
                                   ") is not 64-byte aligned whole slots");
  }
  std::unique_ptr<NamingSpace> ns(new NamingSpace(
      base, area_offset, static_cast<uint32_t>(area_size / kNamingSlotSize), persister));
  if (format) {
    std::memset(base + area_offset, 0, area_size);
    persister->Persist(base + area_offset, area_size);
    return ns;
  }
  for (uint32_t i = 0; i < ns->slots_; i++) {
    const uint32_t st = ns->State(i);
    if (strict && st > kTombstone) {
      return Status::Corruption("naming: slot " + std::to_string(i) + " has state " +
                                std::to_string(st) + " (run asymnvm-ctl check)");
    }
    if (strict && st == kLive && !ns->SlotValid(i)) {
      return Status::Corruption("naming: live slot " + std::to_string(i) +
                                " fails its checksum (run asymnvm-ctl check)");
    }
  }
  return ns;
}

uint32_t NamingSpace::State(uint32_t i) const {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(Slot(i) + 4))
      .load(std::memory_order_acquire);
}

void NamingSpace::SetState(uint32_t i, uint32_t state) {
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(Slot(i) + 4))
      .store(state, std::memory_order_release);
  persister_->Persist(Slot(i) + 4, 4);
}

bool NamingSpace::SlotValid(uint32_t i) const {
  const uint8_t* s = Slot(i);
  if (GetLe32(s + 12) > kMaxNameLength) return false;
  return GetLe32(s) == Crc32c(s + kCrcBegin, kCrcEnd - kCrcBegin);
}

NamingEntry NamingSpace::Decode(uint32_t i) const {
  const uint8_t* s = Slot(i);
  NamingEntry e;
  e.slot = i;
  e.type = GetLe32(s + 8);
  e.name.assign(reinterpret_cast<const char*>(s + 16), GetLe32(s + 12));
  for (size_t k = 0; k < kNamingParams; k++) e.params[k] = GetLe64(s + 80 + 8 * k);
  const uint64_t off = area_offset_ + uint64_t{i} * kNamingSlotSize;
  e.root_addr = off + kRootWordOffset;
  e.lock_addr = off + kLockWordOffset;
  e.seq_addr = off + kSeqWordOffset;
  e.aux_addr = off + kAuxWordOffset;
  return e;
}

int64_t NamingSpace::Find(const std::string& name) const {
  const uint64_t h = NameHash(name);
  for (uint32_t probe = 0; probe < slots_; probe++) {
    const uint32_t i = static_cast<uint32_t>((h + probe) % slots_);
    const uint32_t st = State(i);
    if (st == kFree) return -1;
    if (st != kLive || !SlotValid(i)) continue;
    const uint8_t* s = Slot(i);
    if (GetLe64(s + 112) == h && GetLe32(s + 12) == name.size() &&
        std::memcmp(s + 16, name.data(), name.size()) == 0) {
      return i;
    }
  }
  return -1;
}

Result<NamingEntry> NamingSpace::Create(const std::string& name, uint32_t type,
                                        const std::array<uint64_t, kNamingParams>& params,
                                        NamingEntry* existing) {
  ASYMNVM_RETURN_IF_ERROR(CheckName(name));
  if (type == 0) return Status::InvalidArgument("naming: type 0 is reserved");
  MutexLock lock(mu_);
  if (int64_t i = Find(name); i >= 0) {
    if (existing != nullptr) *existing = Decode(static_cast<uint32_t>(i));
    return Status::AlreadyExists("naming: '" + name + "' already exists (slot " +
                                 std::to_string(i) + ")");
  }
  const uint64_t h = NameHash(name);
  for (uint32_t probe = 0; probe < slots_; probe++) {
    const uint32_t i = static_cast<uint32_t>((h + probe) % slots_);
    const uint32_t st = State(i);
    if (st != kFree && st != kTombstone) continue;  // live, or corrupt: never reused
    uint8_t* s = Slot(i);
    // Body first, while the state still says free/tombstone; then the state flips to live.
    std::memset(s + kCrcBegin, 0, kNamingSlotSize - kCrcBegin);
    PutLe32(s + 8, type);
    PutLe32(s + 12, static_cast<uint32_t>(name.size()));
    std::memcpy(s + 16, name.data(), name.size());
    for (size_t k = 0; k < kNamingParams; k++) PutLe64(s + 80 + 8 * k, params[k]);
    PutLe64(s + 112, h);
    PutLe32(s, Crc32c(s + kCrcBegin, kCrcEnd - kCrcBegin));
    persister_->Persist(s, kNamingSlotSize);
    SetState(i, kLive);
    return Decode(i);
  }
  return Status::ResourceExhausted("naming: all " + std::to_string(slots_) + " slots are live",
                                   false);
}

Result<NamingEntry> NamingSpace::Lookup(const std::string& name) const {
  ASYMNVM_RETURN_IF_ERROR(CheckName(name));
  MutexLock lock(mu_);
  const int64_t i = Find(name);
  if (i < 0) return Status::NotFound("naming: no structure named '" + name + "'");
  return Decode(static_cast<uint32_t>(i));
}

Result<NamingEntry> NamingSpace::At(uint32_t slot) const {
  MutexLock lock(mu_);
  if (slot >= slots_ || State(slot) != kLive) {
    return Status::NotFound("naming: no structure in slot " + std::to_string(slot));
  }
  if (!SlotValid(slot)) {
    return Status::Corruption("naming: slot " + std::to_string(slot) + " fails its checksum");
  }
  return Decode(slot);
}

Status NamingSpace::Remove(const std::string& name) {
  ASYMNVM_RETURN_IF_ERROR(CheckName(name));
  MutexLock lock(mu_);
  const int64_t i = Find(name);
  if (i < 0) return Status::NotFound("naming: no structure named '" + name + "'");
  SetState(static_cast<uint32_t>(i), kTombstone);
  uint8_t* s = Slot(static_cast<uint32_t>(i));
  std::memset(s + kRootWordOffset, 0, kNamingSlotSize - kRootWordOffset);
  persister_->Persist(s + kRootWordOffset, kNamingSlotSize - kRootWordOffset);
  return Status::Ok();
}

std::vector<NamingEntry> NamingSpace::List() const {
  MutexLock lock(mu_);
  std::vector<NamingEntry> out;
  for (uint32_t i = 0; i < slots_; i++) {
    if (State(i) == kLive && SlotValid(i)) out.push_back(Decode(i));
  }
  return out;
}

std::vector<std::string> NamingSpace::Check() const {
  MutexLock lock(mu_);
  std::vector<std::string> problems;
  for (uint32_t i = 0; i < slots_; i++) {
    const uint32_t st = State(i);
    if (st > kTombstone) {
      problems.push_back("naming slot " + std::to_string(i) + ": unknown state " +
                         std::to_string(st));
    } else if (st == kLive && !SlotValid(i)) {
      problems.push_back("naming slot " + std::to_string(i) + ": live but checksum mismatch");
    }
  }
  return problems;
}

uint32_t NamingSpace::live() const {
  MutexLock lock(mu_);
  uint32_t n = 0;
  for (uint32_t i = 0; i < slots_; i++) n += State(i) == kLive && SlotValid(i) ? 1 : 0;
  return n;
}

}  // namespace asymnvm::backend
