#include "kv/rdmp.h"

#include <cstring>
#include <random>
#include <vector>

#include "common/coding.h"
#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::kv {

// ---------------------------------------------------------------------------------------------
// BypassTarget

Result<std::unique_ptr<BypassTarget>> BypassTarget::Start(const BypassTargetOptions& o) {
  if (o.fabric == nullptr || o.pd == nullptr || o.base == nullptr || o.length == 0 ||
      o.persister == nullptr || !o.settle) {
    return Status::InvalidArgument(
        "rdmp target: fabric, pd, base/length, persister and settle are "
        "required");
  }
  std::unique_ptr<BypassTarget> t(new BypassTarget(o));
  fabric::MemoryRegionOptions mo;
  mo.access = fabric::kLocalWrite | fabric::kRemoteRead | fabric::kRemoteWrite;
  mo.persister = o.persister;
  auto mr = o.pd->RegisterMemory(o.base, o.length, mo);
  if (!mr.ok()) return mr.status().WithContext("rdmp target: registering the t-log area");
  t->mr_ = std::move(mr).value();
  // The target never posts: the CQ only satisfies the connection options (ring: never overruns).
  auto cq = o.fabric->CreateCq({.capacity = 64, .ring = true});
  if (!cq.ok()) return cq.status();
  t->cq_ = std::move(cq).value();
  auto l = o.fabric->Listen(o.pd, o.listen_address);
  if (!l.ok()) return l.status().WithContext("rdmp target: listen on " + o.listen_address);
  t->listener_ = std::move(l).value();
  BypassTarget* raw = t.get();
  t->acceptor_ = std::thread([raw] { raw->AcceptLoop(); });
  t->reaper_ = std::thread([raw] {
    MutexLock lk(raw->mu_);
    while (!raw->stopping_) {
      raw->cv_.wait_for(lk.native(), std::chrono::milliseconds(100),
                        [raw]() ASYMNVM_REQUIRES(raw->mu_) { return raw->stopping_; });
      if (raw->stopping_) break;
      lk.unlock();
      raw->Reap();
      lk.lock();
    }
  });
  return t;
}

BypassTarget::~BypassTarget() { Stop(); }

void BypassTarget::Stop() {
  {
    MutexLock l(mu_);
    if (stopping_ && !acceptor_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  if (reaper_.joinable()) reaper_.join();
  std::map<uint64_t, Peer> peers;
  {
    MutexLock l(mu_);
    peers.swap(peers_);
    slot_owner_.clear();
  }
  for (auto& [token, p] : peers) p.conn->Close();
  listener_.reset();
}

std::string BypassTarget::address() const { return listener_->address(); }

fabric::RegionDescriptor BypassTarget::region() const { return mr_->descriptor(); }

namespace {
// The handshake's private data: the target says what it is; the client sends its token (the
// connection options must not change between Accept calls, so the client picks the token).
constexpr uint64_t kTargetMagic = 0x504d44522d564b41ull;  // "AKV-RDMP"
}  // namespace

void BypassTarget::AcceptLoop() {
  fabric::ConnectionOptions co;
  co.send_cq = cq_.get();
  co.recv_cq = cq_.get();
  co.max_send_wr = 1;
  co.max_recv_wr = 1;
  co.private_data.resize(8);
  PutLe64(co.private_data.data(), kTargetMagic);
  co.timeout = std::chrono::milliseconds(100);
  for (;;) {
    {
      MutexLock l(mu_);
      if (stopping_) return;
    }
    auto c = listener_->Accept(co);
    if (!c.ok()) {
      if (c.status().code() != StatusCode::kTimedOut) {
        LOG_WARN("kv", "rdmp accept: " << c.status().ToString());
      }
      continue;
    }
    std::unique_ptr<fabric::Connection> conn = std::move(c).value();
    const auto& pdata = conn->peer_private_data();
    const uint64_t token = pdata.size() == 8 ? GetLe64(pdata.data()) : 0;
    {
      MutexLock l(mu_);
      if (token == 0 || peers_.count(token) > 0) {
        LOG_WARN("kv", "rdmp: refused bypass connection from "
                           << conn->peer_address() << ": "
                           << (token == 0 ? "no token" : "its token is taken"));
        conn->Close();
        continue;
      }
      accepted_++;
      peers_[token].conn = std::move(conn);
    }
    cv_.notify_all();
  }
}

Status BypassTarget::Track(uint64_t token, uint64_t log_offset) {
  MutexLock l(mu_);
  // The client learns its token in the handshake, just before this acceptor files the
  // connection: a reservation may arrive first. Wait for it briefly.
  cv_.wait_for(l.native(), std::chrono::milliseconds(250),
               [&]() ASYMNVM_REQUIRES(mu_) { return stopping_ || peers_.count(token) > 0; });
  auto it = peers_.find(token);
  if (it == peers_.end() || it->second.conn->state() != fabric::ConnectionState::kConnected) {
    return Status::FailedPrecondition(
        "kv reserve: no live bypass connection with this token (reconnect it and reserve again)");
  }
  it->second.slots.insert(log_offset);
  it->second.deadline =
      std::min(it->second.deadline, std::chrono::steady_clock::now() + o_.reservation_timeout);
  slot_owner_[log_offset] = token;
  reservations_++;
  return Status::Ok();
}

void BypassTarget::Untrack(uint64_t log_offset) {
  MutexLock l(mu_);
  auto it = slot_owner_.find(log_offset);
  if (it == slot_owner_.end()) return;
  auto p = peers_.find(it->second);
  if (p != peers_.end()) {
    p->second.slots.erase(log_offset);
    if (p->second.slots.empty()) p->second.deadline = std::chrono::steady_clock::time_point::max();
  }
  slot_owner_.erase(it);
}

void BypassTarget::Reap() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<fabric::Connection>> closing;
  std::vector<uint64_t> slots;
  {
    MutexLock l(mu_);
    for (auto it = peers_.begin(); it != peers_.end();) {
      Peer& p = it->second;
      const bool dead = p.conn->state() != fabric::ConnectionState::kConnected;
      if (!dead && p.deadline > now) {
        ++it;
        continue;
      }
      if (!dead) {
        revoked_++;
        LOG_WARN("kv", "rdmp: a reservation of bypass connection "
                           << p.conn->peer_address() << " expired; closing the connection");
      }
      for (uint64_t s : p.slots) {
        slots.push_back(s);
        slot_owner_.erase(s);
      }
      closing.push_back(std::move(p.conn));
      it = peers_.erase(it);
    }
  }
  // Close first: after Close returns no write of that connection lands; only then may a slot
  // it was writing be abandoned and its segment reclaimed.
  for (auto& c : closing) c->Close();
  closing.clear();
  for (uint64_t s : slots) {
    settled_++;
    o_.settle(s);
  }
}

BypassTargetStats BypassTarget::stats() const {
  return {accepted_.load(), reservations_.load(), revoked_.load(), settled_.load()};
}

// ---------------------------------------------------------------------------------------------
// BypassChannel

Result<std::unique_ptr<BypassChannel>> BypassChannel::Connect(
    fabric::Fabric* fabric, fabric::ProtectionDomain* pd, const std::string& address,
    const fabric::RegionDescriptor& region, size_t buffer, std::chrono::milliseconds timeout) {
  std::unique_ptr<BypassChannel> c(new BypassChannel());
  c->region_ = region;
  c->timeout_ = timeout;
  c->buf_size_ = buffer;
  c->buf_.reset(new uint8_t[buffer]);
  ASYMNVM_ASSIGN_OR_RETURN(
      c->mr_, pd->RegisterMemory(c->buf_.get(), buffer, {.access = fabric::kLocalWrite}));
  ASYMNVM_ASSIGN_OR_RETURN(c->cq_, fabric->CreateCq({.capacity = 64}));
  fabric::ConnectionOptions co;
  co.send_cq = c->cq_.get();
  co.recv_cq = c->cq_.get();
  co.max_send_wr = 16;
  co.max_recv_wr = 1;
  co.timeout = timeout;
  static thread_local std::mt19937_64 rng(std::random_device{}());
  while (c->token_ == 0) c->token_ = rng();
  co.private_data.resize(8);
  PutLe64(co.private_data.data(), c->token_);
  auto conn = fabric->Connect(pd, address, co);
  if (!conn.ok()) return conn.status().WithContext("kv rdmp: connecting to " + address);
  c->conn_ = std::move(conn).value();
  const auto& pdata = c->conn_->peer_private_data();
  if (pdata.size() != 8 || GetLe64(pdata.data()) != kTargetMagic) {
    return Status::ProtocolError("kv rdmp: " + address + " is not an asymnvm-kv bypass endpoint");
  }
  return c;
}

Status BypassChannel::Complete(size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  fabric::Completion comps[4];
  size_t got = 0;
  while (got < n) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      broken_ = true;
      return Status::TimedOut("kv rdmp: one-sided request not completed in time");
    }
    auto r = cq_->Wait({comps, 4},
                       std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
    if (!r.ok()) {
      broken_ = true;
      return r.status();
    }
    for (size_t i = 0; i < *r; i++) {
      if (comps[i].status != fabric::CompletionStatus::kSuccess) {
        broken_ = true;
        return Status::ConnectionError(std::string("kv rdmp: ") +
                                       fabric::OpcodeName(comps[i].opcode) +
                                       " failed: " + fabric::CompletionStatusName(comps[i].status));
      }
    }
    got += *r;
  }
  return Status::Ok();
}

fabric::WorkRequest BypassChannel::Op(fabric::Opcode op, uint8_t* local, size_t length,
                                      uint64_t offset) const {
  fabric::WorkRequest w;
  w.wr_id = static_cast<uint64_t>(op);
  w.opcode = op;
  w.local_addr = local;
  w.length = static_cast<uint32_t>(length);
  w.local_mr = local != nullptr ? mr_.get() : nullptr;
  w.remote_addr = region_.addr + offset;
  w.rkey = region_.rkey;
  return w;
}

Status BypassChannel::PostAndComplete(std::span<const fabric::WorkRequest> wrs) {
  doorbells_++;
  Status st = conn_->Post(wrs);
  if (!st.ok()) {
    broken_ = true;
    return st;
  }
  return Complete(wrs.size());
}

Status BypassChannel::WriteDurable(uint64_t offset, std::span<const uint8_t> data) {
  if (data.size() > buf_size_ || offset + data.size() > region_.length) {
    return Status::InvalidArgument("kv rdmp: write outside the channel buffer or the region");
  }
  std::vector<fabric::WorkRequest> wrs;
  if (!data.empty()) {
    std::memcpy(buf_.get(), data.data(), data.size());
    wrs.push_back(Op(fabric::Opcode::kWrite, buf_.get(), data.size(), offset));
  }
  wrs.push_back(Op(fabric::Opcode::kFlush, nullptr, 0, 0));
  return PostAndComplete(wrs);
}

Status BypassChannel::WriteValueThenFlag(uint64_t value_offset, std::span<const uint8_t> value,
                                         uint64_t flag_offset, uint64_t flag_word) {
  if (value.size() + 8 > buf_size_ || value_offset + value.size() > region_.length ||
      flag_offset + 8 > region_.length) {
    return Status::InvalidArgument("kv rdmp: write outside the channel buffer or the region");
  }
  std::vector<fabric::WorkRequest> wrs;
  if (!value.empty()) {
    std::memcpy(buf_.get(), value.data(), value.size());
    wrs.push_back(Op(fabric::Opcode::kWrite, buf_.get(), value.size(), value_offset));
    wrs.push_back(Op(fabric::Opcode::kFlush, nullptr, 0, 0));
  }
  uint8_t* word = buf_.get() + buf_size_ - 8;
  PutLe64(word, flag_word);
  wrs.push_back(Op(fabric::Opcode::kWrite, word, 8, flag_offset));
  wrs.push_back(Op(fabric::Opcode::kFlush, nullptr, 0, 0));
  return PostAndComplete(wrs);
}

Result<std::span<const uint8_t>> BypassChannel::Read(uint64_t offset, size_t length) {
  if (length > buf_size_ || offset + length > region_.length) {
    return Status::InvalidArgument("kv rdmp: read outside the channel buffer or the region");
  }
  const fabric::WorkRequest w = Op(fabric::Opcode::kRead, buf_.get(), length, offset);
  ASYMNVM_RETURN_IF_ERROR(PostAndComplete({&w, 1}));
  return std::span<const uint8_t>(buf_.get(), length);
}

}  // namespace asymnvm::kv
