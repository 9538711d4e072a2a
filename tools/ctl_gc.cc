// asymnvm-ctl check's leak report and asymnvm-ctl gc (doc/tools.md §Leaks, §gc; doc/alloc.md
// §Leaks across crashes): used blocks (the allocator's bitmap) minus the blocks the structures
// reach (structures::WalkStructures: every structure's Verify with the read observer on) minus
// the blocks whose deferred free is pending.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>

#include "asymnvm/frontend.h"
#include "asymnvm/pm.h"
#include "backend/backend.h"
#include "common/logging.h"
#include "frontend/alloc_journal.h"
#include "structures/walk.h"
#include "tools/ctl.h"

namespace asymnvm::tools {
namespace {

// Copies the pool file sparsely (only 4 KiB pages that are not zero) while holding its lock.
Status CopyPool(const std::string& from, const std::string& to) {
  pm::PoolOptions po;
  po.layout = "";
  ASYMNVM_ASSIGN_OR_RETURN(auto pool, pm::Pool::Open(from, po));
  const int fd = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(to + ": " + std::strerror(errno));
  Status st;
  if (ftruncate(fd, static_cast<off_t>(pool->size())) != 0) {
    st = Status::IoError(to + ": ftruncate: " + std::strerror(errno));
  }
  constexpr uint64_t kPage = 4096;
  static const uint8_t kZero[kPage] = {};
  for (uint64_t off = 0; st.ok() && off < pool->size(); off += kPage) {
    const uint64_t n = std::min(kPage, pool->size() - off);
    const uint8_t* p = pool->base() + off;
    if (std::memcmp(p, kZero, n) == 0) continue;
    if (pwrite(fd, p, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
      st = Status::IoError(to + ": write: " + std::strerror(errno));
    }
  }
  close(fd);
  return st;
}

}  // namespace

Result<LeakReport> FindLeaks(const std::string& pool_path, const LeakOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  LeakReport rep;
  // Refuse a pool in use before starting anything on it (the back-end would refuse too; this
  // says what to do).
  {
    pm::PoolOptions po;
    po.layout = "";
    auto p = pm::Pool::Open(pool_path, po);
    if (!p.ok()) {
      if (p.status().code() == StatusCode::kFailedPrecondition) {
        return Status::FailedPrecondition(p.status().message() +
                                          " — stop the back-end (and its front-ends) first");
      }
      return p.status();
    }
  }
  backend::BackendOptions bo;
  bo.pool_path = pool_path;
  bo.persist_mode = options.persist_mode;
  bo.oq_buffers = options.oq_buffers;
  bo.oq_buffer_size = options.oq_buffer_size;
  // Deferred frees re-armed at start are not leaks (they are excluded below); they must not fire
  // while the walk runs, so the delay outlasts it. They stay recorded for the next start.
  bo.reclaim_delay = std::chrono::hours(24);
  const LogLevel level = GetLogLevel();
  if (static_cast<int>(level) < static_cast<int>(LogLevel::kWarn)) SetLogLevel(LogLevel::kWarn);
  struct RestoreLevel {
    LogLevel l;
    ~RestoreLevel() { SetLogLevel(l); }
  } restore{level};
  ASYMNVM_ASSIGN_OR_RETURN(auto be, backend::Backend::Start(bo));
  struct StopBackend {
    backend::Backend* b;
    ~StopBackend() { b->Stop(); }
  } stop{be.get()};

  std::vector<std::string> names;
  std::vector<uint64_t> journal_words;  // of the front-end records (frontend/alloc_journal.h)
  for (const auto& e : be->NamingEntries()) {
    if (e.type == backend::kFrontendRecordType &&
        e.name == "fe:" + std::to_string(kWalkFrontendId)) {
      return Status::FailedPrecondition(
          "front-end id " + std::to_string(kWalkFrontendId) +
          " is registered in this pool; the structure walk needs that id for itself");
    }
    if (e.type == backend::kFrontendRecordType) {
      journal_words.push_back(e.root_addr + frontend::kJournalWordFromRoot);
      continue;
    }
    names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  frontend::SessionOptions so;
  so.backends = {be->address()};
  so.frontend_id = kWalkFrontendId;
  so.level = frontend::Level::kNaive;
  Result<structures::BlockWalk> walk = Status::Internal("not walked");
  // Ownership journals (doc/alloc.md §Ownership journal): a journal's extent is not a leak (its
  // front-end record names it). gc clears every journal word before it frees anything (the
  // journals may name blocks it frees), then frees the journals' extents too.
  std::vector<std::pair<uint64_t, uint64_t>> journals;  // (word, journal extent)
  const uint32_t bs = be->layout().block_size;
  rep.block_size = bs;
  rep.blocks_total = be->layout().data.size / bs;
  const std::vector<alloc::Extent> extents = be->Extents();
  std::vector<bool> reached(extents.size(), false);
  {
    ASYMNVM_ASSIGN_OR_RETURN(auto session, frontend::Session::Open(so));
    walk = structures::WalkStructures(*session, names);
    for (uint64_t w : journal_words) {
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t j, session->ReadWord(w));
      if (j != 0) journals.emplace_back(w, j);
    }
    if (walk.ok()) {
      for (const auto& [w, j] : journals) walk->ranges.emplace_back(j, 1);
      std::sort(walk->ranges.begin(), walk->ranges.end());
      std::vector<std::pair<uint64_t, uint64_t>> ext;
      ext.reserve(extents.size());
      for (const alloc::Extent& x : extents) ext.emplace_back(x.addr, x.bytes);
      structures::ExtentReach reach = structures::ReachExtents(ext, walk->ranges);
      reached = std::move(reach.reached);
      rep.unallocated_reads = std::move(reach.unallocated);
      if (options.free && rep.unallocated_reads.empty()) {
        for (const auto& [w, j] : journals) {
          ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, session->CompareSwap(w, j, 0));
          if (old != j)
            return Status::Internal("gc: journal word " + std::to_string(w) + " changed");
          rep.journals_cleared++;
        }
      }
    }
  }
  // The walk's session (level naive: no op log) leaves no front-end record behind.
  ASYMNVM_RETURN_IF_ERROR(
      be->ForgetFrontend(kWalkFrontendId).WithContext("forget the walk's record"));
  if (!walk.ok()) {
    rep.walk_error = walk.status().ToString();
    rep.walk_code = walk.status().code();
  } else {
    for (const auto& w : walk->structures) rep.structures.push_back(w.name);
  }
  rep.journals = journals.size();
  std::set<uint64_t> journal_starts;
  for (const auto& [w, j] : journals) {
    auto it = std::upper_bound(extents.begin(), extents.end(), j,
                               [](uint64_t a, const alloc::Extent& x) { return a < x.addr; });
    if (it != extents.begin() && j < std::prev(it)->addr + std::prev(it)->bytes) {
      rep.journal_blocks += std::prev(it)->bytes / bs;
      journal_starts.insert(std::prev(it)->addr);
    }
  }
  const auto pending = be->PendingDeferredFrees();
  const std::set<uint64_t> pending_set(pending.begin(), pending.end());
  for (size_t k = 0; k < extents.size(); k++) {
    const uint64_t blocks = extents[k].bytes / bs;
    rep.blocks_used += blocks;
    if (pending_set.count(extents[k].addr) != 0) {
      rep.blocks_pending_free += blocks;
    } else if (reached[k]) {
      rep.blocks_reachable += blocks;
    } else if (walk.ok()) {
      rep.leaked.push_back(extents[k]);
      rep.leaked_blocks += blocks;
    }
  }
  if (options.free && walk.ok() && rep.unallocated_reads.empty()) {
    for (const alloc::Extent& x : rep.leaked) {
      ASYMNVM_RETURN_IF_ERROR(
          be->FreeExtent(x.addr).WithContext("gc: free " + std::to_string(x.addr)));
      rep.freed.push_back(x);
    }
    for (uint64_t j : journal_starts) {
      ASYMNVM_RETURN_IF_ERROR(
          be->FreeExtent(j).WithContext("gc: free journal " + std::to_string(j)));
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rep;
}

Result<LeakReport> FindLeaksInCopy(const std::string& pool_path, LeakOptions options) {
  const std::string copy =
      (std::filesystem::temp_directory_path() /
       ("asymnvm-ctl-check-" + std::to_string(getpid()) + "-" +
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".pool"))
          .string();
  ASYMNVM_RETURN_IF_ERROR(CopyPool(pool_path, copy));
  options.free = false;
  options.persist_mode = pm::PersistMode::kFlushOnly;  // a throw-away copy: no syncs needed
  auto r = FindLeaks(copy, options);
  std::remove(copy.c_str());
  return r;
}

nlohmann::ordered_json LeakJson(const LeakReport& r) {
  nlohmann::ordered_json j;
  j["block_size"] = r.block_size;
  j["blocks_total"] = r.blocks_total;
  j["blocks_used"] = r.blocks_used;
  j["blocks_reachable"] = r.blocks_reachable;
  j["blocks_pending_free"] = r.blocks_pending_free;
  j["leaked_blocks"] = r.leaked_blocks;
  auto ext = [](const std::vector<alloc::Extent>& v) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& x : v) a.push_back({{"addr", x.addr}, {"bytes", x.bytes}});
    return a;
  };
  j["leaked"] = ext(r.leaked);
  j["freed"] = ext(r.freed);
  j["structures"] = r.structures;
  j["walk_error"] = r.walk_error;
  nlohmann::ordered_json u = nlohmann::ordered_json::array();
  for (const auto& [a, n] : r.unallocated_reads) u.push_back({{"addr", a}, {"bytes", n}});
  j["unallocated_reads"] = u;
  j["journals"] = r.journals;
  j["journals_cleared"] = r.journals_cleared;
  j["journal_blocks"] = r.journal_blocks;
  j["seconds"] = r.seconds;
  return j;
}

void PrintLeaks(const LeakReport& r, std::ostream& out, size_t max_lines) {
  size_t shown = 0;
  for (const auto& x : r.leaked) {
    if (shown++ == max_lines) {
      out << "LEAK: ... " << (r.leaked.size() - max_lines) << " more extent(s)\n";
      break;
    }
    out << "LEAK: data @" << x.addr << ": " << x.bytes << " bytes (" << x.bytes / r.block_size
        << " block(s)) allocated, reached by no structure\n";
  }
  out << "blocks: " << r.blocks_used << " used, " << r.blocks_reachable << " reachable from "
      << r.structures.size() << " structure(s), " << r.blocks_pending_free
      << " pending deferred free, " << r.leaked_blocks << " leaked in " << r.leaked.size()
      << " extent(s)\n";
}

}  // namespace asymnvm::tools
