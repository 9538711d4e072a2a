#include "workloads/job/job_model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "asymnvm/structures/partitioned.h"
#include "workloads/driver/runner.h"

namespace asymnvm::job {

const char* JobName(Kind k) { return k == kPartitioned ? "pbptree" : structures::KindName(k); }

Result<Kind> ParseJobKind(const std::string& n) {
  if (n == "pbptree") return kPartitioned;
  auto k = structures::ParseKind(n);
  if (!k.ok()) {
    return Status::InvalidArgument(std::string(k.status().message()) +
                                   ", or pbptree (a B+tree "
                                   "partitioned over every back-end)");
  }
  return k;
}

std::vector<Kind> JobKinds() {
  std::vector<Kind> v(std::begin(structures::kAllKinds), std::end(structures::kAllKinds));
  v.push_back(kPartitioned);
  return v;
}

Result<std::unique_ptr<structures::Handle>> OpenJobStructure(frontend::Cluster& c, Kind k) {
  if (k == kPartitioned) {
    ASYMNVM_ASSIGN_OR_RETURN(auto m,
                             structures::OpenPartitioned(c, Kind::kBPlusTree, "job-pbptree"));
    return std::unique_ptr<structures::Handle>(std::move(m));
  }
  return structures::Open(c.session(0), k, std::string("job-") + structures::KindName(k));
}

JobOp NextOp(workloads::Rng& rng, const std::vector<Kind>& kinds, uint64_t run, uint64_t i) {
  JobOp op;
  op.structure = rng.Next() % kinds.size();
  const uint64_t r = rng.Next() % 100;
  if (structures::IsSequence(kinds[op.structure])) {
    op.kind = r < 60 ? 1 : 2;
  } else {
    op.kind = r < 50 ? 0 : (r < 90 ? 1 : 2);
  }
  op.key = workloads::KeyNumToKey(rng.Next() % kKeys, true);
  if (op.kind == 1) {
    op.value = driver::ValueFor(op.key, run * 1000003 + i, 1 + rng.Next() % kValueSize);
  }
  return op;
}

void ApplyToModel(Model& m, Kind kind, const JobOp& op) {
  if (structures::IsSequence(kind)) {
    if (op.kind == 1) {
      m.seq.push_back(op.value);
    } else if (op.kind == 2 && !m.seq.empty()) {
      if (kind == Kind::kStack) {
        m.seq.pop_back();
      } else {
        m.seq.pop_front();
      }
    }
  } else if (op.kind == 1) {
    m.map[op.key] = op.value;
  } else if (op.kind == 2) {
    m.map.erase(op.key);
  }
}

size_t NamesCount(const std::vector<Kind>& kinds, const std::vector<std::string>& names) {
  size_t n = 0;
  for (Kind k : kinds) {
    if (std::find(names.begin(), names.end(), JobName(k)) == names.end()) break;
    n++;
  }
  return n;
}

std::vector<uint8_t> EncodeRunRecord(const RunRecord& r) {
  std::vector<uint8_t> rec(kRunRecordSize);
  std::memcpy(rec.data(), &r.run, 8);
  std::memcpy(rec.data() + 8, &r.ops, 8);
  std::memcpy(rec.data() + 16, &r.mask, 8);
  return rec;
}

RunRecord DecodeRunRecord(const structures::Value& v) {
  RunRecord r;
  std::memcpy(&r.run, v.data(), 8);
  std::memcpy(&r.ops, v.data() + 8, 8);
  std::memcpy(&r.mask, v.data() + 16, 8);
  return r;
}

std::vector<Kind> KindsOfMask(uint64_t mask) {
  std::vector<Kind> rk;
  for (Kind k : JobKinds()) {
    if (mask & (uint64_t{1} << static_cast<uint32_t>(k))) rk.push_back(k);
  }
  return rk;
}

std::string VerifyStructures(const std::vector<Kind>& kinds,
                             const std::vector<std::unique_ptr<structures::Handle>>& handles,
                             const std::vector<Model>& ms, uint64_t* elements, Status* err) {
  auto check = [&](const std::string& name, const Status& st) -> std::string {
    if (st.code() == StatusCode::kCorruption) return name + st.ToString();
    *err = st.WithContext(name + "verification");
    return name + st.ToString();
  };
  for (size_t i = 0; i < kinds.size(); i++) {
    const std::string name = JobName(kinds[i]) + std::string(": ");
    Status vs = handles[i]->Verify();
    if (!vs.ok()) return check(name, vs);
    auto n = handles[i]->Count();
    if (!n.ok()) return check(name, n.status());
    const uint64_t want = structures::IsSequence(kinds[i]) ? ms[i].seq.size() : ms[i].map.size();
    if (*n != want)
      return name + std::to_string(*n) + " elements, expected " + std::to_string(want);
    if (structures::IsSequence(kinds[i])) {
      // Every element, in pop order.
      std::vector<structures::Value> got;
      Status st = static_cast<structures::Sequence*>(handles[i].get())->List(SIZE_MAX, &got);
      if (!st.ok()) return check(name, st);
      if (got.size() != want) {
        return name + "lists " + std::to_string(got.size()) + " elements, expected " +
               std::to_string(want);
      }
      for (uint64_t j = 0; j < want; j++) {
        const auto& expect = kinds[i] == Kind::kStack ? ms[i].seq[want - 1 - j] : ms[i].seq[j];
        if (got[j] != expect)
          return name + "element " + std::to_string(j) + " (in pop order) differs";
      }
    } else {
      auto* m = static_cast<structures::Map*>(handles[i].get());
      for (const auto& [k, val] : ms[i].map) {
        structures::Value v;
        Status st = m->Get(k, &v);
        if (st.code() == StatusCode::kNotFound)
          return name + "key " + std::to_string(k) + " is missing";
        if (!st.ok()) return check(name + "key " + std::to_string(k) + ": ", st);
        if (v != val) return name + "key " + std::to_string(k) + " has a different value";
      }
    }
    *elements += want;
  }
  return "";
}

void PrintStackOrigins(const std::vector<structures::Value>& recs,
                       const std::vector<structures::Value>& elems, uint64_t last_run) {
  std::map<structures::Value, std::pair<uint64_t, uint64_t>> origin;
  std::set<structures::Value> ambiguous;
  uint64_t max_ops = 1;
  for (const auto& v : recs) {
    uint64_t o = 0, m = 0;
    std::memcpy(&o, v.data() + 8, 8);
    std::memcpy(&m, v.data() + 16, 8);
    if (m & kStartedBit) max_ops = std::max(max_ops, o);
  }
  const std::vector<Kind> all = JobKinds();
  const size_t stack_index =
      static_cast<size_t>(std::find(all.begin(), all.end(), Kind::kStack) - all.begin());
  for (uint64_t r = 0; r < last_run; r++) {
    workloads::Rng rng(kSeedBase + r);
    for (uint64_t i = 0; i < max_ops; i++) {
      JobOp op = NextOp(rng, all, r, i);
      if (op.structure != stack_index || op.kind != 1) continue;
      if (!origin.emplace(op.value, std::make_pair(r, i)).second) ambiguous.insert(op.value);
    }
  }
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> per_run;  // run -> (elements, max op index)
  uint64_t unknown = 0;
  for (const auto& e : elems) {
    auto it = origin.find(e);
    if (ambiguous.count(e)) continue;
    if (it == origin.end()) {
      unknown++;
      continue;
    }
    auto& pr = per_run[it->second.first];
    pr.first++;
    pr.second = std::max(pr.second, it->second.second);
  }
  std::printf("stack: %zu elements (of runs of up to %llu operations)\n", elems.size(),
              static_cast<unsigned long long>(max_ops));
  for (const auto& [r, pr] : per_run) {
    std::printf("  %llu pushed by run %llu (latest at operation %llu)\n",
                static_cast<unsigned long long>(pr.first), static_cast<unsigned long long>(r + 1),
                static_cast<unsigned long long>(pr.second + 1));
  }
  if (unknown)
    std::printf("  %llu of no run 1..%llu\n", static_cast<unsigned long long>(unknown),
                static_cast<unsigned long long>(last_run));
}

}  // namespace asymnvm::job
