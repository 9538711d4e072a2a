// Cluster: one Session per back-end (include/asymnvm/cluster.h, doc/frontend.md §Clusters).
#include "asymnvm/cluster.h"

#include <algorithm>

#include "asymnvm/pm.h"
#include "common/logging.h"

namespace asymnvm::frontend {

std::string UuidString(const std::array<uint8_t, 16>& uuid) { return pm::UuidToString(uuid); }

struct Cluster::Impl {
  SessionOptions o;
  std::vector<std::string> addresses;
  std::vector<std::array<uint8_t, 16>> uuids;
  std::vector<std::unique_ptr<Session>> sessions;  // null while a Reconnect failed
  std::vector<Member*> members;

  Result<std::unique_ptr<Session>> OpenOne(const std::string& address) const {
    SessionOptions so = o;
    so.backends = {address};
    auto s = Session::Open(so);
    if (!s.ok()) return s.status().WithContext("cluster: back-end " + address);
    return s;
  }
};

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Cluster::~Cluster() {
  if (!impl_) return;
  // Members should be gone; if one is not, it must not be told about sessions that vanish.
  if (!impl_->members.empty()) {
    LOG_WARN("frontend", "cluster destroyed with " << impl_->members.size() << " members attached");
  }
  while (!impl_->sessions.empty()) impl_->sessions.pop_back();
}

Result<std::unique_ptr<Cluster>> Cluster::Open(const SessionOptions& options) {
  if (options.backends.empty()) return Status::InvalidArgument("cluster: no back-end address");
  auto m = std::make_unique<Impl>();
  m->o = options;
  for (const std::string& a : options.backends) {
    ASYMNVM_ASSIGN_OR_RETURN(auto s, m->OpenOne(a));
    const auto uuid = s->pool_uuid();
    for (size_t j = 0; j < m->uuids.size(); j++) {
      if (m->uuids[j] == uuid) {
        return Status::InvalidArgument("cluster: back-ends " + m->addresses[j] + " and " + a +
                                       " serve the same pool " + UuidString(uuid));
      }
    }
    m->addresses.push_back(a);
    m->uuids.push_back(uuid);
    m->sessions.push_back(std::move(s));
  }
  return std::unique_ptr<Cluster>(new Cluster(std::move(m)));
}

size_t Cluster::size() const { return impl_->sessions.size(); }

Session& Cluster::session(size_t index) {
  // A failed Reconnect leaves the slot empty; callers check ok-ness through Reconnect's status.
  return *impl_->sessions.at(index);
}

const std::string& Cluster::address(size_t index) const { return impl_->addresses.at(index); }

const std::array<uint8_t, 16>& Cluster::pool_uuid(size_t index) const {
  return impl_->uuids.at(index);
}

Result<size_t> Cluster::IndexOf(const std::array<uint8_t, 16>& uuid) const {
  for (size_t i = 0; i < impl_->uuids.size(); i++) {
    if (impl_->uuids[i] == uuid) return i;
  }
  return Status::NotFound("cluster: no back-end serves pool " + UuidString(uuid));
}

Status Cluster::Reconnect(size_t index, const std::string& address) {
  Impl& m = *impl_;
  if (index >= m.sessions.size()) {
    return Status::InvalidArgument("cluster: no back-end " + std::to_string(index) + " (size " +
                                   std::to_string(m.sessions.size()) + ")");
  }
  for (Member* mem : m.members) mem->Detach(index);
  m.sessions[index].reset();  // its destructor's fence fails fast on a dead connection
  if (!address.empty()) m.addresses[index] = address;
  ASYMNVM_ASSIGN_OR_RETURN(auto s, m.OpenOne(m.addresses[index]));
  if (s->pool_uuid() != m.uuids[index]) {
    return Status::FailedPrecondition("cluster: " + m.addresses[index] + " now serves pool " +
                                      UuidString(s->pool_uuid()) + ", expected " +
                                      UuidString(m.uuids[index]));
  }
  m.sessions[index] = std::move(s);
  for (Member* mem : m.members) {
    ASYMNVM_RETURN_IF_ERROR(mem->Attach(index, *m.sessions[index]));
  }
  return m.sessions[index]->Replay().WithContext("cluster: replay at " + m.addresses[index]);
}

void Cluster::AddMember(Member* member) { impl_->members.push_back(member); }

void Cluster::RemoveMember(Member* member) {
  auto& v = impl_->members;
  v.erase(std::remove(v.begin(), v.end(), member), v.end());
}

Status Cluster::Fence() {
  Status first;
  for (auto& s : impl_->sessions) {
    if (!s) {
      if (first.ok()) first = Status::ConnectionError("cluster: a back-end is not connected");
      continue;
    }
    Status st = s->Fence();
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

Status Cluster::Replay() {
  for (auto& s : impl_->sessions) {
    if (!s) return Status::ConnectionError("cluster: a back-end is not connected");
    ASYMNVM_RETURN_IF_ERROR(s->Replay());
  }
  return Status::Ok();
}

}  // namespace asymnvm::frontend
