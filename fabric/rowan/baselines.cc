#include "fabric/rowan/baselines.h"

#include <algorithm>
#include <cstring>

#include "common/coding.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/rowan/sender.h"

namespace asymnvm::rowan {
namespace {

constexpr char kTargetMagic[8] = {'R', 'O', 'W', 'A', 'N', 'L', 'O', 'G'};
constexpr size_t kTargetPrivate = fabric::RegionDescriptor::kEncodedSize + 8 + 8 + 8;
constexpr size_t kMaxBatchBytes = 1024;  // inline limit of a batch WRITE

Status CompletionError(const fabric::Completion& c, const char* who) {
  std::string what = std::string(who) + ": " + fabric::OpcodeName(c.opcode) + " " +
                     fabric::CompletionStatusName(c.status);
  if (c.status == fabric::CompletionStatus::kRnrRetryExceeded) {
    return Status::RnrRetryExceeded(what);
  }
  return Status::ConnectionError(what);
}

// rowan: a Sender on the driver's CQ.
class RowanWriter final : public LogWriter {
 public:
  static Result<std::unique_ptr<LogWriter>> Connect(const WriterOptions& o) {
    std::unique_ptr<RowanWriter> w(new RowanWriter());
    SenderOptions so;
    so.fabric = o.fabric;
    so.pd = o.pd;
    so.address = o.address;
    so.timeout = o.timeout;
    so.cq = o.cq;
    so.max_inline = kMaxEntryBytes;
    // Multi-block entries are not submitted here (kMaxEntryBytes), so 2 requests per append.
    so.max_send_wr = std::max<uint32_t>(16, 2 * o.max_outstanding + 2);
    ASYMNVM_ASSIGN_OR_RETURN(w->sender_, Sender::Connect(so));
    w->max_ = o.max_outstanding;
    return std::unique_ptr<LogWriter>(std::move(w));
  }
  LogVariant variant() const override { return LogVariant::kRowan; }
  Status Submit(const EntryMeta& meta, std::span<const uint8_t> payload, uint64_t token) override {
    if (kBlockHeaderSize + payload.size() > kMaxEntryBytes) {
      return Status::InvalidArgument("rowan writer: entry above kMaxEntryBytes");
    }
    if (outstanding_ >= max_) return Status::ResourceExhausted("rowan writer: window full");
    ASYMNVM_RETURN_IF_ERROR(sender_->PostAppend(meta, payload, token));
    outstanding_++;
    return Status::Ok();
  }
  Status OnCompletion(const fabric::Completion& c, std::vector<uint64_t>* durable) override {
    if (c.status != fabric::CompletionStatus::kSuccess) return CompletionError(c, "rowan writer");
    if (c.opcode == fabric::Opcode::kFlush) {
      durable->push_back(c.wr_id);
      outstanding_--;
    }
    return Status::Ok();
  }
  uint64_t connection_id() const override { return sender_->connection().id(); }
  fabric::Counters counters() const override { return sender_->connection().counters(); }

 private:
  RowanWriter() = default;
  std::unique_ptr<Sender> sender_;
  uint32_t max_ = 16;
  uint32_t outstanding_ = 0;
};

// rwrite / share / batch: one-sided WRITEs into a log at a LogTarget.
class WriteWriter final : public LogWriter {
 public:
  static Result<std::unique_ptr<LogWriter>> Connect(LogVariant v, const WriterOptions& o) {
    if (v == LogVariant::kShare && o.cursor == nullptr) {
      return Status::InvalidArgument("share writer: a SharedCursor is required");
    }
    if (v == LogVariant::kBatch && (o.batch_bytes == 0 || o.batch_bytes > kMaxBatchBytes)) {
      return Status::InvalidArgument("batch writer: batch_bytes must be in [1, 1024]");
    }
    std::unique_ptr<WriteWriter> w(new WriteWriter());
    w->v_ = v;
    w->o_ = o;
    fabric::ConnectionOptions co;
    co.send_cq = o.cq;
    co.recv_cq = o.cq;
    co.max_inline = kMaxBatchBytes;
    co.max_send_wr = std::max<uint32_t>(16, 2 * o.max_outstanding + 2);
    co.timeout = o.timeout;
    auto conn = o.fabric->Connect(o.pd, o.address, co);
    if (!conn.ok()) {
      return conn.status().WithContext(std::string(LogVariantName(v)) + " writer: connect " +
                                       o.address);
    }
    w->conn_ = std::move(conn).value();
    const auto& pd = w->conn_->peer_private_data();
    if (pd.size() < kTargetPrivate ||
        std::memcmp(pd.data() + fabric::RegionDescriptor::kEncodedSize, kTargetMagic, 8) != 0) {
      return Status::ProtocolError(std::string(LogVariantName(v)) +
                                   " writer: peer is not a log target");
    }
    ASYMNVM_ASSIGN_OR_RETURN(w->region_, fabric::RegionDescriptor::Decode(pd.data(), pd.size()));
    w->log_off_ = GetLe64(pd.data() + 40);
    w->log_bytes_ = GetLe64(pd.data() + 48);
    if (w->log_bytes_ == 0) {
      return Status::ResourceExhausted("log target has no log left for this connection");
    }
    if (w->log_off_ + w->log_bytes_ > w->region_.length || w->log_bytes_ < kMaxBatchBytes) {
      return Status::ProtocolError("log target sent an impossible log range");
    }
    return std::unique_ptr<LogWriter>(std::move(w));
  }

  LogVariant variant() const override { return v_; }

  Status Submit(const EntryMeta& meta, std::span<const uint8_t> payload, uint64_t token) override {
    if (meta.type == 0) return Status::InvalidArgument("log writer: entry type must be non-zero");
    if (kBlockHeaderSize + payload.size() > kMaxEntryBytes) {
      return Status::InvalidArgument("log writer: entry above kMaxEntryBytes");
    }
    if (conn_->state() != fabric::ConnectionState::kConnected) {
      return Status::ConnectionError("log writer: connection failed: " + conn_->error().ToString());
    }
    const size_t len = kBlockHeaderSize + payload.size();
    const size_t fp = BlockFootprint(payload.size());
    if (v_ != LogVariant::kBatch) {
      if (inflight_.size() >= o_.max_outstanding) {
        return Status::ResourceExhausted("log writer: window full");
      }
      uint8_t block[kMaxEntryBytes];
      EncodeBlock(meta, 1, 0, static_cast<uint32_t>(payload.size()), payload, block);
      ASYMNVM_RETURN_IF_ERROR(PostWrite(block, len, Reserve(fp)));
      inflight_.push_back({next_wr_ - 1, {token}});
      return Status::Ok();
    }
    // batch: the window bounds the entries not yet acknowledged (open batch + batches in flight).
    if (unacked_ >= o_.max_outstanding) {
      return Status::ResourceExhausted("batch writer: window full");
    }
    if (used_ + fp > kMaxBatchBytes) {
      ASYMNVM_RETURN_IF_ERROR(SendBatch());
      if (used_ + fp > kMaxBatchBytes) return Status::ResourceExhausted("batch writer: full");
    }
    if (tokens_.empty()) first_ = Clock::now();
    std::memset(batch_ + used_, 0, fp);
    EncodeBlock(meta, 1, 0, static_cast<uint32_t>(payload.size()), payload, batch_ + used_);
    used_ += fp;
    last_len_ = len;
    tokens_.push_back(token);
    unacked_++;
    if (used_ >= o_.batch_bytes) ASYMNVM_RETURN_IF_ERROR(SendBatch());
    return Status::Ok();
  }

  Result<Clock::time_point> Tick(Clock::time_point now) override {
    if (tokens_.empty()) return Clock::time_point::max();
    if (now - first_ >= o_.batch_delay) {
      ASYMNVM_RETURN_IF_ERROR(SendBatch());
      if (tokens_.empty()) return Clock::time_point::max();
      return now;  // still waiting for a free window slot
    }
    return first_ + std::chrono::duration_cast<Clock::duration>(o_.batch_delay);
  }

  Status OnCompletion(const fabric::Completion& c, std::vector<uint64_t>* durable) override {
    if (c.status != fabric::CompletionStatus::kSuccess) {
      return CompletionError(c, LogVariantName(v_));
    }
    if (c.opcode != fabric::Opcode::kFlush) return Status::Ok();
    if (inflight_.empty() || inflight_.front().wr_id != c.wr_id) {
      return Status::Internal(std::string(LogVariantName(v_)) + " writer: unexpected completion");
    }
    for (uint64_t t : inflight_.front().tokens) durable->push_back(t);
    if (v_ == LogVariant::kBatch) unacked_ -= inflight_.front().tokens.size();
    inflight_.pop_front();
    return Status::Ok();
  }

  uint64_t connection_id() const override { return conn_->id(); }
  fabric::Counters counters() const override { return conn_->counters(); }

 private:
  struct InFlight {
    uint64_t wr_id;
    std::vector<uint64_t> tokens;
  };
  WriteWriter() = default;

  // Log offset for `n` bytes: the writer's own tail (rwrite, batch) or a reservation on the shared
  // cursor (share). Circular: a reservation that would run past the end starts over at 0.
  uint64_t Reserve(size_t n) {
    if (v_ == LogVariant::kShare) {
      while (true) {
        uint64_t logical = o_.cursor->next.fetch_add(n, std::memory_order_relaxed);
        uint64_t p = logical % log_bytes_;
        if (p + n <= log_bytes_) return p;
      }
    }
    if (tail_ + n > log_bytes_) tail_ = 0;
    uint64_t p = tail_;
    tail_ += n;
    return p;
  }

  // WRITE (inline) + signaled FLUSH, one doorbell; the FLUSH's wr_id is next_wr_++.
  Status PostWrite(const uint8_t* data, size_t len, uint64_t off) {
    fabric::WorkRequest wrs[2];
    wrs[0].wr_id = next_wr_;
    wrs[0].opcode = fabric::Opcode::kWrite;
    wrs[0].signaled = false;
    wrs[0].inline_data = true;
    wrs[0].local_addr = const_cast<uint8_t*>(data);
    wrs[0].length = static_cast<uint32_t>(len);
    wrs[0].remote_addr = region_.addr + log_off_ + off;
    wrs[0].rkey = region_.rkey;
    wrs[1].wr_id = next_wr_;
    wrs[1].opcode = fabric::Opcode::kFlush;
    wrs[1].remote_addr = region_.addr + log_off_ + off;
    wrs[1].rkey = region_.rkey;
    ASYMNVM_RETURN_IF_ERROR(conn_->Post(wrs));
    next_wr_++;
    return Status::Ok();
  }

  // Sends the open batch if the window allows (otherwise it stays open; Tick/Submit retry).
  // The last block is written without its stride padding, as a lone entry would be.
  Status SendBatch() {
    if (tokens_.empty() || inflight_.size() >= o_.max_outstanding) return Status::Ok();
    size_t len = used_ - BlockFootprint(last_len_ - kBlockHeaderSize) + last_len_;
    ASYMNVM_RETURN_IF_ERROR(PostWrite(batch_, len, Reserve(used_)));
    inflight_.push_back({next_wr_ - 1, std::move(tokens_)});
    tokens_.clear();
    used_ = 0;
    return Status::Ok();
  }

  LogVariant v_ = LogVariant::kRWrite;
  WriterOptions o_;
  std::unique_ptr<fabric::Connection> conn_;
  fabric::RegionDescriptor region_;
  uint64_t log_off_ = 0, log_bytes_ = 0, tail_ = 0;
  uint64_t next_wr_ = 1;
  std::deque<InFlight> inflight_;
  // batch
  uint8_t batch_[kMaxBatchBytes];
  size_t used_ = 0;
  size_t last_len_ = 0;
  std::vector<uint64_t> tokens_;
  size_t unacked_ = 0;  // entries open or in flight
  Clock::time_point first_{};
};

}  // namespace

const char* LogVariantName(LogVariant v) {
  switch (v) {
    case LogVariant::kRowan:
      return "rowan";
    case LogVariant::kRWrite:
      return "rwrite";
    case LogVariant::kShare:
      return "share";
    case LogVariant::kBatch:
      return "batch";
  }
  return "?";
}

Result<LogVariant> ParseLogVariant(const std::string& name) {
  for (LogVariant v :
       {LogVariant::kRowan, LogVariant::kRWrite, LogVariant::kShare, LogVariant::kBatch}) {
    if (name == LogVariantName(v)) return v;
  }
  return Status::InvalidArgument("unknown log variant '" + name +
                                 "' (expected rowan, rwrite, share or batch)");
}

Result<std::unique_ptr<LogWriter>> ConnectWriter(LogVariant v, const WriterOptions& o) {
  if (o.fabric == nullptr || o.pd == nullptr || o.cq == nullptr || o.address.empty() ||
      o.max_outstanding == 0) {
    return Status::InvalidArgument(
        "log writer: fabric, pd, cq, address and max_outstanding >= 1 are required");
  }
  if (v == LogVariant::kRowan) return RowanWriter::Connect(o);
  return WriteWriter::Connect(v, o);
}

// ---------------------------------------------------------------------------------------------
// LogTarget

Result<std::unique_ptr<LogTarget>> LogTarget::Open(const LogTargetOptions& o) {
  if (o.fabric == nullptr || o.pd == nullptr || o.area == nullptr || o.persister == nullptr) {
    return Status::InvalidArgument("log target: fabric, pd, area and persister are required");
  }
  if (reinterpret_cast<uintptr_t>(o.area) % 64 != 0) {
    return Status::InvalidArgument("log target: area must be 64 B aligned");
  }
  if (!o.shared && (o.log_bytes == 0 || o.log_bytes % 4096 != 0)) {
    return Status::InvalidArgument("log target: log_bytes must be a non-zero multiple of 4 KiB");
  }
  if (o.area_size < (o.shared ? kMaxBatchBytes : o.log_bytes)) {
    return Status::InvalidArgument("log target: area smaller than one log");
  }
  std::unique_ptr<LogTarget> t(new LogTarget(o));
  t->landing_ = std::make_unique<LandingPersister>(o.persister, o.landing_observer, o.area);
  ASYMNVM_ASSIGN_OR_RETURN(
      t->mr_, o.pd->RegisterMemory(
                  o.area, o.area_size,
                  {.access = fabric::kLocalWrite | fabric::kRemoteWrite | fabric::kRemoteRead,
                   .persister = t->landing_.get()}));
  ASYMNVM_ASSIGN_OR_RETURN(t->cq_, o.fabric->CreateCq({.capacity = 1024, .ring = true}));
  ASYMNVM_ASSIGN_OR_RETURN(t->listener_, o.fabric->Listen(o.pd, o.listen_address));
  t->acceptor_ = std::thread([p = t.get()] { p->AcceptLoop(); });
  return t;
}

LogTarget::~LogTarget() { Close(); }

void LogTarget::Close() {
  if (stop_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  MutexLock lock(mu_);
  for (auto& c : conns_) c->Close();
  conns_.clear();
  listener_.reset();
  cq_.reset();
  mr_.reset();
}

std::string LogTarget::address() const {
  MutexLock lock(mu_);
  return listener_ ? listener_->address() : "";
}

uint64_t LogTarget::connections() const {
  MutexLock lock(mu_);
  return conns_.size();
}

void LogTarget::AcceptLoop() {
  const uint64_t logs = o_.shared ? 1 : o_.area_size / o_.log_bytes;
  while (!stop_.load()) {
    uint8_t pd[kTargetPrivate] = {};
    mr_->descriptor().EncodeTo(pd);
    std::memcpy(pd + 32, kTargetMagic, 8);
    {
      MutexLock lock(mu_);
      if (o_.shared) {
        PutLe64(pd + 40, 0);
        PutLe64(pd + 48, o_.area_size / 64 * 64);
      } else if (next_log_ < logs) {
        PutLe64(pd + 40, next_log_ * o_.log_bytes);
        PutLe64(pd + 48, o_.log_bytes);
      }  // else: bytes 0 = no log left
    }
    fabric::ConnectionOptions co;
    co.send_cq = cq_.get();
    co.recv_cq = cq_.get();
    co.private_data.assign(pd, pd + sizeof(pd));
    co.timeout = std::chrono::milliseconds(100);
    auto c = listener_->Accept(co);
    if (!c.ok()) {
      if (c.status().code() != StatusCode::kTimedOut) {
        LOG_WARN("rowan", "log target accept: " << c.status().ToString());
      }
      continue;
    }
    MutexLock lock(mu_);
    if (!o_.shared && next_log_ < logs) next_log_++;
    std::erase_if(conns_,
                  [](const auto& x) { return x->state() != fabric::ConnectionState::kConnected; });
    conns_.push_back(std::move(c).value());
  }
}

}  // namespace asymnvm::rowan
