// The soft provider: a software RDMA NIC (doc/fabric.md).
//
// Structure: SoftFabric owns the region table and the NIC workers (one epoll thread each). A
// connection's state lives in a ConnCore shared by the user-facing SoftConnection and the worker
// that serves it. Initiator side (Post, under sq_mu_): validate, encode all request packets into
// one buffer, write it to the channel (inline doorbell), remember the outstanding WRs in a fixed
// ring. Worker side: read the channel, parse packets; requests are executed against registered
// memory (target role), responses retire outstanding WRs into the send CQ (initiator role).
#include "fabric/soft/soft_fabric.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "asymnvm/pm.h"
#include "common/logging.h"
#include "fabric/bootstrap.h"
#include "fabric/soft/channel.h"
#include "fabric/soft/packet.h"

namespace asymnvm::fabric::soft {
namespace {

// Every access of the soft NIC to registered memory (landing a SEND or WRITE, reading for a READ,
// copying a READ response into the initiator's buffer) goes through DmaCopy. Like a real NIC's DMA
// it runs concurrently with the host's CPU touching the same memory (a seqlock reader, a b-log
// scanner polling for landed blocks): correctness comes from the protocols above it
// (self-validating blocks, sequence words, the OQ's order), never from a lock shared with the NIC.
// ThreadSanitizer flags these as races; tests/tsan.supp suppresses them by this function's name,
// so TSan still reports every other race, including the soft NIC's own state.
[[gnu::noinline]] void DmaCopy(void* dst, const void* src, size_t len) {
  if (len) std::memcpy(dst, src, len);
}

using Clock = std::chrono::steady_clock;
constexpr const char* kLog = "fabric.soft";
constexpr uint32_t kMaxInline = 64 * 1024;
constexpr size_t kReadChunk = 256 * 1024;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// ---------------------------------------------------------------------------------------------
// Counters

struct AtomicCounters {
  std::atomic<uint64_t> writes{0}, reads{0}, compare_swaps{0}, fetch_adds{0}, sends{0},
      flushes{0}, recvs{0}, round_trips{0}, bytes_out{0}, bytes_in{0}, payload_bytes{0},
      rnr_events{0}, errors{0}, remote_ops_served{0};
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_++;
    cv_.wait_until(lock, deadline, [&] { return count_ > 0 || overrun_; });
    sleepers_--;
    return PollLocked(out);
  }

  uint64_t overwritten() const override { return overwritten_.load(std::memory_order_relaxed); }
  uint32_t capacity() const override { return static_cast<uint32_t>(ring_.size()); }

 private:
  Result<size_t> PollLocked(std::span<Completion> out) {
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

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Completion> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
  int sleepers_ = 0;
  bool overrun_ = false;
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

struct RegionTable {
  std::shared_mutex mu;
  std::unordered_map<uint32_t, RegionEntry> map;
};

class SoftFabric;

class SoftMr final : public MemoryRegion {
 public:
  SoftMr(RegionTable* table, void* addr, size_t length, uint32_t access, uint32_t key,
         pm::Persister* persister)
      : table_(table), addr_(addr), length_(length), access_(access), key_(key),
        persister_(persister) {}
  ~SoftMr() override {
    std::unique_lock<std::shared_mutex> lock(table_->mu);  // waits for in-flight accesses
    table_->map.erase(key_);
  }
  void* addr() const override { return addr_; }
  size_t length() const override { return length_; }
  uint32_t lkey() const override { return key_; }
  uint32_t rkey() const override { return key_; }
  uint32_t access() const override { return access_; }
  pm::Persister* persister() const { return persister_; }

 private:
  RegionTable* table_;
  void* addr_;
  size_t length_;
  uint32_t access_;
  uint32_t key_;
  pm::Persister* persister_;
};

bool InsideMr(const MemoryRegion* mr, const void* addr, uint64_t len) {
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
    std::lock_guard<std::mutex> lock(mu_);
    if (bufs_.size() + buffers.size() > max_wr_) {
      return Status::ResourceExhausted("PostRecv: more than max_wr buffers outstanding");
    }
    for (const auto& b : buffers) {
      auto* mr = static_cast<const SoftMr*>(b.mr);
      bufs_.push_back(Buf{b.wr_id, static_cast<uint8_t*>(b.addr), b.length, 0, mr->rkey(),
                          mr->persister()});
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
    std::lock_guard<std::mutex> lock(mu_);
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
  void PopLocked() {
    bufs_.pop_front();
    posted_.store(bufs_.size(), std::memory_order_relaxed);
  }

  std::mutex mu_;
  std::deque<Buf> bufs_;
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

CompletionStatus NakStatus(uint8_t reason) {
  switch (reason) {
    case kNakRnr: return CompletionStatus::kRnrRetryExceeded;
    case kNakAccess: return CompletionStatus::kRemoteAccessError;
    default: return CompletionStatus::kRemoteInvalidRequest;
  }
}

class ConnCore {
 public:
  ConnCore(SoftFabric* fabric, uint64_t id, uint64_t pd_id, std::unique_ptr<Channel> ch,
           const ConnectionOptions& o, ConnParams peer, std::string peer_address)
      : fabric_(fabric), id_(id), pd_id_(pd_id), ch_(std::move(ch)),
        send_cq_(static_cast<SoftCq*>(o.send_cq)), recv_cq_(static_cast<SoftCq*>(o.recv_cq)),
        max_send_wr_(std::max<uint32_t>(1, o.max_send_wr)), max_inline_(o.max_inline),
        peer_(std::move(peer)), peer_address_(std::move(peer_address)),
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
    std::lock_guard<std::mutex> lock(sq_mu_);
    return error_;
  }
  // Enters kError (from kConnected): the outstanding WRs complete with `st`.
  void EnterError(CompletionStatus st, const Status& why);
  // Enters kClosed: outstanding WRs complete with kFlushed.
  void MarkClosed();

  // ---- worker side ----
  void Service(std::shared_lock<std::shared_mutex>* regions);  // read, parse, execute
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
  void StagePersist(std::vector<pm::Persister*>* drain);
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
  Worker* worker_ = nullptr;
  AtomicCounters ctr_;
  const std::vector<uint8_t>& peer_private_data() const { return peer_.private_data; }
  const std::string& peer_address() const { return peer_address_; }

 private:
  enum class Exec { kContinue, kHold, kStop, kFlushWait };
  Exec HandleRequest(const ParsedPacket& p, std::shared_lock<std::shared_mutex>* regions);
  void HandleResponse(const ParsedPacket& p);
  void Nak(uint8_t reason, uint32_t seq, const std::string& why);
  void AppendResponse(uint8_t op, uint8_t reason, uint32_t seq, const uint8_t* data,
                      uint32_t len);
  void FlushResponses();
  const RegionEntry* Lookup(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t right,
                            std::string* why);
  void CompleteLocked(const OutEntry& e, CompletionStatus st, uint32_t byte_len);
  void FailAllLocked(CompletionStatus st);

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
  mutable std::mutex sq_mu_;
  std::vector<OutEntry> ring_;
  size_t ring_head_ = 0, ring_count_ = 0;
  uint32_t next_seq_ = 1;
  uint32_t unacked_run_ = 0;
  uint32_t ack_every_ = 1;
  std::vector<uint8_t> scratch_;
  std::atomic<ConnectionState> state_{ConnectionState::kConnected};
  Status error_;

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
  bool draining_ = false;   // sent a NAK: discard input until the peer closes
  std::atomic<bool> want_drop_{false};  // the worker drops the connection after this pass
  bool dead_ = false;
};

// ---------------------------------------------------------------------------------------------
// NIC worker

class Worker {
 public:
  Worker(RegionTable* regions, std::chrono::microseconds spin) : regions_(regions), spin_(spin) {}
  ~Worker() { Stop(); }

  Status Start() {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return Status::IoError("soft NIC: epoll_create1", errno);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return Status::IoError("soft NIC: eventfd", errno);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  void Stop() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(cmd_mu_);
        stop_ = true;
      }
      Wake();
      thread_.join();
    }
    for (auto& c : conns_) {
      if (!c->dead()) c->Drop();
    }
    flush_waiting_.clear();
    conns_.clear();
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (epfd_ >= 0) ::close(epfd_);
    wake_fd_ = epfd_ = -1;
  }

  void Add(std::shared_ptr<ConnCore> c) {
    c->worker_ = this;
    std::lock_guard<std::mutex> lock(cmd_mu_);
    adds_.push_back(std::move(c));
    Wake();
  }

  // Synchronously detaches `c`: when this returns the worker no longer touches it.
  void Remove(ConnCore* c) {
    std::unique_lock<std::mutex> lock(cmd_mu_);
    if (!thread_.joinable()) return;
    uint64_t ticket = ++remove_requested_;
    removes_.push_back(c);
    Wake();
    cmd_cv_.wait(lock, [&] { return remove_done_ >= ticket || stop_; });
  }

  void Wake() {
    uint64_t one = 1;
    ssize_t r = ::write(wake_fd_, &one, sizeof one);
    (void)r;
  }

 private:
  void Loop() {
    epoll_event evs[64];
    auto spin_until = Clock::now() + spin_;
    for (;;) {
      int timeout = -1;
      auto now = Clock::now();
      if (now < spin_until || !flush_waiting_.empty()) {
        timeout = 0;
      } else {
        for (auto& c : conns_) {
          if (c->held() && !c->dead()) {
            auto d = c->hold_deadline();
            int ms = d <= now ? 0
                              : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     d - now).count() + 1);
            if (timeout < 0 || ms < timeout) timeout = ms;
          }
        }
      }
      int n = ::epoll_wait(epfd_, evs, 64, timeout);
      if (n < 0 && errno != EINTR) {
        LOG_ERROR(kLog, "epoll_wait failed: " << std::strerror(errno));
        return;
      }
      bool wake = false;
      for (int i = 0; i < n; i++) {
        auto* c = static_cast<ConnCore*>(evs[i].data.ptr);
        if (c == nullptr) {
          wake = true;
          continue;
        }
        if (c->dead()) continue;
        if (evs[i].events & EPOLLOUT) c->ch_->OnWritable();
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) c->set_readable();
        Service(c);
      }
      if (wake) {
        uint64_t v;
        ssize_t r = ::read(wake_fd_, &v, sizeof v);
        (void)r;
        if (ProcessCommands()) return;
      }
      now = Clock::now();
      for (auto& c : conns_) {
        if (!c->dead() && c->ready_to_retry(now)) Service(c.get());
      }
      CompleteFlushes();
      Reap();
      if (n > 0) spin_until = Clock::now() + spin_;
    }
  }

  void Service(ConnCore* c) {
    const bool was_waiting = c->flush_waiting();
    std::shared_lock<std::shared_mutex> regions(regions_->mu, std::defer_lock);
    c->Service(&regions);
    if (regions.owns_lock()) regions.unlock();
    if (c->want_drop() && !c->dead()) Detach(c);
    if (!was_waiting && c->flush_waiting() && !c->dead()) flush_waiting_.push_back(c);
  }

  // FLUSH group commit: every connection of this worker waiting on a FLUSH has its landed ranges
  // flushed, then each persister is drained once (msync mode: one group-committed sync of the
  // merged ranges instead of one per FLUSH), then each is acknowledged and goes on parsing — which
  // may stop at its next FLUSH: a few rounds, then back to epoll (without blocking while any wait).
  void CompleteFlushes() {
    for (int round = 0; round < 8 && !flush_waiting_.empty(); round++) {
      std::vector<ConnCore*> waiting;
      waiting.swap(flush_waiting_);  // Service below may queue a connection again
      std::erase_if(waiting, [](ConnCore* c) { return c->dead(); });
      {
        std::shared_lock<std::shared_mutex> regions(regions_->mu);
        std::vector<pm::Persister*> drain;
        for (ConnCore* c : waiting) c->StagePersist(&drain);
        for (pm::Persister* p : drain) p->Drain();
      }
      for (ConnCore* c : waiting) {
        c->AckFlush();
        Service(c);
      }
    }
  }

  void Detach(ConnCore* c) {
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c->ch_->poll_fd(), nullptr);
    c->Drop();
  }

  // Returns true when the worker must exit.
  bool ProcessCommands() {
    std::vector<std::shared_ptr<ConnCore>> adds;
    std::vector<ConnCore*> removes;
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(cmd_mu_);
      if (stop_) {
        cmd_cv_.notify_all();
        return true;
      }
      adds.swap(adds_);
      removes.swap(removes_);
      ticket = remove_requested_;
    }
    for (auto& c : adds) {
      epoll_event ev{};
      ev.events = c->ch_->edge_triggered() ? (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) : EPOLLIN;
      ev.data.ptr = c.get();
      if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, c->ch_->poll_fd(), &ev) != 0) {
        c->EnterError(CompletionStatus::kTransportError,
                      Status::IoError("soft NIC: epoll_ctl", errno));
        c->Drop();
      }
      conns_.push_back(std::move(c));
      Service(conns_.back().get());
    }
    for (ConnCore* c : removes) {
      if (!c->dead()) Detach(c);
    }
    Reap();
    if (!removes.empty()) {
      std::lock_guard<std::mutex> lock(cmd_mu_);
      remove_done_ = ticket;
      cmd_cv_.notify_all();
    }
    return false;
  }

  void Reap() {
    std::erase_if(flush_waiting_, [](ConnCore* c) { return c->dead(); });
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                [](const std::shared_ptr<ConnCore>& c) { return c->dead(); }),
                 conns_.end());
  }

  RegionTable* regions_;
  const std::chrono::microseconds spin_;
  int epfd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  bool stop_ = false;
  std::vector<std::shared_ptr<ConnCore>> adds_;
  std::vector<ConnCore*> removes_;
  uint64_t remove_requested_ = 0, remove_done_ = 0;
  std::vector<std::shared_ptr<ConnCore>> conns_;  // worker thread only
  // Connections stopped at a FLUSH, in arrival order (worker thread only; never dead after Reap).
  std::vector<ConnCore*> flush_waiting_;
};

// ---------------------------------------------------------------------------------------------
// Fabric

class SoftFabric final : public Fabric {
 public:
  explicit SoftFabric(const FabricOptions& o) : options_(o) {}
  ~SoftFabric() override {
    for (auto& w : workers_) w->Stop();
  }

  Status Start() {
    for (uint32_t i = 0; i < options_.nic_threads; i++) {
      workers_.push_back(std::make_unique<Worker>(&regions_, options_.spin));
      ASYMNVM_RETURN_IF_ERROR(workers_.back()->Start());
    }
    return Status::Ok();
  }

  std::string provider() const override { return "soft"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.multi_packet_srq_native = true;
    c.atomics = true;
    c.max_inline = kMaxInline;
    c.max_message = kMaxMessage;
    c.transports = {"tcp", "unix", "inproc"};
    return c;
  }
  Result<std::unique_ptr<ProtectionDomain>> AllocPd() override;
  Result<std::unique_ptr<CompletionQueue>> CreateCq(const CompletionQueueOptions& o) override {
    if (o.capacity == 0) return Status::InvalidArgument("CreateCq: capacity 0");
    return std::unique_ptr<CompletionQueue>(new SoftCq(o, options_.spin));
  }
  Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(ProtectionDomain* pd,
                                                        const SrqOptions& o) override {
    if (pd == nullptr) return Status::InvalidArgument("CreateSrq: null pd");
    if (o.max_wr == 0) return Status::InvalidArgument("CreateSrq: max_wr 0");
    if (o.multi_packet && (o.stride == 0 || (o.stride & (o.stride - 1)) != 0)) {
      return Status::InvalidArgument("CreateSrq: stride must be a power of two");
    }
    return std::unique_ptr<SharedReceiveQueue>(new SoftSrq(this, o));
  }
  Result<std::unique_ptr<Listener>> Listen(ProtectionDomain* pd,
                                           const std::string& address) override;
  Result<std::unique_ptr<Connection>> Connect(ProtectionDomain* pd, const std::string& address,
                                              const ConnectionOptions& options) override;
  Counters counters() const override {
    std::lock_guard<std::mutex> lock(conns_mu_);
    Counters c = retired_;
    for (auto* core : live_) c += core->ctr_.Snapshot();
    return c;
  }

  // Internals.
  Result<uint32_t> NewKey() {
    std::lock_guard<std::mutex> lock(key_mu_);
    for (;;) {
      uint32_t k = static_cast<uint32_t>(rng_());
      if (k != 0 && used_keys_.insert(k).second) return k;
    }
  }
  RegionTable* regions() { return &regions_; }
  const FabricOptions& options() const { return options_; }
  uint64_t NewConnId() { return next_conn_id_.fetch_add(1) + 1; }
  uint64_t NewPdId() { return next_pd_id_.fetch_add(1) + 1; }
  void WakeHeld() {
    for (auto& w : workers_) w->Wake();
  }

  Result<std::unique_ptr<Connection>> MakeConnection(uint64_t pd_id, std::unique_ptr<Channel> ch,
                                                     const ConnectionOptions& o,
                                                     std::span<const uint8_t> peer_blob,
                                                     const std::string& peer_address);
  void Retire(ConnCore* core) {
    std::lock_guard<std::mutex> lock(conns_mu_);
    if (live_.erase(core)) retired_ += core->ctr_.Snapshot();
  }

 private:
  FabricOptions options_;
  RegionTable regions_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint32_t> next_worker_{0};
  std::atomic<uint64_t> next_conn_id_{0};
  std::atomic<uint64_t> next_pd_id_{0};
  std::mutex key_mu_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::unordered_set<uint32_t> used_keys_;
  mutable std::mutex conns_mu_;
  std::unordered_set<ConnCore*> live_;
  Counters retired_;
};

Status SoftSrq::PostRecv(std::span<const RecvRequest> buffers) {
  ASYMNVM_RETURN_IF_ERROR(rq_.PostRecv(buffers));
  fabric_->WakeHeld();
  return Status::Ok();
}

class SoftPd final : public ProtectionDomain {
 public:
  SoftPd(SoftFabric* f, uint64_t id) : fabric_(f), id_(id) {}
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       const MemoryRegionOptions& o) override {
    if (addr == nullptr || length == 0) {
      return Status::InvalidArgument("RegisterMemory: null address or zero length");
    }
    if ((o.access & ~static_cast<uint32_t>(kAllRemote)) != 0) {
      return Status::InvalidArgument("RegisterMemory: unknown access bits");
    }
    if (reinterpret_cast<uintptr_t>(addr) + length < reinterpret_cast<uintptr_t>(addr)) {
      return Status::InvalidArgument("RegisterMemory: range wraps");
    }
    ASYMNVM_ASSIGN_OR_RETURN(uint32_t key, fabric_->NewKey());
    auto mr = std::make_unique<SoftMr>(fabric_->regions(), addr, length, o.access, key,
                                       o.persister);
    {
      std::unique_lock<std::shared_mutex> lock(fabric_->regions()->mu);
      fabric_->regions()->map[key] =
          RegionEntry{static_cast<uint8_t*>(addr), length, o.access, id_, o.persister};
    }
    return std::unique_ptr<MemoryRegion>(std::move(mr));
  }
  uint64_t id() const { return id_; }

 private:
  SoftFabric* fabric_;
  uint64_t id_;
};

Result<std::unique_ptr<ProtectionDomain>> SoftFabric::AllocPd() {
  return std::unique_ptr<ProtectionDomain>(new SoftPd(this, NewPdId()));
}

class SoftConnection final : public Connection {
 public:
  explicit SoftConnection(std::shared_ptr<ConnCore> core) : core_(std::move(core)) {}
  ~SoftConnection() override {
    Close();
    core_->fabric_->Retire(core_.get());
  }
  Status Post(std::span<const WorkRequest> wrs) override { return core_->Post(wrs); }
  Status PostRecv(std::span<const RecvRequest> buffers) override {
    ASYMNVM_RETURN_IF_ERROR(core_->PostRecv(buffers));
    core_->fabric_->WakeHeld();
    return Status::Ok();
  }
  ConnectionState state() const override { return core_->state(); }
  Status error() const override { return core_->error(); }
  uint64_t id() const override { return core_->id_; }
  const std::vector<uint8_t>& peer_private_data() const override {
    return core_->peer_private_data();
  }
  std::string peer_address() const override { return core_->peer_address(); }
  Counters counters() const override { return core_->ctr_.Snapshot(); }
  void Close() override {
    if (closed_) return;
    closed_ = true;
    core_->worker_->Remove(core_.get());
    core_->MarkClosed();
  }

 private:
  std::shared_ptr<ConnCore> core_;
  bool closed_ = false;
};

Result<std::unique_ptr<Connection>> SoftFabric::MakeConnection(uint64_t pd_id,
                                                               std::unique_ptr<Channel> ch,
                                                               const ConnectionOptions& o,
                                                               std::span<const uint8_t> peer_blob,
                                                               const std::string& peer_address) {
  ASYMNVM_ASSIGN_OR_RETURN(ConnParams peer, ConnParams::Decode(peer_blob));
  auto core = std::make_shared<ConnCore>(this, NewConnId(), pd_id, std::move(ch), o,
                                         std::move(peer), peer_address);
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    live_.insert(core.get());
  }
  auto conn = std::make_unique<SoftConnection>(core);
  workers_[next_worker_.fetch_add(1) % workers_.size()]->Add(core);
  return std::unique_ptr<Connection>(std::move(conn));
}

Status ValidateConnOptions(const ConnectionOptions& o) {
  if (o.send_cq == nullptr) return Status::InvalidArgument("connection: send_cq is required");
  if (dynamic_cast<SoftCq*>(o.send_cq) == nullptr ||
      (o.recv_cq && dynamic_cast<SoftCq*>(o.recv_cq) == nullptr)) {
    return Status::InvalidArgument("connection: CQ not created by the soft provider");
  }
  if (o.srq && dynamic_cast<SoftSrq*>(o.srq) == nullptr) {
    return Status::InvalidArgument("connection: SRQ not created by the soft provider");
  }
  if (o.private_data.size() > 1024) {
    return Status::InvalidArgument("connection: private_data longer than 1024 bytes");
  }
  if (o.max_inline > kMaxInline) {
    return Status::InvalidArgument("connection: max_inline above the provider limit");
  }
  if (o.max_send_wr == 0) return Status::InvalidArgument("connection: max_send_wr 0");
  return Status::Ok();
}

std::vector<uint8_t> MyBlob(const ConnectionOptions& o) {
  ConnParams p;
  p.rnr_retry = o.rnr_retry;
  p.rnr_backoff_us = static_cast<uint32_t>(std::max<int64_t>(0, o.rnr_backoff.count()));
  p.max_message = kMaxMessage;
  p.private_data = o.private_data;
  return p.Encode();
}

// Handshakes run concurrently in the listener's HandshakeAcceptor (doc/fabric.md §Handshake): a
// silent, garbage-sending or slow peer costs one pending slot until its own deadline, never the
// accept loop's time.
class SocketListener final : public Listener {
 public:
  SocketListener(SoftFabric* f, uint64_t pd_id, int fd, std::string address)
      : fabric_(f),
        pd_id_(pd_id),
        fd_(fd),
        address_(std::move(address)),
        acceptor_(fd_, f->options().cluster_secret, "listener " + address_,
                  HandshakeLimits{.deadline = f->options().handshake_timeout,
                                  .max_pending = f->options().max_pending_handshakes,
                                  .log_lines_per_second = f->options().handshake_log_per_second}) {}
  ~SocketListener() override {
    ::close(fd_);
    if (address_.rfind("unix://", 0) == 0) ::unlink(address_.substr(7).c_str());
  }
  std::string address() const override { return address_; }
  Result<std::unique_ptr<Connection>> Accept(const ConnectionOptions& o) override {
    ASYMNVM_RETURN_IF_ERROR(ValidateConnOptions(o));
    auto deadline = Clock::now() + o.timeout;
    auto blob = MyBlob(o);
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return Status::TimedOut("Accept " + address_ + ": no peer in time");
      auto peer = acceptor_.Accept(blob, left);
      if (!peer.ok()) {
        if (peer.status().code() == StatusCode::kTimedOut) {
          return Status::TimedOut("Accept " + address_ + ": no peer in time");
        }
        return peer.status().WithContext("Accept " + address_);
      }
      auto params = ConnParams::Decode(peer->blob);
      if (params.ok()) {
        return fabric_->MakeConnection(pd_id_, MakeSocketChannel(peer->fd), o, peer->blob,
                                       address_);
      }
      LOG_WARN(kLog, "Accept " << address_ << ": refused peer " << peer->address << ": "
                               << params.status().ToString());
      ::close(peer->fd);
    }
  }
  HandshakeAcceptorStats handshake_stats() const { return acceptor_.stats(); }

 private:
  SoftFabric* fabric_;
  uint64_t pd_id_;
  int fd_;
  std::string address_;
  HandshakeAcceptor acceptor_;
};

class InprocListener final : public Listener {
 public:
  InprocListener(SoftFabric* f, uint64_t pd_id, std::string name,
                 std::shared_ptr<InprocListenerState> st)
      : fabric_(f), pd_id_(pd_id), name_(std::move(name)), st_(std::move(st)) {}
  ~InprocListener() override {
    UnregisterInproc(name_);
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->closed = true;
    for (auto& p : st_->pending) {
      std::lock_guard<std::mutex> l2(p->mu);
      if (p->state == InprocPending::State::kWaiting) p->state = InprocPending::State::kRefused;
      p->cv.notify_all();
    }
  }
  std::string address() const override { return "inproc://" + name_; }
  Result<std::unique_ptr<Connection>> Accept(const ConnectionOptions& o) override {
    ASYMNVM_RETURN_IF_ERROR(ValidateConnOptions(o));
    auto deadline = Clock::now() + o.timeout;
    for (;;) {
      std::shared_ptr<InprocPending> p;
      {
        std::unique_lock<std::mutex> lock(st_->mu);
        if (!st_->cv.wait_until(lock, deadline, [&] { return !st_->pending.empty(); })) {
          return Status::TimedOut("Accept " + address() + ": no peer in time");
        }
        p = st_->pending.front();
        st_->pending.pop_front();
      }
      std::lock_guard<std::mutex> lock(p->mu);
      if (p->state != InprocPending::State::kWaiting) continue;  // the client gave up
      auto params = ConnParams::Decode(p->client_blob);
      if (!SecretsEqual(p->secret, fabric_->options().cluster_secret) || !params.ok()) {
        LOG_WARN(kLog, "Accept " << address() << ": refused a peer with a wrong cluster secret");
        p->state = InprocPending::State::kRefused;
        p->cv.notify_all();
        continue;
      }
      p->server_blob = MyBlob(o);
      auto conn = fabric_->MakeConnection(pd_id_, MakeInprocChannel(p->c2s, p->s2c), o,
                                          p->client_blob, address());
      p->state = conn.ok() ? InprocPending::State::kAccepted : InprocPending::State::kRefused;
      p->cv.notify_all();
      return conn;
    }
  }

 private:
  SoftFabric* fabric_;
  uint64_t pd_id_;
  std::string name_;
  std::shared_ptr<InprocListenerState> st_;
};

Result<std::unique_ptr<Listener>> SoftFabric::Listen(ProtectionDomain* pd,
                                                     const std::string& address) {
  auto* spd = dynamic_cast<SoftPd*>(pd);
  if (spd == nullptr) return Status::InvalidArgument("Listen: pd not from the soft provider");
  ASYMNVM_ASSIGN_OR_RETURN(Endpoint ep, ParseAddress(address));
  if (ep.kind == Endpoint::Kind::kInproc) {
    auto st = std::make_shared<InprocListenerState>();
    ASYMNVM_RETURN_IF_ERROR(RegisterInproc(ep.path, st));
    return std::unique_ptr<Listener>(new InprocListener(this, spd->id(), ep.path, st));
  }
  ASYMNVM_RETURN_IF_ERROR(CheckListenSecret(address, options_.cluster_secret));
  Endpoint bound;
  ASYMNVM_ASSIGN_OR_RETURN(int fd, ListenSocket(ep, &bound));
  return std::unique_ptr<Listener>(new SocketListener(this, spd->id(), fd, FormatAddress(bound)));
}

Result<std::unique_ptr<Connection>> SoftFabric::Connect(ProtectionDomain* pd,
                                                        const std::string& address,
                                                        const ConnectionOptions& o) {
  auto* spd = dynamic_cast<SoftPd*>(pd);
  if (spd == nullptr) return Status::InvalidArgument("Connect: pd not from the soft provider");
  ASYMNVM_RETURN_IF_ERROR(ValidateConnOptions(o));
  ASYMNVM_ASSIGN_OR_RETURN(Endpoint ep, ParseAddress(address));
  auto blob = MyBlob(o);
  if (ep.kind == Endpoint::Kind::kInproc) {
    auto st = FindInproc(ep.path);
    if (!st) return Status::ConnectionError("Connect " + address + ": no listener");
    auto p = std::make_shared<InprocPending>();
    p->secret = options_.cluster_secret;
    p->client_blob = blob;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      if (st->closed) return Status::ConnectionError("Connect " + address + ": listener closed");
      st->pending.push_back(p);
      st->cv.notify_all();
    }
    std::unique_lock<std::mutex> lock(p->mu);
    p->cv.wait_for(lock, o.timeout, [&] { return p->state != InprocPending::State::kWaiting; });
    switch (p->state) {
      case InprocPending::State::kWaiting:
        p->state = InprocPending::State::kCancelled;
        return Status::TimedOut("Connect " + address + ": not accepted in time");
      case InprocPending::State::kRefused:
        return Status::PermissionDenied("Connect " + address +
                                        ": refused (cluster secret mismatch or listener closed)");
      default:
        break;
    }
    auto server_blob = p->server_blob;
    lock.unlock();
    return MakeConnection(spd->id(), MakeInprocChannel(p->s2c, p->c2s), o, server_blob, address);
  }
  ASYMNVM_ASSIGN_OR_RETURN(int fd, ConnectSocket(ep, o.timeout));
  std::vector<uint8_t> peer;
  Status st = HandshakeClient(fd, options_.cluster_secret, blob, &peer, o.timeout);
  if (!st.ok()) {
    ::close(fd);
    return st.WithContext("Connect " + address);
  }
  return MakeConnection(spd->id(), MakeSocketChannel(fd), o, peer, address);
}

// ---------------------------------------------------------------------------------------------
// ConnCore: initiator

Status ConnCore::Post(std::span<const WorkRequest> wrs) {
  if (wrs.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(sq_mu_);
  if (state() != ConnectionState::kConnected) {
    return Status::ConnectionError("Post: connection is not connected: " + error_.ToString());
  }
  if (ring_count_ + wrs.size() > max_send_wr_) {
    return Status::ResourceExhausted("Post: more than max_send_wr requests outstanding");
  }
  size_t bytes = 0;
  for (const auto& w : wrs) {
    bytes += kRequestHeaderSize;
    if (w.length > kMaxMessage) return Status::InvalidArgument("Post: length above max_message");
    switch (w.opcode) {
      case Opcode::kWrite:
      case Opcode::kSend:
        bytes += w.length;
        if (w.inline_data) {
          if (w.length > max_inline_) return Status::InvalidArgument("Post: inline too long");
          if (w.length && w.local_addr == nullptr) {
            return Status::InvalidArgument("Post: inline payload without local_addr");
          }
        } else if (w.length) {
          if (w.local_mr == nullptr || !InsideMr(w.local_mr, w.local_addr, w.length)) {
            return Status::InvalidArgument("Post: local buffer outside local_mr");
          }
        }
        break;
      case Opcode::kRead:
        if (w.inline_data) return Status::InvalidArgument("Post: READ cannot be inline");
        if (w.length) {
          if (w.local_mr == nullptr || !InsideMr(w.local_mr, w.local_addr, w.length)) {
            return Status::InvalidArgument("Post: READ destination outside local_mr");
          }
          if (!(w.local_mr->access() & kLocalWrite)) {
            return Status::InvalidArgument("Post: READ destination lacks kLocalWrite");
          }
        }
        break;
      case Opcode::kCompareSwap:
      case Opcode::kFetchAdd:
        if (w.local_addr) {
          if (w.local_mr == nullptr || !InsideMr(w.local_mr, w.local_addr, 8)) {
            return Status::InvalidArgument("Post: atomic result buffer outside local_mr");
          }
          if (!(w.local_mr->access() & kLocalWrite)) {
            return Status::InvalidArgument("Post: atomic result buffer lacks kLocalWrite");
          }
        }
        break;
      case Opcode::kFlush:
        break;
      default:
        return Status::InvalidArgument("Post: opcode not postable");
    }
  }
  scratch_.resize(bytes);
  uint8_t* out = scratch_.data();
  for (size_t i = 0; i < wrs.size(); i++) {
    const auto& w = wrs[i];
    uint32_t seq = next_seq_++;
    bool needs_ack = w.signaled || w.opcode == Opcode::kRead || w.opcode == Opcode::kCompareSwap ||
                     w.opcode == Opcode::kFetchAdd || w.opcode == Opcode::kFlush ||
                     i + 1 == wrs.size() || ++unacked_run_ >= ack_every_;
    if (needs_ack) unacked_run_ = 0;
    uint8_t flags = static_cast<uint8_t>((w.signaled ? kFlagSignaled : 0) |
                                         (needs_ack ? kFlagNeedsAck : 0));
    uint32_t wire_len = w.length;
    bool atomic = w.opcode == Opcode::kCompareSwap || w.opcode == Opcode::kFetchAdd;
    if (atomic && wire_len == 0) wire_len = 8;
    if (w.opcode == Opcode::kFlush) wire_len = 0;
    EncodeRequestHeader(out, static_cast<uint8_t>(w.opcode), flags, seq, wire_len, w.rkey,
                        w.remote_addr, w.compare_add, w.swap);
    out += kRequestHeaderSize;
    switch (w.opcode) {
      case Opcode::kWrite:
        AtomicCounters::Inc(ctr_.writes);
        break;
      case Opcode::kSend:
        AtomicCounters::Inc(ctr_.sends);
        break;
      case Opcode::kRead:
        AtomicCounters::Inc(ctr_.reads);
        break;
      case Opcode::kCompareSwap:
        AtomicCounters::Inc(ctr_.compare_swaps);
        break;
      case Opcode::kFetchAdd:
        AtomicCounters::Inc(ctr_.fetch_adds);
        break;
      default:
        AtomicCounters::Inc(ctr_.flushes);
    }
    if (w.opcode == Opcode::kWrite || w.opcode == Opcode::kSend) {
      DmaCopy(out, w.local_addr, w.length);
      out += w.length;
    }
    if (w.opcode == Opcode::kWrite || w.opcode == Opcode::kSend || w.opcode == Opcode::kRead) {
      AtomicCounters::Inc(ctr_.payload_bytes, w.length);
    }
    ring_[(ring_head_ + ring_count_) % ring_.size()] =
        OutEntry{w.wr_id, w.local_addr, w.length, seq, w.opcode, w.signaled};
    ring_count_++;
  }
  IncShared(ctr_.bytes_out, bytes);
  AtomicCounters::Inc(ctr_.round_trips);
  ch_->Send(scratch_.data(), bytes);  // a broken channel is reported by the worker (EOF/error)
  if (scratch_.capacity() > (4u << 20)) std::vector<uint8_t>().swap(scratch_);
  return Status::Ok();
}

void ConnCore::CompleteLocked(const OutEntry& e, CompletionStatus st, uint32_t byte_len) {
  if (st != CompletionStatus::kSuccess) IncShared(ctr_.errors);
  if (!e.signaled && st == CompletionStatus::kSuccess) return;
  Completion c;
  c.wr_id = e.wr_id;
  c.opcode = e.opcode;
  c.status = st;
  c.byte_len = byte_len;
  c.connection_id = id_;
  if (!send_cq_->Push(c) && state() == ConnectionState::kConnected) {
    state_.store(ConnectionState::kError, std::memory_order_release);
    error_ = Status::ResourceExhausted("send completion queue overrun", false);
    want_drop_ = true;  // read by the worker only; Post never sets it
  }
}

void ConnCore::FailAllLocked(CompletionStatus st) {
  while (ring_count_ > 0) {
    OutEntry e = ring_[ring_head_];
    ring_head_ = (ring_head_ + 1) % ring_.size();
    ring_count_--;
    CompleteLocked(e, st, 0);
  }
}

void ConnCore::EnterError(CompletionStatus st, const Status& why) {
  std::lock_guard<std::mutex> lock(sq_mu_);
  if (state() == ConnectionState::kConnected) {
    error_ = why;
    state_.store(ConnectionState::kError, std::memory_order_release);
    FailAllLocked(st);
  } else if (state() == ConnectionState::kError) {
    FailAllLocked(CompletionStatus::kFlushed);
  }
}

void ConnCore::MarkClosed() {
  std::lock_guard<std::mutex> lock(sq_mu_);
  if (state() == ConnectionState::kClosed) return;
  if (error_.ok()) error_ = Status::ConnectionError("connection closed");
  state_.store(ConnectionState::kClosed, std::memory_order_release);
  FailAllLocked(CompletionStatus::kFlushed);
}

void ConnCore::HandleResponse(const ParsedPacket& p) {
  std::lock_guard<std::mutex> lock(sq_mu_);
  if (p.opcode == kWireRnrNotice) {
    AtomicCounters::Inc(ctr_.rnr_events);
    return;
  }
  if (state() == ConnectionState::kClosed) return;
  // Everything before p.seq succeeded (cumulative acknowledgement).
  while (ring_count_ > 0 && ring_[ring_head_].seq != p.seq) {
    OutEntry e = ring_[ring_head_];
    ring_head_ = (ring_head_ + 1) % ring_.size();
    ring_count_--;
    CompleteLocked(e, CompletionStatus::kSuccess, e.opcode == Opcode::kRead ? e.length : 0);
  }
  if (ring_count_ == 0) {
    if (state() == ConnectionState::kConnected) {
      LOG_WARN(kLog, "connection " << id_ << ": response for unknown seq " << p.seq);
      state_.store(ConnectionState::kError, std::memory_order_release);
      error_ = Status::ProtocolError("response for an unknown request");
    }
    want_drop_ = true;
    return;
  }
  OutEntry e = ring_[ring_head_];
  ring_head_ = (ring_head_ + 1) % ring_.size();
  ring_count_--;
  if (p.opcode == kWireNak) {
    CompletionStatus st = NakStatus(p.reason);
    if (state() == ConnectionState::kConnected) {
      // The error state is visible before the failed completion is: a poller that sees the
      // error completion must also see kError (contract: "the connection then enters kError").
      error_ = Status(st == CompletionStatus::kRnrRetryExceeded ? StatusCode::kRnrRetryExceeded
                                                                : StatusCode::kRemoteAccessError,
                      std::string("remote NAK: ") + CompletionStatusName(st));
      state_.store(ConnectionState::kError, std::memory_order_release);
      CompleteLocked(e, st, 0);
    }
    FailAllLocked(CompletionStatus::kFlushed);
    want_drop_ = true;
    return;
  }
  if (state() != ConnectionState::kConnected) return;
  uint32_t byte_len = 0;
  if (p.opcode == kWireReadResp) {
    if (e.opcode != Opcode::kRead) {
      state_.store(ConnectionState::kError, std::memory_order_release);
      error_ = Status::ProtocolError("READ response for a non-READ request");
      CompleteLocked(e, CompletionStatus::kTransportError, 0);
      FailAllLocked(CompletionStatus::kFlushed);
      want_drop_ = true;
      return;
    }
    byte_len = std::min(p.payload_len, e.length);
    DmaCopy(e.local_addr, p.payload, byte_len);
  } else if (p.opcode == kWireAtomicResp) {
    if (e.local_addr) DmaCopy(e.local_addr, p.payload, 8);
    byte_len = 8;
  }
  CompleteLocked(e, CompletionStatus::kSuccess, byte_len);
}

// ---------------------------------------------------------------------------------------------
// ConnCore: target

void ConnCore::AppendResponse(uint8_t op, uint8_t reason, uint32_t seq, const uint8_t* data,
                              uint32_t len) {
  size_t at = resp_.size();
  resp_.resize(at + kResponseHeaderSize + len);
  EncodeResponseHeader(resp_.data() + at, op, reason, seq, len);
  DmaCopy(resp_.data() + at + kResponseHeaderSize, data, len);
}

void ConnCore::FlushResponses() {
  if (resp_.empty()) return;
  IncShared(ctr_.bytes_out, resp_.size());
  ch_->Send(resp_.data(), resp_.size());
  resp_.clear();
  if (resp_.capacity() > (4u << 20)) std::vector<uint8_t>().swap(resp_);
}

void ConnCore::Nak(uint8_t reason, uint32_t seq, const std::string& why) {
  LOG_WARN(kLog, "connection " << id_ << " (" << peer_address_ << "): rejecting request seq "
                               << seq << ": " << why << "; dropping the connection");
  IncShared(ctr_.errors);
  AppendResponse(kWireNak, reason, seq, nullptr, 0);
  FlushResponses();
  ch_->ShutdownWrite();
  draining_ = true;
  // The RC connection is now in error in both directions.
  EnterError(CompletionStatus::kTransportError,
             Status::RemoteAccessError("this endpoint rejected a peer request: " + why));
}

const RegionEntry* ConnCore::Lookup(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t right,
                                    std::string* why) {
  auto& map = fabric_->regions()->map;
  auto it = map.find(rkey);
  if (it == map.end() || it->second.pd_id != pd_id_) {
    *why = "unknown rkey " + std::to_string(rkey);
    return nullptr;
  }
  const RegionEntry& e = it->second;
  if (!(e.access & right)) {
    *why = "region lacks the access right";
    return nullptr;
  }
  auto base = reinterpret_cast<uint64_t>(e.base);
  if (addr < base || len > e.length || addr - base > e.length - len) {
    *why = "range [" + std::to_string(addr) + ", +" + std::to_string(len) +
           ") outside the region";
    return nullptr;
  }
  return &e;
}

void ConnCore::StagePersist(std::vector<pm::Persister*>* drain) {
  auto& map = fabric_->regions()->map;
  for (const auto& r : persist_) {
    auto it = map.find(r.rkey);
    if (it == map.end()) continue;  // deregistered since: nothing left to persist
    r.persister->Flush(r.addr, r.len);
    if (std::find(drain->begin(), drain->end(), r.persister) == drain->end()) {
      drain->push_back(r.persister);
    }
  }
  persist_.clear();
}

void ConnCore::AckFlush() {
  if (!flush_waiting_) return;
  flush_waiting_ = false;
  AppendResponse(kWireAck, 0, flush_seq_, nullptr, 0);
  FlushResponses();
}

ConnCore::Exec ConnCore::HandleRequest(const ParsedPacket& p,
                                       std::shared_lock<std::shared_mutex>* regions) {
  if (!regions->owns_lock()) regions->lock();
  if (p.seq != expect_seq_) {
    Nak(kNakInvalid, expect_seq_, "sequence " + std::to_string(p.seq) + ", expected " +
                                      std::to_string(expect_seq_));
    return Exec::kStop;
  }
  bool ack = (p.flags & kFlagNeedsAck) != 0;
  std::string why;
  switch (p.opcode) {
    case kWireWrite: {
      const RegionEntry* e = Lookup(p.rkey, p.remote_addr, p.length, kRemoteWrite, &why);
      if (e == nullptr) {
        Nak(kNakAccess, p.seq, "WRITE: " + why);
        return Exec::kStop;
      }
      auto* dst = reinterpret_cast<uint8_t*>(p.remote_addr);
      DmaCopy(dst, p.payload, p.length);
      if (e->persister && p.length) {
        if (!persist_.empty() && persist_.back().rkey == p.rkey &&
            persist_.back().addr + persist_.back().len == dst) {
          persist_.back().len += p.length;
        } else {
          persist_.push_back({p.rkey, dst, p.length, e->persister});
        }
      }
      AtomicCounters::Inc(ctr_.remote_ops_served);
      if (ack) AppendResponse(kWireAck, 0, p.seq, nullptr, 0);
      break;
    }
    case kWireRead: {
      const RegionEntry* e = Lookup(p.rkey, p.remote_addr, p.length, kRemoteRead, &why);
      if (e == nullptr) {
        Nak(kNakAccess, p.seq, "READ: " + why);
        return Exec::kStop;
      }
      AppendResponse(kWireReadResp, 0, p.seq, reinterpret_cast<const uint8_t*>(p.remote_addr),
                     p.length);
      AtomicCounters::Inc(ctr_.remote_ops_served);
      break;
    }
    case kWireCompareSwap:
    case kWireFetchAdd: {
      if (p.length != 8 || p.remote_addr % 8 != 0) {
        Nak(kNakInvalid, p.seq, "atomic: length must be 8 and the address 8-byte aligned");
        return Exec::kStop;
      }
      const RegionEntry* e = Lookup(p.rkey, p.remote_addr, 8, kRemoteAtomic, &why);
      if (e == nullptr) {
        Nak(kNakAccess, p.seq, "atomic: " + why);
        return Exec::kStop;
      }
      auto* word = reinterpret_cast<uint64_t*>(p.remote_addr);
      uint64_t orig;
      if (p.opcode == kWireCompareSwap) {
        orig = p.compare_add;
        __atomic_compare_exchange_n(word, &orig, p.swap, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
      } else {
        orig = __atomic_fetch_add(word, p.compare_add, __ATOMIC_SEQ_CST);
      }
      if (e->persister) persist_.push_back({p.rkey, reinterpret_cast<uint8_t*>(word), 8,
                                            e->persister});
      uint8_t le[8];
      StoreLe64(le, orig);
      AppendResponse(kWireAtomicResp, 0, p.seq, le, 8);
      AtomicCounters::Inc(ctr_.remote_ops_served);
      break;
    }
    case kWireSend: {
      RecvQueue::Place r = recv_cq_ == nullptr
                               ? RecvQueue::Place::kNoBuffer
                               : rq_->Deliver(p.payload, p.length, id_, recv_cq_, &persist_);
      if (r == RecvQueue::Place::kNoBuffer) {
        if (hold_attempts_ < peer_.rnr_retry) {
          uint32_t shift = std::min<uint32_t>(hold_attempts_, 20);
          hold_attempts_++;
          AtomicCounters::Inc(ctr_.rnr_events);
          AppendResponse(kWireRnrNotice, 0, p.seq, nullptr, 0);
          held_ = true;
          hold_deadline_ =
              Clock::now() + std::chrono::microseconds(uint64_t{peer_.rnr_backoff_us} << shift);
          return Exec::kHold;
        }
        hold_attempts_ = 0;
        AtomicCounters::Inc(ctr_.rnr_events);
        Nak(kNakRnr, p.seq, "SEND: receiver not ready after " +
                                std::to_string(peer_.rnr_retry) + " retries");
        return Exec::kStop;
      }
      hold_attempts_ = 0;
      if (r == RecvQueue::Place::kTooLong) {
        IncShared(ctr_.errors);
        Nak(kNakLength, p.seq, "SEND: message longer than the receive buffer");
        return Exec::kStop;
      }
      if (r == RecvQueue::Place::kCqOverrun) {
        Nak(kNakInvalid, p.seq, "SEND: receive completion queue overrun");
        return Exec::kStop;
      }
      AtomicCounters::Inc(ctr_.recvs);
      if (ack) AppendResponse(kWireAck, 0, p.seq, nullptr, 0);
      break;
    }
    case kWireFlush: {
      if (p.rkey != 0 && Lookup(p.rkey, p.remote_addr, 1, kRemoteRead, &why) == nullptr) {
        Nak(kNakAccess, p.seq, "FLUSH: " + why);
        return Exec::kStop;
      }
      // Persisted and acknowledged by the worker together with the other connections' FLUSHes
      // (Worker::CompleteFlushes): one sync for all of them.
      flush_waiting_ = true;
      flush_seq_ = p.seq;
      expect_seq_++;
      return Exec::kFlushWait;
    }
    default:
      Nak(kNakInvalid, p.seq, "unknown opcode");
      return Exec::kStop;
  }
  expect_seq_++;
  return Exec::kContinue;
}

void ConnCore::Service(std::shared_lock<std::shared_mutex>* regions) {
  if (dead_ || flush_waiting_) return;
  held_ = held_ && !(Clock::now() >= hold_deadline_ || rq_->HasBuffer());
  bool stop = false;
  while (!stop && !held_) {
    // Parse everything buffered.
    while (rstart_ < rend_) {
      size_t consumed = 0;
      auto r = ParsePacket(rbuf_.data() + rstart_, rend_ - rstart_, &consumed);
      if (!r.ok()) {
        if (!draining_) Nak(kNakInvalid, expect_seq_, "malformed packet: " + r.status().message());
        rstart_ = rend_ = 0;
        break;
      }
      const ParsedPacket& p = *r;
      if (!p.complete) {
        if (p.needed > rbuf_.size()) {
          // Grow for a large packet; compact first.
          std::vector<uint8_t> nb(std::max(p.needed, rbuf_.size()) + kReadChunk);
          std::memcpy(nb.data(), rbuf_.data() + rstart_, rend_ - rstart_);
          rend_ -= rstart_;
          rstart_ = 0;
          rbuf_.swap(nb);
        }
        break;
      }
      if (draining_) {
        rstart_ += consumed;
        continue;
      }
      if (p.is_response) {
        HandleResponse(p);
      } else {
        Exec e = HandleRequest(p, regions);
        if (e == Exec::kHold) {
          stop = true;
          break;
        }
        if (e == Exec::kFlushWait) {
          rstart_ += consumed;
          stop = true;
          break;
        }
      }
      rstart_ += consumed;
    }
    if (rstart_ == rend_) rstart_ = rend_ = 0;
    if (stop || held_ || !readable_) break;
    // Make room, then read more.
    if (rbuf_.size() - rend_ < kReadChunk / 4 && rstart_ > 0) {
      std::memmove(rbuf_.data(), rbuf_.data() + rstart_, rend_ - rstart_);
      rend_ -= rstart_;
      rstart_ = 0;
    }
    if (rbuf_.size() - rend_ < kReadChunk / 4) rbuf_.resize(rbuf_.size() + kReadChunk);
    size_t n = 0;
    // Release the region lock around the system call so deregistration is not delayed by I/O.
    if (regions->owns_lock()) regions->unlock();
    auto rs = ch_->Read(rbuf_.data() + rend_, rbuf_.size() - rend_, &n);
    if (rs == Channel::ReadStatus::kData) {
      rend_ += n;
      IncShared(ctr_.bytes_in, n);
      continue;
    }
    if (rs == Channel::ReadStatus::kWouldBlock) {
      readable_ = false;
      break;
    }
    // EOF or error: the peer is gone (or finished draining after our NAK).
    FlushResponses();
    EnterError(CompletionStatus::kTransportError,
               Status::ConnectionError(rs == Channel::ReadStatus::kEof
                                           ? "peer closed the connection"
                                           : "transport error"));
    want_drop_ = true;
    break;
  }
  if (held_) stop = true;
  FlushResponses();
  if (rbuf_.size() > 8 * kReadChunk && rstart_ == rend_) {
    rbuf_.assign(kReadChunk * 2, 0);
    rstart_ = rend_ = 0;
  }
}

}  // namespace

std::vector<uint8_t> ConnParams::Encode() const {
  std::vector<uint8_t> out(20 + private_data.size());
  StoreLe32(out.data(), kMagic);
  StoreLe32(out.data() + 4, rnr_retry);
  StoreLe32(out.data() + 8, rnr_backoff_us);
  StoreLe32(out.data() + 12, max_message);
  StoreLe32(out.data() + 16, static_cast<uint32_t>(private_data.size()));
  if (!private_data.empty()) std::memcpy(out.data() + 20, private_data.data(), private_data.size());
  return out;
}

Result<ConnParams> ConnParams::Decode(std::span<const uint8_t> blob) {
  if (blob.size() < 20) return Status::ProtocolError("soft connection parameters: truncated");
  if (LoadLe32(blob.data()) != kMagic) {
    return Status::ProtocolError("soft connection parameters: bad magic (not a soft NIC peer)");
  }
  ConnParams p;
  p.rnr_retry = LoadLe32(blob.data() + 4);
  p.rnr_backoff_us = LoadLe32(blob.data() + 8);
  p.max_message = LoadLe32(blob.data() + 12);
  uint32_t n = LoadLe32(blob.data() + 16);
  if (n > 1024 || blob.size() != 20 + size_t{n}) {
    return Status::ProtocolError("soft connection parameters: bad private data length");
  }
  p.private_data.assign(blob.begin() + 20, blob.end());
  return p;
}

Result<std::unique_ptr<Fabric>> OpenSoftFabric(const FabricOptions& options) {
  if (options.nic_threads == 0 || options.nic_threads > 64) {
    return Status::InvalidArgument("soft fabric: nic_threads must be 1..64");
  }
  FabricOptions resolved = options;  // idempotent after Fabric::Open; tests open it directly
  ASYMNVM_ASSIGN_OR_RETURN(resolved.cluster_secret, ResolveClusterSecret(options));
  resolved.secret_file.clear();
  auto f = std::make_unique<SoftFabric>(resolved);
  ASYMNVM_RETURN_IF_ERROR(f->Start());
  return std::unique_ptr<Fabric>(std::move(f));
}

}  // namespace asymnvm::fabric::soft
