#include "mirror/primary_role.h"

#include <unistd.h>

#include <sstream>

#include "asymnvm/pm.h"
#include "backend/registration.h"
#include "common/logging.h"
#include "mirror/group.h"

namespace asymnvm::mirror {

namespace {
constexpr auto kPoll = std::chrono::milliseconds(250);

}  // namespace

std::string JoiningPath(const std::array<uint8_t, 16>& uuid) {
  return GroupPath(uuid) + "/joining";
}

Status RecordReplica(coord::Coordinator& c, const std::string& name,
                     const std::array<uint8_t, 16>& uuid) {
  const std::string dir = "/asymnvm/replicas";
  ASYMNVM_RETURN_IF_ERROR(c.EnsurePath(dir));
  const std::string path = dir + "/" + NodeComponent(name);
  const std::string data = "group " + pm::UuidToString(uuid) + "\nname " + name + "\n";
  for (int attempt = 0; attempt < 10; attempt++) {
    auto node = c.Get(path);
    if (node.ok()) {
      if (node->data == data) return Status::Ok();
      auto set = c.Set(path, data, node->version);
      if (set.ok() || set.status().code() != StatusCode::kAborted) return set.status();
      continue;
    }
    if (node.status().code() != StatusCode::kNotFound) return node.status();
    auto created = c.Create(path, data);
    if (created.ok() || created.status().code() != StatusCode::kAlreadyExists) {
      return created.status();
    }
  }
  return Status::Aborted(path + ": too many concurrent changes");
}

Result<std::array<uint8_t, 16>> LookupReplica(coord::Coordinator& c, const std::string& name) {
  const std::string path = "/asymnvm/replicas/" + NodeComponent(name);
  ASYMNVM_ASSIGN_OR_RETURN(coord::Node node, c.Get(path));
  auto uuid = pm::UuidFromString(backend::RegistrationField(node.data, "group"));
  if (!uuid.ok()) return Status::Corruption(path + ": " + uuid.status().message());
  return *uuid;
}

PrimaryRole::PrimaryRole(std::shared_ptr<coord::Coordinator> coordinator,
                         const std::array<uint8_t, 16>& uuid, std::string name, uint64_t term,
                         std::string who)
    : coord_(std::move(coordinator)),
      uuid_(uuid),
      name_(std::move(name)),
      who_(std::move(who)),
      term_(term) {}

PrimaryRole::~PrimaryRole() { Stop(false); }

Status PrimaryRole::OnInSync(const std::vector<std::string>& insync) {
  uint64_t t = 0;
  Status s = SetInSync(*coord_, uuid_, name_, insync, &t);
  if (s.ok()) {
    uint64_t cur = term_.load();
    while (t > cur && !term_.compare_exchange_weak(cur, t)) {
    }
    std::string list;
    for (const auto& n : insync) list += (list.empty() ? "" : ",") + n;
    LOG_INFO("mirror", who_ << ": group in-sync set (term " << t << "): {" << list << "}");
  }
  return s;
}

Status PrimaryRole::CheckClientTerm(uint64_t client_term) {
  if (client_term <= term_.load()) return Status::Ok();
  auto node = coord_->Get(GroupPath(uuid_) + "/state");
  if (!node.ok()) {
    return Status::FailedPrecondition(
        "register: the front-end is at group term " + std::to_string(client_term) +
        ", and the group state cannot be read: " + node.status().ToString());
  }
  auto s = DecodeGroupState(node->data);
  if (!s.ok()) return s.status();
  if (s->primary != name_) {
    Status why =
        Status::FailedPrecondition(
            "fenced: a front-end registered at group term " + std::to_string(client_term) +
            "; the group is at term " + std::to_string(s->term) + ", served by " + s->primary +
            " (a mirror was promoted); this replica (" + name_ + ") holds stale data")
            .WithSubCode(StatusSubCode::kFenced);
    Fence(why);
    return why;
  }
  uint64_t cur = term_.load();
  while (s->term > cur && !term_.compare_exchange_weak(cur, s->term)) {
  }
  if (client_term <= term_.load()) return Status::Ok();
  return Status::FailedPrecondition("register: the front-end claims group term " +
                                    std::to_string(client_term) + "; the group is at term " +
                                    std::to_string(s->term) + " (served here)");
}

Status PrimaryRole::Register(const std::string& data, std::chrono::milliseconds wait) {
  const std::string full = data + "term " + std::to_string(term_.load()) + "\n";
  ASYMNVM_RETURN_IF_ERROR(RegisterPrimaryNode(*coord_, uuid_, full, wait));
  registered_ = GroupPath(uuid_) + "/primary";
  Status r = RecordReplica(*coord_, name_, uuid_);
  if (!r.ok()) LOG_WARN("mirror", who_ << ": recording replica " << name_ << ": " << r.ToString());
  return Status::Ok();
}

void PrimaryRole::Start(std::function<void(const Status&)> fenced,
                        std::function<Status(const std::string&)> add_mirror) {
  fenced_ = std::move(fenced);
  add_mirror_ = std::move(add_mirror);
  watcher_ = std::thread([this] { Loop(); });
}

void PrimaryRole::Fence(const Status& why) {
  if (fenced_once_.exchange(true)) return;
  LOG_ERROR("mirror", who_ << ": " << why.ToString());
  if (fenced_) fenced_(why);
}

void PrimaryRole::Stop(bool clear_insync) {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stop_ = true;
    cv_.notify_all();
  }
  if (watcher_.joinable()) watcher_.join();
  auto has_state = coord_->Exists(GroupPath(uuid_) + "/state");
  if (clear_insync && (!has_state.ok() || *has_state)) {
    uint64_t t = 0;
    Status s = SetInSync(*coord_, uuid_, name_, {}, &t);
    if (!s.ok()) LOG_WARN("mirror", who_ << ": clearing the in-sync set: " << s.ToString());
  }
  if (!registered_.empty()) {
    Status d = coord_->Delete(registered_);
    if (!d.ok()) LOG_WARN("mirror", who_ << ": unregister " << registered_ << ": " << d.ToString());
    registered_.clear();
  }
}

void PrimaryRole::AttachJoining() {
  const std::string dir = JoiningPath(uuid_);
  auto kids = coord_->Children(dir);
  if (!kids.ok()) return;  // kNotFound: nobody ever announced itself
  for (const auto& k : *kids) {
    auto node = coord_->Get(dir + "/" + k);
    if (!node.ok()) continue;
    const std::string address = backend::RegistrationField(node->data, "address");
    if (address.empty() || attached_.count(address)) continue;
    Status s = add_mirror_(address);
    attached_.insert(address);  // one attempt per address: the Replicator retries a link itself
    if (s.ok()) {
      joined_++;
      LOG_INFO("mirror", who_ << ": mirror " << backend::RegistrationField(node->data, "name")
                              << " at " << address
                              << " announced itself; attaching it while serving");
    } else if (s.code() != StatusCode::kAlreadyExists) {
      LOG_WARN("mirror", who_ << ": joining mirror at " << address << ": " << s.ToString());
    }
  }
}

void PrimaryRole::Loop() {
  const std::string path = GroupPath(uuid_) + "/state";
  auto confirmed = coord::Clock::now();
  std::string last_error;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stop_) return;
    }
    const auto sent = coord::Clock::now();
    int64_t version = coord::Coordinator::kNoNode;
    auto node = coord_->Get(path);
    if (node.ok() || node.status().code() == StatusCode::kNotFound) {
      confirmed = sent;
      last_error.clear();
      if (node.ok()) {
        version = node->version;
        auto s = DecodeGroupState(node->data);
        if (s.ok() && s->primary != name_) {
          Fence(Status::FailedPrecondition(
                    "fenced: group " + pm::UuidToString(uuid_) + " is now at term " +
                    std::to_string(s->term) + ", served by " + s->primary +
                    " (a mirror was promoted); this replica (" + name_ + ") must not serve")
                    .WithSubCode(StatusSubCode::kFenced));
          return;
        }
        if (s.ok()) {
          uint64_t cur = term_.load();
          while (s->term > cur && !term_.compare_exchange_weak(cur, s->term)) {
          }
        }
      }
    } else if (node.status().ToString() != last_error) {
      last_error = node.status().ToString();
      LOG_WARN("mirror", who_ << ": reading " << path << ": " << last_error);
    }
    if (coord_->state() == coord::SessionState::kExpired) {
      Fence(Status::FailedPrecondition("fenced: the coordinator session expired, so /primary "
                                       "is gone and a mirror may be promoted")
                .WithSubCode(StatusSubCode::kFenced));
      return;
    }
    const auto lease = coord_->lease_timeout();
    if (lease.count() > 0 && coord::Clock::now() - confirmed > lease * 2 / 3) {
      Fence(Status::FailedPrecondition(
                "fenced: the coordinator has not confirmed this replica's session for " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   coord::Clock::now() - confirmed)
                                   .count()) +
                " ms (2/3 of its " + std::to_string(lease.count()) +
                " ms timeout): a mirror may be promoted")
                .WithSubCode(StatusSubCode::kFenced));
      return;
    }
    if (add_mirror_) AttachJoining();
    polls_++;
    // Waits for a change of the state (or the poll interval: joining mirrors, the lease).
    auto deadline = coord::Clock::now() + kPoll;
    if (lease.count() > 0) deadline = std::min(deadline, coord::Clock::now() + lease / 6);
    auto changed = coord_->WaitForChange(path, version, deadline);
    if (!changed.ok() && changed.status().code() != StatusCode::kTimedOut) {
      MutexLock lock(mu_);
      cv_.wait_for(lock.native(), kPoll, [&]() ASYMNVM_REQUIRES(mu_) { return stop_; });
    }
  }
}

}  // namespace asymnvm::mirror
