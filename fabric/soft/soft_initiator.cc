// The soft NIC connection core, initiator role (fabric/soft/soft_internal.h): posting work
// requests, retiring them with the responses, completions and the error states.
#include "common/thread_annotations.h"
#include "fabric/soft/soft_internal.h"

namespace asymnvm::fabric::soft::internal {

// Defined here, not inline: tests/tsan.supp suppresses the NIC's DMA by this name.
[[gnu::noinline]] void DmaCopy(void* dst, const void* src, size_t len) {
  if (len) std::memcpy(dst, src, len);
}

// ---------------------------------------------------------------------------------------------
// ConnCore: initiator

Status ConnCore::Post(std::span<const WorkRequest> wrs) {
  if (wrs.empty()) return Status::Ok();
  MutexLock lock(sq_mu_);
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
    // The direct path (shm provider) takes a prefix of the list: only while nothing of this
    // connection is outstanding in the channel, so nothing executes out of order.
    uint32_t direct_len = 0;
    if (direct_ && ring_count_ == 0 && direct_->Execute(w, channel_dirty_, &direct_len)) {
      CountPosted(w);
      if (w.signaled) {
        CompleteLocked(OutEntry{w.wr_id, w.local_addr, w.length, 0, w.opcode, true},
                       CompletionStatus::kSuccess, direct_len);
      }
      continue;
    }
    if (w.opcode == Opcode::kFlush) {
      channel_dirty_ = false;
    } else if (w.opcode != Opcode::kRead) {
      channel_dirty_ = true;
    }
    uint32_t seq = next_seq_++;
    bool needs_ack = w.signaled || w.opcode == Opcode::kRead || w.opcode == Opcode::kCompareSwap ||
                     w.opcode == Opcode::kFetchAdd || w.opcode == Opcode::kFlush ||
                     i + 1 == wrs.size() || ++unacked_run_ >= ack_every_;
    if (needs_ack) unacked_run_ = 0;
    uint8_t flags =
        static_cast<uint8_t>((w.signaled ? kFlagSignaled : 0) | (needs_ack ? kFlagNeedsAck : 0));
    uint32_t wire_len = w.length;
    bool atomic = w.opcode == Opcode::kCompareSwap || w.opcode == Opcode::kFetchAdd;
    if (atomic && wire_len == 0) wire_len = 8;
    if (w.opcode == Opcode::kFlush) wire_len = 0;
    EncodeRequestHeader(out, static_cast<uint8_t>(w.opcode), flags, seq, wire_len, w.rkey,
                        w.remote_addr, w.compare_add, w.swap);
    out += kRequestHeaderSize;
    CountPosted(w);
    if (w.opcode == Opcode::kWrite || w.opcode == Opcode::kSend) {
      DmaCopy(out, w.local_addr, w.length);
      out += w.length;
    }
    ring_[(ring_head_ + ring_count_) % ring_.size()] =
        OutEntry{w.wr_id, w.local_addr, w.length, seq, w.opcode, w.signaled};
    ring_count_++;
  }
  bytes = static_cast<size_t>(out - scratch_.data());
  AtomicCounters::Inc(ctr_.round_trips);
  if (bytes != 0) {
    IncShared(ctr_.bytes_out, bytes);
    ch_->Send(scratch_.data(), bytes);  // a broken channel is reported by the worker (EOF/error)
  }
  if (scratch_.capacity() > (4u << 20)) std::vector<uint8_t>().swap(scratch_);
  return Status::Ok();
}

void ConnCore::CountPosted(const WorkRequest& w) {
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
  if (w.opcode == Opcode::kWrite || w.opcode == Opcode::kSend || w.opcode == Opcode::kRead) {
    AtomicCounters::Inc(ctr_.payload_bytes, w.length);
  }
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
  MutexLock lock(sq_mu_);
  if (state() == ConnectionState::kConnected) {
    error_ = why;
    state_.store(ConnectionState::kError, std::memory_order_release);
    FailAllLocked(st);
  } else if (state() == ConnectionState::kError) {
    FailAllLocked(CompletionStatus::kFlushed);
  }
}

void ConnCore::MarkClosed() {
  MutexLock lock(sq_mu_);
  if (state() == ConnectionState::kClosed) return;
  if (error_.ok()) error_ = Status::ConnectionError("connection closed");
  state_.store(ConnectionState::kClosed, std::memory_order_release);
  FailAllLocked(CompletionStatus::kFlushed);
}

void ConnCore::HandleResponse(const ParsedPacket& p) {
  MutexLock lock(sq_mu_);
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

}  // namespace asymnvm::fabric::soft::internal
