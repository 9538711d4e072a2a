// The verbs provider's hot path: work request translation and posting, receive posting (own RQ
// and the SRQ slot fallback), completion translation, and the CQ (Poll/Wait and the ring
// emulation).
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/logging.h"
#include "fabric/verbs/verbs_internal.h"

namespace asymnvm::fabric::verbs {
namespace {

bool Inside(const MemoryRegion* mr, const void* addr, uint64_t len) {
  auto base = reinterpret_cast<uintptr_t>(mr->addr());
  auto a = reinterpret_cast<uintptr_t>(addr);
  return a >= base && len <= mr->length() && a - base <= mr->length() - len;
}

std::string At(size_t index) { return " (request " + std::to_string(index) + ")"; }

ibv_wr_opcode IbvOpcode(Opcode op) {
  switch (op) {
    case Opcode::kWrite:
      return IBV_WR_RDMA_WRITE;
    case Opcode::kRead:
    case Opcode::kFlush:
      return IBV_WR_RDMA_READ;
    case Opcode::kCompareSwap:
      return IBV_WR_ATOMIC_CMP_AND_SWP;
    case Opcode::kFetchAdd:
      return IBV_WR_ATOMIC_FETCH_AND_ADD;
    case Opcode::kSend:
    case Opcode::kRecv:
      return IBV_WR_SEND;
  }
  return IBV_WR_SEND;
}

Status PostFailure(std::string_view call, int rc) {
  int err = rc > 0 ? rc : errno;
  if (err == ENOMEM) {
    return Status(StatusCode::kResourceExhausted,
                  "verbs: " + std::string(call) + ": queue full (ENOMEM)", err, true);
  }
  return VerbsError(call, rc);
}

Status ValidateRecv(const RecvRequest& r, size_t index, uint32_t min_length) {
  if (r.addr == nullptr || r.length == 0 || r.mr == nullptr) {
    return Status::InvalidArgument("verbs: receive buffer without address, length or mr" +
                                   At(index));
  }
  if (!Inside(r.mr, r.addr, r.length)) {
    return Status::InvalidArgument("verbs: receive buffer outside its memory region" + At(index));
  }
  if ((r.mr->access() & kLocalWrite) == 0) {
    return Status::InvalidArgument("verbs: receive buffer's region lacks kLocalWrite" + At(index));
  }
  if (r.length < min_length) {
    return Status::InvalidArgument("verbs: receive buffer shorter than the stride" + At(index));
  }
  return Status::Ok();
}

}  // namespace

// ---- sending ------------------------------------------------------------------------------------

Status ConnCore::Validate(const WorkRequest& wr, size_t i) const {
  switch (wr.opcode) {
    case Opcode::kWrite:
    case Opcode::kSend:
      if (wr.inline_data) {
        if (wr.length > max_inline_) {
          return Status::InvalidArgument("verbs: inline payload of " + std::to_string(wr.length) +
                                         " bytes > max_inline " + std::to_string(max_inline_) +
                                         At(i));
        }
        if (wr.length > 0 && wr.local_addr == nullptr) {
          return Status::InvalidArgument("verbs: inline request without local_addr" + At(i));
        }
        return Status::Ok();
      }
      break;
    case Opcode::kRead:
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd:
      if (dev_->dev_attr.atomic_cap == IBV_ATOMIC_NONE) {
        return Status::NotSupported("verbs: device has no atomics" + At(i));
      }
      if (wr.inline_data) return Status::InvalidArgument("verbs: inline atomic" + At(i));
      if (wr.local_addr == nullptr) return Status::Ok();  // result goes to the PD scratch
      if (wr.local_mr == nullptr || !Inside(wr.local_mr, wr.local_addr, 8)) {
        return Status::InvalidArgument("verbs: atomic result buffer (8 bytes) outside local_mr" +
                                       At(i));
      }
      if ((wr.local_mr->access() & kLocalWrite) == 0) {
        return Status::InvalidArgument("verbs: atomic result region lacks kLocalWrite" + At(i));
      }
      return Status::Ok();
    case Opcode::kFlush:
      if (wr.inline_data) return Status::InvalidArgument("verbs: inline flush" + At(i));
      return Status::Ok();
    case Opcode::kRecv:
    default:
      return Status::InvalidArgument("verbs: opcode " + std::string(OpcodeName(wr.opcode)) +
                                     " cannot be posted" + At(i));
  }
  if (wr.inline_data) return Status::InvalidArgument("verbs: inline READ" + At(i));
  const uint32_t max_msg = dev_->port_attr.max_msg_sz;
  if (max_msg > 0 && wr.length > max_msg) {
    return Status::InvalidArgument("verbs: " + std::to_string(wr.length) + "-byte message > " +
                                   "max_msg_sz " + std::to_string(max_msg) + At(i));
  }
  if (wr.length == 0) return Status::Ok();
  if (wr.local_addr == nullptr || wr.local_mr == nullptr ||
      !Inside(wr.local_mr, wr.local_addr, wr.length)) {
    return Status::InvalidArgument("verbs: local buffer outside local_mr" + At(i));
  }
  if (wr.opcode == Opcode::kRead && (wr.local_mr->access() & kLocalWrite) == 0) {
    return Status::InvalidArgument("verbs: READ destination region lacks kLocalWrite" + At(i));
  }
  return Status::Ok();
}

void ConnCore::CountPosted(const WorkRequest& wr) {
  const uint64_t len = wr.length;
  const uint64_t packets = std::max<uint64_t>(1, (len + mtu_bytes_ - 1) / mtu_bytes_);
  Counters& c = counters_;
  switch (wr.opcode) {
    case Opcode::kWrite:
    case Opcode::kSend:
      (wr.opcode == Opcode::kWrite ? c.writes : c.sends)++;
      c.payload_bytes += len;
      c.bytes_out += packets * kWireHeaderBytes + len;
      c.bytes_in += kWireHeaderBytes;  // ACK
      break;
    case Opcode::kRead:
      c.reads++;
      c.payload_bytes += len;
      c.bytes_out += kWireHeaderBytes;
      c.bytes_in += packets * kWireHeaderBytes + len;
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd:
      (wr.opcode == Opcode::kCompareSwap ? c.compare_swaps : c.fetch_adds)++;
      c.bytes_out += kWireHeaderBytes + kAtomicRequestExtra;
      c.bytes_in += kWireHeaderBytes + 8;
      break;
    case Opcode::kFlush:
      c.flushes++;
      c.bytes_out += kWireHeaderBytes;
      c.bytes_in += kWireHeaderBytes + 1;
      break;
    case Opcode::kRecv:
      break;
  }
}

Status ConnCore::Post(std::span<const WorkRequest> wrs) {
  if (wrs.empty()) return Status::Ok();
  if (send_cq_->ring()) send_cq_->Drain();
  MutexLock lk(mu_);
  if (state_ != ConnectionState::kConnected) {
    return Status::ConnectionError(state_ == ConnectionState::kClosed
                                       ? "verbs: connection closed"
                                       : "verbs: connection in error state: " + error_.message());
  }
  if (sends_.size() + wrs.size() > max_send_wr_) {
    return Status::ResourceExhausted("verbs: " + std::to_string(sends_.size()) + " outstanding + " +
                                     std::to_string(wrs.size()) + " > max_send_wr " +
                                     std::to_string(max_send_wr_));
  }
  for (size_t i = 0; i < wrs.size(); i++) ASYMNVM_RETURN_IF_ERROR(Validate(wrs[i], i));

  const size_t n = wrs.size();
  std::vector<ibv_send_wr> ibv(n);
  std::vector<ibv_sge> sge(n);
  for (size_t i = 0; i < n; i++) {
    const WorkRequest& wr = wrs[i];
    ibv_send_wr& w = ibv[i];
    ibv_sge& s = sge[i];
    w = ibv_send_wr{};
    s = ibv_sge{};
    w.wr_id = EncodeWrId(WrKind::kSend, next_send_seq_ + i);
    w.next = i + 1 < n ? &ibv[i + 1] : nullptr;
    w.opcode = IbvOpcode(wr.opcode);
    w.send_flags = wr.signaled ? IBV_SEND_SIGNALED : 0;
    w.sg_list = &s;
    w.num_sge = 1;
    switch (wr.opcode) {
      case Opcode::kWrite:
      case Opcode::kSend:
      case Opcode::kRead:
        s.addr = reinterpret_cast<uint64_t>(wr.local_addr);
        s.length = wr.length;
        s.lkey = wr.local_mr != nullptr ? wr.local_mr->lkey() : 0;
        if (wr.inline_data) w.send_flags |= IBV_SEND_INLINE;
        if (wr.length == 0) w.num_sge = 0;
        if (wr.opcode != Opcode::kSend) {
          w.wr.rdma.remote_addr = wr.remote_addr;
          w.wr.rdma.rkey = wr.rkey;
        }
        break;
      case Opcode::kCompareSwap:
      case Opcode::kFetchAdd:
        if (wr.local_addr != nullptr) {
          s.addr = reinterpret_cast<uint64_t>(wr.local_addr);
          s.lkey = wr.local_mr->lkey();
        } else {
          s.addr = reinterpret_cast<uint64_t>(pd_->scratch());
          s.lkey = pd_->scratch_lkey();
        }
        s.length = 8;
        w.wr.atomic.remote_addr = wr.remote_addr;
        w.wr.atomic.rkey = wr.rkey;
        w.wr.atomic.compare_add = wr.compare_add;
        w.wr.atomic.swap = wr.opcode == Opcode::kCompareSwap ? wr.swap : 0;
        break;
      case Opcode::kFlush:  // the papers' persistence idiom: a 1-byte READ behind the writes
        s.addr = reinterpret_cast<uint64_t>(pd_->scratch());
        s.length = 1;
        s.lkey = pd_->scratch_lkey();
        w.wr.rdma.remote_addr = wr.remote_addr;
        w.wr.rdma.rkey = wr.rkey;
        break;
      case Opcode::kRecv:
        break;
    }
  }

  ibv_send_wr* bad = nullptr;
  int rc = dev_->api->PostSend(qp_, ibv.data(), &bad);
  size_t posted = n;
  if (rc != 0) {
    posted = 0;
    if (bad != nullptr && bad >= ibv.data() && bad < ibv.data() + n) posted = bad - ibv.data();
  }
  for (size_t i = 0; i < posted; i++) {
    sends_.push_back(SendEntry{next_send_seq_ + i, wrs[i].wr_id, wrs[i].opcode, wrs[i].length});
    CountPosted(wrs[i]);
  }
  next_send_seq_ += n;
  if (posted > 0) counters_.round_trips++;
  if (rc != 0) {
    return PostFailure("ibv_post_send", rc)
        .WithContext(std::to_string(posted) + " of " + std::to_string(n) + " requests posted");
  }
  return Status::Ok();
}

// ---- receiving ----------------------------------------------------------------------------------

Status ConnCore::PostRecv(std::span<const RecvRequest> buffers) {
  if (srq_ != nullptr) {
    return Status::FailedPrecondition("verbs: connection receives through an SRQ");
  }
  if (recv_cq_ == nullptr) {
    return Status::FailedPrecondition("verbs: connection has no recv_cq");
  }
  if (buffers.empty()) return Status::Ok();
  for (size_t i = 0; i < buffers.size(); i++) {
    ASYMNVM_RETURN_IF_ERROR(ValidateRecv(buffers[i], i, 1));
  }
  if (recv_cq_->ring()) recv_cq_->Drain();
  MutexLock lk(mu_);
  if (state_ != ConnectionState::kConnected) {
    return Status::ConnectionError("verbs: connection not connected");
  }
  if (recvs_.size() + buffers.size() > max_recv_wr_) {
    return Status::ResourceExhausted("verbs: more than max_recv_wr receive buffers");
  }
  const size_t n = buffers.size();
  std::vector<ibv_recv_wr> ibv(n);
  std::vector<ibv_sge> sge(n);
  for (size_t i = 0; i < n; i++) {
    sge[i] = ibv_sge{reinterpret_cast<uint64_t>(buffers[i].addr), buffers[i].length,
                     buffers[i].mr->lkey()};
    ibv[i] = ibv_recv_wr{};
    ibv[i].wr_id = EncodeWrId(WrKind::kRecv, next_recv_seq_ + i);
    ibv[i].next = i + 1 < n ? &ibv[i + 1] : nullptr;
    ibv[i].sg_list = &sge[i];
    ibv[i].num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  int rc = dev_->api->PostRecv(qp_, ibv.data(), &bad);
  size_t posted = n;
  if (rc != 0) {
    posted = 0;
    if (bad != nullptr && bad >= ibv.data() && bad < ibv.data() + n) posted = bad - ibv.data();
  }
  for (size_t i = 0; i < posted; i++) recvs_[next_recv_seq_ + i] = buffers[i].wr_id;
  next_recv_seq_ += n;
  if (rc != 0) return PostFailure("ibv_post_recv", rc);
  return Status::Ok();
}

Status SrqCore::PostRecv(std::span<const RecvRequest> buffers) {
  if (buffers.empty()) return Status::Ok();
  const uint32_t min_len = options_.multi_packet ? options_.stride : 1;
  for (size_t i = 0; i < buffers.size(); i++) {
    ASYMNVM_RETURN_IF_ERROR(ValidateRecv(buffers[i], i, min_len));
  }
  // Carve: multi-packet buffers become fallback_slot_size slots (a tail shorter than the stride
  // is left unused); otherwise one slot per buffer.
  std::vector<uint32_t> slots(buffers.size());
  uint64_t total_slots = 0;
  for (size_t i = 0; i < buffers.size(); i++) {
    const uint32_t len = buffers[i].length;
    if (!options_.multi_packet) {
      slots[i] = 1;
    } else {
      const uint32_t s = options_.fallback_slot_size;
      slots[i] = len / s + ((len % s) >= options_.stride ? 1 : 0);
      if (slots[i] == 0) slots[i] = 1;
      if (slots[i] >= (1u << kSlotBits)) {
        return Status::InvalidArgument("verbs: receive buffer holds too many slots");
      }
    }
    total_slots += slots[i];
  }
  MutexLock lk(mu_);
  if (buffers_.size() + buffers.size() > options_.max_wr) {
    return Status::ResourceExhausted("verbs: more than max_wr buffers posted to the SRQ");
  }
  if (slots_outstanding_ + total_slots > hw_depth_) {
    return Status::ResourceExhausted(
        "verbs: SRQ slot fallback: " + std::to_string(slots_outstanding_ + total_slots) +
        " slots > hardware SRQ depth " + std::to_string(hw_depth_));
  }
  std::vector<ibv_recv_wr> ibv(total_slots);
  std::vector<ibv_sge> sge(total_slots);
  std::vector<size_t> owner(total_slots);
  size_t k = 0;
  for (size_t i = 0; i < buffers.size(); i++) {
    const RecvRequest& b = buffers[i];
    const uint32_t slot_size = options_.multi_packet ? options_.fallback_slot_size : b.length;
    for (uint32_t j = 0; j < slots[i]; j++, k++) {
      const uint64_t off = static_cast<uint64_t>(j) * slot_size;
      const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(slot_size, b.length - off));
      sge[k] = ibv_sge{reinterpret_cast<uint64_t>(b.addr) + off, len, b.mr->lkey()};
      ibv[k] = ibv_recv_wr{};
      ibv[k].wr_id = EncodeSrqSlot(next_seq_ + i, j);
      ibv[k].next = k + 1 < total_slots ? &ibv[k + 1] : nullptr;
      ibv[k].sg_list = &sge[k];
      ibv[k].num_sge = 1;
      owner[k] = i;
    }
  }
  ibv_recv_wr* bad = nullptr;
  int rc = dev_->api->PostSrqRecv(srq_, ibv.data(), &bad);
  size_t posted = total_slots;
  if (rc != 0) {
    posted = 0;
    if (bad != nullptr && bad >= ibv.data() && bad < ibv.data() + total_slots) {
      posted = bad - ibv.data();
    }
  }
  // Record what reached the SRQ (after a partial failure a buffer may own fewer slots).
  for (size_t s = 0; s < posted; s++) {
    const size_t i = owner[s];
    auto [it, fresh] = buffers_.try_emplace(
        next_seq_ + i,
        Buffer{buffers[i].wr_id, 0, 0,
               options_.multi_packet ? options_.fallback_slot_size : buffers[i].length});
    it->second.slots++;
    slots_outstanding_++;
  }
  next_seq_ += buffers.size();
  if (rc != 0) return PostFailure("ibv_post_srq_recv", rc);
  return Status::Ok();
}

uint32_t SrqCore::posted() const {
  MutexLock lk(mu_);
  return static_cast<uint32_t>(buffers_.size());
}

bool SrqCore::OnSlotCompleted(uint64_t value, uint64_t* user_wr_id, uint32_t* offset,
                              bool* buffer_done) {
  const uint64_t seq = value >> kSlotBits;
  const uint32_t slot = static_cast<uint32_t>(value & ((1u << kSlotBits) - 1));
  MutexLock lk(mu_);
  auto it = buffers_.find(seq);
  if (it == buffers_.end()) return false;
  Buffer& b = it->second;
  *user_wr_id = b.user_wr_id;
  *offset = slot * b.slot_size;
  b.consumed++;
  slots_outstanding_--;
  *buffer_done = b.consumed >= b.slots;
  if (*buffer_done) buffers_.erase(it);
  return true;
}

// ---- completions --------------------------------------------------------------------------------

void ConnCore::EnterError(CompletionStatus s, Opcode op) {
  counters_.errors++;
  if (s == CompletionStatus::kRnrRetryExceeded) counters_.rnr_events++;
  if (state_ == ConnectionState::kConnected) {
    state_ = ConnectionState::kError;
    error_ = ConnectionErrorFor(s, op);
    LOG_WARN("verbs", "connection " << id_ << " entered the error state: " << OpcodeName(op)
                                    << " completed with " << CompletionStatusName(s));
  }
}

bool ConnCore::OnCompletion(const ibv_wc& wc, Completion* out) {
  MutexLock lk(mu_);
  if (state_ == ConnectionState::kClosed) return false;
  Completion c;
  c.connection_id = id_;
  c.status = MapWcStatus(wc.status);
  const uint64_t value = WrValueOf(wc.wr_id);
  switch (WrKindOf(wc.wr_id)) {
    case WrKind::kSend: {
      // Completions of one QP arrive in posting order: earlier unsignaled requests are done.
      while (!sends_.empty() && sends_.front().seq < value) sends_.pop_front();
      if (sends_.empty() || sends_.front().seq != value) {
        LOG_WARN("verbs", "connection " << id_ << ": completion for unknown send " << value);
        return false;
      }
      const SendEntry e = sends_.front();
      sends_.pop_front();
      c.wr_id = e.user_wr_id;
      c.opcode = e.opcode;
      if (e.opcode == Opcode::kRead) c.byte_len = e.length;
      if (e.opcode == Opcode::kCompareSwap || e.opcode == Opcode::kFetchAdd) c.byte_len = 8;
      break;
    }
    case WrKind::kRecv: {
      auto it = recvs_.find(value);
      if (it == recvs_.end()) return false;
      c.wr_id = it->second;
      recvs_.erase(it);
      c.opcode = Opcode::kRecv;
      c.buffer_done = true;
      break;
    }
    case WrKind::kSrq: {
      if (srq_ == nullptr || !srq_->OnSlotCompleted(value, &c.wr_id, &c.offset, &c.buffer_done)) {
        return false;
      }
      c.opcode = Opcode::kRecv;
      break;
    }
    default:
      return false;
  }
  if (c.opcode == Opcode::kRecv && c.status == CompletionStatus::kSuccess) {
    c.byte_len = wc.byte_len;
    const uint64_t packets =
        std::max<uint64_t>(1, (uint64_t{wc.byte_len} + mtu_bytes_ - 1) / mtu_bytes_);
    counters_.recvs++;
    counters_.bytes_in += packets * kWireHeaderBytes + wc.byte_len;
  }
  if (c.status != CompletionStatus::kSuccess) EnterError(c.status, c.opcode);
  *out = c;
  return true;
}

void ConnCore::Close() {
  std::vector<Completion> send_flush, recv_flush;
  {
    MutexLock lk(mu_);
    if (state_ == ConnectionState::kClosed) return;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    int rc = dev_->api->ModifyQp(qp_, &attr, IBV_QP_STATE);
    if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_modify_qp(ERR)", rc).ToString());
    rc = dev_->api->DestroyQp(qp_);
    if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_destroy_qp", rc).ToString());
    // The device discards a destroyed QP's CQEs: report what was outstanding as flushed.
    for (const SendEntry& e : sends_) {
      Completion c;
      c.wr_id = e.user_wr_id;
      c.opcode = e.opcode;
      c.status = CompletionStatus::kFlushed;
      c.connection_id = id_;
      send_flush.push_back(c);
    }
    for (const auto& [seq, user] : recvs_) {
      Completion c;
      c.wr_id = user;
      c.opcode = Opcode::kRecv;
      c.status = CompletionStatus::kFlushed;
      c.connection_id = id_;
      c.buffer_done = true;
      recv_flush.push_back(c);
    }
    sends_.clear();
    recvs_.clear();
    state_ = ConnectionState::kClosed;
  }
  dev_->Unregister(qpn());
  if (!send_flush.empty()) send_cq_->Push(std::move(send_flush));
  if (!recv_flush.empty() && recv_cq_ != nullptr) recv_cq_->Push(std::move(recv_flush));
}

ConnectionState ConnCore::state() const {
  MutexLock lk(mu_);
  return state_;
}

Status ConnCore::error() const {
  MutexLock lk(mu_);
  return error_;
}

Counters ConnCore::counters() const {
  MutexLock lk(mu_);
  return counters_;
}

// ---- the CQ -------------------------------------------------------------------------------------

void VerbsCq::Append(const Completion& c) {
  if (options_.ring && pending_.size() >= options_.capacity) {
    pending_.pop_front();
    overwritten_.fetch_add(1);
  }
  pending_.push_back(c);
}

Status VerbsCq::DrainLocked(size_t want) {
  constexpr int kBatch = 32;
  ibv_wc wcs[kBatch];
  size_t taken = 0;
  while (options_.ring || taken < want) {
    const int ask =
        options_.ring ? kBatch : static_cast<int>(std::min<size_t>(kBatch, want - taken));
    const int got = dev_->api->PollCq(cq_, ask, wcs);
    if (got < 0) {
      if (!options_.ring) overrun_ = true;
      return Status::ResourceExhausted("verbs: ibv_poll_cq failed (" + std::to_string(got) +
                                           "): completion queue overrun or device error",
                                       false);
    }
    for (int i = 0; i < got; i++) {
      auto conn = dev_->FindByQpn(wcs[i].qp_num);
      Completion c;
      if (conn != nullptr && conn->OnCompletion(wcs[i], &c)) Append(c);
    }
    taken += got;
    if (got < ask) break;
  }
  return Status::Ok();
}

void VerbsCq::Drain() {
  MutexLock lk(mu_);
  Status st = DrainLocked(0);
  if (!st.ok()) LOG_WARN("verbs", st.ToString());
}

void VerbsCq::Push(std::vector<Completion> completions) {
  MutexLock lk(mu_);
  for (const Completion& c : completions) Append(c);
}

Result<size_t> VerbsCq::Poll(std::span<Completion> out) {
  MutexLock lk(mu_);
  if (overrun_) {
    return Status::ResourceExhausted("verbs: completion queue overrun; completions were lost",
                                     false);
  }
  if (out.empty()) return size_t{0};
  if (options_.ring) {
    ASYMNVM_RETURN_IF_ERROR(DrainLocked(0));
  } else if (pending_.size() < out.size()) {
    ASYMNVM_RETURN_IF_ERROR(DrainLocked(out.size() - pending_.size()));
  }
  size_t n = 0;
  while (n < out.size() && !pending_.empty()) {
    out[n++] = pending_.front();
    pending_.pop_front();
  }
  return n;
}

Result<size_t> VerbsCq::Wait(std::span<Completion> out, std::chrono::microseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  const auto spin_end = start + std::min(dev_->options.spin, timeout);
  ASYMNVM_ASSIGN_OR_RETURN(size_t n, Poll(out));
  if (n > 0 || out.empty()) return n;
  while (Clock::now() < spin_end) {
    ASYMNVM_ASSIGN_OR_RETURN(n, Poll(out));
    if (n > 0) return n;
    std::this_thread::yield();
  }
  while (true) {
    int rc = dev_->api->ReqNotifyCq(cq_, 0);
    if (rc != 0) return VerbsError("ibv_req_notify_cq", rc);
    // A completion that landed before the request armed nothing: look again.
    ASYMNVM_ASSIGN_OR_RETURN(n, Poll(out));
    if (n > 0) return n;
    const auto now = Clock::now();
    if (now >= deadline) return size_t{0};
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    const int ms = static_cast<int>((left.count() + 999) / 1000);
    pollfd pfd{channel_->fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("verbs: poll(completion channel)", errno);
    }
    if (r == 0) return Poll(out);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    rc = dev_->api->GetCqEvent(channel_, &ev_cq, &ev_ctx);
    if (rc != 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return VerbsError("ibv_get_cq_event", rc);
    }
    dev_->api->AckCqEvents(ev_cq, 1);
    ASYMNVM_ASSIGN_OR_RETURN(n, Poll(out));
    if (n > 0) return n;
  }
}

}  // namespace asymnvm::fabric::verbs
