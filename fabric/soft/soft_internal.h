// Internals of the soft provider shared by its files (doc/fabric.md; the public entry is
// fabric/soft/soft_fabric.h). Files:
//   soft_internal.h    helpers, counters, completion queue, regions, receive queues, the connection
//                      core (ConnCore: one connection's state, shared by the user's Connection and
//                      the worker serving it)
//   soft_worker.h      the NIC worker: one epoll thread serving its connections, RNR holds, the
//                      FLUSH group commit
//   soft_fabric.cc     the Fabric, protection domains, connections, listeners, the handshake
//   soft_initiator.cc  ConnCore, initiator role: Post, responses, completions
//   soft_target.cc     ConnCore, target role: parsing and executing requests, FLUSH group commit
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "asymnvm/pm.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/bootstrap.h"
#include "fabric/soft/channel.h"
#include "fabric/soft/packet.h"
#include "fabric/soft/soft_fabric.h"

namespace asymnvm::fabric::soft::internal {

// Every access of the soft NIC to registered memory (landing a SEND or WRITE, reading for a READ,
// copying a READ response into the initiator's buffer) goes through DmaCopy. Like a real NIC's DMA
// it runs concurrently with the host's CPU touching the same memory (a seqlock reader, a b-log
// scanner polling for landed blocks): correctness comes from the protocols above it
// (self-validating blocks, sequence words, the OQ's order), never from a lock shared with the NIC.
// ThreadSanitizer flags these as races; tests/tsan.supp suppresses them by this function's name,
// so TSan still reports every other race, including the soft NIC's own state.
void DmaCopy(void* dst, const void* src, size_t len);

using Clock = std::chrono::steady_clock;
inline constexpr const char* kLog = "fabric.soft";
inline constexpr uint32_t kMaxInline = 64 * 1024;
inline constexpr size_t kReadChunk = 256 * 1024;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// ---------------------------------------------------------------------------------------------
// Counters

struct AtomicCounters {
  std::atomic<uint64_t> writes{0}, reads{0}, compare_swaps{0}, fetch_adds{0}, sends{0}, flushes{0},
      recvs{0}, round_trips{0}, bytes_out{0}, bytes_in{0}, payload_bytes{0}, rnr_events{0},
      errors{0}, remote_ops_served{0};
  static void Inc(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  Counters Snapshot() const {
    Counters c;
    c.writes = writes.load(std::memory_order_relaxed);
    c.reads = reads.load(std::memory_order_relaxed);
    c.compare_swaps = compare_swaps.load(std::memory_order_relaxed);
    c.fetch_adds = fetch_adds.load(std::memory_order_relaxed);
    c.sends = sends.load(std::memory_order_relaxed);
    c.flushes = flushes.load(std::memory_order_relaxed);
    c.recvs = recvs.load(std::memory_order_relaxed);
    c.round_trips = round_trips.load(std::memory_order_relaxed);
    c.bytes_out = bytes_out.load(std::memory_order_relaxed);
    c.bytes_in = bytes_in.load(std::memory_order_relaxed);
    c.payload_bytes = payload_bytes.load(std::memory_order_relaxed);
    c.rnr_events = rnr_events.load(std::memory_order_relaxed);
    c.errors = errors.load(std::memory_order_relaxed);
    c.remote_ops_served = remote_ops_served.load(std::memory_order_relaxed);
    return c;
  }
};
// Each counter has exactly one writer thread at a time except where noted; Inc is a plain
// load+store for the single-writer fields and a fetch_add for shared ones.
inline void IncShared(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Completion queue

class SoftCq final : public CompletionQueue {
 public:
  SoftCq(const CompletionQueueOptions& o, std::chrono::microseconds spin)
      : ring_(o.capacity), ring_mode_(o.ring), spin_(spin) {}

  // Returns false on an overrun (non-ring CQ full): the completion is lost.
  bool Push(const Completion& c) {
    MutexLock lock(mu_);
    if (count_ == ring_.size()) {
      if (!ring_mode_) {
        overrun_ = true;
        return false;
      }
      head_ = (head_ + 1) % ring_.size();
      count_--;
      overwritten_.fetch_add(1, std::memory_order_relaxed);
    }
    ring_[(head_ + count_) % ring_.size()] = c;
    count_++;
    avail_.store(count_, std::memory_order_release);
    if (sleepers_ > 0) cv_.notify_one();
    return true;
  }

  Result<size_t> Poll(std::span<Completion> out) override {
    MutexLock lock(mu_);
    return PollLocked(out);
  }

  Result<size_t> Wait(std::span<Completion> out, std::chrono::microseconds timeout) override {
    auto start = Clock::now();
    auto deadline = start + timeout;
    auto spin_end = start + std::min(spin_, timeout);
    while (avail_.load(std::memory_order_acquire) == 0) {
      if (Clock::now() >= spin_end) break;
      for (int i = 0; i < 32; i++) CpuRelax();
    }
    MutexLock lock(mu_);
    sleepers_++;
    cv_.wait_until(lock.native(), deadline,
                   [&]() ASYMNVM_REQUIRES(mu_) { return count_ > 0 || overrun_; });
    sleepers_--;
    return PollLocked(out);
  }

  uint64_t overwritten() const override { return overwritten_.load(std::memory_order_relaxed); }
  uint32_t capacity() const override { return static_cast<uint32_t>(ring_.size()); }

 private:
  Result<size_t> PollLocked(std::span<Completion> out) ASYMNVM_REQUIRES(mu_) {
    size_t n = std::min(out.size(), count_);
    if (n == 0 && overrun_) {
      return Status::ResourceExhausted("completion queue overrun: completions were lost", false);
    }
    for (size_t i = 0; i < n; i++) {
      out[i] = ring_[head_];
      head_ = (head_ + 1) % ring_.size();
    }
    count_ -= n;
    avail_.store(count_, std::memory_order_release);
    return n;
  }

  Mutex mu_;
  std::condition_variable cv_;
  std::vector<Completion> ring_;  // its size is fixed (capacity()); the elements under mu_
  size_t head_ ASYMNVM_GUARDED_BY(mu_) = 0;
  size_t count_ ASYMNVM_GUARDED_BY(mu_) = 0;
  int sleepers_ ASYMNVM_GUARDED_BY(mu_) = 0;
  bool overrun_ ASYMNVM_GUARDED_BY(mu_) = false;
  const bool ring_mode_;
  const std::chrono::microseconds spin_;
  std::atomic<size_t> avail_{0};
  std::atomic<uint64_t> overwritten_{0};
};

// ---------------------------------------------------------------------------------------------
// Regions

struct RegionEntry {
  uint8_t* base = nullptr;
  uint64_t length = 0;
  uint32_t access = 0;
  uint64_t pd_id = 0;
  pm::Persister* persister = nullptr;
};

// The fabric's registered regions by key. Registration and deregistration take the lock
// exclusively; the workers read it shared through a RegionReadHold.
class RegionTable {
 public:
  void Insert(uint32_t key, const RegionEntry& e) ASYMNVM_EXCLUDES(mu_) {
    WriterMutexLock lock(mu_);
    map_[key] = e;
  }
  // Waits for in-flight accesses (a worker's hold) to end.
  void Erase(uint32_t key) ASYMNVM_EXCLUDES(mu_) {
    WriterMutexLock lock(mu_);
    map_.erase(key);
  }

 private:
  friend class RegionReadHold;
  const RegionEntry* Find(uint32_t key) const ASYMNVM_REQUIRES_SHARED(mu_) {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }

  mutable SharedMutex mu_;
  std::unordered_map<uint32_t, RegionEntry> map_ ASYMNVM_GUARDED_BY(mu_);
};

// A worker's shared hold of the region table, taken lazily — at the first lookup of a service
// pass, so a pass that only reads its socket does not delay deregistration — and dropped around
// system calls (Release) and at the end of the pass. An entry Find returns is valid until
// Release: deregistration (RegionTable::Erase) waits for the hold.
class RegionReadHold {
 public:
  explicit RegionReadHold(RegionTable* table) : table_(table) {}
  RegionReadHold(const RegionReadHold&) = delete;
  RegionReadHold& operator=(const RegionReadHold&) = delete;
  ~RegionReadHold() { Release(); }

  const RegionEntry* Find(uint32_t key) {
    Acquire();
    table_->mu_.AssertReaderHeld();  // held_ is true here: Acquire took it
    return table_->Find(key);
  }
  void Acquire() ASYMNVM_NO_THREAD_SAFETY_ANALYSIS {  // held across calls: checked by held_
    if (!held_) table_->mu_.lock_shared();
    held_ = true;
  }
  void Release() ASYMNVM_NO_THREAD_SAFETY_ANALYSIS {  // releases what Acquire took, if anything
    if (held_) table_->mu_.unlock_shared();
    held_ = false;
  }

 private:
  RegionTable* table_;
  bool held_ = false;
};

class SoftFabric;

class SoftMr final : public MemoryRegion {
 public:
  SoftMr(RegionTable* table, void* addr, size_t length, uint32_t access, uint32_t key,
         pm::Persister* persister, Extension* ext)
      : ext_(ext),
        table_(table),
        addr_(addr),
        length_(length),
        access_(access),
        key_(key),
        persister_(persister) {}
  ~SoftMr() override {
    if (ext_ != nullptr) ext_->OnDeregister(key_);  // revokes direct access first
    table_->Erase(key_);                            // waits for in-flight accesses
  }
  void* addr() const override { return addr_; }
  size_t length() const override { return length_; }
  uint32_t lkey() const override { return key_; }
  uint32_t rkey() const override { return key_; }
  uint32_t access() const override { return access_; }
  pm::Persister* persister() const { return persister_; }

 private:
  Extension* ext_;
  RegionTable* table_;
  void* addr_;
  size_t length_;
  uint32_t access_;
  uint32_t key_;
  pm::Persister* persister_;
};

inline bool InsideMr(const MemoryRegion* mr, const void* addr, uint64_t len) {
  auto base = reinterpret_cast<uintptr_t>(mr->addr());
  auto a = reinterpret_cast<uintptr_t>(addr);
  return a >= base && len <= mr->length() && a - base <= mr->length() - len;
}

// ---------------------------------------------------------------------------------------------
// Receive queues (a connection's own RQ or an SRQ)

struct PersistRange {
  uint32_t rkey;
  uint8_t* addr;
  uint64_t len;
  pm::Persister* persister;
};

class RecvQueue {
 public:
  RecvQueue(uint32_t max_wr, bool multi, uint32_t stride)
      : max_wr_(max_wr), multi_(multi), stride_(stride) {}

  Status PostRecv(std::span<const RecvRequest> buffers) {
    for (const auto& b : buffers) {
      if (b.mr == nullptr || b.addr == nullptr || b.length == 0) {
        return Status::InvalidArgument("PostRecv: null buffer, null mr or zero length");
      }
      if (dynamic_cast<const SoftMr*>(b.mr) == nullptr) {
        return Status::InvalidArgument("PostRecv: mr was not registered with the soft provider");
      }
      if (!(b.mr->access() & kLocalWrite)) {
        return Status::InvalidArgument("PostRecv: mr lacks kLocalWrite");
      }
      if (!InsideMr(b.mr, b.addr, b.length)) {
        return Status::InvalidArgument("PostRecv: buffer outside its mr");
      }
      if (multi_ && b.length < stride_) {
        return Status::InvalidArgument("PostRecv: multi-packet buffer shorter than the stride");
      }
    }
    MutexLock lock(mu_);
    if (bufs_.size() + buffers.size() > max_wr_) {
      return Status::ResourceExhausted("PostRecv: more than max_wr buffers outstanding");
    }
    for (const auto& b : buffers) {
      auto* mr = static_cast<const SoftMr*>(b.mr);
      bufs_.push_back(
          Buf{b.wr_id, static_cast<uint8_t*>(b.addr), b.length, 0, mr->rkey(), mr->persister()});
    }
    posted_.store(bufs_.size(), std::memory_order_relaxed);
    return Status::Ok();
  }

  bool HasBuffer() const { return posted_.load(std::memory_order_relaxed) > 0; }
  uint32_t posted() const { return static_cast<uint32_t>(posted_.load(std::memory_order_relaxed)); }

  enum class Place { kPlaced, kNoBuffer, kTooLong, kCqOverrun };

  // Places one message (NIC thread). Completions go to `cq`; landed PM ranges to `persist`.
  Place Deliver(const uint8_t* data, uint32_t len, uint64_t conn_id, SoftCq* cq,
                std::vector<PersistRange>* persist) {
    MutexLock lock(mu_);
    bool cq_ok = true;
    for (;;) {
      if (bufs_.empty()) return Place::kNoBuffer;
      Buf& b = bufs_.front();
      Completion c;
      c.wr_id = b.wr_id;
      c.opcode = Opcode::kRecv;
      c.connection_id = conn_id;
      if (!multi_) {
        c.buffer_done = true;
        c.byte_len = len;
        if (len > b.length) {
          c.status = CompletionStatus::kLocalLengthError;
          cq->Push(c);
          PopLocked();
          return Place::kTooLong;
        }
        DmaCopy(b.addr, data, len);
        if (b.persister && len) persist->push_back({b.rkey, b.addr, len, b.persister});
        cq_ok = cq->Push(c);
        PopLocked();
        return cq_ok ? Place::kPlaced : Place::kCqOverrun;
      }
      uint64_t off = (static_cast<uint64_t>(b.used) + stride_ - 1) / stride_ * stride_;
      if (off + len <= b.length) {
        DmaCopy(b.addr + off, data, len);
        if (b.persister && len) persist->push_back({b.rkey, b.addr + off, len, b.persister});
        b.used = static_cast<uint32_t>(off + len);
        uint64_t next = (static_cast<uint64_t>(b.used) + stride_ - 1) / stride_ * stride_;
        c.offset = static_cast<uint32_t>(off);
        c.byte_len = len;
        c.buffer_done = next >= b.length;
        cq_ok = cq->Push(c);
        if (c.buffer_done) PopLocked();
        return cq_ok ? Place::kPlaced : Place::kCqOverrun;
      }
      if (b.used == 0) {  // larger than a whole fresh buffer
        c.status = CompletionStatus::kLocalLengthError;
        c.byte_len = len;
        cq->Push(c);
        return Place::kTooLong;
      }
      // Retire the partly used buffer with a zero-length completion; try the next one.
      c.offset = b.used;
      c.byte_len = 0;
      c.buffer_done = true;
      if (!cq->Push(c)) cq_ok = false;
      PopLocked();
      if (!cq_ok) return Place::kCqOverrun;
    }
  }

 private:
  struct Buf {
    uint64_t wr_id;
    uint8_t* addr;
    uint32_t length;
    uint32_t used;
    uint32_t rkey;
    pm::Persister* persister;
  };
  void PopLocked() ASYMNVM_REQUIRES(mu_) {
    bufs_.pop_front();
    posted_.store(bufs_.size(), std::memory_order_relaxed);
  }

  Mutex mu_;
  std::deque<Buf> bufs_ ASYMNVM_GUARDED_BY(mu_);
  std::atomic<size_t> posted_{0};
  const uint32_t max_wr_;
  const bool multi_;
  const uint32_t stride_;
};

class SoftSrq final : public SharedReceiveQueue {
 public:
  SoftSrq(SoftFabric* fabric, const SrqOptions& o)
      : fabric_(fabric), rq_(o.max_wr, o.multi_packet, o.stride) {}
  Status PostRecv(std::span<const RecvRequest> buffers) override;
  uint32_t posted() const override { return rq_.posted(); }
  bool multi_packet_native() const override { return true; }
  RecvQueue* rq() { return &rq_; }

 private:
  SoftFabric* fabric_;
  RecvQueue rq_;
};

// ---------------------------------------------------------------------------------------------
// Connection core

class Worker;

struct OutEntry {
  uint64_t wr_id;
  void* local_addr;
  uint32_t length;
  uint32_t seq;
  Opcode opcode;
  bool signaled;
};

inline CompletionStatus NakStatus(uint8_t reason) {
  switch (reason) {
    case kNakRnr:
      return CompletionStatus::kRnrRetryExceeded;
    case kNakAccess:
      return CompletionStatus::kRemoteAccessError;
    default:
      return CompletionStatus::kRemoteInvalidRequest;
  }
}

class ConnCore {
 public:
  ConnCore(SoftFabric* fabric, uint64_t id, uint64_t pd_id, std::unique_ptr<Channel> ch,
           const ConnectionOptions& o, ConnParams peer, std::string peer_address)
      : fabric_(fabric),
        id_(id),
        pd_id_(pd_id),
        ch_(std::move(ch)),
        send_cq_(static_cast<SoftCq*>(o.send_cq)),
        recv_cq_(static_cast<SoftCq*>(o.recv_cq)),
        max_send_wr_(std::max<uint32_t>(1, o.max_send_wr)),
        max_inline_(o.max_inline),
        peer_(std::move(peer)),
        peer_address_(std::move(peer_address)),
        ring_(max_send_wr_) {
    if (o.srq != nullptr) {
      rq_ = static_cast<SoftSrq*>(o.srq)->rq();
    } else {
      own_rq_ = std::make_unique<RecvQueue>(o.max_recv_wr, false, 64);
      rq_ = own_rq_.get();
    }
    has_srq_ = o.srq != nullptr;
    ack_every_ = std::max<uint32_t>(1, max_send_wr_ / 4);
    rbuf_.resize(kReadChunk * 2);
  }

  Status Post(std::span<const WorkRequest> wrs);
  Status PostRecv(std::span<const RecvRequest> buffers) {
    if (has_srq_) return Status::FailedPrecondition("PostRecv: the connection uses an SRQ");
    return rq_->PostRecv(buffers);
  }
  ConnectionState state() const { return state_.load(std::memory_order_acquire); }
  Status error() const {
    MutexLock lock(sq_mu_);
    return error_;
  }
  // Enters kError (from kConnected): the outstanding WRs complete with `st`.
  void EnterError(CompletionStatus st, const Status& why);
  // Enters kClosed: outstanding WRs complete with kFlushed.
  void MarkClosed();

  // ---- worker side ----
  void Service(RegionReadHold* regions);  // read, parse, execute
  bool held() const { return held_; }
  Clock::time_point hold_deadline() const { return hold_deadline_; }
  bool ready_to_retry(Clock::time_point now) const {
    return held_ && (now >= hold_deadline_ || rq_->HasBuffer());
  }
  void set_readable() { readable_ = true; }
  // FLUSH group commit (the worker's CompleteFlushes): a connection that parsed a FLUSH stops
  // there until the worker has persisted the ranges of every waiting connection with one Drain
  // per persister; then AckFlush acknowledges it and parsing resumes.
  bool flush_waiting() const { return flush_waiting_; }
  // Flush (without Drain) of this connection's landed ranges; the persisters to drain are added
  // to *drain. Caller holds the regions lock (shared).
  void StagePersist(RegionReadHold* regions, std::vector<pm::Persister*>* drain);
  void AckFlush();
  bool dead() const { return dead_; }
  bool want_drop() const { return want_drop_.load(std::memory_order_acquire); }
  void Drop() {
    dead_ = true;
    ch_->Shutdown();
  }

  SoftFabric* fabric_;
  const uint64_t id_;
  const uint64_t pd_id_;
  std::unique_ptr<Channel> ch_;
  // The direct path (shm provider), or null; used under sq_mu_ (set before the connection is
  // published).
  std::unique_ptr<DirectConn> direct_;
  Worker* worker_ = nullptr;
  AtomicCounters ctr_;
  const std::vector<uint8_t>& peer_private_data() const { return peer_.private_data; }
  const std::string& peer_address() const { return peer_address_; }

 private:
  enum class Exec { kContinue, kHold, kStop, kFlushWait };
  Exec HandleRequest(const ParsedPacket& p, RegionReadHold* regions);
  void HandleResponse(const ParsedPacket& p);
  void Nak(uint8_t reason, uint32_t seq, const std::string& why);
  void AppendResponse(uint8_t op, uint8_t reason, uint32_t seq, const uint8_t* data, uint32_t len);
  void FlushResponses();
  const RegionEntry* Lookup(RegionReadHold* regions, uint32_t rkey, uint64_t addr, uint64_t len,
                            uint32_t right, std::string* why);
  void CompleteLocked(const OutEntry& e, CompletionStatus st, uint32_t byte_len)
      ASYMNVM_REQUIRES(sq_mu_);
  void CountPosted(const WorkRequest& w) ASYMNVM_REQUIRES(sq_mu_);
  void FailAllLocked(CompletionStatus st) ASYMNVM_REQUIRES(sq_mu_);

  SoftCq* send_cq_;
  SoftCq* recv_cq_;
  RecvQueue* rq_ = nullptr;
  std::unique_ptr<RecvQueue> own_rq_;
  bool has_srq_ = false;
  const uint32_t max_send_wr_;
  const uint32_t max_inline_;
  const ConnParams peer_;
  const std::string peer_address_;

  // Initiator state.
  mutable Mutex sq_mu_;
  std::vector<OutEntry> ring_ ASYMNVM_GUARDED_BY(sq_mu_);
  size_t ring_head_ ASYMNVM_GUARDED_BY(sq_mu_) = 0, ring_count_ ASYMNVM_GUARDED_BY(sq_mu_) = 0;
  uint32_t next_seq_ ASYMNVM_GUARDED_BY(sq_mu_) = 1;
  uint32_t unacked_run_ ASYMNVM_GUARDED_BY(sq_mu_) = 0;
  uint32_t ack_every_ ASYMNVM_GUARDED_BY(sq_mu_) = 1;
  // Something may have landed at the target through the channel since its last FLUSH (direct
  // path: a FLUSH then also goes through the channel).
  bool channel_dirty_ ASYMNVM_GUARDED_BY(sq_mu_) = false;
  std::vector<uint8_t> scratch_ ASYMNVM_GUARDED_BY(sq_mu_);
  std::atomic<ConnectionState> state_{ConnectionState::kConnected};
  Status error_ ASYMNVM_GUARDED_BY(sq_mu_);

  // Target state (worker thread only).
  std::vector<uint8_t> rbuf_;
  size_t rstart_ = 0, rend_ = 0;
  uint32_t expect_seq_ = 1;
  std::vector<uint8_t> resp_;
  std::vector<PersistRange> persist_;
  bool readable_ = true;
  bool flush_waiting_ = false;  // a FLUSH parsed, its persist and ack pending (CompleteFlushes)
  uint32_t flush_seq_ = 0;
  bool held_ = false;
  uint32_t hold_attempts_ = 0;
  Clock::time_point hold_deadline_{};
  bool draining_ = false;               // sent a NAK: discard input until the peer closes
  std::atomic<bool> want_drop_{false};  // the worker drops the connection after this pass
  bool dead_ = false;
};

}  // namespace asymnvm::fabric::soft::internal
