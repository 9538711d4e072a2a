#include "fabric/rowan/sender.h"

#include <cstring>

#include "common/thread_annotations.h"

namespace asymnvm::rowan {

Result<std::unique_ptr<Sender>> Sender::Connect(const SenderOptions& o) {
  if (o.fabric == nullptr || o.pd == nullptr || o.address.empty()) {
    return Status::InvalidArgument("rowan sender: fabric, pd and address are required");
  }
  std::unique_ptr<Sender> s(new Sender());
  s->o_ = o;
  if (o.cq != nullptr) {
    s->cq_ = o.cq;
  } else {
    ASYMNVM_ASSIGN_OR_RETURN(s->own_cq_, o.fabric->CreateCq({.capacity = 1024}));
    s->cq_ = s->own_cq_.get();
  }
  fabric::ConnectionOptions co;
  co.send_cq = s->cq_;
  co.recv_cq = s->cq_;
  co.max_inline = o.max_inline;
  co.max_send_wr = o.max_send_wr;
  co.rnr_retry = o.rnr_retry;
  co.timeout = o.timeout;
  auto conn = o.fabric->Connect(o.pd, o.address, co);
  if (!conn.ok()) return conn.status().WithContext("rowan sender: connect " + o.address);
  s->conn_ = std::move(conn).value();
  const auto& pd = s->conn_->peer_private_data();
  if (pd.size() < fabric::RegionDescriptor::kEncodedSize + 12) {
    return Status::ProtocolError("rowan sender: receiver sent no b-log parameters");
  }
  ASYMNVM_ASSIGN_OR_RETURN(s->flush_target_,
                           fabric::RegionDescriptor::Decode(pd.data(), pd.size()));
  uint32_t mtu;
  uint64_t seg;
  std::memcpy(&mtu, pd.data() + 32, 4);
  std::memcpy(&seg, pd.data() + 36, 8);
  if (mtu <= kBlockHeaderSize || mtu % kStride != 0 || seg < mtu) {
    return Status::ProtocolError("rowan sender: receiver sent impossible mtu/segment size");
  }
  s->mtu_ = mtu;
  s->segment_size_ = seg;
  return s;
}

Status Sender::PostAppend(const EntryMeta& meta, std::span<const uint8_t> payload, uint64_t token) {
  MutexLock lock(mu_);
  auto blocks = EncodeEntry(meta, payload, mtu_);
  if (!blocks.ok()) return blocks.status();
  wrs_.clear();
  for (const auto& b : *blocks) {
    if (b.size() > o_.max_inline) {
      return Status::InvalidArgument("rowan sender: PostAppend block of " +
                                     std::to_string(b.size()) + " bytes exceeds max_inline " +
                                     std::to_string(o_.max_inline));
    }
    fabric::WorkRequest wr;
    wr.wr_id = token;
    wr.opcode = fabric::Opcode::kSend;
    wr.signaled = false;
    wr.inline_data = true;
    wr.local_addr = const_cast<uint8_t*>(b.data());
    wr.length = static_cast<uint32_t>(b.size());
    wrs_.push_back(wr);
  }
  fabric::WorkRequest flush;
  flush.wr_id = token;
  flush.opcode = fabric::Opcode::kFlush;
  flush.remote_addr = flush_target_.addr;
  flush.rkey = flush_target_.rkey;
  wrs_.push_back(flush);
  return conn_->Post(wrs_);  // inline payloads are copied here; `blocks` may go
}

Status Sender::Append(const EntryMeta& meta, std::span<const uint8_t> payload) {
  MutexLock lock(mu_);
  if (!own_cq_) {
    return Status::FailedPrecondition("rowan sender: Append needs the sender's own CQ");
  }
  auto blocks = EncodeEntry(meta, payload, mtu_);
  if (!blocks.ok()) return blocks.status();
  size_t total = 0;
  for (const auto& b : *blocks) total += BlockFootprint(b.size() - kBlockHeaderSize);
  if (total > segment_size_ * 64) {
    return Status::InvalidArgument("rowan sender: entry larger than the b-log can hold");
  }
  if (buf_.size() < total || !mr_) {
    buf_.assign(std::max<size_t>(total, 4096), 0);
    ASYMNVM_ASSIGN_OR_RETURN(
        mr_, o_.pd->RegisterMemory(buf_.data(), buf_.size(), {.access = fabric::kLocalWrite}));
  }
  wrs_.clear();
  size_t off = 0;
  for (const auto& b : *blocks) {
    std::memcpy(buf_.data() + off, b.data(), b.size());
    fabric::WorkRequest wr;
    wr.wr_id = next_wr_++;
    wr.opcode = fabric::Opcode::kSend;
    wr.signaled = false;
    wr.local_addr = buf_.data() + off;
    wr.length = static_cast<uint32_t>(b.size());
    wr.local_mr = mr_.get();
    wrs_.push_back(wr);
    off += b.size();
  }
  fabric::WorkRequest flush;
  flush.wr_id = next_wr_++;
  flush.opcode = fabric::Opcode::kFlush;
  flush.remote_addr = flush_target_.addr;
  flush.rkey = flush_target_.rkey;
  wrs_.push_back(flush);
  ASYMNVM_RETURN_IF_ERROR(conn_->Post(wrs_));
  const uint64_t want = flush.wr_id;
  auto deadline = std::chrono::steady_clock::now() + o_.timeout;
  fabric::Completion c[8];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::TimedOut("rowan sender: append not acknowledged");
    auto n = cq_->Wait(c, left);
    if (!n.ok()) return n.status();
    for (size_t i = 0; i < *n; i++) {
      if (c[i].status != fabric::CompletionStatus::kSuccess) {
        std::string what = std::string("rowan sender: ") + fabric::OpcodeName(c[i].opcode) + " " +
                           fabric::CompletionStatusName(c[i].status);
        if (c[i].status == fabric::CompletionStatus::kRnrRetryExceeded) {
          return Status::RnrRetryExceeded(what);
        }
        return Status::ConnectionError(what);
      }
      if (c[i].wr_id == want) return Status::Ok();
    }
  }
}

}  // namespace asymnvm::rowan
