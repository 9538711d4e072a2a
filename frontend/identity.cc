#include "frontend/identity.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::frontend {

namespace {
constexpr const char* kIdCounter = "/asymnvm/ids/frontend";
constexpr uint64_t kMaxFrontendId = 0xFFFF;  // the Rowan owner field is 16 bits
constexpr int kAllocateAttempts = 64;
}  // namespace

std::string FrontendIdentity::EpochPath(uint64_t id) {
  return "/asymnvm/frontends/" + std::to_string(id);
}
std::string FrontendIdentity::LeasePath(uint64_t id) { return EpochPath(id) + "/lease"; }

Status FrontendIdentity::TryClaim(uint64_t id) {
  ASYMNVM_RETURN_IF_ERROR(coord_->EnsurePath(EpochPath(id)));
  const std::string lease = "pid " + std::to_string(::getpid());
  const int64_t sent = std::chrono::steady_clock::now().time_since_epoch().count();
  auto created = coord_->Create(LeasePath(id), lease, coord::kEphemeral);
  if (!created.ok()) {
    if (created.status().code() == StatusCode::kAlreadyExists) {
      std::string holder;
      auto n = coord_->Get(LeasePath(id));
      if (n.ok()) holder = " (" + n->data + ", session " + std::to_string(n->owner_session) + ")";
      return Status::AlreadyExists("session: front-end id " + std::to_string(id) +
                                   " is held by another live process" + holder +
                                   "; choose another id, or frontend_id 0 to be given one");
    }
    return created.status();
  }
  // The lease is ours: bump the incarnation epoch (only the lease holder writes it).
  for (;;) {
    auto node = coord_->Get(EpochPath(id));
    if (!node.ok()) return node.status();
    uint64_t epoch = 0;
    if (node->data.rfind("epoch ", 0) == 0)
      epoch = std::strtoull(node->data.c_str() + 6, nullptr, 10);
    auto set = coord_->Set(EpochPath(id), "epoch " + std::to_string(epoch + 1), node->version);
    if (set.ok()) {
      id_ = id;
      epoch_ = epoch + 1;
      confirmed_.store(sent);
      return Status::Ok();
    }
    if (set.status().code() != StatusCode::kAborted) return set.status();
  }
}

Result<std::unique_ptr<FrontendIdentity>> FrontendIdentity::Claim(
    const std::string& uri, uint64_t requested, std::chrono::milliseconds timeout) {
  if (requested > kMaxFrontendId) {
    return Status::InvalidArgument("session: frontend_id must be in 1..65535 (0: allocate one)");
  }
  coord::Options o;
  o.connect_timeout = timeout;
  o.operation_timeout = timeout;
  auto c = coord::Coordinator::Open(uri, o);
  if (!c.ok()) return c.status().WithContext("session: coordinator " + uri);
  std::unique_ptr<FrontendIdentity> me(new FrontendIdentity());
  me->coord_ = std::move(c).value();
  if (requested != 0) {
    ASYMNVM_RETURN_IF_ERROR(me->TryClaim(requested));
    me->StartHeartbeat();
    return me;
  }
  for (int attempt = 0; attempt < kAllocateAttempts; ++attempt) {
    auto id = me->coord_->AllocateId(kIdCounter);
    if (!id.ok()) return id.status().WithContext("session: allocating a front-end id");
    if (*id > kMaxFrontendId) {
      return Status::ResourceExhausted("session: the coordinator's front-end ids ran past 65535",
                                       false);
    }
    Status st = me->TryClaim(*id);
    if (st.ok()) {
      me->StartHeartbeat();
      return me;
    }
    // An id someone chose by hand: take the next one.
    if (st.code() != StatusCode::kAlreadyExists) return st;
  }
  return Status::ResourceExhausted(
      "session: no free front-end id after " + std::to_string(kAllocateAttempts) + " allocations",
      true);
}

void FrontendIdentity::StartHeartbeat() {
  lease_ = coord_->lease_timeout();
  if (lease_.count() <= 0) return;
  heartbeat_ = std::thread([this] { Heartbeat(); });
}

void FrontendIdentity::Heartbeat() {
  const auto period = std::max(lease_ / 5, std::chrono::milliseconds(10));
  MutexLock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock.native(), period, [this]() ASYMNVM_REQUIRES(mu_) { return stop_; });
    if (stop_) break;
    lock.unlock();
    const int64_t sent = std::chrono::steady_clock::now().time_since_epoch().count();
    auto node = coord_->Get(LeasePath(id_));
    if (node.ok() && node->owner_session == coord_->session_id()) {
      int64_t prev = confirmed_.load();
      while (prev < sent && !confirmed_.compare_exchange_weak(prev, sent)) {
      }
    } else if ((!node.ok() && node.status().code() == StatusCode::kNotFound) || node.ok() ||
               coord_->state() == coord::SessionState::kExpired) {
      if (!lost_.exchange(true)) {
        LOG_WARN("frontend", "front-end id " << id_ << " (epoch " << epoch_
                                             << "): lease lost; sessions under it are fenced");
      }
    }
    lock.lock();
  }
}

Status FrontendIdentity::CheckLease() const {
  if (lost_.load()) {
    return Status::FailedPrecondition("fenced: the lease of front-end id " + std::to_string(id_) +
                                      " (epoch " + std::to_string(epoch_) +
                                      ") was lost; another process may have taken it over")
        .WithSubCode(StatusSubCode::kFenced);
  }
  if (lease_.count() <= 0) return Status::Ok();
  const auto age = std::chrono::steady_clock::now().time_since_epoch() -
                   std::chrono::steady_clock::duration(confirmed_.load());
  if (age * 3 >= lease_ * 2) {
    return Status::FailedPrecondition(
               "fenced: the lease of front-end id " + std::to_string(id_) + " (epoch " +
               std::to_string(epoch_) + ") was last confirmed " +
               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(age).count()) +
               " ms ago (lease " + std::to_string(lease_.count()) +
               " ms): the coordinator may have expired it")
        .WithSubCode(StatusSubCode::kFenced);
  }
  return Status::Ok();
}

FrontendIdentity::~FrontendIdentity() {
  if (heartbeat_.joinable()) {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    heartbeat_.join();
  }
  if (!coord_) return;
  if (id_ != 0) {
    Status st = coord_->Delete(LeasePath(id_));
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      LOG_WARN("frontend", "releasing front-end id " << id_ << ": " << st.ToString());
    }
  }
  coord_->Close();
}

Result<std::unique_ptr<FrontendIdentity>> ClaimSessionIdentity(SessionOptions* options) {
  if (options->coordinator.empty()) return std::unique_ptr<FrontendIdentity>();
  auto identity = FrontendIdentity::Claim(options->coordinator, options->frontend_id,
                                          std::max(options->timeout, std::chrono::milliseconds(1)));
  if (!identity.ok()) return identity.status();
  options->frontend_id = (*identity)->id();
  return std::move(identity).value();
}

}  // namespace asymnvm::frontend
