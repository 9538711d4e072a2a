// FaultyFabric: see faulty_fabric.h for the contract.
#include "fabric/faulty_fabric.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/crash_point.h"

namespace asymnvm::fabric {

class FaultyCompletionQueue;

namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kDrop:
      return "drop";
    case FaultKind::kError:
      return "error";
    case FaultKind::kDelay:
      return "delay";
    case FaultKind::kCut:
      return "cut";
  }
  return "unknown";
}

// Merges injected completions into the provider's completion stream. For every connection it keeps,
// in posting order, the requests the provider will complete (signaled at the provider); injected
// completions ride behind the last of them, so they surface after everything posted earlier.
class FaultyCompletionQueue : public CompletionQueue {
 public:
  explicit FaultyCompletionQueue(std::unique_ptr<CompletionQueue> base) : base_(std::move(base)) {}

  Result<size_t> Poll(std::span<Completion> out) override {
    if (out.empty()) return size_t{0};
    MutexLock lock(mu_);
    if (ready_.size() < out.size()) {
      std::vector<Completion> tmp(out.size() - ready_.size());
      Result<size_t> r = base_->Poll(tmp);
      if (!r.ok()) return r.status();
      for (size_t i = 0; i < *r; i++) ProcessLocked(tmp[i]);
    }
    return TakeLocked(out);
  }

  Result<size_t> Wait(std::span<Completion> out, std::chrono::microseconds timeout) override {
    if (out.empty()) return size_t{0};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<Completion> tmp(out.size());
    while (true) {
      {
        MutexLock lock(mu_);
        if (!ready_.empty()) return TakeLocked(out);
      }
      auto now = std::chrono::steady_clock::now();
      auto remaining = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
      if (remaining.count() < 0) remaining = std::chrono::microseconds(0);
      // Wait in slices so completions injected by a concurrent Post are noticed promptly.
      auto slice = std::min(remaining, std::chrono::microseconds(1000));
      Result<size_t> r = base_->Wait(tmp, slice);
      if (!r.ok()) return r.status();
      MutexLock lock(mu_);
      for (size_t i = 0; i < *r; i++) ProcessLocked(tmp[i]);
      if (!ready_.empty()) return TakeLocked(out);
      if (std::chrono::steady_clock::now() >= deadline) return size_t{0};
    }
  }

  uint64_t overwritten() const override { return base_->overwritten(); }
  uint32_t capacity() const override { return base_->capacity(); }

  CompletionQueue* base() const { return base_.get(); }

  // Registers requests the provider will complete on `conn`, in posting order.
  void Expect(uint64_t conn, uint64_t wr_id, bool hide_success) {
    MutexLock lock(mu_);
    pending_[conn].push_back(Pending{wr_id, hide_success, {}});
  }
  // Undoes the last `n` Expect calls on `conn` (the provider refused the list).
  void Unexpect(uint64_t conn, size_t n) {
    MutexLock lock(mu_);
    auto& q = pending_[conn];
    for (size_t i = 0; i < n && !q.empty(); i++) q.pop_back();
  }
  // Queues completions that must follow every request already registered on `conn`.
  void Inject(uint64_t conn, std::vector<Completion> completions) {
    MutexLock lock(mu_);
    auto it = pending_.find(conn);
    if (it == pending_.end() || it->second.empty()) {
      for (auto& c : completions) ready_.push_back(c);
      return;
    }
    auto& after = it->second.back().after;
    after.insert(after.end(), completions.begin(), completions.end());
  }

 private:
  struct Pending {
    uint64_t wr_id;
    bool hide_success;
    std::vector<Completion> after;
  };

  void ProcessLocked(const Completion& c) ASYMNVM_REQUIRES(mu_) {
    if (c.opcode == Opcode::kRecv) {
      ready_.push_back(c);
      return;
    }
    auto it = pending_.find(c.connection_id);
    if (it == pending_.end() || it->second.empty() || it->second.front().wr_id != c.wr_id) {
      // An unsignaled request that failed (or was flushed): the provider reports it anyway.
      ready_.push_back(c);
      return;
    }
    Pending p = std::move(it->second.front());
    it->second.pop_front();
    if (!(p.hide_success && c.status == CompletionStatus::kSuccess)) ready_.push_back(c);
    for (auto& a : p.after) ready_.push_back(a);
    if (it->second.empty()) pending_.erase(it);
  }

  size_t TakeLocked(std::span<Completion> out) ASYMNVM_REQUIRES(mu_) {
    size_t n = std::min(out.size(), ready_.size());
    for (size_t i = 0; i < n; i++) {
      out[i] = ready_.front();
      ready_.pop_front();
    }
    return n;
  }

  std::unique_ptr<CompletionQueue> base_;
  Mutex mu_;
  std::unordered_map<uint64_t, std::deque<Pending>> pending_ ASYMNVM_GUARDED_BY(mu_);
  std::deque<Completion> ready_ ASYMNVM_GUARDED_BY(mu_);
};

class FaultyConnection : public Connection {
 public:
  FaultyConnection(FaultyFabric* fabric, std::unique_ptr<Connection> base,
                   FaultyCompletionQueue* send_cq, uint64_t ordinal, uint64_t seed)
      : fabric_(fabric),
        base_(std::move(base)),
        send_cq_(send_cq),
        ordinal_(ordinal),
        rng_(seed ^ (0xD1B54A32D192ED03ull * (ordinal + 1))) {}

  ~FaultyConnection() override = default;

  Status Post(std::span<const WorkRequest> wrs) override {
    MutexLock lock(post_mu_);
    ASYMNVM_CRASH_POINT("fabric.post.before");
    if (failed_.load()) {
      MutexLock elock(error_mu_);  // a race found by the thread-safety annotations
      return Status::ConnectionError("fault injector: connection in error state: " +
                                     error_.ToString());
    }
    if (wrs.empty() || send_cq_ == nullptr) return base_->Post(wrs);
    const FaultOptions opts = fabric_->fault_options();

    size_t fault_at = wrs.size();
    FaultKind fault_kind = FaultKind::kDrop;
    bool delay = false;
    for (size_t i = 0; i < wrs.size(); i++) {
      if ((opts.opcode_mask & OpcodeBit(wrs[i].opcode)) == 0) continue;
      const bool drop = OneIn(opts.drop_one_in);
      const bool error = OneIn(opts.error_one_in);
      const bool slow = OneIn(opts.delay_one_in);
      if (drop || error) {
        fault_at = i;
        fault_kind = drop ? FaultKind::kDrop : FaultKind::kError;
        break;
      }
      if (slow && !delay) {
        delay = true;
        fabric_->Record(FaultEvent{ordinal_, request_index_ + i, FaultKind::kDelay, wrs[i].opcode,
                                   wrs[i].wr_id});
      }
    }
    if (delay) std::this_thread::sleep_for(opts.delay);

    if (fault_at > 0) {
      std::vector<WorkRequest> prefix(wrs.begin(), wrs.begin() + fault_at);
      bool hide_last = false;
      if (!prefix.back().signaled) {
        prefix.back().signaled = true;
        hide_last = true;
      }
      const uint64_t cid = base_->id();
      size_t expected = 0;
      for (size_t i = 0; i < prefix.size(); i++) {
        if (!prefix[i].signaled) continue;
        send_cq_->Expect(cid, prefix[i].wr_id, hide_last && i + 1 == prefix.size());
        expected++;
      }
      Status st = base_->Post(prefix);
      if (!st.ok()) {
        send_cq_->Unexpect(cid, expected);
        return st;
      }
    }

    if (fault_at < wrs.size()) {
      std::vector<Completion> injected;
      injected.reserve(wrs.size() - fault_at);
      for (size_t i = fault_at; i < wrs.size(); i++) {
        Completion c;
        c.wr_id = wrs[i].wr_id;
        c.opcode = wrs[i].opcode;
        c.connection_id = base_->id();
        c.status = i > fault_at                     ? CompletionStatus::kFlushed
                   : fault_kind == FaultKind::kDrop ? CompletionStatus::kTransportError
                                                    : CompletionStatus::kGeneralError;
        injected.push_back(c);
      }
      {
        MutexLock elock(error_mu_);
        error_ = Status::ConnectionError(
            std::string("fault injector: injected ") + FaultKindName(fault_kind) + " of " +
            OpcodeName(wrs[fault_at].opcode) + " wr_id " + std::to_string(wrs[fault_at].wr_id));
      }
      failed_.store(true);
      fabric_->Record(FaultEvent{ordinal_, request_index_ + fault_at, fault_kind,
                                 wrs[fault_at].opcode, wrs[fault_at].wr_id});
      fabric_->CountFlushed(wrs.size() - fault_at - 1);
      send_cq_->Inject(base_->id(), std::move(injected));
    }
    request_index_ += wrs.size();
    fabric_->CountSeen(wrs.size());
    ASYMNVM_CRASH_POINT("fabric.post.after");
    return Status::Ok();
  }

  Status PostRecv(std::span<const RecvRequest> buffers) override {
    return base_->PostRecv(buffers);
  }
  ConnectionState state() const override {
    if (failed_.load()) return ConnectionState::kError;
    return base_->state();
  }
  Status error() const override {
    if (failed_.load()) {
      MutexLock elock(error_mu_);
      return error_;
    }
    return base_->error();
  }
  uint64_t id() const override { return base_->id(); }
  const std::vector<uint8_t>& peer_private_data() const override {
    return base_->peer_private_data();
  }
  std::string peer_address() const override { return base_->peer_address(); }
  Counters counters() const override { return base_->counters(); }
  void Close() override { base_->Close(); }

  void Cut() {
    MutexLock lock(post_mu_);
    if (cut_) return;
    cut_ = true;
    if (!failed_.load()) {
      MutexLock elock(error_mu_);
      error_ = Status::ConnectionError("fault injector: connection cut");
    }
    failed_.store(true);
    fabric_->Record(FaultEvent{ordinal_, request_index_, FaultKind::kCut, Opcode::kWrite, 0});
    base_->Close();
  }

 private:
  bool OneIn(uint32_t n) {
    uint64_t r = SplitMix64(&rng_);
    return n != 0 && r % n == 0;
  }

  FaultyFabric* const fabric_;
  std::unique_ptr<Connection> base_;
  FaultyCompletionQueue* const send_cq_;
  const uint64_t ordinal_;
  Mutex post_mu_;
  uint64_t rng_ ASYMNVM_GUARDED_BY(post_mu_);
  uint64_t request_index_ ASYMNVM_GUARDED_BY(post_mu_) = 0;
  bool cut_ ASYMNVM_GUARDED_BY(post_mu_) = false;
  std::atomic<bool> failed_{false};
  mutable Mutex error_mu_;
  Status error_ ASYMNVM_GUARDED_BY(error_mu_);
};

class FaultyListener : public Listener {
 public:
  FaultyListener(FaultyFabric* fabric, std::unique_ptr<Listener> base)
      : fabric_(fabric), base_(std::move(base)) {}
  std::string address() const override { return base_->address(); }
  Result<std::unique_ptr<Connection>> Accept(const ConnectionOptions& options) override {
    ASYMNVM_ASSIGN_OR_RETURN(ConnectionOptions unwrapped, FaultyFabric::Unwrap(options));
    ASYMNVM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, base_->Accept(unwrapped));
    return fabric_->WrapConnection(std::move(conn), options);
  }

 private:
  FaultyFabric* const fabric_;
  std::unique_ptr<Listener> base_;
};

FaultyFabric::FaultyFabric(std::unique_ptr<Fabric> base, const FaultOptions& options)
    : base_(std::move(base)), options_(options) {}

FaultyFabric::~FaultyFabric() = default;

std::unique_ptr<FaultyFabric> FaultyFabric::Wrap(std::unique_ptr<Fabric> base,
                                                 const FaultOptions& options) {
  return std::unique_ptr<FaultyFabric>(new FaultyFabric(std::move(base), options));
}

Result<std::unique_ptr<FaultyFabric>> FaultyFabric::Open(const FabricOptions& fabric_options,
                                                         const FaultOptions& fault_options) {
  ASYMNVM_ASSIGN_OR_RETURN(std::unique_ptr<Fabric> base, Fabric::Open(fabric_options));
  return Wrap(std::move(base), fault_options);
}

std::string FaultyFabric::provider() const { return base_->provider(); }
Capabilities FaultyFabric::capabilities() const { return base_->capabilities(); }
Result<std::unique_ptr<ProtectionDomain>> FaultyFabric::AllocPd() { return base_->AllocPd(); }

Result<std::unique_ptr<CompletionQueue>> FaultyFabric::CreateCq(const CompletionQueueOptions& o) {
  ASYMNVM_ASSIGN_OR_RETURN(std::unique_ptr<CompletionQueue> cq, base_->CreateCq(o));
  return std::unique_ptr<CompletionQueue>(new FaultyCompletionQueue(std::move(cq)));
}

Result<std::unique_ptr<SharedReceiveQueue>> FaultyFabric::CreateSrq(ProtectionDomain* pd,
                                                                    const SrqOptions& o) {
  return base_->CreateSrq(pd, o);
}

Result<std::unique_ptr<Listener>> FaultyFabric::Listen(ProtectionDomain* pd,
                                                       const std::string& address) {
  ASYMNVM_ASSIGN_OR_RETURN(std::unique_ptr<Listener> l, base_->Listen(pd, address));
  return std::unique_ptr<Listener>(new FaultyListener(this, std::move(l)));
}

Result<std::unique_ptr<Connection>> FaultyFabric::Connect(ProtectionDomain* pd,
                                                          const std::string& address,
                                                          const ConnectionOptions& options) {
  ASYMNVM_ASSIGN_OR_RETURN(ConnectionOptions unwrapped, Unwrap(options));
  ASYMNVM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                           base_->Connect(pd, address, unwrapped));
  return WrapConnection(std::move(conn), options);
}

Counters FaultyFabric::counters() const { return base_->counters(); }

Result<ConnectionOptions> FaultyFabric::Unwrap(const ConnectionOptions& options) {
  ConnectionOptions out = options;
  for (CompletionQueue** cq : {&out.send_cq, &out.recv_cq}) {
    if (*cq == nullptr) continue;
    auto* faulty = dynamic_cast<FaultyCompletionQueue*>(*cq);
    if (faulty == nullptr) {
      return Status::InvalidArgument(
          "fault injector: connection options must name CQs created by the FaultyFabric");
    }
    *cq = faulty->base();
  }
  return out;
}

Result<std::unique_ptr<Connection>> FaultyFabric::WrapConnection(std::unique_ptr<Connection> base,
                                                                 const ConnectionOptions& options) {
  auto* send_cq = dynamic_cast<FaultyCompletionQueue*>(options.send_cq);
  uint64_t seed;
  {
    MutexLock lock(mu_);
    seed = options_.seed;
  }
  auto conn = std::make_unique<FaultyConnection>(this, std::move(base), send_cq,
                                                 next_ordinal_.fetch_add(1), seed);
  ASYMNVM_CRASH_POINT("fabric.connect.after");
  return std::unique_ptr<Connection>(std::move(conn));
}

Status FaultyFabric::CutConnection(Connection* connection) {
  auto* faulty = dynamic_cast<FaultyConnection*>(connection);
  if (faulty == nullptr) {
    return Status::InvalidArgument("fault injector: not a connection of this FaultyFabric");
  }
  faulty->Cut();
  return Status::Ok();
}

void FaultyFabric::SetFaultOptions(const FaultOptions& options) {
  MutexLock lock(mu_);
  options_ = options;
}

FaultOptions FaultyFabric::fault_options() const {
  MutexLock lock(mu_);
  return options_;
}

FaultCounters FaultyFabric::fault_counters() const {
  MutexLock lock(mu_);
  return counters_;
}

std::vector<FaultEvent> FaultyFabric::fault_log() const {
  MutexLock lock(mu_);
  return log_;
}

void FaultyFabric::Record(const FaultEvent& event) {
  MutexLock lock(mu_);
  log_.push_back(event);
  switch (event.kind) {
    case FaultKind::kDrop:
      counters_.dropped++;
      break;
    case FaultKind::kError:
      counters_.errored++;
      break;
    case FaultKind::kDelay:
      counters_.delayed++;
      break;
    case FaultKind::kCut:
      counters_.cuts++;
      break;
  }
}

void FaultyFabric::CountSeen(uint64_t n) {
  MutexLock lock(mu_);
  counters_.requests_seen += n;
}

void FaultyFabric::CountFlushed(uint64_t n) {
  MutexLock lock(mu_);
  counters_.flushed += n;
}

}  // namespace asymnvm::fabric
