// The ownership journal of a front-end id (doc/alloc.md §Leaks across crashes; PM layout in
// doc/backend.md §Naming space, "front-end records"): the slabs and large extents the front-end
// obtained from the back-end and has not returned, recorded persistently so that the front-end
// that recovers a crashed incarnation (its restart, or a dead-writer take-over) can free the ones
// no structure reaches (structures::ReclaimDeadAllocations).
//
// Where: a data-area extent whose pool offset is the journal word of the front-end record
// `fe:<id>` (slot byte 208; 0 = no journal). Extent layout (little-endian u64 words):
//   0 magic "ASYMJRN1", 1 front-end id, 2 capacity n, 3 clean-close mark, 4 .. 4+n entries
// An entry is 0 (free) or the start address of an extent the front-end holds, its low 6 bits
// holding the writer's incarnation mod 64 (block addresses are 64-byte aligned). Entries are
// written one at a time by a durable 8-byte compare-and-swap (failure-atomic), so a crash leaves
// every entry either written or not. The tag keeps a superseded incarnation that still runs (a
// writer woken after its take-over) from clearing an entry a later incarnation wrote for the
// same block in the same slot: its compare-and-swap expects its own tag and fails ("fenced").
//
// Atomicity (what makes reclamation safe and complete): the back-end writes an entry in the
// same request as the allocation it records (requests 20/21 carry the entry's address and the
// tag) and clears it in the same request as the free (request 22 carries the entry's address and
// value), allocation first and entry second, entry cleared first and block freed second. So a
// front-end killed at any point leaves every extent it holds named by its journal and no entry
// naming an extent it returned; only a back-end crash inside such a request can leave an extent
// no journal names (a leak `asymnvm-ctl gc` finds), never an entry naming a free block.
//
// Clean close: a session that closes cleanly (its last fence succeeded, nothing of an earlier
// incarnation left to replay or reclaim) writes "ASJCLEAN" ^ its incarnation into word 3. The
// next incarnation's Load reads it — the entries it inherits then name only extents a live
// session held when it closed, not a crash's allocations, so no reclaim walk is needed — and
// clears it durably before anything else, so that a crash of that incarnation is never taken
// for a clean close. A mark of any incarnation but the one just before is ignored (cleared, and
// the walk runs). A wrong "clean" could only skip a walk: the entries stay, and the next walk
// (after a crash of the id) or gc frees what they name.
//
// Growth: when every entry is used, a journal of twice the capacity is allocated, written
// (header + entries) durably, swapped into the journal word (durable CAS), and the old one freed;
// a crash between the swap and the free leaks the old journal extent (gc frees it).
//
// Thread safety: none (the Session's allocator calls it under its own mutex; the Session is used
// by one thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::frontend {

inline constexpr uint64_t kJournalMagic = 0x314E524A4D595341ull;  // "ASYMJRN1"
inline constexpr uint64_t kJournalHeaderBytes = 32;
inline constexpr uint64_t kJournalCleanMagic = 0x4E41454C434A5341ull;  // "ASJCLEAN"
inline constexpr uint64_t kJournalCleanWord = 24;                      // header byte offset
// Byte offset of the journal word from the front-end record's root word (slot byte 128 → 208).
inline constexpr uint64_t kJournalWordFromRoot = 80;

class OwnershipJournal {
 public:
  struct Io {
    std::function<Status(uint64_t addr, std::span<uint8_t> out)> read;
    std::function<Status(uint64_t addr, std::span<const uint8_t> data)> write;  // durable
    std::function<Result<uint64_t>(uint64_t addr, uint64_t expected, uint64_t desired)>
        cas;                                                // durable; returns the old value
    std::function<Result<uint64_t>(uint64_t bytes)> alloc;  // back-end extent, not journaled
    std::function<Status(uint64_t addr)> free;              // back-end free, not journaled
  };
  OwnershipJournal(Io io, uint64_t frontend_id, uint64_t word_addr, uint32_t block_size,
                   uint64_t data_begin, uint64_t data_end, uint32_t incarnation);

  // Reads the journal of the earlier incarnations of this id (if any): its entries become
  // inherited(). An unreadable or invalid journal (bad magic, id or capacity) is logged and
  // replaced by a fresh one at the next Add (its extents stay allocated: gc finds them).
  // Clears a clean-close mark (durably) and reports it in previous_closed_cleanly().
  Status Load();
  // Whether the incarnation just before this one closed cleanly (Load found its mark).
  bool previous_closed_cleanly() const { return previous_clean_; }
  // Writes this incarnation's clean-close mark (durable); nothing when there is no journal.
  Status MarkClosedCleanly();
  // Allocates an extent recorded in this journal: reserves a free entry (growing the journal if
  // needed) and calls `alloc(entry address, tag)`, the back-end request that allocates and
  // writes `address | tag` into the entry durably in one step (requests 20/21 with the journal
  // trailer), then records the returned address. Errors: alloc's (nothing recorded).
  using AllocWithEntry = std::function<Result<uint64_t>(uint64_t entry, uint64_t tag)>;
  Result<uint64_t> Add(const AllocWithEntry& alloc);
  // Frees a recorded extent: `free(entry address, the entry's value)` is the back-end request
  // that clears the entry durably and frees in one step (request 22 with the trailer); then the
  // entry is forgotten. kNotFound when `addr` is not recorded (nothing sent).
  using FreeWithEntry = std::function<Status(uint64_t entry, uint64_t expected)>;
  Status Remove(uint64_t addr, const FreeWithEntry& free);
  // Clears `addr`'s entry durably without freeing it (an extent dropped from the journal);
  // kNotFound when it is not recorded (nothing written).
  Status Remove(uint64_t addr);

  // Extents recorded by earlier incarnations and still recorded, in address order.
  std::vector<uint64_t> inherited() const { return {inherited_.begin(), inherited_.end()}; }
  bool recorded(uint64_t addr) const { return slot_of_.count(addr) != 0; }
  uint64_t address() const { return journal_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t writes() const { return writes_; }  // durable entry writes (adds + removes)
  uint64_t entries() const { return slot_of_.size(); }

 private:
  Status Create(uint64_t capacity);
  uint64_t EntryAddr(uint64_t slot) const { return journal_ + kJournalHeaderBytes + 8 * slot; }

  Io io_;
  const uint64_t fe_;
  const uint64_t word_addr_;
  const uint32_t block_size_;
  const uint64_t data_begin_, data_end_;
  uint64_t journal_ = 0;  // pool offset of the journal extent (0: none yet)
  uint64_t capacity_ = 0;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>>
      slot_of_;  // recorded address → (entry index, the entry's word)
  const uint32_t incarnation_;
  const uint64_t tag_;
  bool previous_clean_ = false;
  std::set<uint64_t> free_slots_;
  std::set<uint64_t> inherited_;
  uint64_t writes_ = 0;
};

}  // namespace asymnvm::frontend
