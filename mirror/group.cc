#include "mirror/group.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "asymnvm/pm.h"

namespace asymnvm::mirror {

std::string GroupPath(const std::array<uint8_t, 16>& uuid) {
  return "/asymnvm/groups/" + pm::UuidToString(uuid);
}

std::string EncodeGroupState(const GroupState& s) {
  std::string out = "term " + std::to_string(s.term) + "\nprimary " + s.primary + "\ninsync ";
  for (size_t i = 0; i < s.insync.size(); i++) out += (i ? "," : "") + s.insync[i];
  return out + "\n";
}

Result<GroupState> DecodeGroupState(const std::string& data) {
  GroupState s;
  std::istringstream in(data);
  std::string line;
  bool have_term = false;
  while (std::getline(in, line)) {
    if (line.rfind("term ", 0) == 0) {
      try {
        s.term = std::stoull(line.substr(5));
        have_term = true;
      } catch (...) {
        return Status::Corruption("group state: bad term line '" + line + "'");
      }
    } else if (line.rfind("primary ", 0) == 0) {
      s.primary = line.substr(8);
    } else if (line.rfind("insync ", 0) == 0 || line == "insync") {
      std::string list = line.size() > 7 ? line.substr(7) : "";
      size_t pos = 0;
      while (pos < list.size()) {
        size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        if (end > pos) s.insync.push_back(list.substr(pos, end - pos));
        pos = end + 1;
      }
    }
  }
  if (!have_term) return Status::Corruption("group state without a term: '" + data + "'");
  return s;
}

std::string DefaultReplicaName(const std::string& pool_path) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::error_code ec;
  auto abs = std::filesystem::absolute(pool_path, ec);
  return std::string(host) + ":" + (ec ? pool_path : abs.lexically_normal().string());
}

std::string NodeComponent(const std::string& name) {
  std::string out;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
    out += ok ? ch : '_';
  }
  if (out.empty() || out[0] == '.') out = "_" + out;
  if (out.size() > 200) out = out.substr(out.size() - 200);
  return out;
}

namespace {
Status Fenced(const std::array<uint8_t, 16>& uuid, const GroupState& s, const std::string& name) {
  return Status::FailedPrecondition("fenced: group " + pm::UuidToString(uuid) + " is at term " +
                                    std::to_string(s.term) + ", served by " + s.primary +
                                    " (a mirror was promoted); this replica (" + name +
                                    ") holds stale data and must not serve")
      .WithSubCode(StatusSubCode::kFenced);
}
}  // namespace

Status CheckPrimary(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                    const std::string& name, uint64_t* term) {
  *term = 0;
  auto node = c.Get(GroupPath(uuid) + "/state");
  if (!node.ok()) {
    return node.status().code() == StatusCode::kNotFound ? Status::Ok() : node.status();
  }
  ASYMNVM_ASSIGN_OR_RETURN(GroupState s, DecodeGroupState(node->data));
  if (s.primary != name) return Fenced(uuid, s, name);
  *term = s.term;
  return Status::Ok();
}

Status SetInSync(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                 const std::string& name, const std::vector<std::string>& insync, uint64_t* term) {
  const std::string path = GroupPath(uuid) + "/state";
  ASYMNVM_RETURN_IF_ERROR(c.EnsurePath(GroupPath(uuid)));
  for (int attempt = 0; attempt < 100; attempt++) {
    auto node = c.Get(path);
    if (!node.ok() && node.status().code() == StatusCode::kNotFound) {
      GroupState s{1, name, insync};
      auto created = c.Create(path, EncodeGroupState(s));
      if (created.ok()) {
        *term = 1;
        return Status::Ok();
      }
      if (created.status().code() == StatusCode::kAlreadyExists) continue;
      return created.status();
    }
    ASYMNVM_RETURN_IF_ERROR(node.status());
    ASYMNVM_ASSIGN_OR_RETURN(GroupState s, DecodeGroupState(node->data));
    if (s.primary != name) return Fenced(uuid, s, name);
    s.insync = insync;
    auto set = c.Set(path, EncodeGroupState(s), node->version);
    if (set.ok()) {
      *term = s.term;
      return Status::Ok();
    }
    if (set.status().code() != StatusCode::kAborted) return set.status();
  }
  return Status::Aborted(path + ": too many concurrent changes");
}

Result<uint64_t> TryPromote(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                            const std::string& name) {
  const std::string path = GroupPath(uuid) + "/state";
  auto node = c.Get(path);
  if (!node.ok() && node.status().code() == StatusCode::kNotFound) {
    return Status::FailedPrecondition(path +
                                      " does not exist: no primary ever listed this mirror "
                                      "as in sync");
  }
  ASYMNVM_RETURN_IF_ERROR(node.status());
  ASYMNVM_ASSIGN_OR_RETURN(GroupState s, DecodeGroupState(node->data));
  if (s.primary == name) return s.term;  // already ours (a retry after a lost reply)
  if (std::find(s.insync.begin(), s.insync.end(), name) == s.insync.end()) {
    return Status::FailedPrecondition("mirror " + name + " is not in the in-sync set of term " +
                                      std::to_string(s.term) + " (" + node->data + ")");
  }
  GroupState n{s.term + 1, name, {}};
  auto set = c.Set(path, EncodeGroupState(n), node->version);
  if (!set.ok()) return set.status();
  return n.term;
}

Status RegisterPrimaryNode(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                           const std::string& data, std::chrono::milliseconds wait) {
  const std::string group = GroupPath(uuid);
  ASYMNVM_RETURN_IF_ERROR(c.EnsurePath(group));
  const std::string path = group + "/primary";
  const auto deadline = coord::Clock::now() + wait;
  for (;;) {
    auto created = c.Create(path, data, coord::kEphemeral);
    if (created.ok()) return Status::Ok();
    if (created.status().code() != StatusCode::kAlreadyExists) return created.status();
    auto old = c.Get(path);
    if (!old.ok() && old.status().code() == StatusCode::kNotFound) continue;
    ASYMNVM_RETURN_IF_ERROR(old.status());
    if (coord::Clock::now() >= deadline) {
      return Status::AlreadyExists(path + " is held by a live process (" + old->data + ")");
    }
    auto changed = c.WaitForChange(path, old->version, deadline);
    if (!changed.ok() && changed.status().code() != StatusCode::kTimedOut) return changed.status();
  }
}

}  // namespace asymnvm::mirror
