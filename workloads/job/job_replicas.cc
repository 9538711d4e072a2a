#include "workloads/job/job_replicas.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "asymnvm/frontend.h"
#include "asymnvm/pm.h"
#include "mirror/group.h"
#include "tools/ctl.h"

namespace asymnvm::job {

namespace fs = std::filesystem;

bool IsLostConnection(const Status& st) {
  switch (st.code()) {
    case StatusCode::kConnectionError:
    case StatusCode::kTimedOut:
    case StatusCode::kRnrRetryExceeded:
    case StatusCode::kAborted:
    case StatusCode::kUnavailable:
      return true;
    default:
      return false;
  }
}

std::string FormatFixed(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.*f", prec, v);
  return b;
}

Result<std::array<uint8_t, 16>> ReadPoolUuid(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("open " + path, errno);
  std::vector<uint8_t> buf(pm::kSuperblockSize);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  const int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(buf.size()))
    return Status::IoError("read superblock of " + path, e);
  pm::Superblock sb;
  ASYMNVM_RETURN_IF_ERROR(pm::DecodeSuperblock(buf.data(), buf.size(), &sb));
  return sb.uuid;
}

std::string ReplicaPaths::Pool(uint32_t i) const {
  return (fs::path(data_dir_) /
          (i == 0 ? std::string("asymnvm.pool") : "asymnvm-" + std::to_string(i) + ".pool"))
      .string();
}

std::string ReplicaPaths::Mirror(uint32_t i, uint32_t m) const {
  std::string p = Pool(i);
  return p.substr(0, p.size() - 5) + ".mirror-" + std::to_string(m) + ".pool";
}

std::string ReplicaPaths::Slot(uint32_t i, uint32_t slot) const {
  return slot == 0 ? Pool(i) : Mirror(i, slot - 1);
}

std::string ReplicaPaths::SlotAddress(uint32_t i, uint32_t slot) const {
  return "unix://" + fs::absolute(Slot(i, slot)).lexically_normal().string() + ".sock";
}

bool ReplicaPaths::Exists(uint32_t i) const {
  for (uint32_t slot = 0; slot < kSlots; slot++) {
    if (fs::exists(Slot(i, slot))) return true;
  }
  return false;
}

bool ReplicaPaths::TornCopy(uint32_t i, uint32_t slot) const {
  std::ifstream side(Slot(i, slot) + ".mirror");
  std::string first;
  return side && std::getline(side, first) && first != "state in-sync";
}

void ReplicaPaths::RemoveAll() const {
  std::error_code ec;
  for (uint32_t i = 0; Exists(i); i++) {
    fs::remove(Pool(i), ec);
    fs::remove(Pool(i) + ".backend.log", ec);
    fs::remove(Pool(i) + ".mirror", ec);  // the old primary's path rejoined as a mirror
    for (uint32_t m = 0; m < 4; m++) {
      for (const char* suffix : {"", ".mirror", ".backend.log"}) {
        fs::remove(Mirror(i, m) + suffix, ec);
      }
    }
  }
}

Result<uint32_t> ReplicaPaths::ServingSlot(uint32_t i, coord::Coordinator& coord) const {
  for (uint32_t slot = 0; slot < kSlots; slot++) {
    if (!fs::exists(Slot(i, slot)) || TornCopy(i, slot)) continue;
    auto uuid = ReadPoolUuid(Slot(i, slot));
    if (!uuid.ok()) continue;  // a mirror whose copy never started
    auto node = coord.Get(mirror::GroupPath(*uuid) + "/state");
    if (!node.ok()) {
      if (node.status().code() == StatusCode::kNotFound) continue;  // no group (yet)
      return node.status();
    }
    ASYMNVM_ASSIGN_OR_RETURN(mirror::GroupState gs, mirror::DecodeGroupState(node->data));
    for (uint32_t t = 0; t < kSlots; t++) {
      if (mirror::DefaultReplicaName(Slot(i, t)) == gs.primary) return t;
    }
    return Status::FailedPrecondition("the group " + pm::UuidToString(*uuid) + " of back-end " +
                                      std::to_string(i) + " is served by " + gs.primary +
                                      " (term " + std::to_string(gs.term) + "), not by a pool of " +
                                      data_dir_);
  }
  if (fs::exists(Slot(i, 0)) && TornCopy(i, 0)) {
    return Status::FailedPrecondition(Slot(i, 0) + " is a mirror's incomplete copy (" + Slot(i, 0) +
                                      ".mirror) and no group state names a pool to serve instead");
  }
  return 0u;
}

Status JobDaemons::FindMirrorBinary(const std::string& backend_bin) {
  const auto dir = fs::path(backend_bin).parent_path();
  for (auto p : {dir / ".." / "mirror" / "asymnvm-mirror", dir / "asymnvm-mirror"}) {
    if (::access(p.c_str(), X_OK) == 0) {
      mirror_bin_ = p.lexically_normal().string();
      return Status::Ok();
    }
  }
  return Status::NotFound("asymnvm-mirror not found next to " + backend_bin);
}

Result<std::unique_ptr<driver::BackendProcess>> JobDaemons::StartMirror(uint32_t i, uint32_t slot) {
  const std::string mp = paths_.Slot(i, slot);
  std::vector<std::string> margs = {"--pm-mode", o_.pm_mode, "--coord",
                                    o_.coord,    "--listen", paths_.SlotAddress(i, slot)};
  if (o_.kill_primary_after > 0) {
    margs.push_back("--promotion-timeout-ms");
    margs.push_back("1000");
  }
  for (uint32_t other : group_slots_[i]) {
    if (other == slot) continue;
    margs.push_back("--mirror");
    margs.push_back(paths_.SlotAddress(i, other));
  }
  if (o_.mirrors > 0) {
    margs.push_back("--mirror-mode");
    margs.push_back(o_.mirror_mode);
  }
  return driver::BackendProcess::Start(mirror_bin_, mp, o_.pool_size, margs, o_.log_level);
}

Status JobDaemons::StartGroup(uint32_t i, const std::string& backend_bin, std::string* what) {
  if (group_slots_.size() <= i) {
    group_slots_.resize(i + 1);
    mirror_first_.resize(i + 1);
  }
  auto serve = paths_.ServingSlot(i, coord_);
  if (!serve.ok()) {
    *what = "back-end " + std::to_string(i);
    return serve.status();
  }
  const std::string p = paths_.Slot(i, *serve);
  group_slots_[i].push_back(*serve);
  for (uint32_t slot = 0; slot < ReplicaPaths::kSlots && group_slots_[i].size() < o_.mirrors + 1;
       slot++) {
    if (slot != *serve) group_slots_[i].push_back(slot);
  }
  std::cout << "asymnvm-job: " << (fs::exists(p) ? "reopening " : "creating ") << p;
  if (*serve != 0) std::cout << " (promoted: the group's state on the coordinator names it)";
  std::cout << "\n";
  std::vector<std::string> bargs = {"--pm-mode", o_.pm_mode, "--coord",
                                    o_.coord,    "--fabric", o_.fabric};
  mirror_first_[i] = mirrors.size();
  for (size_t m = 1; m < group_slots_[i].size(); m++) {
    const std::string mp = paths_.Slot(i, group_slots_[i][m]);
    auto md = StartMirror(i, group_slots_[i][m]);
    if (!md.ok()) {
      *what = "starting mirror " + mp;
      return md.status();
    }
    std::cout << "mirror " << m - 1 << " of back-end " << i << ": pid " << (*md)->pid() << " at "
              << (*md)->address() << " (" << mp << ")\n";
    bargs.push_back("--mirror");
    bargs.push_back((*md)->address());
    mirrors.push_back(std::move(*md));
  }
  if (o_.mirrors > 0) {
    bargs.push_back("--mirror-mode");
    bargs.push_back(o_.mirror_mode);
  }
  auto be = driver::BackendProcess::Start(backend_bin, p, o_.pool_size, bargs, o_.log_level);
  if (!be.ok()) {
    *what = "starting back-end " + std::to_string(i);
    return be.status();
  }
  std::cout << "back-end " << i << ": pid " << (*be)->pid() << " serving at " << (*be)->address()
            << "\n";
  addresses.push_back((*be)->address());
  backends.push_back(std::move(*be));
  return Status::Ok();
}

Status JobDaemons::WaitMirrorsInSync(const std::string& address) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  auto pause = std::chrono::milliseconds(20);
  std::string last;
  for (;;) {
    auto st = tools::FetchStatus(address, std::chrono::milliseconds(10000));
    if (st.ok()) {
      auto j = nlohmann::json::parse(*st, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.value("mirrors_configured", 0ull) > 0 &&
          j.value("mirrors_in_sync", 0ull) == j.value("mirrors_configured", 0ull)) {
        return Status::Ok();
      }
      last = st->substr(0, 400);
    } else {
      last = st.status().ToString();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::TimedOut("the back-end at " + address +
                              " did not report its mirrors in "
                              "sync within 3 minutes; last status: " +
                              last);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

Status JobDaemons::KillPrimary(frontend::Cluster& cl, uint64_t kill_after, FailoverReport* fo,
                               std::chrono::steady_clock::time_point* kill_time) {
  // No sync first: the primary dies while the structures hold ops open in DRAM (a stack's or
  // queue's pending pushes, unpublished MV versions) and memory logs in an unsent batch, as an
  // application would be; the sessions' reconnection drops and replays them (doc/frontend.md
  // §Reconnection).
  // Only an in-sync mirror may be promoted: a mirror still copying (a large pool on a slow
  // disk may outlast the back-end's --mirror-wait-ms) is waited for first.
  ASYMNVM_RETURN_IF_ERROR(WaitMirrorsInSync(addresses[0]));
  const uint32_t old_slot = group_slots_[0][0];
  fo->old_pid = backends[0]->pid();
  fo->old_address = addresses[0];
  fo->old_pool = paths_.Slot(0, old_slot);
  backends[0]->Kill();
  *kill_time = std::chrono::steady_clock::now();
  fo->killed = true;
  backends[0].reset();
  std::error_code rec;
  fs::remove(fo->old_pool, rec);
  if (rec) return Status::IoError("removing " + fo->old_pool + ": " + rec.message());
  std::cout << "killed back-end 0 (pid " << fo->old_pid << ", SIGKILL) after " << kill_after
            << " acknowledged operations; deleted " << fo->old_pool << "\n";
  // A call that is safe to repeat: the session finds the connection broken, waits for the
  // group's new primary to register on the coordinator, connects, replays its op logs not
  // covered there, and retries (doc/frontend.md §Reconnection). A batch that was pending when
  // the connection broke makes the first call fail ("reconnects at its next call"): again.
  frontend::Session& s0 = cl.session(0);
  const uint64_t replayed0 = s0.counters().replayed_ops;
  Status st;
  for (int attempt = 0; attempt < 3; attempt++) {
    st = s0.Fence();
    if (st.ok() || !IsLostConnection(st)) break;
  }
  if (!st.ok()) return st.WithContext("switching to the promoted mirror");
  fo->switch_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - *kill_time)
          .count();
  fo->replayed = s0.counters().replayed_ops - replayed0;
  fo->new_address = s0.backend_address();
  addresses[0] = fo->new_address;
  // Which mirror won: the group's state names it.
  auto node = coord_.Get(mirror::GroupPath(s0.pool_uuid()) + "/state");
  if (!node.ok()) return node.status().WithContext("the group's state");
  ASYMNVM_ASSIGN_OR_RETURN(mirror::GroupState gs, mirror::DecodeGroupState(node->data));
  fo->term = gs.term;
  size_t winner = 0;
  for (size_t m = 1; m < group_slots_[0].size(); m++) {
    if (mirror::DefaultReplicaName(paths_.Slot(0, group_slots_[0][m])) == gs.primary) winner = m;
  }
  if (winner == 0) {
    return Status::FailedPrecondition("the group's state names " + gs.primary +
                                      ", none of back-end 0's mirrors");
  }
  fo->new_pool = paths_.Slot(0, group_slots_[0][winner]);
  const size_t di = mirror_first_[0] + winner - 1;
  promoted.push_back(std::move(mirrors[di]));
  mirrors.erase(mirrors.begin() + static_cast<long>(di));
  // Rejoin: the old primary's path as a mirror of the promoted primary, which was started
  // with --mirror naming it and copies it while serving.
  auto md = StartMirror(0, old_slot);
  if (!md.ok()) return md.status().WithContext("rejoining " + fo->old_pool + " as a mirror");
  fo->rejoin_address = (*md)->address();
  std::cout << "promoted: " << fo->new_pool << " serves back-end 0 at " << fo->new_address
            << " (term " << fo->term << "); the job switched to it "
            << FormatFixed(fo->switch_ms, 0) << " ms after the kill (" << fo->replayed
            << " op(s) replayed); " << fo->old_pool << " rejoins as its mirror (pid "
            << (*md)->pid() << ")\n";
  mirrors.push_back(std::move(*md));
  return Status::Ok();
}

}  // namespace asymnvm::job
