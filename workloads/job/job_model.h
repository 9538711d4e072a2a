// The main job's model of the data (asymnvm-job, workloads/job/job.h): the operations of a run
// derived from its seed alone, the model they build, the run log's records, and the comparison
// of the structures with a model. Every function here is pure or reads structures only; not
// thread-safe (one job thread).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/cluster.h"
#include "asymnvm/status.h"
#include "asymnvm/structures/structure.h"
#include "workloads/gen/generators.h"

namespace asymnvm::job {

using structures::Kind;

inline constexpr uint64_t kKeys = 4096;        // keynums per map
inline constexpr uint64_t kSeedBase = 0xA5A5;  // run r uses seed kSeedBase + r
inline constexpr uint32_t kValueSize = 64;
// The job's B+tree partitioned over every back-end: a pseudo-kind of its own (bit 16 of a run
// record's mask), a map like the others.
inline constexpr Kind kPartitioned = static_cast<Kind>(16);
// Run log records: run u64 | ops u64 | kinds mask u64; this bit of the mask marks a run's start
// record (pushed before its first operation; the end record follows when it completes).
inline constexpr uint64_t kStartedBit = uint64_t{1} << 63;
inline constexpr size_t kRunRecordSize = 24;

const char* JobName(Kind k);
// A structure name of --structures: a kind name or "pbptree".
Result<Kind> ParseJobKind(const std::string& n);
// Every kind the job knows, in Kind order, kPartitioned last.
std::vector<Kind> JobKinds();
// Opens (creating on first use) the job's structure of kind `k`: a named root "job-<kind>" on
// back-end 0, or the partitioned B+tree over every back-end.
Result<std::unique_ptr<structures::Handle>> OpenJobStructure(frontend::Cluster& c, Kind k);

struct Model {
  std::map<uint64_t, structures::Value> map;
  std::deque<structures::Value> seq;
};

// One operation of a run, derived from the run's RNG only (never from the data), so a later run
// can regenerate the whole history.
struct JobOp {
  size_t structure;  // index into the job's structure list
  int kind;          // maps: 0 get, 1 put, 2 delete; sequences: 0 peek, 1 push, 2 pop
  uint64_t key;
  structures::Value value;
};

JobOp NextOp(workloads::Rng& rng, const std::vector<Kind>& kinds, uint64_t run, uint64_t i);
void ApplyToModel(Model& m, Kind kind, const JobOp& op);

// The number of leading entries of `kinds` named in `names` (the command line's structures come
// first in `kinds`; earlier runs' extra ones are appended).
size_t NamesCount(const std::vector<Kind>& kinds, const std::vector<std::string>& names);

// A record of the run log (a stack "job-runs" on back-end 0).
struct RunRecord {
  uint64_t run = 0, ops = 0, mask = 0;
};
std::vector<uint8_t> EncodeRunRecord(const RunRecord& r);
// `v` must be kRunRecordSize bytes (the caller checks and reports the size).
RunRecord DecodeRunRecord(const structures::Value& v);

// The kinds named by a run record's mask, in JobKinds() order.
std::vector<Kind> KindsOfMask(uint64_t mask);

// Compares every structure handles[i] (of kind kinds[i]) with models[i]: "" when equal, else
// what differs (name first); *elements counts the elements compared. A call that fails for
// another reason than corruption (a lost connection, a dead daemon) sets *err instead: that is
// not evidence about the data.
std::string VerifyStructures(const std::vector<Kind>& kinds,
                             const std::vector<std::unique_ptr<structures::Handle>>& handles,
                             const std::vector<Model>& models, uint64_t* elements, Status* err);

// --show-runs forensics: which run pushed each element of the stack `elems`? Every pushed value
// is a function of (run, operation index), so the runs that left data can be named even without
// their records. Runs are assumed to have used every structure, and as many operations as the
// largest start record in `records` asks for. Prints to stdout.
void PrintStackOrigins(const std::vector<structures::Value>& records,
                       const std::vector<structures::Value>& elems, uint64_t last_run);

}  // namespace asymnvm::job
