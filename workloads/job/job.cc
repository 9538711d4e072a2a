// RunJob: the main job's steps in order (workloads/job/job.h): options, identity, daemons,
// sessions, replay, the run log, verification of earlier runs, this run, the report.
#include "workloads/job/job.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "asymnvm/cluster.h"
#include "asymnvm/frontend.h"
#include "common/logging.h"
#include "frontend/identity.h"
#include "tools/ctl.h"
#include "workloads/bench/latency.h"
#include "workloads/job/job_model.h"
#include "workloads/job/job_replicas.h"

namespace asymnvm::job {
namespace {

namespace fs = std::filesystem;

// One run of the job: the state its steps share.
class JobRun {
 public:
  explicit JobRun(const JobOptions& o) : o_(o), paths_(o.data_dir) {}
  ~JobRun() {
    if (progress_fd_ >= 0) ::close(progress_fd_);
  }
  Result<JobReport> Run();

 private:
  // A failed step: prints "asymnvm-job: WHAT: STATUS" (and which daemon died) to `err` and
  // returns the Status that ends the run: kUnavailable when a daemon died or a connection was
  // lost (the data is safe), else the cause (kFailedPrecondition for a cause whose code would
  // read as bad options or a failed verification).
  Status Fail(const std::string& what, const Status& st, std::ostream& err = std::cerr);
  // Prints "asymnvm-job: VERIFICATION FAILED..." and returns kCorruption.
  static Status VerificationFailed(const std::string& text);
  Status Validate();
  Status ClaimIdentity();
  Status StartDaemons();
  Status OpenCluster();
  Status ReadRunLog();
  Status VerifyEarlierRuns();
  Status RunOperations();
  Status PushRunRecord(const RunRecord& r, const std::string& what);
  void Measure(JobReport* r);
  Status StopDaemons(JobReport* r);

  struct Sample {
    frontend::Counters counters;
    Result<double> cpu = 0.0;
    Result<uint64_t> syncs = uint64_t{0};
  };
  Sample TakeSample();

  JobOptions o_;
  ReplicaPaths paths_;
  std::vector<Kind> kinds_;  // this run's structures first, then earlier runs' others
  std::unique_ptr<JobDaemons> daemons_;
  // The front-end identity, held for the whole run (released before the daemons stop).
  std::shared_ptr<frontend::FrontendIdentity> held_;
  std::unique_ptr<frontend::Cluster> cluster_;
  std::vector<std::unique_ptr<structures::Handle>> handles_;
  std::unique_ptr<structures::Sequence> runs_;  // the run log
  // The progress file of the last run that started: (run u64, operations acknowledged u64).
  std::string progress_path_;
  uint64_t progress_[2] = {0, 0};
  bool have_progress_ = false;
  int progress_fd_ = -1;
  std::vector<RunRecord> run_recs_;  // completed runs, in order (ops = operations applied)
  RunRecord irec_{};                 // a run that started and never recorded its end ...
  bool interrupted_ = false;         // ... when this is set
  std::vector<Model> models_;
  uint64_t verified_ = 0;
  // This run.
  uint64_t run_ = 0, mask_ = 0;
  std::vector<Kind> run_kinds_;
  std::vector<bench::LatencySampler> lat_;
  std::vector<uint64_t> per_ops_, mismatches_;
  double secs_ = 0;
  Sample before_, after_;
  FailoverReport fo_;
  bench::Clock::time_point kill_time_;
};

Status JobRun::Fail(const std::string& what, const Status& st, std::ostream& err) {
  err << "asymnvm-job: " << what << ": " << st.ToString() << "\n";
  // A killed daemon's sockets close as it exits, so the lost connection can be seen a moment
  // before the exit itself: give the exit up to a second to show before naming the cause.
  bool died = false;
  const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  const size_t n = daemons_ ? daemons_->backends.size() : 0;
  do {
    for (size_t i = 0; i < n; i++) {
      const auto& d = daemons_->backends[i];
      std::string how;
      if (d && d->Exited(&how)) {
        err << "asymnvm-job: back-end " << i << " (pid " << d->pid() << ") " << how << "\n";
        died = true;
      }
    }
    if (died || !IsLostConnection(st)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < settle);
  const std::string text = what + ": " + st.ToString();
  if (died || IsLostConnection(st)) {
    err << "asymnvm-job: interrupted: everything acknowledged is durable in the pool files; "
           "run the job again to replay and verify it (exit "
        << kExitInterrupted << ")\n";
    return Status::Unavailable(text);
  }
  if (st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kCorruption) {
    return Status::FailedPrecondition(text);
  }
  return Status(st.code(), text, st.sys_errno());
}

Status JobRun::VerificationFailed(const std::string& text) {
  std::cerr << "asymnvm-job: VERIFICATION FAILED" << text << "\n";
  return Status::Corruption("VERIFICATION FAILED" + text);
}

Status JobRun::Validate() {
  auto usage = [](const std::string& text) {
    std::cerr << "asymnvm-job: " << text << "\n";
    return Status::InvalidArgument(text);
  };
  if (o_.ops < 1 || o_.ops > 100000000) return usage("--ops must be in 1..100000000");
  if (o_.backends < 1 || o_.backends > 8) return usage("--backends must be in 1..8");
  if (o_.mirrors > 4) return usage("--mirrors must be in 0..4");
  if (o_.kill_primary_after > 0 && o_.mirrors == 0) {
    return usage("--kill-primary-after needs --mirrors >= 1 (a mirror to promote)");
  }
  if (o_.kill_primary_after > 0 && o_.kill_primary_after >= o_.ops) {
    return usage("--kill-primary-after must be less than --ops");
  }
  if (!frontend::ParseLevel(o_.level).ok()) return usage("--level: " + o_.level);
  LogLevel ll;
  if (!ParseLogLevel(o_.log_level, &ll)) return usage("--log-level: " + o_.log_level);
  SetLogLevel(ll);
  for (const auto& n : o_.structures) {
    auto k = ParseJobKind(n);
    if (!k.ok()) return usage("--structures: " + std::string(k.status().message()));
    if (std::find(kinds_.begin(), kinds_.end(), *k) == kinds_.end()) kinds_.push_back(*k);
  }
  // A run's operations pick structures by index into its kinds in this order; a later run
  // regenerates them from the kinds mask, so the order must not depend on the command line.
  std::sort(kinds_.begin(), kinds_.end());
  return Status::Ok();
}

Status JobRun::ClaimIdentity() {
  std::error_code ec;
  fs::create_directories(o_.data_dir, ec);
  if (ec) {
    const std::string text = "cannot create " + o_.data_dir + ": " + ec.message();
    std::cerr << "asymnvm-job: " << text << "\n";
    return Status::IoError(text);
  }
  // The front-end id: claimed before anything else, held until exit (frontend/identity.h).
  if (o_.coord.empty()) o_.coord = "dir:" + (fs::absolute(o_.data_dir) / "coord").string();
  const std::string id_path = (fs::path(o_.data_dir) / "job.frontend-id").string();
  uint64_t wanted_id = 0;
  if (fs::exists(id_path)) {
    std::ifstream f(id_path);
    if (!(f >> wanted_id) || wanted_id == 0 || wanted_id > 0xFFFF) {
      const std::string text = id_path + " does not hold a front-end id (1..65535)";
      std::cerr << "asymnvm-job: " << text << "\n";
      return Status::FailedPrecondition(text);
    }
  } else if (fs::exists(paths_.Pool(0))) {
    wanted_id = 1;  // a data directory of a run from before job.frontend-id: its op logs are id 1
  }
  auto identity = frontend::FrontendIdentity::Claim(o_.coord, wanted_id, std::chrono::seconds(30));
  if (!identity.ok()) {
    if (identity.status().code() == StatusCode::kAlreadyExists) {
      std::cerr << "asymnvm-job: another asymnvm-job is running on " << o_.data_dir << ": "
                << identity.status().message() << "\n";
      return Status::AlreadyExists("another asymnvm-job is running on " + o_.data_dir + ": " +
                                   identity.status().message());
    }
    return Fail("coordinator " + o_.coord, identity.status());
  }
  // Shared with the Cluster's sessions (SessionOptions::identity): each reconnects by itself.
  held_ = std::shared_ptr<frontend::FrontendIdentity>(std::move(*identity));
  if (wanted_id == 0) {
    // Keep the allocated id for every later run (replay needs the same id): tmp + fsync + rename.
    const std::string tmp = id_path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << held_->id() << "\n";
      f.flush();
      if (!f) {
        std::cerr << "asymnvm-job: cannot write " << tmp << "\n";
        return Status::IoError("cannot write " + tmp);
      }
    }
    int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)::fsync(fd);
      ::close(fd);
    }
    fs::rename(tmp, id_path, ec);
    if (ec) {
      std::cerr << "asymnvm-job: cannot write " << id_path << ": " << ec.message() << "\n";
      return Status::IoError("cannot write " + id_path + ": " + ec.message());
    }
  }
  std::cout << "asymnvm-job: front-end id " << held_->id() << " (epoch " << held_->epoch()
            << ") held at " << o_.coord << "\n";
  return Status::Ok();
}

Status JobRun::StartDaemons() {
  if (o_.fresh) paths_.RemoveAll();
  while (paths_.Exists(o_.backends)) o_.backends++;  // every pool of earlier runs is served
  daemons_ = std::make_unique<JobDaemons>(o_, paths_, held_->coordinator());
  if (o_.backend_bin.empty()) {
    auto b = driver::FindBackendBinary(o_.program_path);
    if (!b.ok()) return Fail("back-end", b.status());
    o_.backend_bin = *b;
  }
  if (o_.mirrors > 0) {
    Status m = daemons_->FindMirrorBinary(o_.backend_bin);
    if (!m.ok()) return Fail("mirrors", m);
  }
  for (uint32_t i = 0; i < o_.backends; i++) {
    std::string what;
    Status st = daemons_->StartGroup(i, o_.backend_bin, &what);
    if (!st.ok()) return Fail(what, st);
  }
  return Status::Ok();
}

Status JobRun::OpenCluster() {
  frontend::SessionOptions so;
  so.backends = daemons_->addresses;
  so.fabric.provider = o_.fabric;
  // The id is held by `held_` for the whole job: the Cluster's sessions (one per back-end, same
  // id) are opened with it given, not claimed again per session.
  so.frontend_id = held_->id();
  // The sessions share the identity (not claimed again) and so follow a promoted mirror by
  // themselves (doc/frontend.md §Reconnection); `coordinator` lets them take over dead writers.
  so.identity = held_;
  so.coordinator = o_.coord;
  // With mirrors a lost back-end is waited for (a mirror is promoted within seconds); without,
  // a dead back-end ends the run at once with exit 4 (the next run replays and verifies).
  so.reconnect_deadline =
      o_.mirrors > 0 ? std::chrono::milliseconds(60000) : std::chrono::milliseconds(0);
  so.level = frontend::ParseLevel(o_.level).value();
  so.cache_bytes = 32ull << 20;
  so.timeout = std::chrono::milliseconds(30000);
  auto cluster = frontend::Cluster::Open(so);
  // A connection refused or cut during the handshake while every daemon is alive is a slow or
  // busy machine, not a failure: retry with back-off for up to the session timeout.
  const auto open_deadline = std::chrono::steady_clock::now() + so.timeout;
  for (int attempt = 1; !cluster.ok() && cluster.status().code() == StatusCode::kConnectionError &&
                        std::chrono::steady_clock::now() < open_deadline;
       attempt++) {
    bool alive = true;
    for (auto& d : daemons_->backends) alive = alive && !d->Exited();
    if (!alive) break;
    std::cerr << "asymnvm-job: connecting (attempt " << attempt
              << "): " << cluster.status().ToString() << "; retrying\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 50 * attempt)));
    cluster = frontend::Cluster::Open(so);
  }
  if (!cluster.ok()) return Fail("session", cluster.status());
  cluster_ = std::move(*cluster);
  frontend::Cluster& cl = *cluster_;
  for (size_t i = 0; i < cl.size(); i++) structures::RegisterReplays(cl.session(i));
  for (Kind k : kinds_) {
    auto h = OpenJobStructure(cl, k);
    if (!h.ok()) return Fail(std::string("opening ") + JobName(k), h.status());
    handles_.push_back(std::move(*h));
  }
  // The run log: one push per completed run (value = run number u64 | op count u64 | mask u64 of
  // the structure kinds it used, bit = Kind value).
  auto runs = structures::OpenSequence(cl.session(0), Kind::kStack, "job-runs");
  if (!runs.ok()) return Fail("opening the run log", runs.status());
  runs_ = std::move(*runs);
  Status rep = cl.Replay();
  if (!rep.ok()) return Fail("replaying op logs of an interrupted run", rep);
  uint64_t replayed = 0;
  for (size_t i = 0; i < cl.size(); i++) replayed += cl.session(i).counters().replayed_ops;
  if (replayed > 0) std::cout << "replayed " << replayed << " operations of an interrupted run\n";
  return Status::Ok();
}

Status JobRun::ReadRunLog() {
  // Regenerate the model of every earlier completed run and verify.
  auto nruns = runs_->Count();
  if (!nruns.ok()) return Fail("run log", nruns.status());
  progress_path_ = (fs::path(o_.data_dir) / "job.progress").string();
  {
    std::ifstream pf(progress_path_, std::ios::binary);
    have_progress_ =
        static_cast<bool>(pf.read(reinterpret_cast<char*>(progress_), sizeof progress_));
  }
  // Read the run records without removing anything (a kill here must not lose one): List gives
  // them newest first.
  std::vector<structures::Value> recs;
  Status st = runs_->List(SIZE_MAX, &recs);
  if (!st.ok()) return Fail("run log", st);
  for (auto it = recs.rbegin(); it != recs.rend(); ++it) {
    if (it->size() != kRunRecordSize) {
      return VerificationFailed(": run log record of " + std::to_string(it->size()) +
                                " bytes (expected 24)");
    }
    RunRecord rr = DecodeRunRecord(*it);
    if (o_.show_runs) {
      std::printf(
          "run log %3zu: run %llu %s ops %llu mask 0x%llx\n",
          static_cast<size_t>(it - recs.rbegin()), static_cast<unsigned long long>(rr.run + 1),
          (rr.mask & kStartedBit) ? "start" : "end  ", static_cast<unsigned long long>(rr.ops),
          static_cast<unsigned long long>(rr.mask & ~kStartedBit));
    }
    if (rr.mask & kStartedBit) {  // a run's start record; its end record follows it
      if (interrupted_) {
        return VerificationFailed(": run log: run " + std::to_string(irec_.run + 1) +
                                  " started twice without an end record");
      }
      rr.mask &= ~kStartedBit;
      irec_ = rr;
      interrupted_ = true;
      continue;
    }
    if (interrupted_ && irec_.run != rr.run) {
      return VerificationFailed(": run log: run " + std::to_string(irec_.run + 1) +
                                " is followed by the end record of run " +
                                std::to_string(rr.run + 1));
    }
    if (rr.run != run_recs_.size()) {
      return VerificationFailed(": run log: the end record of run " + std::to_string(rr.run + 1) +
                                " follows " + std::to_string(run_recs_.size()) +
                                " completed run(s)");
    }
    interrupted_ = false;
    run_recs_.push_back(rr);
  }
  if (o_.show_runs) {
    std::printf(
        "%zu completed run(s)%s\n", run_recs_.size(),
        interrupted_ ? (", run " + std::to_string(irec_.run + 1) + " interrupted").c_str() : "");
    uint64_t last_run = run_recs_.size() + (interrupted_ ? 1 : 0);
    if (have_progress_) last_run = std::max(last_run, progress_[0] + 1);
    const auto kst = std::find(kinds_.begin(), kinds_.end(), Kind::kStack);
    std::vector<structures::Value> elems;
    if (kst != kinds_.end() && static_cast<structures::Sequence*>(
                                   handles_[static_cast<size_t>(kst - kinds_.begin())].get())
                                   ->List(SIZE_MAX, &elems)
                                   .ok()) {
      PrintStackOrigins(recs, elems, last_run);
    }
  }
  return Status::Ok();
}

Status JobRun::PushRunRecord(const RunRecord& r, const std::string& what) {
  const std::vector<uint8_t> rec = EncodeRunRecord(r);
  Status pr = runs_->Push(std::span<const uint8_t>(rec.data(), rec.size()));
  if (pr.ok()) pr = runs_->Sync();
  if (!pr.ok()) return Fail(what, pr);
  return Status::Ok();
}

Status JobRun::VerifyEarlierRuns() {
  frontend::Cluster& cl = *cluster_;
  // Models per kind, from every earlier run's own structure list.
  std::map<Kind, Model> by_kind;
  for (uint64_t r = 0; r < run_recs_.size(); r++) {
    const std::vector<Kind> rk = KindsOfMask(run_recs_[r].mask);
    if (rk.empty()) {
      return VerificationFailed(": run log record " + std::to_string(r) + " names no structure");
    }
    workloads::Rng rng(kSeedBase + r);
    for (uint64_t i = 0; i < run_recs_[r].ops; i++) {
      JobOp op = NextOp(rng, rk, r, i);
      ApplyToModel(by_kind[rk[op.structure]], rk[op.structure], op);
    }
  }
  // The structures of an interrupted run are verified too.
  std::vector<Kind> interrupted_kinds;
  if (interrupted_) {
    interrupted_kinds = KindsOfMask(irec_.mask);
    for (Kind k : interrupted_kinds) (void)by_kind[k];
    if (interrupted_kinds.empty()) {
      return VerificationFailed(": run log: interrupted run " + std::to_string(irec_.run + 1) +
                                " names no structure");
    }
  }
  // Structures of earlier runs that this run does not use are verified too.
  for (const auto& [k, m] : by_kind) {
    if (std::find(kinds_.begin(), kinds_.end(), k) != kinds_.end()) continue;
    auto h = OpenJobStructure(cl, k);
    if (!h.ok()) return Fail(std::string("opening ") + JobName(k), h.status());
    kinds_.push_back(k);
    handles_.push_back(std::move(*h));
  }
  models_.assign(kinds_.size(), Model{});
  for (size_t i = 0; i < kinds_.size(); i++) models_[i] = by_kind[kinds_[i]];
  // Run numbers are the count of completed runs when a run starts, and the progress file names
  // the last run that started: a larger number than the run log knows means the run log lost
  // records. Jobs before the run log became push-only read it by popping every record and
  // pushing it back, and a kill in between lost the records popped (doc/workloads.md).
  if (have_progress_ && progress_[0] > run_recs_.size()) {
    return VerificationFailed(
        ": the run log holds " + std::to_string(run_recs_.size()) + " completed run(s) but " +
        progress_path_ + " names run " + std::to_string(progress_[0] + 1) +
        ": run records were lost (a job older than the push-only run log was killed while it "
        "re-pushed them); the model of earlier runs cannot be rebuilt");
  }
  if (interrupted_) {
    // An interrupted run (the job was killed): its acknowledged operations are durable and the
    // replay above re-executed those whose memory logs were pending, so the data is the state
    // after a prefix of its operations: A (the last acknowledged one, from the progress file)
    // or A + 1 (the one in flight, when its op log had landed). Find which, and record it.
    const bool known = have_progress_ && progress_[0] == irec_.run;
    const uint64_t acked = known ? progress_[1] : 0;
    if (!known) {
      return VerificationFailed(": run " + std::to_string(irec_.run + 1) +
                                " was interrupted and its progress file " + progress_path_ +
                                " is missing or from another run");
    }
    std::map<Kind, size_t> index;
    for (size_t i = 0; i < kinds_.size(); i++) index[kinds_[i]] = i;
    std::string why;
    for (uint64_t cand : {acked + 1, acked}) {
      if (cand > irec_.ops) continue;
      std::vector<Model> ms = models_;
      workloads::Rng irng(kSeedBase + irec_.run);
      for (uint64_t i = 0; i < cand; i++) {
        JobOp op = NextOp(irng, interrupted_kinds, irec_.run, i);
        const Kind k = interrupted_kinds[op.structure];
        ApplyToModel(ms[index[k]], k, op);
      }
      uint64_t elements = 0;
      Status err;
      why = VerifyStructures(kinds_, handles_, ms, &elements, &err);
      if (!err.ok()) return Fail("verifying interrupted run " + std::to_string(irec_.run + 1), err);
      if (!why.empty()) continue;
      models_ = std::move(ms);
      verified_ = elements;
      ASYMNVM_RETURN_IF_ERROR(PushRunRecord({irec_.run, cand, irec_.mask}, "run log"));
      run_recs_.push_back({irec_.run, cand, irec_.mask});
      std::cout << "run " << irec_.run + 1 << " was interrupted after " << cand << " of "
                << irec_.ops << " operations (" << acked << " acknowledged); recorded\n";
      return Status::Ok();
    }
    return VerificationFailed(" after interrupted run " + std::to_string(irec_.run + 1) + " (" +
                              std::to_string(acked) + " operations acknowledged): " + why);
  }
  Status err;
  const std::string why = VerifyStructures(kinds_, handles_, models_, &verified_, &err);
  if (!err.ok()) return Fail("verifying", err);
  if (!why.empty()) return VerificationFailed(" for " + why);
  return Status::Ok();
}

JobRun::Sample JobRun::TakeSample() {
  Sample s;
  for (size_t i = 0; i < cluster_->size(); i++) {
    const auto c = cluster_->session(i).counters();
    s.counters.fabric.round_trips += c.fabric.round_trips;
    s.counters.fabric.bytes_out += c.fabric.bytes_out;
    s.counters.cache_hits += c.cache_hits;
    s.counters.cache_misses += c.cache_misses;
  }
  s.cpu = [&]() -> Result<double> {
    double t = 0;
    for (auto& d : daemons_->backends) {
      if (!d) return Status::FailedPrecondition("a back-end was killed");
      ASYMNVM_ASSIGN_OR_RETURN(double x, d->CpuSeconds());
      t += x;
    }
    return t;
  }();
  // Back-end syncs (msync/fdatasync calls, from each daemon's status): the disk-durable mode's
  // cost.
  s.syncs = [&]() -> Result<uint64_t> {
    uint64_t t = 0;
    for (const auto& a : daemons_->addresses) {
      ASYMNVM_ASSIGN_OR_RETURN(std::string st,
                               tools::FetchStatus(a, std::chrono::milliseconds(10000)));
      auto j = nlohmann::json::parse(st, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.contains("pm_syncs"))
        return Status::ProtocolError("status without pm_syncs");
      t += j["pm_syncs"].get<uint64_t>();
    }
    return t;
  }();
  return s;
}

Status JobRun::RunOperations() {
  // This run's operations go to the structures named on the command line only.
  run_ = run_recs_.size();
  const size_t active = NamesCount(kinds_, o_.structures);
  run_kinds_.assign(kinds_.begin(), kinds_.begin() + static_cast<long>(active));
  for (Kind k : run_kinds_) mask_ |= uint64_t{1} << static_cast<uint32_t>(k);
  workloads::Rng rng(kSeedBase + run_);
  // The progress file: (run, operations acknowledged), rewritten after every operation. It
  // survives a kill of the job (page cache), not necessarily a machine crash. (run, 0) is written
  // before the start record, so a start record found by a later job always has its progress.
  progress_fd_ = ::open(progress_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (progress_fd_ < 0) return Fail("progress file", Status::IoError(progress_path_, errno));
  auto note_progress = [&](uint64_t done) {
    const uint64_t rec[2] = {run_, done};
    return ::pwrite(progress_fd_, rec, sizeof rec, 0) == static_cast<ssize_t>(sizeof rec);
  };
  if (!note_progress(0)) return Fail("progress file", Status::IoError(progress_path_, errno));
  // The start record: a later job that finds it without its end record knows this run was
  // interrupted, and which operations it was running.
  ASYMNVM_RETURN_IF_ERROR(
      PushRunRecord({run_, o_.ops, mask_ | kStartedBit}, "recording the run's start"));
  lat_.assign(kinds_.size(), bench::LatencySampler());
  per_ops_.assign(kinds_.size(), 0);
  mismatches_.assign(kinds_.size(), 0);
  before_ = TakeSample();
  const bool tty = isatty(1);
  const auto t0 = bench::Clock::now();
  for (uint64_t i = 0; i < o_.ops; i++) {
    JobOp op = NextOp(rng, run_kinds_, run_, i);
    const size_t x = op.structure;
    Model& m = models_[x];
    const auto a = bench::Clock::now();
    Status st;
    structures::Value got;
    if (structures::IsSequence(kinds_[x])) {
      auto* q = static_cast<structures::Sequence*>(handles_[x].get());
      if (op.kind == 1) {
        st = q->Push(op.value);
      } else {
        st = q->Pop(&got);
        if (st.ok()) {
          const auto& expect = kinds_[x] == Kind::kStack ? m.seq.back() : m.seq.front();
          if (got != expect) mismatches_[x]++;
        } else if (st.code() == StatusCode::kNotFound && m.seq.empty()) {
          st = Status::Ok();
        }
      }
    } else {
      auto* mp = static_cast<structures::Map*>(handles_[x].get());
      auto it = m.map.find(op.key);
      if (op.kind == 0) {
        st = mp->Get(op.key, &got);
        if (st.ok() && (it == m.map.end() || got != it->second)) mismatches_[x]++;
        if (st.code() == StatusCode::kNotFound && it == m.map.end()) st = Status::Ok();
      } else if (op.kind == 1) {
        st = mp->Put(op.key, op.value);
      } else {
        st = mp->Delete(op.key);
        if (st.code() == StatusCode::kNotFound && it == m.map.end()) st = Status::Ok();
      }
    }
    lat_[x].Add(bench::ElapsedNs(a, bench::Clock::now()));
    if (!st.ok()) {
      return Fail("operation " + std::to_string(i) + " on " + JobName(kinds_[x]), st);
    }
    ApplyToModel(m, kinds_[x], op);
    per_ops_[x]++;
    if (!note_progress(i + 1)) {
      return Fail("progress file", Status::IoError(progress_path_, errno));
    }
    if (fo_.killed && fo_.first_op_ms < 0) {
      fo_.first_op_ms =
          std::chrono::duration<double, std::milli>(bench::Clock::now() - kill_time_).count();
    }
    if (o_.kill_primary_after > 0 && i + 1 == o_.kill_primary_after) {
      Status k = daemons_->KillPrimary(*cluster_, o_.kill_primary_after, &fo_, &kill_time_);
      if (!k.ok()) return Fail("failover after killing back-end 0", k);
    }
    if (tty && (i % 512 == 0 || i + 1 == o_.ops)) {
      const double el = std::chrono::duration<double>(bench::Clock::now() - t0).count();
      std::cout << "\r\033[Krun " << run_ + 1 << ": " << i + 1 << "/" << o_.ops << " ops, "
                << FormatFixed(static_cast<double>(i + 1) / std::max(el, 1e-9), 0) << " ops/s"
                << std::flush;
    }
  }
  for (auto& h : handles_) {
    Status st = h->Sync();
    if (!st.ok()) return Fail("sync", st);
  }
  secs_ = std::chrono::duration<double>(bench::Clock::now() - t0).count();
  if (tty) std::cout << "\r\033[K";
  after_ = TakeSample();
  if (fo_.killed) {
    // The rejoined mirror: its full copy ran while the operations went on; wait (generously)
    // until the promoted primary reports every mirror in sync.
    Status ws = JobDaemons::WaitMirrorsInSync(fo_.new_address);
    if (!ws.ok()) return Fail("rejoin", ws);
    fo_.rejoin_ms =
        std::chrono::duration<double, std::milli>(bench::Clock::now() - kill_time_).count();
    // Full verification of every structure against the job's model after the promotion.
    Status err;
    const std::string why =
        VerifyStructures(kinds_, handles_, models_, &fo_.verified_elements, &err);
    if (!err.ok()) return Fail("verifying after the promotion", err);
    if (!why.empty()) return VerificationFailed(" after the promotion: " + why);
  }
  ::close(progress_fd_);
  progress_fd_ = -1;
  // Record the run's end, durably, before declaring success.
  return PushRunRecord({run_, o_.ops, mask_}, "recording the run");
}

void JobRun::Measure(JobReport* r) {
  r->run = run_;
  r->ops = o_.ops;
  r->seconds = secs_;
  r->level = o_.level;
  r->pm_mode = o_.pm_mode;
  r->data_dir = o_.data_dir;
  r->verified_elements = verified_;
  for (size_t i = 0; i < kinds_.size(); i++) {
    auto n = handles_[i]->Count();
    r->structures.push_back({JobName(kinds_[i]), per_ops_[i], lat_[i].PercentileUs(50),
                             lat_[i].PercentileUs(99), n.ok() ? *n : 0, mismatches_[i]});
  }
  const double ops = static_cast<double>(o_.ops);
  const frontend::Counters& c0 = before_.counters;
  const frontend::Counters& c1 = after_.counters;
  // After a failover the switched session's counters started again from 0: not comparable (-1).
  const bool killed = fo_.killed;
  r->round_trips_per_op =
      killed ? -1 : static_cast<double>(c1.fabric.round_trips - c0.fabric.round_trips) / ops;
  r->bytes_per_op =
      killed ? -1 : static_cast<double>(c1.fabric.bytes_out - c0.fabric.bytes_out) / ops;
  r->backend_cpu_us_per_op =
      before_.cpu.ok() && after_.cpu.ok() ? (*after_.cpu - *before_.cpu) * 1e6 / ops : -1;
  r->cache_hit_percent =
      killed ? -1.0
             : 100.0 * static_cast<double>(c1.cache_hits - c0.cache_hits) /
                   std::max<double>(1, static_cast<double>((c1.cache_hits - c0.cache_hits) +
                                                           (c1.cache_misses - c0.cache_misses)));
  uint64_t updates = 0;  // acknowledged operations that change data (puts, deletes, pushes, pops)
  {
    workloads::Rng urng(kSeedBase + run_);
    for (uint64_t i = 0; i < o_.ops; i++) {
      updates += NextOp(urng, run_kinds_, run_, i).kind != 0 ? 1 : 0;
    }
  }
  const bool syncs = !killed && before_.syncs.ok() && after_.syncs.ok();
  r->syncs_per_op = syncs ? static_cast<double>(*after_.syncs - *before_.syncs) / ops : -1;
  r->syncs_per_update = syncs && updates > 0 ? static_cast<double>(*after_.syncs - *before_.syncs) /
                                                   static_cast<double>(updates)
                                             : -1;
  r->backends = cluster_->size();
  r->kill_primary_after = o_.kill_primary_after;
  r->failover = fo_;
  r->mirrors = o_.mirrors;
  r->mirror_mode = o_.mirror_mode;
}

// The last line of a daemon's log.
std::string LastLine(std::string log) {
  while (!log.empty() && log.back() == '\n') log.pop_back();
  const size_t nl = log.rfind('\n');
  return nl == std::string::npos ? log : log.substr(nl + 1);
}

Status JobRun::StopDaemons(JobReport* r) {
  handles_.clear();
  runs_.reset();
  cluster_.reset();
  // A failure here is reported after the report's table, as the stop lines before it are.
  auto failed = [&](const std::string& what, const Status& st) {
    std::ostringstream err;
    const Status s = Fail(what, st, err);
    r->stop_failure_text = err.str();
    r->stop_failure_exit = JobExitCode(s);
    return Status::Ok();
  };
  auto& backends = daemons_->backends;
  for (size_t i = 0; i < backends.size(); i++) {
    if (!backends[i]) {
      r->stop_lines.push_back("back-end " + std::to_string(i) +
                              ": killed by the job (--kill-primary-after)");
      continue;
    }
    std::string log;
    Status stop = backends[i]->Stop(&log);
    if (!stop.ok()) return failed("stopping back-end " + std::to_string(i), stop);
    r->stop_lines.push_back("back-end " + std::to_string(i) + ": " + LastLine(log));
  }
  for (auto& pd : daemons_->promoted) {
    std::string log;
    Status stop = pd->Stop(&log);
    if (!stop.ok()) return failed("stopping the promoted mirror", stop);
    r->stop_lines.push_back("promoted mirror: " + LastLine(log));
  }
  for (size_t m = 0; m < daemons_->mirrors.size(); m++) {
    Status stop = daemons_->mirrors[m]->Stop();
    if (!stop.ok()) return failed("stopping mirror " + std::to_string(m), stop);
  }
  r->pools = backends.size();
  return Status::Ok();
}

Result<JobReport> JobRun::Run() {
  ASYMNVM_RETURN_IF_ERROR(Validate());
  ASYMNVM_RETURN_IF_ERROR(ClaimIdentity());
  ASYMNVM_RETURN_IF_ERROR(StartDaemons());
  ASYMNVM_RETURN_IF_ERROR(OpenCluster());
  ASYMNVM_RETURN_IF_ERROR(ReadRunLog());
  JobReport report;
  if (o_.show_runs) {
    report.showed_runs = true;
    return report;
  }
  ASYMNVM_RETURN_IF_ERROR(VerifyEarlierRuns());
  if (!run_recs_.empty()) {
    std::cout << "verified " << verified_ << " elements left by " << run_recs_.size()
              << " earlier run(s) in " << kinds_.size() << " structures\n";
  }
  ASYMNVM_RETURN_IF_ERROR(RunOperations());
  Measure(&report);
  ASYMNVM_RETURN_IF_ERROR(StopDaemons(&report));
  return report;
}

}  // namespace

uint64_t JobReport::total_read_mismatches() const {
  uint64_t n = 0;
  for (const auto& s : structures) n += s.read_mismatches;
  return n;
}

int JobExitCode(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    case StatusCode::kCorruption:
      return kExitVerification;
    case StatusCode::kUnavailable:
      return kExitInterrupted;
    default:
      return kExitFailure;
  }
}

Result<JobReport> RunJob(const JobOptions& options) {
  JobRun run(options);
  return run.Run();
}

}  // namespace asymnvm::job
