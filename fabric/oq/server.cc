// OQ server: workers, acceptors, executor loop, durable recovery (doc/oq.md).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "common/checksum.h"
#include "common/coding.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "common/zero.h"
#include "fabric/oq/executor.h"
#include "fabric/oq/oq.h"
#include "fabric/oq/wire.h"

namespace asymnvm::oq {
namespace {

constexpr char kAreaMagic[8] = {'A', 'S', 'Y', 'M', 'O', 'Q', 'D', '1'};
constexpr size_t kHeaderPage = 4096;
constexpr size_t kWorkerHeaderStride = 64;

uint32_t RoundUp(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

std::string WorkerAddress(const std::string& base, uint32_t w) {
  if (w == 0) return base;
  if (base.rfind("tcp://", 0) == 0) {
    std::string hostport = base.substr(6);
    size_t colon = hostport.rfind(':');
    std::string host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
    return "tcp://" + host + ":0";
  }
  if (base.rfind("unix://", 0) == 0) return base + ".w" + std::to_string(w);
  return base + "-w" + std::to_string(w);
}

// A ring of registered memory for response SENDs, released in FIFO order as their (possibly
// out-of-order) completions arrive.
class ResponseArena {
 public:
  Status Init(fabric::ProtectionDomain* pd, size_t bytes) {
    mem_.assign(bytes, 0);
    ASYMNVM_ASSIGN_OR_RETURN(
        mr_, pd->RegisterMemory(mem_.data(), mem_.size(), {.access = fabric::kLocalWrite}));
    return Status::Ok();
  }
  // Returns nullptr when no room (caller reaps completions and retries).
  uint8_t* Alloc(uint32_t len, uint64_t* wr_id) {
    uint64_t cap = mem_.size();
    uint64_t pos = head_ % cap;
    uint64_t skip = pos + len > cap ? cap - pos : 0;
    if (head_ + skip + len - tail_ > cap || inflight_.size() >= 4096) return nullptr;
    head_ += skip;
    uint8_t* p = mem_.data() + head_ % cap;
    head_ += len;
    *wr_id = first_id_ + inflight_.size();
    inflight_.push_back({head_, false});
    return p;
  }
  void Release(uint64_t wr_id) {
    if (wr_id < first_id_ || wr_id - first_id_ >= inflight_.size()) return;
    inflight_[wr_id - first_id_].done = true;
    while (!inflight_.empty() && inflight_.front().done) {
      tail_ = inflight_.front().end;
      inflight_.pop_front();
      first_id_++;
    }
  }
  bool idle() const { return inflight_.empty(); }
  const fabric::MemoryRegion* mr() const { return mr_.get(); }

 private:
  struct Entry {
    uint64_t end;
    bool done;
  };
  std::vector<uint8_t> mem_;
  std::unique_ptr<fabric::MemoryRegion> mr_;
  uint64_t head_ = 0, tail_ = 0, first_id_ = 0;
  std::deque<Entry> inflight_;
};

}  // namespace

struct Server::Impl {
  struct Worker {
    uint32_t index = 0;
    uint8_t* buffers = nullptr;  // B × buffer_size
    uint8_t* header = nullptr;   // durable: RTE word at +0, SRQTail word at +8
    std::vector<uint8_t> dram;   // non-durable buffers
    uint64_t tail = 0;           // next post sequence (SRQTail)
    uint64_t rte = 0;            // ReqToExecute position (DRAM copy)
    uint64_t rte_persisted = 0;
    bool nilext_unpersisted = false;  // a nilext request executed past rte_persisted
    std::unique_ptr<fabric::MemoryRegion> mr;
    std::unique_ptr<fabric::CompletionQueue> recv_cq, send_cq;
    std::unique_ptr<fabric::SharedReceiveQueue> srq;
    std::unique_ptr<fabric::Listener> listener;
    std::vector<uint8_t> hello;
    OrderedExecutor exec{64};
    ResponseArena arena;
    Mutex conn_mu;
    std::vector<std::unique_ptr<fabric::Connection>> conns ASYMNVM_GUARDED_BY(conn_mu);
    // rnr events of connections already dropped
    uint64_t closed_rnr ASYMNVM_GUARDED_BY(conn_mu) = 0;
    mutable Mutex stats_mu;
    WorkerStats stats ASYMNVM_GUARDED_BY(stats_mu);
    std::thread thread, acceptor;
    // Responses produced in one execution batch, sent after ReqToExecute is persisted.
    struct Pending {
      uint64_t conn_id;
      std::vector<uint8_t> bytes;
      std::chrono::steady_clock::time_point unknown_since{};  // connection not registered yet
    };
    std::vector<Pending> pending;
  };

  ServerOptions o;
  Handler handler;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<uint8_t> flush_target;
  std::unique_ptr<fabric::MemoryRegion> flush_mr;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> connections{0};
  bool stopped = false;

  uint8_t* Buffer(Worker& w, uint64_t seq) const {
    return w.buffers + (seq % o.buffers_per_worker) * size_t{o.buffer_size};
  }
  void Bump(Worker& w, uint64_t WorkerStats::*field, uint64_t n = 1) {
    MutexLock lock(w.stats_mu);
    w.stats.*field += n;
  }

  Status Validate();
  Status InitDurable();
  Status Recover(Worker& w);
  Status InitFabric(Worker& w);
  Status PostBuffer(Worker& w);
  void PersistRte(Worker& w);
  // PersistRte only when a nilext request executed since the last one: recovery skips non-nilext
  // requests, so an RTE that lags behind reads only costs a longer scan, never a re-execution.
  void PersistRteForResponses(Worker& w);
  void Run(Worker& w);
  void AcceptLoop(Worker& w);
  void Execute(Worker& w, const OrderedExecutor::Event& ev);
  void Retire(Worker& w, const OrderedExecutor::Event& ev);
  void QueueResponse(Worker& w, uint64_t conn_id, uint64_t seq, const Status& st,
                     std::span<const uint8_t> body);
  void SendPending(Worker& w);
  void ReapSends(Worker& w, bool block);
};

Status Server::Impl::Validate() {
  if (o.fabric == nullptr || o.pd == nullptr) {
    return Status::InvalidArgument("oq server: fabric and pd are required");
  }
  if (o.workers == 0 || o.workers > kMaxWorkers) {
    return Status::InvalidArgument("oq server: workers must be 1.." + std::to_string(kMaxWorkers));
  }
  if (!o.worker_listen_addresses.empty() && o.worker_listen_addresses.size() + 1 < o.workers) {
    return Status::InvalidArgument("oq server: " + std::to_string(o.workers) + " workers need " +
                                   std::to_string(o.workers - 1) +
                                   " worker listen addresses beyond the first, " +
                                   std::to_string(o.worker_listen_addresses.size()) + " given");
  }
  if (o.stride < 64 || o.stride > 4096 || (o.stride & (o.stride - 1)) != 0) {
    return Status::InvalidArgument("oq server: stride must be a power of two in 64..4096");
  }
  if (o.buffer_size < 4096 || o.buffer_size % 4096 != 0 || o.buffer_size > (1u << 20) ||
      o.buffer_size / o.stride > 0xFFFF) {
    return Status::InvalidArgument(
        "oq server: buffer size must be a multiple of 4096 in 4 KiB..1 MiB");
  }
  if (o.buffers_per_worker < 2 || o.buffers_per_worker > 65536) {
    return Status::InvalidArgument("oq server: buffers per worker must be 2..65536");
  }
  if (o.max_request < kRequestHeaderSize || o.max_request > o.buffer_size) {
    return Status::InvalidArgument("oq server: max_request must be in [40, buffer_size]");
  }
  if (o.max_response > (1u << 20)) {
    return Status::InvalidArgument("oq server: max_response above 1 MiB");
  }
  if (o.durable) {
    if (o.pm_area == nullptr || o.persister == nullptr) {
      return Status::InvalidArgument("oq server: durable mode needs pm_area and persister");
    }
    if (reinterpret_cast<uintptr_t>(o.pm_area) % 4096 != 0) {
      return Status::InvalidArgument("oq server: pm_area must be 4 KiB aligned");
    }
    size_t need = DurableAreaSize(o.workers, o.buffers_per_worker, o.buffer_size);
    if (o.pm_area_size < need) {
      return Status::InvalidArgument("oq server: pm area of " + std::to_string(o.pm_area_size) +
                                     " bytes, need " + std::to_string(need));
    }
  }
  return Status::Ok();
}

// Durable area: header page [magic 8][version u32][workers u32][buffers u32][buffer_size u32]
// [stride u32][crc32c u32 of bytes 0..28]; worker w's words at 64 + 64·w; buffers from 4096.
Status Server::Impl::InitDurable() {
  uint8_t* h = o.pm_area;
  bool blank = std::all_of(h, h + 32, [](uint8_t b) { return b == 0; });
  bool valid = std::memcmp(h, kAreaMagic, 8) == 0 && GetLe32(h + 28) == Crc32c(h, 28);
  if (!blank && !valid) {
    return Status::Corruption("oq server: durable area header is corrupt (bad magic or checksum)");
  }
  if (valid) {
    if (GetLe32(h + 8) != 1 || GetLe32(h + 12) != o.workers ||
        GetLe32(h + 16) != o.buffers_per_worker || GetLe32(h + 20) != o.buffer_size ||
        GetLe32(h + 24) != o.stride) {
      return Status::InvalidArgument(
          "oq server: durable area was formatted with another geometry (workers " +
          std::to_string(GetLe32(h + 12)) + ", buffers " + std::to_string(GetLe32(h + 16)) +
          ", buffer size " + std::to_string(GetLe32(h + 20)) + ", stride " +
          std::to_string(GetLe32(h + 24)) + "); refusing to reformat it");
    }
  } else {
    size_t n = DurableAreaSize(o.workers, o.buffers_per_worker, o.buffer_size);
    ZeroPages(h + 32, n - 32);  // a fresh (sparse) file: nothing to write
    for (uint32_t w = 0; w < o.workers; w++) {
      uint8_t* wh = h + 64 + kWorkerHeaderStride * w;
      PutLe64(wh, wire::EncodeWord(0));
      PutLe64(wh + 8, wire::EncodeWord(0));
    }
    o.persister->Persist(h + 32, n - 32);
    std::memcpy(h, kAreaMagic, 8);
    PutLe32(h + 8, 1);
    PutLe32(h + 12, o.workers);
    PutLe32(h + 16, o.buffers_per_worker);
    PutLe32(h + 20, o.buffer_size);
    PutLe32(h + 24, o.stride);
    PutLe32(h + 28, Crc32c(h, 28));
    o.persister->Persist(h, 32);
  }
  for (auto& w : workers) {
    w->header = h + 64 + kWorkerHeaderStride * w->index;
    w->buffers = h + kHeaderPage + size_t{w->index} * o.buffers_per_worker * o.buffer_size;
    uint64_t rte, tail;
    if (!wire::DecodeWord(GetLe64(w->header), &rte) ||
        !wire::DecodeWord(GetLe64(w->header + 8), &tail)) {
      return Status::Corruption("oq server: worker " + std::to_string(w->index) +
                                ": ReqToExecute / SRQTail word fails its check");
    }
    uint64_t rte_seq = rte >> 16;
    if (rte_seq > tail || tail - rte_seq > o.buffers_per_worker ||
        (rte & 0xFFFF) > o.buffer_size / o.stride) {
      return Status::Corruption("oq server: worker " + std::to_string(w->index) +
                                ": ReqToExecute " + std::to_string(rte) +
                                " inconsistent with SRQTail " + std::to_string(tail));
    }
    w->rte = rte;
    w->rte_persisted = rte;
    w->tail = tail;
  }
  return Status::Ok();
}

Result<DurableAreaScan> ScanDurableArea(std::span<const uint8_t> area, uint32_t max_request) {
  if (area.size() < kHeaderPage) {
    return Status::InvalidArgument("oq durable area: " + std::to_string(area.size()) +
                                   " bytes, shorter than its header page");
  }
  const uint8_t* h = area.data();
  if (std::all_of(h, h + 32, [](uint8_t b) { return b == 0; })) {
    return Status::NotFound("oq durable area: not formatted (blank header)");
  }
  if (std::memcmp(h, kAreaMagic, 8) != 0 || GetLe32(h + 28) != Crc32c(h, 28)) {
    return Status::Corruption("oq durable area: header is corrupt (bad magic or checksum)");
  }
  DurableAreaScan d;
  d.workers = GetLe32(h + 12);
  d.buffers_per_worker = GetLe32(h + 16);
  d.buffer_size = GetLe32(h + 20);
  d.stride = GetLe32(h + 24);
  if (GetLe32(h + 8) != 1 || d.workers == 0 || d.workers > kMaxWorkers ||
      d.buffers_per_worker < 2 || d.buffer_size < 4096 || d.buffer_size % 4096 != 0 ||
      d.stride < 64 || (d.stride & (d.stride - 1)) != 0 || d.buffer_size / d.stride > 0xFFFF) {
    return Status::Corruption("oq durable area: impossible version or geometry in the header");
  }
  if (DurableAreaSize(d.workers, d.buffers_per_worker, d.buffer_size) > area.size()) {
    return Status::InvalidArgument("oq durable area: geometry needs more than the " +
                                   std::to_string(area.size()) + "-byte area");
  }
  if (max_request == 0) max_request = d.buffer_size;
  for (uint32_t w = 0; w < d.workers; w++) {
    const uint8_t* wh = h + 64 + kWorkerHeaderStride * w;
    uint64_t rte = 0, tail = 0;
    if (!wire::DecodeWord(GetLe64(wh), &rte) || !wire::DecodeWord(GetLe64(wh + 8), &tail)) {
      return Status::Corruption("oq durable area: worker " + std::to_string(w) +
                                ": ReqToExecute / SRQTail word fails its check");
    }
    if ((rte >> 16) > tail || tail - (rte >> 16) > d.buffers_per_worker ||
        (rte & 0xFFFF) > d.buffer_size / d.stride) {
      return Status::Corruption("oq durable area: worker " + std::to_string(w) + ": ReqToExecute " +
                                std::to_string(rte) + " inconsistent with SRQTail " +
                                std::to_string(tail));
    }
    d.req_to_execute.push_back(rte);
    d.srq_tail.push_back(tail);
    const uint8_t* buffers = h + kHeaderPage + size_t{w} * d.buffers_per_worker * d.buffer_size;
    auto buffer = [&](uint64_t seq) {
      return buffers + (seq % d.buffers_per_worker) * size_t{d.buffer_size};
    };
    const uint64_t first = rte >> 16;
    for (uint64_t seq = first; seq < tail; seq++) {
      const uint8_t* buf = buffer(seq);
      uint32_t off = seq == first ? static_cast<uint32_t>(rte & 0xFFFF) * d.stride : 0;
      const size_t first_landing = d.landed.size();
      bool in_bad_run = false;
      uint32_t valid_end = 0;  // end of the last valid request in this buffer
      while (off + kRequestHeaderSize <= d.buffer_size) {
        LandedRequest l;
        l.worker = w;
        l.post_seq = seq;
        l.offset = off;
        l.area_offset = static_cast<uint64_t>(buf - h) + off;
        auto r = ValidateRequest({buf + off, d.buffer_size - off}, max_request);
        if (r.ok() && r->worker == w) {
          in_bad_run = false;
          l.valid = true;
          l.header = *r;
          l.bytes = {buf + off, r->size};
          d.landed.push_back(l);
          off = RoundUp(off + r->size, d.stride);
          valid_end = off;
          continue;
        }
        const bool empty =
            std::all_of(buf + off, buf + off + d.stride, [](uint8_t b) { return b == 0; });
        if (!empty && !in_bad_run) {  // one record per contiguous run of bad strides
          l.error = r.ok() ? "request addressed to worker " + std::to_string(r->worker)
                           : r.status().message();
          l.bytes = {buf + off, d.buffer_size - off};
          d.landed.push_back(l);
        }
        in_bad_run = !empty;
        off += d.stride;
      }
      // Landings into one buffer are sequential, and the NIC fills the next buffer only after
      // this one: a bad run is an unfinished landing only if it is the last thing landed.
      const bool moved_on = seq + 1 < tail && GetLe64(buffer(seq + 1)) != 0;
      for (size_t i = first_landing; i < d.landed.size(); i++) {
        LandedRequest& l = d.landed[i];
        l.tail = !l.valid && l.offset >= valid_end && !moved_on;
      }
    }
  }
  return d;
}

void Server::Impl::PersistRte(Worker& w) {
  if (!o.durable || w.rte == w.rte_persisted) return;
  __atomic_store_n(reinterpret_cast<uint64_t*>(w.header), wire::EncodeWord(w.rte),
                   __ATOMIC_RELEASE);
  (o.rte_persister != nullptr ? o.rte_persister : o.persister)->Persist(w.header, 8);
  w.rte_persisted = w.rte;
  w.nilext_unpersisted = false;
}

void Server::Impl::PersistRteForResponses(Worker& w) {
  if (w.nilext_unpersisted) PersistRte(w);
}

// Scans ReqToExecute..SRQTail: re-executes valid nilext requests in order, skips the others.
Status Server::Impl::Recover(Worker& w) {
  uint64_t first = w.rte >> 16;
  for (uint64_t seq = first; seq < w.tail; seq++) {
    uint8_t* buf = Buffer(w, seq);
    uint32_t off = seq == first ? static_cast<uint32_t>(w.rte & 0xFFFF) * o.stride : 0;
    while (off + kRequestHeaderSize <= o.buffer_size) {
      auto h = ValidateRequest({buf + off, o.buffer_size - off}, o.max_request);
      if (!h.ok() || h->worker != w.index) {
        off += o.stride;
        continue;
      }
      RequestContext ctx{w.index,      h->type, h->nilext,
                         h->client_id, h->seq,  wire::Position(seq, off / o.stride),
                         true};
      if (h->nilext) {
        std::vector<uint8_t> resp;
        Status st =
            handler(ctx, {buf + off + kRequestHeaderSize, h->size - kRequestHeaderSize}, &resp);
        if (!st.ok()) {
          Bump(w, &WorkerStats::handler_errors);
          LOG_WARN("oq", "worker " << w.index << " recovery: handler failed on nilext request "
                                   << "at position " << ctx.position << ": " << st.ToString());
        }
        Bump(w, &WorkerStats::recovered_executed);
        Bump(w, &WorkerStats::executed);
      } else {
        Bump(w, &WorkerStats::recovered_skipped);
      }
      off = RoundUp(off + h->size, o.stride);
      w.rte = wire::Position(seq, off / o.stride);
      PersistRte(w);
    }
    w.rte = wire::Position(seq + 1, 0);
    PersistRte(w);
  }
  // Fresh buffers: zero every buffer, then ReqToExecute = (tail, 0); posting advances SRQTail.
  if (o.before_recycle) o.before_recycle(w.index, wire::Position(w.tail, 0));
  ZeroPages(w.buffers, size_t{o.buffers_per_worker} * o.buffer_size);
  o.persister->Persist(w.buffers, size_t{o.buffers_per_worker} * o.buffer_size);
  w.rte = wire::Position(w.tail, 0);
  PersistRte(w);
  WorkerStats s;
  {
    MutexLock lock(w.stats_mu);
    s = w.stats;
  }
  if (s.recovered_executed + s.recovered_skipped > 0) {
    LOG_INFO("oq", "worker " << w.index << " recovered: re-executed " << s.recovered_executed
                             << " nilext, skipped " << s.recovered_skipped << " non-nilext");
  }
  return Status::Ok();
}

Status Server::Impl::PostBuffer(Worker& w) {
  uint64_t seq = w.tail;
  if (o.durable) {
    __atomic_store_n(reinterpret_cast<uint64_t*>(w.header + 8), wire::EncodeWord(seq + 1),
                     __ATOMIC_RELEASE);
    o.persister->Persist(w.header + 8, 8);
  }
  fabric::RecvRequest r{
      .wr_id = seq, .addr = Buffer(w, seq), .length = o.buffer_size, .mr = w.mr.get()};
  Status st = w.srq->PostRecv({&r, 1});
  if (!st.ok()) return st.WithContext("oq server: posting a receive buffer");
  w.exec.AddBuffer(seq, o.buffer_size);
  w.tail = seq + 1;
  return Status::Ok();
}

Status Server::Impl::InitFabric(Worker& w) {
  w.exec = OrderedExecutor(o.stride);
  if (!o.durable) {
    // Over-allocate to align the buffers to 4 KiB.
    w.dram.assign(size_t{o.buffers_per_worker} * o.buffer_size + 4096, 0);
    uintptr_t p = reinterpret_cast<uintptr_t>(w.dram.data());
    w.buffers = w.dram.data() + ((4096 - p % 4096) % 4096);
    w.tail = 0;
    w.rte = 0;
  }
  size_t bytes = size_t{o.buffers_per_worker} * o.buffer_size;
  ASYMNVM_ASSIGN_OR_RETURN(
      w.mr, o.pd->RegisterMemory(
                w.buffers, bytes,
                {.access = fabric::kLocalWrite, .persister = o.durable ? o.persister : nullptr}));
  uint32_t cq_cap = o.buffers_per_worker * (o.buffer_size / o.stride + 1) + 64;
  ASYMNVM_ASSIGN_OR_RETURN(w.recv_cq, o.fabric->CreateCq({.capacity = cq_cap}));
  ASYMNVM_ASSIGN_OR_RETURN(w.send_cq, o.fabric->CreateCq({.capacity = 8192}));
  ASYMNVM_ASSIGN_OR_RETURN(
      w.srq, o.fabric->CreateSrq(
                 o.pd, {.max_wr = o.buffers_per_worker, .multi_packet = true, .stride = o.stride}));
  if (!w.srq->multi_packet_native()) {
    LOG_WARN("oq", "provider emulates multi-packet SRQ with fixed slots; executing per slot");
  }
  ASYMNVM_RETURN_IF_ERROR(
      w.arena.Init(o.pd, std::max<size_t>(1u << 20, 4 * size_t{o.max_response + 64})));
  const std::string address = w.index > 0 && !o.worker_listen_addresses.empty()
                                  ? o.worker_listen_addresses[w.index - 1]
                                  : WorkerAddress(o.listen_address, w.index);
  auto l = o.fabric->Listen(o.pd, address);
  if (!l.ok()) {
    return l.status().WithContext("oq server: worker " + std::to_string(w.index) + " listen");
  }
  w.listener = std::move(l).value();
  for (uint32_t i = 0; i < o.buffers_per_worker; i++) ASYMNVM_RETURN_IF_ERROR(PostBuffer(w));
  return Status::Ok();
}

void Server::Impl::AcceptLoop(Worker& w) {
  while (!stop.load()) {
    fabric::ConnectionOptions co;
    co.send_cq = w.send_cq.get();
    co.recv_cq = w.recv_cq.get();
    co.srq = w.srq.get();
    co.max_send_wr = 1024;
    co.private_data = w.hello;
    // accept_poll is only how long this call waits before re-checking `stop`: each peer's
    // handshake runs concurrently in the listener with its own deadline
    // (FabricOptions::handshake_timeout, doc/fabric.md §Handshake), across calls.
    co.timeout = o.accept_poll;
    auto c = w.listener->Accept(co);
    if (!c.ok()) {
      if (c.status().code() != StatusCode::kTimedOut) {
        LOG_WARN("oq", "worker " << w.index << " accept: " << c.status().ToString());
      }
      continue;
    }
    auto hello = wire::DecodeClientHello((*c)->peer_private_data());
    if (!hello.ok() || hello->worker != w.index) {
      LOG_WARN("oq", "worker " << w.index << ": refusing a peer: "
                               << (hello.ok() ? "hello names another worker"
                                              : hello.status().ToString()));
      (*c)->Close();
      continue;
    }
    connections++;
    MutexLock lock(w.conn_mu);
    std::erase_if(w.conns, [&](const auto& x) ASYMNVM_REQUIRES(w.conn_mu) {
      if (x->state() == fabric::ConnectionState::kConnected) return false;
      w.closed_rnr += x->counters().rnr_events;
      return true;
    });
    w.conns.push_back(std::move(c).value());
  }
}

void Server::Impl::QueueResponse(Worker& w, uint64_t conn_id, uint64_t seq, const Status& st,
                                 std::span<const uint8_t> body) {
  Worker::Pending p;
  p.conn_id = conn_id;
  if (st.ok()) {
    wire::ResponseHeader h;
    h.seq = seq;
    h.worker = w.index;
    wire::EncodeResponse(h, body, &p.bytes);
  } else {
    wire::EncodeErrorResponse(st, seq, w.index, &p.bytes);
  }
  w.pending.push_back(std::move(p));
}

void Server::Impl::ReapSends(Worker& w, bool block) {
  fabric::Completion cs[64];
  auto n = block ? w.send_cq->Wait(cs, std::chrono::milliseconds(10)) : w.send_cq->Poll(cs);
  if (!n.ok()) {
    LOG_ERROR("oq", "worker " << w.index << " send CQ: " << n.status().ToString());
    return;
  }
  for (size_t i = 0; i < *n; i++) {
    if (cs[i].status != fabric::CompletionStatus::kSuccess) {
      LOG_DEBUG("oq", "worker " << w.index << ": response "
                                << fabric::CompletionStatusName(cs[i].status));
    }
    w.arena.Release(cs[i].wr_id);
  }
}

void Server::Impl::SendPending(Worker& w) {
  if (w.pending.empty()) return;
  if (o.before_respond && !o.before_respond(w.index)) {
    LOG_ERROR("oq", "worker " << w.index << ": " << w.pending.size()
                              << " responses dropped: their effects could not be made durable");
    for (size_t i = 0; i < w.pending.size(); i++) Bump(w, &WorkerStats::responses_failed);
    w.pending.clear();
    return;
  }
  MutexLock lock(w.conn_mu);
  std::vector<Worker::Pending> keep;
  for (auto& p : w.pending) {
    fabric::Connection* conn = nullptr;
    for (auto& c : w.conns) {
      if (c->id() == p.conn_id) conn = c.get();
    }
    if (conn == nullptr) {
      // A request can be executed before its connection's acceptor registered the connection
      // (Accept returned, the push is pending): keep the response for a while; a connection
      // that never appears went away.
      auto now = std::chrono::steady_clock::now();
      if (p.unknown_since == std::chrono::steady_clock::time_point{}) p.unknown_since = now;
      if (now - p.unknown_since < std::chrono::seconds(2)) keep.push_back(std::move(p));
      continue;
    }
    uint64_t wr_id = 0;
    uint8_t* buf = nullptr;
    while ((buf = w.arena.Alloc(static_cast<uint32_t>(p.bytes.size()), &wr_id)) == nullptr) {
      ReapSends(w, true);
      if (stop.load()) return;
    }
    std::memcpy(buf, p.bytes.data(), p.bytes.size());
    fabric::WorkRequest wr;
    wr.wr_id = wr_id;
    wr.opcode = fabric::Opcode::kSend;
    wr.signaled = true;
    wr.local_addr = buf;
    wr.length = static_cast<uint32_t>(p.bytes.size());
    wr.local_mr = w.arena.mr();
    Bump(w, &WorkerStats::responses);  // before Post: the client may see it at once
    Status st = conn->Post({&wr, 1});
    if (!st.ok()) {
      w.arena.Release(wr_id);
      Bump(w, &WorkerStats::responses_failed);
      LOG_DEBUG("oq", "worker " << w.index << ": response not sent: " << st.ToString());
    }
  }
  w.pending = std::move(keep);
}

void Server::Impl::Execute(Worker& w, const OrderedExecutor::Event& ev) {
  const uint8_t* p = Buffer(w, ev.buffer_id) + ev.offset;
  uint32_t slot = ev.offset / o.stride;
  const uint64_t rte_after =
      wire::Position(ev.buffer_id, RoundUp(ev.offset + ev.length, o.stride) / o.stride);
  auto h = ValidateRequest({p, ev.length}, o.max_request);
  if (h.ok() && h->worker != w.index) {
    h = Status::InvalidArgument("oq request: addressed to worker " + std::to_string(h->worker) +
                                ", received by worker " + std::to_string(w.index));
  }
  if (!h.ok()) {
    Bump(w, &WorkerStats::rejected);
    LOG_WARN("oq", "worker " << w.index << ": rejected request at position "
                             << wire::Position(ev.buffer_id, slot) << " from connection "
                             << ev.connection_id << ": " << h.status().ToString());
    // Answer unless the (unverified) header says nilext under kOq: that client already committed.
    if (ev.length >= kRequestHeaderSize &&
        ((p[14] & wire::kFlagNilext) == 0 || o.policy != Policy::kOq)) {
      QueueResponse(w, ev.connection_id, GetLe64(p + 24), h.status(), {});
    }
    w.rte = rte_after;
    return;
  }
  RequestContext ctx{
      w.index, h->type, h->nilext, h->client_id, h->seq, wire::Position(ev.buffer_id, slot), false};
  bool deferred = h->nilext && o.policy == Policy::kDeferred;
  if (deferred) {
    QueueResponse(w, ev.connection_id, h->seq, Status::Ok(), {});
    PersistRteForResponses(w);  // earlier responses of this batch may only leave after their RTE
    SendPending(w);             // reply, then execute
  }
  std::vector<uint8_t> resp;
  Status st = handler(ctx, {p + kRequestHeaderSize, h->size - kRequestHeaderSize}, &resp);
  w.rte = rte_after;
  if (h->nilext) w.nilext_unpersisted = true;
  ASYMNVM_CRASH_POINT("oq.after_execute");
  {
    MutexLock lock(w.stats_mu);
    w.stats.executed++;
    (h->nilext ? w.stats.nilext : w.stats.non_nilext)++;
    if (!st.ok()) w.stats.handler_errors++;
  }
  if (resp.size() > o.max_response) {
    st = Status::Internal("oq server: response of " + std::to_string(resp.size()) +
                          " bytes above max_response");
  }
  if (h->nilext && o.policy == Policy::kOq) {
    if (!st.ok()) {
      LOG_WARN("oq", "worker " << w.index << ": nilext request type " << h->type
                               << " failed (client already committed): " << st.ToString());
    }
    return;
  }
  if (deferred) return;
  QueueResponse(w, ev.connection_id, h->seq, st,
                st.ok() ? std::span<const uint8_t>(resp) : std::span<const uint8_t>());
}

void Server::Impl::Retire(Worker& w, const OrderedExecutor::Event& ev) {
  w.rte = wire::Position(ev.buffer_id + 1, 0);
  if (o.durable && o.before_recycle) o.before_recycle(w.index, w.rte);
  PersistRte(w);
  SendPending(w);
  if (o.durable) {
    // Old requests must not look valid to a later recovery scan once the buffer is re-posted.
    uint8_t* b = Buffer(w, ev.buffer_id);
    std::memset(b, 0, ev.used);
    o.persister->Persist(b, std::max<uint32_t>(ev.used, 1));
  }
  ASYMNVM_CRASH_POINT("oq.before_repost");
  Status st = PostBuffer(w);
  if (!st.ok()) LOG_ERROR("oq", "worker " << w.index << ": " << st.ToString());
  Bump(w, &WorkerStats::buffers_retired);
}

void Server::Impl::Run(Worker& w) {
  fabric::Completion cs[256];
  while (!stop.load()) {
    auto n = w.recv_cq->Wait(cs, std::chrono::milliseconds(20));
    if (!n.ok()) {
      LOG_ERROR("oq", "worker " << w.index << " receive CQ: " << n.status().ToString());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    for (size_t i = 0; i < *n; i++) {
      const auto& c = cs[i];
      if (c.opcode != fabric::Opcode::kRecv) continue;
      if (c.status != fabric::CompletionStatus::kSuccess) {
        Bump(w, &WorkerStats::recv_errors);
        LOG_WARN("oq", "worker " << w.index << ": receive completion "
                                 << fabric::CompletionStatusName(c.status) << " from connection "
                                 << c.connection_id);
        continue;
      }
      Status st =
          w.exec.OnCompletion(c.wr_id, c.offset, c.byte_len, c.buffer_done, c.connection_id);
      if (!st.ok()) LOG_ERROR("oq", "worker " << w.index << ": " << st.ToString());
    }
    OrderedExecutor::Event ev;
    while (w.exec.Next(&ev)) {
      if (ev.kind == OrderedExecutor::Event::kMessage) {
        Execute(w, ev);
      } else {
        Retire(w, ev);
      }
    }
    PersistRteForResponses(w);
    SendPending(w);
    ReapSends(w, false);
    MutexLock lock(w.stats_mu);
    w.stats.out_of_order = w.exec.out_of_order();
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->handler = std::move(handler);
  if (!impl->handler) return Status::InvalidArgument("oq server: a handler is required");
  ASYMNVM_RETURN_IF_ERROR(impl->Validate());
  for (uint32_t i = 0; i < options.workers; i++) {
    impl->workers.push_back(std::make_unique<Impl::Worker>());
    impl->workers.back()->index = i;
  }
  std::unique_ptr<Server> server(new Server(std::move(impl)));
  Impl& s = *server->impl_;
  if (options.durable) {
    ASYMNVM_RETURN_IF_ERROR(s.InitDurable());
    for (auto& w : s.workers) ASYMNVM_RETURN_IF_ERROR(s.Recover(*w));
  }
  s.flush_target.assign(64, 0);
  ASYMNVM_ASSIGN_OR_RETURN(s.flush_mr, options.pd->RegisterMemory(
                                           s.flush_target.data(), s.flush_target.size(),
                                           {.access = fabric::kLocalWrite | fabric::kRemoteRead}));
  for (auto& w : s.workers) ASYMNVM_RETURN_IF_ERROR(s.InitFabric(*w));
  wire::ServerHello hello;
  hello.info = {options.policy, options.durable, options.workers, options.max_request,
                options.max_response};
  hello.flush_target = s.flush_mr->descriptor();
  for (auto& w : s.workers) hello.addresses.push_back(w->listener->address());
  for (auto& w : s.workers) {
    hello.worker = w->index;
    ASYMNVM_ASSIGN_OR_RETURN(w->hello, wire::EncodeServerHello(hello));
  }
  for (auto& w : s.workers) {
    Impl::Worker* wp = w.get();
    wp->thread = std::thread([&s, wp] { s.Run(*wp); });
    wp->acceptor = std::thread([&s, wp] { s.AcceptLoop(*wp); });
  }
  return server;
}

std::string Server::address() const {
  return impl_->workers.empty() || !impl_->workers[0]->listener
             ? ""
             : impl_->workers[0]->listener->address();
}

ServerStats Server::stats() const {
  ServerStats s;
  s.connections = impl_->connections.load();
  for (auto& w : impl_->workers) {
    {
      MutexLock lock(w->stats_mu);
      s.workers.push_back(w->stats);
    }
    s.executed += s.workers.back().executed;
    MutexLock lock(w->conn_mu);
    s.rnr_seen += w->closed_rnr;
    for (auto& c : w->conns) s.rnr_seen += c->counters().rnr_events;
  }
  return s;
}

void Server::Stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  s.stop.store(true);
  for (auto& w : s.workers) {
    if (w->acceptor.joinable()) w->acceptor.join();
    if (w->thread.joinable()) w->thread.join();
  }
  for (auto& w : s.workers) {
    MutexLock lock(w->conn_mu);
    for (auto& c : w->conns) c->Close();
    w->conns.clear();
  }
  for (auto& w : s.workers) {
    w->listener.reset();
    w->srq.reset();
    w->recv_cq.reset();
    w->send_cq.reset();
    w->arena = ResponseArena();
    w->mr.reset();
  }
  s.flush_mr.reset();
}

}  // namespace asymnvm::oq
