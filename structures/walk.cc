#include "structures/walk.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "asymnvm/structures/partitioned.h"
#include "asymnvm/structures/structure.h"
#include "asymnvm/structures/transaction.h"
#include "common/crash_point.h"
#include "common/logging.h"

namespace asymnvm::structures {

Result<BlockWalk> WalkStructures(frontend::Session& s, const std::vector<std::string>& names) {
  BlockWalk walk;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const uint64_t begin = s.data_begin(), end = s.data_end();
  uint64_t* counter = nullptr;
  s.SetReadObserver([&](uint64_t addr, uint64_t len) {
    if (len == 0 || addr < begin || addr >= end) return;
    ranges.emplace_back(addr, std::min(len, end - addr));
    if (counter != nullptr) (*counter)++;
  });
  struct Unset {
    frontend::Session& s;
    ~Unset() { s.SetReadObserver({}); }
  } unset{s};
  for (const std::string& name : names) {
    ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st, s.OpenRoot(name));
    walk.structures.push_back({name, st.type, 0});
    counter = &walk.structures.back().ranges;
    const std::string what = "structure '" + name + "' (type " + std::to_string(st.type) + ")";
    // The root word: an anchor, a map block (or 0).
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t root, s.ReadWord(st.root_addr));
    if (root >= begin && root < end) ranges.emplace_back(root, 1);
    if (st.type == kTxnRootType || st.type == kPartitionMapType) continue;
    bool known = false;
    for (Kind k : kAllKinds) known = known || static_cast<uint32_t>(k) == st.type;
    if (!known) {
      return Status::NotSupported(what +
                                  ": unknown type, the walk cannot tell which blocks it owns");
    }
    Options o;
    o.access = Access::kReader;
    o.create = false;
    auto h = Open(s, static_cast<Kind>(st.type), name, o);
    // Created, never written (no anchor yet): owns nothing.
    if (!h.ok() && root == 0 && h.status().code() == StatusCode::kNotFound) continue;
    if (!h.ok()) return h.status().WithContext(what + ": open");
    Status v = (*h)->Verify();
    if (!v.ok()) return v.WithContext(what + ": verify");
  }
  counter = nullptr;
  std::sort(ranges.begin(), ranges.end());
  for (const auto& [a, n] : ranges) {
    if (!walk.ranges.empty() && a <= walk.ranges.back().first + walk.ranges.back().second) {
      auto& last = walk.ranges.back();
      last.second = std::max(last.first + last.second, a + n) - last.first;
    } else {
      walk.ranges.emplace_back(a, n);
    }
  }
  return walk;
}

ExtentReach ReachExtents(const std::vector<std::pair<uint64_t, uint64_t>>& extents,
                         const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  // Both lists are sorted by address: mark every extent a range overlaps; report what a range
  // covers outside any extent (a structure reaching an unallocated block).
  ExtentReach r;
  r.reached.assign(extents.size(), false);
  size_t e = 0;
  for (const auto& [a, n] : ranges) {
    const uint64_t end = a + n;
    while (e < extents.size() && extents[e].first + extents[e].second <= a) e++;
    uint64_t pos = a;
    for (size_t k = e; k < extents.size() && extents[k].first < end; k++) {
      if (extents[k].first > pos) r.unallocated.emplace_back(pos, extents[k].first - pos);
      r.reached[k] = true;
      pos = std::max(pos, extents[k].first + extents[k].second);
    }
    if (pos < end) r.unallocated.emplace_back(pos, end - pos);
  }
  return r;
}

Result<ReclaimResult> ReclaimDeadAllocations(frontend::Session& s) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  ReclaimResult res;
  const std::vector<uint64_t> inherited = s.InheritedExtents();
  res.inherited = inherited.size();
  const std::string who = "front-end " + std::to_string(s.frontend_id());
  if (inherited.empty()) {
    s.MarkReclaimed();
    return res;
  }
  // 1. Every structure's writer lock: a structure another live front-end writes may be in the
  // middle of a restructuring, and a walk of it could miss a pointer that moves.
  ASYMNVM_ASSIGN_OR_RETURN(std::vector<frontend::Structure> all, s.ListStructures());
  // A type the walk cannot read would fail it after the locks were taken; and the lock word of
  // an application's own entry may not be a lock. Refuse before touching any lock.
  for (const frontend::Structure& st : all) {
    bool known = st.type == kTxnRootType || st.type == kPartitionMapType;
    for (Kind k : kAllKinds) known = known || static_cast<uint32_t>(k) == st.type;
    if (!known) {
      return Status::NotSupported(who + ": reclaim: structure '" + st.name + "' has type " +
                                  std::to_string(st.type) +
                                  ", which the block walk does not know; nothing freed");
    }
  }
  std::vector<frontend::Structure> taken;
  auto release = [&]() {
    for (const frontend::Structure& st : taken) {
      Status u = s.WriterUnlock(st);
      if (!u.ok()) LOG_WARN("reclaim", who << ": unlock '" << st.name << "': " << u.ToString());
    }
    taken.clear();
  };
  for (const frontend::Structure& st : all) {
    if (s.HoldsWriterLock(st)) continue;
    auto got = s.TryWriterLock(st, s.options().reclaim_lock_wait);
    if (!got.ok()) {
      release();
      return got.status().WithContext(who + ": reclaim: lock of '" + st.name + "'");
    }
    if (!*got) {
      release();
      res.deferred = true;
      res.deferred_by = st.name;
      res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      s.CountReclaim(0, true, 0, 0);
      LOG_WARN("reclaim", who << ": reclaim of " << inherited.size()
                              << " journaled extent(s) deferred: the writer lock of '" << st.name
                              << "' is held by another front-end (a later recovery, a retry or "
                                 "asymnvm-ctl gc frees them)");
      return res;
    }
    taken.push_back(st);
  }
  // 2. The walk, every structure consistent (locked) at once.
  std::vector<std::string> names;
  for (const frontend::Structure& st : all) names.push_back(st.name);
  s.InvalidateCache();
  const auto walk_start = Clock::now();
  Result<BlockWalk> walk = WalkStructures(s, names);
  res.walk_seconds = std::chrono::duration<double>(Clock::now() - walk_start).count();
  release();
  if (!walk.ok()) return walk.status().WithContext(who + ": reclaim walk");
  res.structures = walk->structures.size();
  // 3. Only live extents that start at the journaled address are candidates.
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (uint64_t a : inherited) {
    ASYMNVM_ASSIGN_OR_RETURN(auto ext, s.ExtentOf(a));
    if (ext.second == 0 || ext.first != a) {
      LOG_WARN("reclaim", who << ": journaled extent " << a
                              << " is not a live allocation starting there (live: " << ext.first
                              << "+" << ext.second << "); dropped from the journal, not freed");
      res.refused++;
      ASYMNVM_RETURN_IF_ERROR(s.ReleaseInherited(a, 0, false));
      continue;
    }
    extents.push_back(ext);
  }
  // 4. Free what no structure reaches, after one grace period (lock-free readers may still be
  // inside old versions the dead writer replaced).
  const ExtentReach reach = ReachExtents(extents, walk->ranges);
  bool waited = false;
  const uint64_t block = s.block_size();
  for (size_t k = 0; k < extents.size(); k++) {
    if (reach.reached[k]) {
      res.kept_extents++;
      continue;
    }
    if (!waited) {
      std::this_thread::sleep_for(s.options().reclaim_grace);
      waited = true;
    }
    // A crash here (doc/alloc.md §Reclaim at recovery): the extents before this one are freed
    // and unjournaled, this one and the rest are journaled and allocated; the next recovery of
    // the id walks again and frees them.
    ASYMNVM_CRASH_POINT("structures.reclaim.before_free");
    // Entry cleared and extent freed by one back-end request (request 22 with the journal
    // trailer): no front-end crash lands between the two.
    Status f = s.ReleaseInherited(extents[k].first, extents[k].second, true);
    if (!f.ok()) {
      if (f.code() == StatusCode::kConnectionError || f.code() == StatusCode::kTimedOut) return f;
      LOG_WARN("reclaim", who << ": free of journaled extent " << extents[k].first
                              << " refused: " << f.ToString());
      res.refused++;
      continue;
    }
    res.freed_extents++;
    res.freed_blocks += (extents[k].second + block - 1) / block;
    // Freed and unjournaled (acknowledged): the next recovery never sees this entry again.
    ASYMNVM_CRASH_POINT("structures.reclaim.after_free");
  }
  s.MarkReclaimed();
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  s.CountReclaim(res.freed_blocks, false, res.refused,
                 static_cast<uint64_t>(res.walk_seconds * 1e6));
  LOG_INFO("reclaim", who << ": reclaimed " << res.freed_blocks << " block(s) in "
                          << res.freed_extents << " extent(s) of " << res.inherited
                          << " journaled; kept " << res.kept_extents << " reached, refused "
                          << res.refused << "; walk of " << res.structures << " structure(s) "
                          << static_cast<int64_t>(res.walk_seconds * 1000) << " ms, total "
                          << static_cast<int64_t>(res.seconds * 1000) << " ms");
  return res;
}

}  // namespace asymnvm::structures
