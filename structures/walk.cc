#include "structures/walk.h"

#include <algorithm>

#include "asymnvm/structures/partitioned.h"
#include "asymnvm/structures/structure.h"
#include "asymnvm/structures/transaction.h"

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

}  // namespace asymnvm::structures
