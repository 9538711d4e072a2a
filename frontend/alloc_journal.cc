// The ownership journal of a front-end id (frontend/alloc_journal.h; doc/alloc.md §Leaks across
// crashes).
#include "frontend/alloc_journal.h"

#include <cstring>
#include <string>

#include "common/coding.h"
#include "common/logging.h"

namespace asymnvm::frontend {
namespace {
constexpr const char* kLog = "frontend";
}  // namespace

OwnershipJournal::OwnershipJournal(Io io, uint64_t frontend_id, uint64_t word_addr,
                                   uint32_t block_size, uint64_t data_begin, uint64_t data_end,
                                   uint32_t incarnation)
    : io_(std::move(io)),
      fe_(frontend_id),
      word_addr_(word_addr),
      block_size_(block_size),
      data_begin_(data_begin),
      data_end_(data_end),
      incarnation_(incarnation),
      tag_(incarnation & 63) {}

Status OwnershipJournal::Load() {
  uint8_t w[8];
  ASYMNVM_RETURN_IF_ERROR(io_.read(word_addr_, w).WithContext("ownership journal word"));
  const uint64_t j = GetLe64(w);
  if (j == 0) return Status::Ok();
  const std::string what =
      "front-end " + std::to_string(fe_) + ": ownership journal at " + std::to_string(j);
  if (j < data_begin_ || j >= data_end_ || data_end_ - j < kJournalHeaderBytes) {
    LOG_WARN(kLog, what << " is outside the data area; ignored (gc reclaims what it named)");
    return Status::Ok();
  }
  uint8_t h[kJournalHeaderBytes];
  ASYMNVM_RETURN_IF_ERROR(io_.read(j, h).WithContext(what));
  const uint64_t cap = GetLe64(h + 16);
  if (GetLe64(h) != kJournalMagic || GetLe64(h + 8) != fe_ || cap == 0 ||
      cap > (data_end_ - j - kJournalHeaderBytes) / 8) {
    LOG_WARN(kLog, what << " has a bad header (magic, id or capacity); ignored (gc reclaims what "
                           "it named)");
    return Status::Ok();
  }
  if (const uint64_t mark = GetLe64(h + kJournalCleanWord); mark != 0) {
    previous_clean_ = incarnation_ > 0 && mark == (kJournalCleanMagic ^ (incarnation_ - 1));
    uint8_t zero[8] = {};
    ASYMNVM_RETURN_IF_ERROR(
        io_.write(j + kJournalCleanWord, zero).WithContext(what + ": clearing the clean mark"));
  }
  std::vector<uint8_t> e(cap * 8);
  ASYMNVM_RETURN_IF_ERROR(io_.read(j + kJournalHeaderBytes, e).WithContext(what));
  journal_ = j;
  capacity_ = cap;
  for (uint64_t i = 0; i < cap; i++) {
    const uint64_t raw = GetLe64(e.data() + 8 * i);
    const uint64_t a = raw & ~uint64_t{63};
    if (raw == 0) {
      free_slots_.insert(i);
      continue;
    }
    if (a < data_begin_ || a >= data_end_ || (a - data_begin_) % block_size_ != 0 ||
        slot_of_.count(a) != 0) {
      // Never written by Add (entries are failure-atomic words): corruption. Left as it is, never
      // freed; the slot is not reused.
      LOG_WARN(kLog, what << ": entry " << i << " holds " << a
                          << ", not a block address of the data area (or a duplicate); ignored");
      continue;
    }
    slot_of_.emplace(a, std::make_pair(i, raw));
    inherited_.insert(a);
  }
  return Status::Ok();
}

Status OwnershipJournal::MarkClosedCleanly() {
  if (journal_ == 0) return Status::Ok();
  uint8_t mark[8];
  PutLe64(mark, kJournalCleanMagic ^ incarnation_);
  return io_.write(journal_ + kJournalCleanWord, mark);
}

Status OwnershipJournal::Create(uint64_t capacity) {
  const uint64_t bytes = kJournalHeaderBytes + 8 * capacity;
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t j, io_.alloc(bytes));
  std::vector<uint8_t> img(bytes, 0);
  PutLe64(img.data(), kJournalMagic);
  PutLe64(img.data() + 8, fe_);
  PutLe64(img.data() + 16, capacity);
  for (const auto& [addr, entry] : slot_of_) {
    PutLe64(img.data() + kJournalHeaderBytes + 8 * entry.first, entry.second);
  }
  Status st = io_.write(j, img);
  Result<uint64_t> old = journal_;
  if (st.ok()) {
    old = io_.cas(word_addr_, journal_, j);
    if (old.ok() && *old != journal_) {
      st = Status::FailedPrecondition("front-end " + std::to_string(fe_) +
                                      ": fenced: ownership journal word changed (holds " +
                                      std::to_string(*old) + ")")
               .WithSubCode(StatusSubCode::kFenced);
    } else if (!old.ok()) {
      st = old.status();
    }
  }
  if (!st.ok()) {
    (void)io_.free(j);  // not published: nobody names it
    return st.WithContext("front-end " + std::to_string(fe_) + ": new ownership journal");
  }
  const uint64_t previous = journal_;
  journal_ = j;
  for (uint64_t i = capacity_; i < capacity; i++) free_slots_.insert(i);
  capacity_ = capacity;
  if (previous != 0) {
    // Unpublished now; a failure (or a crash before this) leaves it allocated: gc frees it.
    Status f = io_.free(previous);
    if (!f.ok()) LOG_WARN(kLog, "freeing the replaced ownership journal: " << f.ToString());
  }
  return Status::Ok();
}

Result<uint64_t> OwnershipJournal::Add(const AllocWithEntry& alloc) {
  if (free_slots_.empty()) {
    const uint64_t first = (block_size_ - kJournalHeaderBytes) / 8;
    ASYMNVM_RETURN_IF_ERROR(Create(capacity_ == 0 ? std::max<uint64_t>(first, 4) : 2 * capacity_));
  }
  const uint64_t slot = *free_slots_.begin();
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t addr, alloc(EntryAddr(slot), tag_));
  if (addr % 64 != 0 || slot_of_.count(addr) != 0) {
    // The back-end recorded it; a block address is 64-byte aligned and not held twice.
    return Status::ProtocolError("ownership journal: the back-end allocated " +
                                 std::to_string(addr) + ", not a fresh 64-byte aligned extent");
  }
  free_slots_.erase(free_slots_.begin());
  slot_of_.emplace(addr, std::make_pair(slot, addr | tag_));
  writes_++;
  return addr;
}

Status OwnershipJournal::Remove(uint64_t addr, const FreeWithEntry& free) {
  auto it = slot_of_.find(addr);
  if (it == slot_of_.end()) {
    return Status::NotFound("ownership journal: " + std::to_string(addr) + " is not recorded");
  }
  const auto [slot, word] = it->second;
  ASYMNVM_RETURN_IF_ERROR(free(EntryAddr(slot), word));
  free_slots_.insert(slot);
  slot_of_.erase(it);
  inherited_.erase(addr);
  writes_++;
  return Status::Ok();
}

Status OwnershipJournal::Remove(uint64_t addr) {
  auto it = slot_of_.find(addr);
  if (it == slot_of_.end()) {
    return Status::NotFound("ownership journal: " + std::to_string(addr) + " is not recorded");
  }
  const auto [slot, word] = it->second;
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, io_.cas(EntryAddr(slot), word, 0));
  if (old != word) {
    return Status::FailedPrecondition(
               "front-end " + std::to_string(fe_) + ": fenced: ownership journal entry " +
               std::to_string(slot) + " holds " + std::to_string(old) + ", expected " +
               std::to_string(word) + " (a later incarnation of this id wrote it)")
        .WithSubCode(StatusSubCode::kFenced);
  }
  free_slots_.insert(slot);
  slot_of_.erase(it);
  inherited_.erase(addr);
  writes_++;
  return Status::Ok();
}

}  // namespace asymnvm::frontend
