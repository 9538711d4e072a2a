// Rowan receiver: one b-log in a PM area, fed by many senders through one multi-packet SRQ
// (Rowan paper §3, §4.3; layout in doc/rowan.md §Receiver area).
//
// The area is [header 4 KiB][segment meta table][segments...]. A control thread keeps the SRQ
// stocked with free segments (state free → using, persisted before posting), detects used
// segments (the first 8 bytes of the *next* posted segment became non-zero, then a grace period for
// in-flight landings), and hands them to the consumer in landing order. The consumer scans a used
// segment (rowan::Scanner) and calls Commit(); the control thread then zeroes it and returns it to
// the free list. The receiver's CQ is an overwrite ring that nobody polls per message.
//
// Recovery: Open() on an area that holds a b-log keeps every segment that was using/used (or whose
// meta entry is unreadable) and hands them out first, in posting order, before new ones — so every
// acknowledged entry is found again with no persistent tail pointer.
//
// Thread safety: NextUsed/Commit may be called from one consumer thread; stats() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"
#include "fabric/rowan/landing.h"
#include "fabric/rowan/scanner.h"

namespace asymnvm::rowan {

enum class SegmentState : uint8_t { kFree = 0, kUsing = 1, kUsed = 2, kCommitted = 3 };

struct ReceiverOptions {
  fabric::Fabric* fabric = nullptr;        // required
  fabric::ProtectionDomain* pd = nullptr;  // required
  uint8_t* area = nullptr;                 // PM area (4 KiB aligned), e.g. inside a pm::Pool
  size_t area_size = 0;
  pm::Persister* persister = nullptr;  // required: persists the area
  // Optional: sees every range the NIC lands and persists in the segments (offset relative to
  // `area`), in persist order — not the receiver's own meta/zeroing writes. E.g. pm::XPLineModel.
  // Must outlive the Receiver.
  pm::PersistObserver* landing_observer = nullptr;
  std::string listen_address = "tcp://127.0.0.1:0";
  size_t segment_size = 4u << 20;         // multiple of 4 KiB
  uint32_t post_batch = 4;                // segments per RECV post
  uint32_t min_posted = 4;                // keep at least this many segments posted
  std::chrono::microseconds grace{2000};  // wait for in-flight landings before "used"
  // The control thread is woken by events (a landing flushed into a segment after the first
  // posted one, a Commit, Close); between events it re-checks after poll_interval, doubling the
  // wait while nothing happens up to max_poll_interval (a safety net for landings without FLUSH).
  std::chrono::microseconds poll_interval{200};
  std::chrono::microseconds max_poll_interval{20000};
  size_t mtu = 4096;
};

struct ReceiverStats {
  uint32_t segments = 0, free = 0, using_ = 0, used = 0, committed = 0, posted = 0;
  uint64_t segments_handed_over = 0, segments_recycled = 0, connections = 0;
  uint64_t recovered_segments = 0;
  uint64_t ring_overwritten = 0;
};

struct SegmentView {
  uint32_t index = 0;
  uint64_t post_seq = 0;
  std::span<const uint8_t> bytes;
};

// ---- Read-only inspection of a b-log that no Receiver holds (asymnvm-ctl check, a back-end
// before it opens its receiver). Same rules as Open's recovery; nothing is written. ----

struct AreaSegment {
  uint32_t index = 0;
  SegmentState state = SegmentState::kFree;
  uint32_t post_seq = 0;
  bool meta_ok = true;  // false: the meta word fails its check (recovery scans it as used)
  uint64_t offset = 0;  // of the segment, from the start of the area
  std::span<const uint8_t> bytes;
};

struct AreaView {
  uint64_t segment_size = 0;
  uint32_t count = 0;
  uint32_t mtu = 0;
  uint64_t meta_offset = 0;           // from the start of the area
  std::vector<AreaSegment> segments;  // every segment, by index
};

// Decodes the header and the meta table. kNotFound: blank header (no b-log formatted yet);
// kCorruption: bad magic or checksum, or a geometry that does not fit `area`.
Result<AreaView> ReadArea(std::span<const uint8_t> area);

// A landing that holds bytes but no valid block (or a block that contradicts its entry).
struct AreaBadLanding {
  uint32_t segment = 0;  // index
  uint64_t offset = 0;   // from the start of the area
  std::string what;
  bool header_read = false;  // only the checksum failed: meta holds the unverified fields
  EntryMeta meta;
  // An unfinished landing: nothing valid landed after it in its segment and the NIC had not
  // moved on to the next posted segment (its first word is still zero). The normal state after
  // a crash — never acknowledged, because the sender's FLUSH completes only after the landing.
  bool tail = false;
};

struct AreaCheck {
  AreaView view;
  uint32_t live_segments = 0;  // using, used, or unreadable meta: what recovery scans
  uint64_t entries = 0;
  std::vector<AreaBadLanding> bad;         // corrupt (tail == false) and unfinished (tail == true)
  uint64_t incomplete_entries = 0;         // multi-block entries with blocks missing (a sender
  std::vector<std::string> incomplete;     // died between its SENDs: never acknowledged); first 64
  std::vector<std::string> meta_problems;  // meta words that fail their check
};

// Scans every live segment in posting order with one Scanner (as the consumer would), yields every
// valid entry to `sink` (may be empty) and classifies every bad landing. Errors as ReadArea.
Result<AreaCheck> CheckArea(
    std::span<const uint8_t> area,
    const std::function<void(const AreaSegment&, const ScannedEntry&)>& sink);

class Receiver {
 public:
  // Formats the area if it holds no b-log (or a b-log of another geometry only when `format` is
  // true), otherwise recovers it. Errors: kInvalidArgument (missing field, area too small for two
  // segments, misaligned), kCorruption (header checksum bad and format == false), fabric errors.
  static Result<std::unique_ptr<Receiver>> Open(const ReceiverOptions& options,
                                                bool format = false);
  ~Receiver();

  std::string address() const;
  // The next used segment in landing order; kTimedOut if none within `timeout`.
  Result<SegmentView> NextUsed(std::chrono::milliseconds timeout);
  // Every segment that may hold entries not yet committed (posted and being filled, or used and
  // not yet committed), in post order. The bytes may still be landing: callers copy them and
  // rely on the scanner's checksums (recovery look-ups, e.g. fetching a front-end's op logs).
  std::vector<SegmentView> LiveSegments() const;
  // The consumer is done with a used segment: used → committed → (zeroed) → free.
  Status Commit(uint32_t index);
  ReceiverStats stats() const;
  // Stops accepting and serving; persists nothing new (everything acknowledged is already durable).
  void Close();

 private:
  explicit Receiver(const ReceiverOptions& o) : o_(o) {}
  // Fills the guarded state before the threads it starts exist (not analysed: no lock is needed).
  Status Init(bool format) ASYMNVM_NO_THREAD_SAFETY_ANALYSIS;
  void ControlLoop();
  void Wake();  // any thread, without mu_ held or with it (lock order mu_ → wake_mu_)
  void OnLanding(uint64_t offset);  // NIC thread, after a landing was flushed
  void AcceptLoop();
  void SetState(uint32_t index, SegmentState s, uint64_t post_seq) ASYMNVM_REQUIRES(mu_);
  Status PostFree(uint32_t n) ASYMNVM_REQUIRES(mu_);
  uint8_t* Segment(uint32_t i) const { return segments_ + size_t{i} * o_.segment_size; }

  ReceiverOptions o_;
  uint32_t count_ = 0;
  uint8_t* meta_ = nullptr;
  uint8_t* segments_ = nullptr;
  uint64_t next_post_seq_ = 1;

  std::unique_ptr<LandingPersister> landing_;  // the segments' MR persists through it
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::unique_ptr<fabric::CompletionQueue> ring_;
  std::unique_ptr<fabric::CompletionQueue> send_cq_;
  std::unique_ptr<fabric::SharedReceiveQueue> srq_;
  std::unique_ptr<fabric::Listener> listener_;
  std::vector<uint8_t> flush_target_;
  std::unique_ptr<fabric::MemoryRegion> flush_mr_;

  mutable Mutex mu_;
  std::condition_variable used_cv_;
  std::vector<std::unique_ptr<fabric::Connection>> conns_ ASYMNVM_GUARDED_BY(mu_);
  std::vector<SegmentState> state_ ASYMNVM_GUARDED_BY(mu_);  // DRAM mirror of the meta table
  std::vector<uint64_t> post_seq_ ASYMNVM_GUARDED_BY(mu_);
  std::deque<uint32_t> posted_ ASYMNVM_GUARDED_BY(mu_);  // posted segments, in posting order
  std::deque<uint32_t> used_ ASYMNVM_GUARDED_BY(mu_);    // ready for the consumer, in landing order
  std::deque<uint32_t> to_recycle_ ASYMNVM_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point candidate_since_ ASYMNVM_GUARDED_BY(mu_){};
  bool candidate_ ASYMNVM_GUARDED_BY(mu_) = false;
  ReceiverStats counters_ ASYMNVM_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  // Control-thread wake-ups: `front_` mirrors posted_.front() (UINT32_MAX: none) so the NIC
  // thread can tell, without mu_, that it moved on to a later posted segment.
  Mutex wake_mu_;
  std::condition_variable control_cv_;
  std::atomic<bool> wake_{false};
  std::atomic<uint32_t> front_{UINT32_MAX};
  std::thread control_, acceptor_;
};

}  // namespace asymnvm::rowan
