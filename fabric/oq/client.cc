// OQ client: one connection per server worker, shared by the process's threads through publish
// slots; flat-combined posting and an owner thread that delivers completions (doc/oq.md §Client).
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <unordered_map>

#include "common/coding.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/oq/oq.h"
#include "fabric/oq/wire.h"

namespace asymnvm::oq {
namespace {

using Clock = std::chrono::steady_clock;

struct Slot {
  bool in_use = false;
  bool posted = false;
  bool done = false;
  bool abandoned = false;  // the caller timed out; free the slot when its completions arrive
  bool need_response = false;
  bool acked = false;
  bool responded = false;
  bool use_flush = false;
  uint64_t seq = 0;
  uint32_t length = 0;
  Status status;
  std::vector<uint8_t> response;
};

// A request that certainly never left this client (the connection had failed before it was
// posted, or the post itself was refused): the same code as the failure, marked
// retryable so that a caller may send it again elsewhere even when it is not idempotent.
Status NotSent(const Status& failure) {
  return Status(failure.code(), "the request was not sent: " + failure.message(),
                failure.sys_errno(),
                /*retryable=*/true);
}

Status FromCompletion(fabric::CompletionStatus cs, fabric::Opcode op) {
  std::string what = std::string("oq client: ") + fabric::OpcodeName(op) + " completed with " +
                     fabric::CompletionStatusName(cs);
  if (cs == fabric::CompletionStatus::kRnrRetryExceeded) return Status::RnrRetryExceeded(what);
  return Status::ConnectionError(what);
}

}  // namespace

struct Client::Impl {
  struct Conn {
    uint32_t worker = 0;
    std::unique_ptr<fabric::CompletionQueue> cq;
    std::unique_ptr<fabric::Connection> conn;
    std::vector<uint8_t> send_buf, recv_buf;
    std::unique_ptr<fabric::MemoryRegion> send_mr, recv_mr;
    uint32_t recv_size = 0;

    Mutex mu;  // slots, free list, published queue, in-flight map, failure
    std::condition_variable cv;
    std::vector<Slot> slots ASYMNVM_GUARDED_BY(mu);
    std::vector<uint32_t> free ASYMNVM_GUARDED_BY(mu);
    std::deque<uint32_t> published ASYMNVM_GUARDED_BY(mu);
    std::unordered_map<uint64_t, uint32_t> inflight ASYMNVM_GUARDED_BY(mu);  // seq → slot
    // A doorbell's FLUSH (by the wr_id it carries) → the slots whose SENDs it makes durable.
    std::unordered_map<uint64_t, std::vector<uint32_t>> flush_covers ASYMNVM_GUARDED_BY(mu);
    uint64_t next_seq ASYMNVM_GUARDED_BY(mu) = 1;
    bool failed ASYMNVM_GUARDED_BY(mu) = false;
    Status fail_status ASYMNVM_GUARDED_BY(mu);

    Mutex post_mu;  // flat-combining: the holder posts everything published
    Mutex poll_mu;  // the owner: waits on the CQ and delivers
  };

  ClientOptions o;
  ServerInfo info;
  fabric::RegionDescriptor flush_target;
  std::vector<std::unique_ptr<Conn>> conns;

  Status ConnectWorker(uint32_t w, const std::string& address, wire::ServerHello* hello);
  // c.mu held. Every unfinished slot ends with `st`, except the ones never posted, which end with
  // NotSent(st). (A flushed completion does not prove a request unsent: with verbs, a SEND already
  // transmitted but not acknowledged when the queue pair enters the error state is flushed too.)
  void FailAll(Conn& c, const Status& st) ASYMNVM_REQUIRES(c.mu);
  void Finish(Conn& c, Slot& s, uint32_t idx) ASYMNVM_REQUIRES(c.mu);
  void PostPublished(Conn& c);
  void Deliver(Conn& c, const fabric::Completion& comp) ASYMNVM_REQUIRES(c.mu);
  Status Do(uint32_t worker, bool nilext_submit, bool want_response,
            const std::function<uint32_t(uint8_t*, uint64_t)>& encode, uint32_t length,
            std::vector<uint8_t>* response);
  // Do in two halves: Begin takes a slot, encodes and publishes the request (and posts it when
  // `post`); Await waits for its commit and frees the slot.
  Status Begin(uint32_t worker, bool nilext_submit, bool want_response,
               const std::function<uint32_t(uint8_t*, uint64_t)>& encode, uint32_t length,
               Clock::time_point deadline, bool post, uint32_t* slot);
  Status Await(uint32_t worker, uint32_t idx, bool want_response, Clock::time_point deadline,
               std::vector<uint8_t>* response);
};

Status Client::Impl::ConnectWorker(uint32_t w, const std::string& address,
                                   wire::ServerHello* hello) {
  auto c = std::make_unique<Conn>();
  c->worker = w;
  ASYMNVM_ASSIGN_OR_RETURN(c->cq, o.fabric->CreateCq({.capacity = 4 * o.window + 64}));
  fabric::ConnectionOptions co;
  co.send_cq = c->cq.get();
  co.recv_cq = c->cq.get();
  co.max_send_wr = 2 * o.window + 8;
  co.max_recv_wr = o.window;
  co.rnr_retry = o.rnr_retry;
  co.timeout = o.timeout;
  co.private_data = wire::EncodeClientHello({w, o.client_id, o.window});
  auto conn = o.fabric->Connect(o.pd, address, co);
  if (!conn.ok()) {
    return conn.status().WithContext("oq client: connect worker " + std::to_string(w) + " at " +
                                     address);
  }
  c->conn = std::move(conn).value();
  ASYMNVM_ASSIGN_OR_RETURN(*hello, wire::DecodeServerHello(c->conn->peer_private_data()));
  if (hello->worker != w) {
    return Status::ProtocolError("oq client: " + address + " is worker " +
                                 std::to_string(hello->worker) + ", expected " + std::to_string(w));
  }
  if (w == 0) info = hello->info;
  uint32_t max_request = hello->info.max_request;
  c->recv_size = kResponseHeaderSize + hello->info.max_response;
  c->recv_size = (c->recv_size + 63) / 64 * 64;
  c->send_buf.assign(size_t{o.window} * max_request, 0);
  c->recv_buf.assign(size_t{o.window} * c->recv_size, 0);
  ASYMNVM_ASSIGN_OR_RETURN(c->send_mr, o.pd->RegisterMemory(c->send_buf.data(), c->send_buf.size(),
                                                            {.access = fabric::kLocalWrite}));
  ASYMNVM_ASSIGN_OR_RETURN(c->recv_mr, o.pd->RegisterMemory(c->recv_buf.data(), c->recv_buf.size(),
                                                            {.access = fabric::kLocalWrite}));
  std::vector<fabric::RecvRequest> rr;
  for (uint32_t i = 0; i < o.window; i++) {
    rr.push_back({.wr_id = i,
                  .addr = c->recv_buf.data() + size_t{i} * c->recv_size,
                  .length = c->recv_size,
                  .mr = c->recv_mr.get()});
  }
  ASYMNVM_RETURN_IF_ERROR(c->conn->PostRecv(rr));
  {
    MutexLock lock(c->mu);  // uncontended: the connection is not in `conns` yet
    c->slots.resize(o.window);
    for (uint32_t i = o.window; i-- > 0;) c->free.push_back(i);
  }
  conns.push_back(std::move(c));
  return Status::Ok();
}

void Client::Impl::Finish(Conn& c, Slot& s, uint32_t idx) {
  s.done = true;
  c.inflight.erase(s.seq);
  if (s.abandoned) {
    s = Slot();
    c.free.push_back(idx);
  }
}

void Client::Impl::FailAll(Conn& c, const Status& st) {
  if (!c.failed) {
    c.failed = true;
    c.fail_status = st;
    LOG_WARN("oq", "client connection to worker " << c.worker << " failed: " << st.ToString());
  }
  for (uint32_t i = 0; i < c.slots.size(); i++) {
    Slot& s = c.slots[i];
    if (s.in_use && !s.done) {
      s.status = s.posted ? st : NotSent(st);
      Finish(c, s, i);
    }
  }
  c.published.clear();
  c.flush_covers.clear();
  c.cv.notify_all();
}

void Client::Impl::PostPublished(Conn& c) {
  MutexLock post_lock(c.post_mu);
  std::vector<fabric::WorkRequest> wrs;
  std::vector<uint32_t> batch;
  {
    MutexLock lock(c.mu);
    if (c.failed || c.published.empty()) return;
    // One FLUSH at the end covers every SEND of the doorbell that needs one (group commit of
    // the receive buffer at the server: one sync, not one per request).
    std::vector<uint32_t> flushed;
    for (uint32_t idx : c.published) {
      Slot& s = c.slots[idx];
      fabric::WorkRequest wr;
      wr.wr_id = s.seq;
      wr.opcode = fabric::Opcode::kSend;
      wr.signaled = !s.use_flush;
      wr.local_addr = c.send_buf.data() + size_t{idx} * info.max_request;
      wr.length = s.length;
      wr.local_mr = c.send_mr.get();
      wrs.push_back(wr);
      if (s.use_flush) flushed.push_back(idx);
      s.posted = true;
      c.inflight[s.seq] = idx;
      batch.push_back(idx);
    }
    if (!flushed.empty()) {
      fabric::WorkRequest f;
      f.wr_id = c.slots[flushed.back()].seq;
      f.opcode = fabric::Opcode::kFlush;
      f.signaled = true;
      f.remote_addr = flush_target.addr;
      f.rkey = flush_target.rkey;
      wrs.push_back(f);
      c.flush_covers[f.wr_id] = std::move(flushed);
    }
    c.published.clear();
  }
  Status st = c.conn->Post(wrs);
  if (!st.ok()) {
    // Post validates every request before posting any: none of this batch left.
    MutexLock lock(c.mu);
    for (uint32_t idx : batch) {
      c.slots[idx].posted = false;
      c.inflight.erase(c.slots[idx].seq);
      c.flush_covers.erase(c.slots[idx].seq);
    }
    FailAll(c, st.WithContext("oq client: post"));
  }
}

void Client::Impl::Deliver(Conn& c, const fabric::Completion& comp) {
  if (comp.status != fabric::CompletionStatus::kSuccess) {
    FailAll(c, FromCompletion(comp.status, comp.opcode));
    return;
  }
  if (comp.opcode == fabric::Opcode::kRecv) {
    uint32_t buf = static_cast<uint32_t>(comp.wr_id);
    if (buf >= o.window) return;
    const uint8_t* p = c.recv_buf.data() + size_t{buf} * c.recv_size;
    auto h = wire::ValidateResponse({p, comp.byte_len});
    if (!h.ok()) {
      LOG_WARN("oq", "client: dropping a bad response from worker " << c.worker << ": "
                                                                    << h.status().ToString());
    } else {
      auto it = c.inflight.find(h->seq);
      if (it != c.inflight.end()) {
        uint32_t idx = it->second;
        Slot& s = c.slots[idx];
        std::span<const uint8_t> body(p + kResponseHeaderSize, h->size - kResponseHeaderSize);
        if (h->code == StatusCode::kOk) {
          s.response.assign(body.begin(), body.end());
        } else {
          s.status = wire::DecodeErrorStatus(*h, body);
        }
        s.responded = true;
        // An error response ends the request at once (it proves the request landed).
        if (!s.status.ok()) s.acked = true;
        if (s.acked && (s.responded || !s.need_response)) Finish(c, s, idx);
      }
    }
    fabric::RecvRequest rr{.wr_id = buf,
                           .addr = c.recv_buf.data() + size_t{buf} * c.recv_size,
                           .length = c.recv_size,
                           .mr = c.recv_mr.get()};
    Status st = c.conn->PostRecv({&rr, 1});
    if (!st.ok()) FailAll(c, st.WithContext("oq client: re-posting a response buffer"));
    return;
  }
  if (comp.opcode == fabric::Opcode::kFlush) {
    // The doorbell's FLUSH: every SEND it covers is durable at the server.
    auto g = c.flush_covers.find(comp.wr_id);
    if (g == c.flush_covers.end()) return;
    std::vector<uint32_t> covered = std::move(g->second);
    c.flush_covers.erase(g);
    for (uint32_t idx : covered) {
      Slot& s = c.slots[idx];
      if (!s.in_use || s.done) continue;
      s.acked = true;
      if (s.responded || !s.need_response) Finish(c, s, idx);
    }
    return;
  }
  auto it = c.inflight.find(comp.wr_id);
  if (it == c.inflight.end()) return;
  uint32_t idx = it->second;
  Slot& s = c.slots[idx];
  s.acked = true;
  if (s.responded || !s.need_response) Finish(c, s, idx);
}

Status Client::Impl::Begin(uint32_t worker, bool nilext_submit, bool want_response,
                           const std::function<uint32_t(uint8_t*, uint64_t)>& encode,
                           uint32_t length, Clock::time_point deadline, bool post, uint32_t* slot) {
  if (worker >= conns.size()) {
    return Status::InvalidArgument("oq client: worker " + std::to_string(worker) +
                                   " out of range (server has " + std::to_string(conns.size()) +
                                   ")");
  }
  if (length > info.max_request) {
    return Status::InvalidArgument("oq client: request of " + std::to_string(length) +
                                   " bytes above the server's max_request " +
                                   std::to_string(info.max_request));
  }
  Conn& c = *conns[worker];
  MutexLock lk(c.mu);
  if (!c.cv.wait_until(lk.native(), deadline,
                       [&]() ASYMNVM_REQUIRES(c.mu) { return c.failed || !c.free.empty(); })) {
    return Status::TimedOut("oq client: no free slot on worker " + std::to_string(worker));
  }
  if (c.failed) return NotSent(c.fail_status);
  uint32_t idx = c.free.back();
  c.free.pop_back();
  Slot& s = c.slots[idx];
  s = Slot();
  s.in_use = true;
  s.seq = c.next_seq++;
  // Durable: a request that commits on its acknowledgement (Submit, raw sends) is SEND + FLUSH;
  // a Call too unless ClientOptions::flush_calls is off (see there).
  s.use_flush = (o.durable || info.durable) && (!want_response || o.flush_calls);
  s.need_response = want_response || (nilext_submit && info.policy != Policy::kOq);
  lk.unlock();
  s.length = encode(c.send_buf.data() + size_t{idx} * info.max_request, s.seq);
  lk.lock();
  if (c.failed) {
    s = Slot();
    c.free.push_back(idx);
    return NotSent(c.fail_status);
  }
  c.published.push_back(idx);
  lk.unlock();
  if (post) PostPublished(c);
  *slot = idx;
  return Status::Ok();
}

Status Client::Impl::Await(uint32_t worker, uint32_t idx, bool want_response,
                           Clock::time_point deadline, std::vector<uint8_t>* response) {
  Conn& c = *conns[worker];
  MutexLock lk(c.mu);
  Slot& s = c.slots[idx];
  while (!s.done) {
    auto now = Clock::now();
    if (now >= deadline) {
      s.abandoned = true;
      if (!s.posted) {
        std::erase(c.published, idx);
        s = Slot();
        c.free.push_back(idx);
      }
      return Status::TimedOut("oq client: request " +
                              std::string(want_response ? "call" : "submit") + " to worker " +
                              std::to_string(worker) + " not committed in time");
    }
    if (c.poll_mu.try_lock()) {
      lk.unlock();
      fabric::Completion comps[64];
      auto wait = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(20));
      auto n = c.cq->Wait(comps, std::chrono::duration_cast<std::chrono::microseconds>(wait));
      lk.lock();
      if (!n.ok()) {
        FailAll(c, n.status().WithContext("oq client: completion queue"));
      } else {
        for (size_t i = 0; i < *n; i++) Deliver(c, comps[i]);
      }
      c.poll_mu.unlock();
      c.cv.notify_all();
    } else {
      c.cv.wait_until(lk.native(), std::min(deadline, now + std::chrono::milliseconds(20)));
    }
  }
  Status st = std::move(s.status);
  if (st.ok() && response != nullptr) *response = std::move(s.response);
  s = Slot();
  c.free.push_back(idx);
  c.cv.notify_all();
  return st;
}

Status Client::Impl::Do(uint32_t worker, bool nilext_submit, bool want_response,
                        const std::function<uint32_t(uint8_t*, uint64_t)>& encode, uint32_t length,
                        std::vector<uint8_t>* response) {
  const auto deadline = Clock::now() + o.timeout;
  uint32_t idx = 0;
  ASYMNVM_RETURN_IF_ERROR(
      Begin(worker, nilext_submit, want_response, encode, length, deadline, true, &idx));
  return Await(worker, idx, want_response, deadline, response);
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  for (auto& c : impl_->conns) {
    if (c->conn) c->conn->Close();
  }
  for (auto& c : impl_->conns) {
    c->conn.reset();
    c->send_mr.reset();
    c->recv_mr.reset();
    c->cq.reset();
  }
}

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.fabric == nullptr || options.pd == nullptr || options.server_address.empty()) {
    return Status::InvalidArgument("oq client: fabric, pd and server_address are required");
  }
  if (options.window == 0 || options.window > 4096) {
    return Status::InvalidArgument("oq client: window must be 1..4096");
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  if (impl->o.client_id == 0) {
    std::random_device rd;
    impl->o.client_id = (uint64_t{rd()} << 32 | rd()) | 1;
  }
  std::unique_ptr<Client> client(new Client(std::move(impl)));
  Impl& c = *client->impl_;
  wire::ServerHello hello;
  ASYMNVM_RETURN_IF_ERROR(c.ConnectWorker(0, options.server_address, &hello));
  c.flush_target = hello.flush_target;
  std::vector<std::string> addresses = hello.addresses;
  if (addresses.size() != c.info.workers) {
    return Status::ProtocolError("oq client: hello lists " + std::to_string(addresses.size()) +
                                 " addresses for " + std::to_string(c.info.workers) + " workers");
  }
  for (uint32_t w = 1; w < c.info.workers; w++) {
    wire::ServerHello h;
    ASYMNVM_RETURN_IF_ERROR(c.ConnectWorker(w, addresses[w], &h));
  }
  return client;
}

const ServerInfo& Client::server() const { return impl_->info; }
uint64_t Client::client_id() const { return impl_->o.client_id; }

Status Client::Submit(uint32_t worker, uint16_t type, std::span<const uint8_t> payload) {
  ASYMNVM_ASSIGN_OR_RETURN(const Ticket t, SubmitAsync(worker, type, payload));
  return AwaitSubmit(t);
}

Result<Client::Ticket> Client::SubmitAsync(uint32_t worker, uint16_t type,
                                           std::span<const uint8_t> payload) {
  Impl& m = *impl_;
  const uint64_t id = m.o.client_id;
  Ticket t;
  t.worker = worker;
  t.deadline = Clock::now() + m.o.timeout;
  ASYMNVM_RETURN_IF_ERROR(m.Begin(
      worker, true, false,
      [&](uint8_t* dst, uint64_t seq) {
        std::vector<uint8_t> b;
        EncodeRequest({0, 0, type, true, id, seq, worker}, payload, &b);
        std::memcpy(dst, b.data(), b.size());
        return static_cast<uint32_t>(b.size());
      },
      static_cast<uint32_t>(kRequestHeaderSize + payload.size()), t.deadline, true, &t.slot));
  return t;
}

Status Client::AwaitSubmit(const Ticket& ticket) {
  return impl_->Await(ticket.worker, ticket.slot, false, ticket.deadline, nullptr);
}

std::vector<Status> Client::SubmitMany(std::span<const Outgoing> requests) {
  Impl& m = *impl_;
  const uint64_t id = m.o.client_id;
  const auto deadline = Clock::now() + m.o.timeout;
  std::vector<Status> out(requests.size());
  // In rounds of at most half a window per connection, so that a round never waits for a slot
  // its own earlier requests hold.
  const size_t round = std::max<size_t>(1, m.o.window / 2);
  for (size_t first = 0; first < requests.size(); first += round) {
    const size_t last = std::min(requests.size(), first + round);
    std::vector<std::pair<size_t, uint32_t>> begun;  // request index, slot
    std::vector<bool> touched(m.conns.size(), false);
    for (size_t i = first; i < last; i++) {
      const Outgoing& r = requests[i];
      uint32_t idx = 0;
      out[i] = m.Begin(
          r.worker, true, false,
          [&](uint8_t* dst, uint64_t seq) {
            std::vector<uint8_t> b;
            EncodeRequest({0, 0, r.type, true, id, seq, r.worker}, r.payload, &b);
            std::memcpy(dst, b.data(), b.size());
            return static_cast<uint32_t>(b.size());
          },
          static_cast<uint32_t>(kRequestHeaderSize + r.payload.size()), deadline, false, &idx);
      if (out[i].ok()) {
        begun.push_back({i, idx});
        touched[r.worker] = true;
      }
    }
    // One post (doorbell) per connection for everything this round published on it.
    for (size_t w = 0; w < m.conns.size(); w++) {
      if (touched[w]) m.PostPublished(*m.conns[w]);
    }
    for (const auto& [i, idx] : begun) {
      out[i] = m.Await(requests[i].worker, idx, false, deadline, nullptr);
    }
  }
  return out;
}

Status Client::Call(uint32_t worker, uint16_t type, std::span<const uint8_t> payload,
                    std::vector<uint8_t>* response) {
  uint64_t id = impl_->o.client_id;
  return impl_->Do(
      worker, false, true,
      [&](uint8_t* dst, uint64_t seq) {
        std::vector<uint8_t> b;
        EncodeRequest({0, 0, type, false, id, seq, worker}, payload, &b);
        std::memcpy(dst, b.data(), b.size());
        return static_cast<uint32_t>(b.size());
      },
      static_cast<uint32_t>(kRequestHeaderSize + payload.size()), response);
}

Status Client::TEST_SendRaw(uint32_t worker, std::span<const uint8_t> raw) {
  return impl_->Do(
      worker, false, false,
      [&](uint8_t* dst, uint64_t) {
        std::memcpy(dst, raw.data(), raw.size());
        return static_cast<uint32_t>(raw.size());
      },
      static_cast<uint32_t>(raw.size()), nullptr);
}

uint64_t Client::TEST_NextSeq(uint32_t worker) {
  auto& c = *impl_->conns.at(worker);
  MutexLock lock(c.mu);
  return c.next_seq;
}

Status Client::TEST_CallRaw(uint32_t worker, std::span<const uint8_t> raw,
                            std::vector<uint8_t>* response) {
  return impl_->Do(
      worker, false, true,
      [&](uint8_t* dst, uint64_t) {
        std::memcpy(dst, raw.data(), raw.size());
        return static_cast<uint32_t>(raw.size());
      },
      static_cast<uint32_t>(raw.size()), response);
}

fabric::Counters Client::counters() const {
  fabric::Counters sum;
  for (auto& c : impl_->conns) sum += c->conn->counters();
  return sum;
}

}  // namespace asymnvm::oq
