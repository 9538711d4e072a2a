// The soft NIC connection core, target role (fabric/soft/soft_internal.h): parsing requests,
// executing them against registered memory, responses, RNR holds and the FLUSH group commit.
#include "fabric/soft/soft_internal.h"

namespace asymnvm::fabric::soft::internal {

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
  LOG_WARN(kLog, "connection " << id_ << " (" << peer_address_ << "): rejecting request seq " << seq
                               << ": " << why << "; dropping the connection");
  IncShared(ctr_.errors);
  AppendResponse(kWireNak, reason, seq, nullptr, 0);
  FlushResponses();
  ch_->ShutdownWrite();
  draining_ = true;
  // The RC connection is now in error in both directions.
  EnterError(CompletionStatus::kTransportError,
             Status::RemoteAccessError("this endpoint rejected a peer request: " + why));
}

const RegionEntry* ConnCore::Lookup(RegionReadHold* regions, uint32_t rkey, uint64_t addr,
                                    uint64_t len, uint32_t right, std::string* why) {
  const RegionEntry* found = regions->Find(rkey);
  if (found == nullptr || found->pd_id != pd_id_) {
    *why = "unknown rkey " + std::to_string(rkey);
    return nullptr;
  }
  const RegionEntry& e = *found;
  if (!(e.access & right)) {
    *why = "region lacks the access right";
    return nullptr;
  }
  auto base = reinterpret_cast<uint64_t>(e.base);
  if (addr < base || len > e.length || addr - base > e.length - len) {
    *why = "range [" + std::to_string(addr) + ", +" + std::to_string(len) + ") outside the region";
    return nullptr;
  }
  return &e;
}

void ConnCore::StagePersist(RegionReadHold* regions, std::vector<pm::Persister*>* drain) {
  for (const auto& r : persist_) {
    if (regions->Find(r.rkey) == nullptr) continue;  // deregistered since: nothing to persist
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

ConnCore::Exec ConnCore::HandleRequest(const ParsedPacket& p, RegionReadHold* regions) {
  regions->Acquire();
  if (p.seq != expect_seq_) {
    Nak(kNakInvalid, expect_seq_,
        "sequence " + std::to_string(p.seq) + ", expected " + std::to_string(expect_seq_));
    return Exec::kStop;
  }
  bool ack = (p.flags & kFlagNeedsAck) != 0;
  std::string why;
  switch (p.opcode) {
    case kWireWrite: {
      const RegionEntry* e = Lookup(regions, p.rkey, p.remote_addr, p.length, kRemoteWrite, &why);
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
      const RegionEntry* e = Lookup(regions, p.rkey, p.remote_addr, p.length, kRemoteRead, &why);
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
      const RegionEntry* e = Lookup(regions, p.rkey, p.remote_addr, 8, kRemoteAtomic, &why);
      if (e == nullptr) {
        Nak(kNakAccess, p.seq, "atomic: " + why);
        return Exec::kStop;
      }
      auto* word = reinterpret_cast<uint64_t*>(p.remote_addr);
      uint64_t orig;
      if (p.opcode == kWireCompareSwap) {
        orig = p.compare_add;
        __atomic_compare_exchange_n(word, &orig, p.swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      } else {
        orig = __atomic_fetch_add(word, p.compare_add, __ATOMIC_SEQ_CST);
      }
      if (e->persister)
        persist_.push_back({p.rkey, reinterpret_cast<uint8_t*>(word), 8, e->persister});
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
        Nak(kNakRnr, p.seq,
            "SEND: receiver not ready after " + std::to_string(peer_.rnr_retry) + " retries");
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
      if (p.rkey != 0 && Lookup(regions, p.rkey, p.remote_addr, 1, kRemoteRead, &why) == nullptr) {
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

void ConnCore::Service(RegionReadHold* regions) {
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
    regions->Release();
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
    EnterError(
        CompletionStatus::kTransportError,
        Status::ConnectionError(rs == Channel::ReadStatus::kEof ? "peer closed the connection"
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

}  // namespace asymnvm::fabric::soft::internal
