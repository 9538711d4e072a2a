// Suite "fabric": latency and throughput of the fabric's verbs against a plain ping-pong floor
// measured in the same run over the same transport (doc/fabric.md).
//
// For every provider × transport: two Fabric instances (initiator NIC and target NIC) in this
// process, or the target in a child process (--target-process, tcp/unix only). The target
// registers a 1 MiB area with every remote right (WRITE/READ/CAS land there) and a shared receive
// queue of 1024 × 4 KiB buffers that a target application thread re-posts as they are consumed.
// Operations:
//   WRITE, READ  64 B and 4 KiB (WRITE of <= 64 B is posted inline)
//   CAS          8 B compare-and-swap (tracks the expected value so most swaps succeed)
//   SEND         SEND (unsignaled) + flush (signaled) posted as one list; the flush completion ends
//                the operation
// each with 1, 8 and 64 outstanding operations (window kept full; completions reaped in batches and
// their replacements posted as one list). Outstanding 1 is lock-step: its p50/p99 is the latency.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/shared_memory.h"
#include "common/logging.h"
#include "common/tls_files.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/floor.h"
#include "workloads/bench/latency.h"

namespace asymnvm::bench {
namespace {

using fabric::Completion;
using fabric::CompletionStatus;
using fabric::Connection;
using fabric::ConnectionOptions;
using fabric::Counters;
using fabric::Fabric;
using fabric::FabricOptions;
using fabric::MemoryRegion;
using fabric::Opcode;
using fabric::RecvRequest;
using fabric::RegionDescriptor;
using fabric::WorkRequest;

constexpr uint32_t kSlotBytes = 4096;      // one slot per outstanding operation
constexpr uint32_t kMaxOutstanding = 256;  // slots in the remote area and the local buffer
constexpr size_t kAreaBytes = size_t{kMaxOutstanding} * kSlotBytes;  // 1 MiB
constexpr uint32_t kRecvBuffers = 1024;  // slack for a descheduled re-poster
constexpr uint32_t kRecvBufferBytes = 4096;
constexpr uint32_t kInlineMax = 64;
constexpr uint64_t kSendTag = 1ull << 62;  // wr_id bit of the (unsignaled) SEND of SEND+flush

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<void, FreeDeleter>;

Buffer AllocBuffer(size_t bytes) {
  bytes = (bytes + 4095) / 4096 * 4096;  // aligned_alloc wants a multiple of the alignment
  void* p = std::aligned_alloc(4096, bytes);
  if (p != nullptr) std::memset(p, 0, bytes);
  return Buffer(p);
}

std::string Join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); i++) out += (i ? sep : "") + v[i];
  return out;
}

struct PmSpec {
  std::string dir;  // empty: DRAM regions
  pm::PersistMode mode = pm::PersistMode::kFlushOnly;
};

// ---------------------------------------------------------------------------------------------
// The target NIC and its application thread (which only re-posts receive buffers).

class BenchTarget {
 public:
  static Result<std::unique_ptr<BenchTarget>> Start(const FabricOptions& fo,
                                                    const std::string& listen_address,
                                                    const PmSpec& pm_spec) {
    auto t = std::unique_ptr<BenchTarget>(new BenchTarget());
    uint8_t* area = nullptr;
    uint8_t* recv_area = nullptr;
    pm::Persister* persister = nullptr;
    if (!pm_spec.dir.empty()) {
      pm::PoolOptions po;
      po.mode = pm_spec.mode;
      po.layout = "asymnvm-bench-fabric";
      std::string path = pm_spec.dir + "/bench-fabric-" + std::to_string(::getpid()) + ".pool";
      ASYMNVM_ASSIGN_OR_RETURN(t->pool_, pm::Pool::OpenOrCreate(path, 8ull << 20, po));
      t->pool_path_ = path;
      area = t->pool_->user_base();
      recv_area = area + kAreaBytes;
      persister = t->pool_->persister();
    } else {
      // Shareable DRAM: the shm provider maps it into the initiator (plain memory to the others).
      ASYMNVM_ASSIGN_OR_RETURN(t->area_mem_, fabric::SharedMemory::Allocate(kAreaBytes));
      t->recv_mem_ = AllocBuffer(size_t{kRecvBuffers} * kRecvBufferBytes);
      if (!t->recv_mem_) return Status::ResourceExhausted("target: out of memory");
      area = t->area_mem_->data();
      recv_area = static_cast<uint8_t*>(t->recv_mem_.get());
    }
    ASYMNVM_ASSIGN_OR_RETURN(t->fabric_, Fabric::Open(fo));
    ASYMNVM_ASSIGN_OR_RETURN(t->pd_, t->fabric_->AllocPd());
    fabric::MemoryRegionOptions mo;
    mo.access = fabric::kAllRemote;
    mo.persister = persister;
    ASYMNVM_ASSIGN_OR_RETURN(t->mr_, t->pd_->RegisterMemory(area, kAreaBytes, mo));
    mo.access = fabric::kLocalWrite;
    ASYMNVM_ASSIGN_OR_RETURN(
        t->recv_mr_,
        t->pd_->RegisterMemory(recv_area, size_t{kRecvBuffers} * kRecvBufferBytes, mo));
    ASYMNVM_ASSIGN_OR_RETURN(t->send_cq_, t->fabric_->CreateCq({}));
    ASYMNVM_ASSIGN_OR_RETURN(t->recv_cq_, t->fabric_->CreateCq({}));
    fabric::SrqOptions so;
    so.max_wr = 2 * kRecvBuffers;
    ASYMNVM_ASSIGN_OR_RETURN(t->srq_, t->fabric_->CreateSrq(t->pd_.get(), so));
    t->recv_base_ = recv_area;
    std::vector<RecvRequest> reqs;
    for (uint32_t i = 0; i < kRecvBuffers; i++) {
      reqs.push_back(
          {i, recv_area + size_t{i} * kRecvBufferBytes, kRecvBufferBytes, t->recv_mr_.get()});
    }
    ASYMNVM_RETURN_IF_ERROR(t->srq_->PostRecv(reqs));
    ASYMNVM_ASSIGN_OR_RETURN(t->listener_, t->fabric_->Listen(t->pd_.get(), listen_address));
    return t;
  }

  ~BenchTarget() {
    stop_.store(true);
    if (reposter_.joinable()) reposter_.join();
    conn_.reset();
    listener_.reset();
    if (!pool_path_.empty()) {
      pool_.reset();
      ::unlink(pool_path_.c_str());
    }
  }

  std::string address() const { return listener_->address(); }
  RegionDescriptor region() const { return mr_->descriptor(); }

  // Accepts the initiator's connection and starts the re-posting thread.
  Status AcceptOne() {
    ConnectionOptions co;
    co.send_cq = send_cq_.get();
    co.recv_cq = recv_cq_.get();
    co.srq = srq_.get();
    co.max_send_wr = 1024;
    co.timeout = std::chrono::milliseconds(10000);
    ASYMNVM_ASSIGN_OR_RETURN(conn_, listener_->Accept(co));
    reposter_ = std::thread([this] { RepostLoop(); });
    return Status::Ok();
  }

 private:
  BenchTarget() = default;

  void RepostLoop() {
    Completion comps[64];
    std::vector<RecvRequest> reqs;
    while (!stop_.load(std::memory_order_relaxed)) {
      auto n = recv_cq_->Wait(comps, std::chrono::milliseconds(20));
      if (!n.ok()) {
        LOG_ERROR("bench", "target recv CQ: " << n.status().ToString());
        return;
      }
      reqs.clear();
      for (size_t i = 0; i < *n; i++) {
        if (comps[i].status != CompletionStatus::kSuccess) {
          LOG_WARN("bench", "target RECV completion: " << CompletionStatusName(comps[i].status));
          continue;
        }
        if (!comps[i].buffer_done) continue;
        uint64_t b = comps[i].wr_id;
        reqs.push_back({b, recv_base_ + b * kRecvBufferBytes, kRecvBufferBytes, recv_mr_.get()});
      }
      if (!reqs.empty()) {
        Status st = srq_->PostRecv(reqs);
        if (!st.ok()) LOG_ERROR("bench", "target re-post: " << st.ToString());
      }
    }
  }

  std::unique_ptr<pm::Pool> pool_;
  std::string pool_path_;
  std::unique_ptr<fabric::SharedMemory> area_mem_;
  Buffer recv_mem_;
  uint8_t* recv_base_ = nullptr;
  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<fabric::ProtectionDomain> pd_;
  std::unique_ptr<MemoryRegion> mr_;
  std::unique_ptr<MemoryRegion> recv_mr_;
  std::unique_ptr<fabric::CompletionQueue> send_cq_;
  std::unique_ptr<fabric::CompletionQueue> recv_cq_;
  std::unique_ptr<fabric::SharedReceiveQueue> srq_;
  std::unique_ptr<fabric::Listener> listener_;
  std::unique_ptr<Connection> conn_;
  std::thread reposter_;
  std::atomic<bool> stop_{false};
};

// A target running in a child process (--target-process). The child reports its listen address
// and region descriptor over a pipe and exits when the parent closes the control pipe.
class ChildTarget {
 public:
  static Result<std::unique_ptr<ChildTarget>> Spawn(const FabricOptions& fo,
                                                    const std::string& listen_address,
                                                    const PmSpec& pm_spec) {
    int info[2], ctl[2];
    if (::pipe2(info, O_CLOEXEC) != 0) return Status::IoError("target process: pipe", errno);
    if (::pipe2(ctl, O_CLOEXEC) != 0) {
      ::close(info[0]);
      ::close(info[1]);
      return Status::IoError("target process: pipe", errno);
    }
    std::cout.flush();
    pid_t pid = ::fork();
    if (pid < 0) return Status::IoError("target process: fork", errno);
    if (pid == 0) {
      ::close(info[0]);
      ::close(ctl[1]);
      ::_exit(ChildMain(fo, listen_address, pm_spec, info[1], ctl[0]));
    }
    ::close(info[1]);
    ::close(ctl[0]);
    auto c = std::unique_ptr<ChildTarget>(new ChildTarget());
    c->pid_ = pid;
    c->ctl_fd_ = ctl[1];
    std::string msg;
    char buf[512];
    ssize_t n;
    while ((n = ::read(info[0], buf, sizeof(buf))) > 0) msg.append(buf, static_cast<size_t>(n));
    ::close(info[0]);
    // "OK <address>\n" + 32-byte descriptor, or "ERR <message>".
    if (msg.rfind("OK ", 0) != 0) {
      return Status::IoError("target process failed: " + (msg.size() > 4 ? msg.substr(4) : msg));
    }
    size_t nl = msg.find('\n');
    if (nl == std::string::npos || msg.size() < nl + 1 + RegionDescriptor::kEncodedSize) {
      return Status::ProtocolError("target process: short report");
    }
    c->address_ = msg.substr(3, nl - 3);
    ASYMNVM_ASSIGN_OR_RETURN(
        c->region_, RegionDescriptor::Decode(reinterpret_cast<const uint8_t*>(msg.data()) + nl + 1,
                                             RegionDescriptor::kEncodedSize));
    return c;
  }

  ~ChildTarget() {
    if (ctl_fd_ >= 0) ::close(ctl_fd_);
    if (pid_ > 0) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }

  const std::string& address() const { return address_; }
  RegionDescriptor region() const { return region_; }

 private:
  ChildTarget() = default;

  static int ChildMain(const FabricOptions& fo, const std::string& listen_address,
                       const PmSpec& pm_spec, int info_fd, int ctl_fd) {
    auto t = BenchTarget::Start(fo, listen_address, pm_spec);
    std::string msg;
    if (!t.ok()) {
      msg = "ERR " + t.status().ToString();
      (void)!::write(info_fd, msg.data(), msg.size());
      return 1;
    }
    msg = "OK " + (*t)->address() + "\n";
    uint8_t desc[RegionDescriptor::kEncodedSize];
    (*t)->region().EncodeTo(desc);
    msg.append(reinterpret_cast<const char*>(desc), sizeof(desc));
    (void)!::write(info_fd, msg.data(), msg.size());
    ::close(info_fd);
    Status st = (*t)->AcceptOne();
    if (!st.ok()) {
      LOG_ERROR("bench", "target process: accept: " << st.ToString());
      return 1;
    }
    char c;
    while (::read(ctl_fd, &c, 1) > 0) {
    }
    t->reset();
    return 0;
  }

  pid_t pid_ = -1;
  int ctl_fd_ = -1;
  std::string address_;
  RegionDescriptor region_;
};

// ---------------------------------------------------------------------------------------------
// The initiator side and the measurement loop.

enum class OpKind { kWrite, kRead, kCas, kSendFlush };

const char* OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kWrite:
      return "WRITE";
    case OpKind::kRead:
      return "READ";
    case OpKind::kCas:
      return "CAS";
    case OpKind::kSendFlush:
      return "SEND+flush";
  }
  return "?";
}

struct Initiator {
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  Buffer mem;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<fabric::CompletionQueue> cq;
  std::unique_ptr<Connection> conn;
  RegionDescriptor remote;

  uint8_t* slot(uint32_t i) const {
    return static_cast<uint8_t*>(mem.get()) + size_t{i} * kSlotBytes;
  }
  uint64_t* atomic_result(uint32_t i) const {
    return reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(mem.get()) + kAreaBytes) + i;
  }

  ~Initiator() {
    conn.reset();
    cq.reset();
    mr.reset();
    pd.reset();
    fabric.reset();
  }
};

class OpRunner {
 public:
  OpRunner(Initiator* in, OpKind kind, uint32_t size, uint32_t outstanding)
      : in_(in), kind_(kind), size_(size), outstanding_(outstanding), expected_(outstanding, 0) {
    for (uint32_t s = 0; s < outstanding; s++) std::memset(in_->slot(s), 'a' + (s % 26), size);
  }

  // Keeps `outstanding_` operations in flight until the budget is spent, then drains.
  Result<Measurement> Run(const Budget& budget) {
    Measurement m;
    std::vector<WorkRequest> wrs;
    std::vector<Clock::time_point> started(outstanding_);
    Clock::time_point start = Clock::now();
    Clock::time_point deadline = start + budget.duration;
    uint64_t issued = 0;
    for (uint32_t s = 0; s < outstanding_; s++) {
      if (budget.max_ops != 0 && issued >= budget.max_ops) break;
      Build(s, &wrs);
      started[s] = start;
      issued++;
    }
    ASYMNVM_RETURN_IF_ERROR(in_->conn->Post(wrs).WithContext("post"));
    uint64_t in_flight = issued;
    Completion comps[64];
    Clock::time_point last = start;
    while (in_flight > 0) {
      auto n = in_->cq->Wait(comps, std::chrono::seconds(5));
      if (!n.ok()) return n.status().WithContext("poll");
      if (*n == 0) {
        return Status::TimedOut(std::string(OpKindName(kind_)) + ": no completion within 5 s (" +
                                std::to_string(in_flight) + " in flight)");
      }
      Clock::time_point now = Clock::now();
      last = now;
      wrs.clear();
      bool more = now < deadline;
      for (size_t i = 0; i < *n; i++) {
        const Completion& c = comps[i];
        if (c.status != CompletionStatus::kSuccess) {
          Status why = in_->conn->error();
          return Status::IoError(std::string(OpKindName(kind_)) + " completed with " +
                                 CompletionStatusName(c.status) +
                                 (why.ok() ? "" : " (" + why.ToString() + ")"));
        }
        if (c.wr_id & kSendTag) continue;
        uint32_t s = static_cast<uint32_t>(c.wr_id);
        m.latency.Add(ElapsedNs(started[s], now));
        m.ops++;
        in_flight--;
        if (kind_ == OpKind::kCas) {
          uint64_t orig = *in_->atomic_result(s);
          expected_[s] = orig == expected_[s] ? expected_[s] + 1 : orig;
        }
        if (more && (budget.max_ops == 0 || issued < budget.max_ops)) {
          Build(s, &wrs);
          started[s] = now;
          issued++;
          in_flight++;
        }
      }
      if (!wrs.empty()) ASYMNVM_RETURN_IF_ERROR(in_->conn->Post(wrs).WithContext("post"));
    }
    m.seconds = std::chrono::duration<double>(last - start).count();
    return m;
  }

 private:
  void Build(uint32_t s, std::vector<WorkRequest>* out) {
    WorkRequest wr;
    wr.wr_id = s;
    wr.signaled = true;
    wr.local_addr = in_->slot(s);
    wr.local_mr = in_->mr.get();
    wr.length = size_;
    wr.remote_addr = in_->remote.addr + uint64_t{s} * kSlotBytes;
    wr.rkey = in_->remote.rkey;
    switch (kind_) {
      case OpKind::kWrite:
        wr.opcode = Opcode::kWrite;
        wr.inline_data = size_ <= kInlineMax;
        break;
      case OpKind::kRead:
        wr.opcode = Opcode::kRead;
        break;
      case OpKind::kCas:
        wr.opcode = Opcode::kCompareSwap;
        wr.local_addr = in_->atomic_result(s);
        wr.length = 8;
        wr.compare_add = expected_[s];
        wr.swap = expected_[s] + 1;
        break;
      case OpKind::kSendFlush: {
        WorkRequest send = wr;
        send.wr_id = kSendTag | s;
        send.opcode = Opcode::kSend;
        send.signaled = false;
        send.inline_data = size_ <= kInlineMax;
        send.remote_addr = 0;
        send.rkey = 0;
        out->push_back(send);
        wr.opcode = Opcode::kFlush;
        wr.local_addr = nullptr;
        wr.local_mr = nullptr;
        wr.length = 0;
        wr.remote_addr = in_->remote.addr;
        break;
      }
    }
    out->push_back(wr);
  }

  Initiator* in_;
  OpKind kind_;
  uint32_t size_;
  uint32_t outstanding_;
  std::vector<uint64_t> expected_;
};

// ---------------------------------------------------------------------------------------------
// The suite.

class FabricSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--providers", providers_,
                    "Providers to measure (verbs is skipped without a device)")
        ->delimiter(',')
        ->check(CLI::IsMember({"soft", "shm", "verbs"}))
        ->default_str("soft,shm,verbs");
    cmd->add_option("--transports", transports_,
                    "soft transports to measure (tcp+tls: tcp with fabric TLS, a throwaway "
                    "certificate made for the run; its floor is plain tcp's)")
        ->delimiter(',')
        ->check(CLI::IsMember({"tcp", "tcp+tls", "unix", "inproc"}))
        ->default_str("tcp,tcp+tls,unix,inproc");
    cmd->add_option("--op", ops_, "Operations: WRITE,READ,CAS,SEND (SEND = SEND+flush)")
        ->delimiter(',')
        ->check(CLI::IsMember({"WRITE", "READ", "CAS", "SEND"}))
        ->default_str("WRITE,READ,CAS,SEND");
    cmd->add_option("--sizes", sizes_, "Payload sizes for WRITE/READ/SEND (bytes, <= 4096)")
        ->delimiter(',')
        ->check(CLI::Range(1, 4096))
        ->default_str("64,4096");
    cmd->add_option("--outstanding", outstanding_, "Operations kept in flight (1 = lock-step)")
        ->delimiter(',')
        ->check(CLI::Range(1, 256))
        ->default_str("1,8,64");
    cmd->add_flag("--target-process", target_process_,
                  "Run the target NIC in a child process (tcp/unix; inproc stays in-process)");
    cmd->add_option("--nic-threads", nic_threads_, "soft: software NIC threads per Fabric")
        ->check(CLI::Range(1, 16));
    cmd->add_option("--spin-us", spin_us_,
                    "soft: adaptive-polling spin before blocking, microseconds (NIC threads and "
                    "CQ Wait); a list sweeps it (e.g. 0,50); default: the provider's")
        ->delimiter(',')
        ->check(CLI::Range(0, 100000));
    cmd->add_option("--pm-dir", pm_dir_,
                    "Put the target's regions in a PM pool file in DIR (removed afterwards); "
                    "default: DRAM regions")
        ->type_name("DIR");
    cmd->add_option("--pm-mode", pm_mode_, "Persist mode of the --pm-dir pool: auto|msync|flush")
        ->check(CLI::IsMember({"auto", "msync", "flush"}));
  }

  Status Validate(const CommonOptions& common) override {
    if (providers_.empty() || transports_.empty() || ops_.empty() || outstanding_.empty()) {
      return Status::InvalidArgument("empty --providers/--transports/--op/--outstanding");
    }
    if (!pm_dir_.empty()) {
      auto mode = pm::ParsePersistMode(pm_mode_);
      if (!mode.ok()) return mode.status();
      pm_.dir = pm_dir_;
      pm_.mode = *mode;
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    budget_.duration = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(common.duration_s > 0 ? common.duration_s
                                      : common.quick        ? 0.1
                                                            : 1.0));
    budget_.max_ops = common.ops;
    warmup_.duration =
        std::min<std::chrono::nanoseconds>(budget_.duration / 5, std::chrono::milliseconds(50));
    warmup_.max_ops = common.ops == 0 ? 0 : std::max<uint64_t>(1, common.ops / 10);

    unsigned cores = MachineCores();
    std::vector<std::string> run_providers;
    std::vector<std::string> run_transports;
    for (const std::string& p : providers_) {
      if (p == "verbs") {
        FabricOptions fo;
        fo.provider = "verbs";
        auto probe = Fabric::Open(fo);
        if (!probe.ok()) {
          std::string reason = probe.status().code() == StatusCode::kNotSupported
                                   ? "no RDMA device"
                                   : probe.status().message();
          std::cout << "verbs: skipped (" << reason << ")\n";
          Json rec = MakeRecord("verbs", Json{{"provider", "verbs"}});
          rec["skipped"] = true;
          rec["reason"] = reason;
          rec["detail"] = probe.status().ToString();
          skipped_.push_back(std::move(rec));
          continue;
        }
      }
      run_providers.push_back(p);
    }
    std::vector<std::pair<std::string, std::string>> runs;  // (provider, transport)
    for (const std::string& t : transports_) {
      for (const std::string& p : run_providers) {
        if (p == "verbs" && t != "tcp") continue;  // verbs bootstraps over tcp only
        runs.push_back({p, t});
      }
      run_transports.push_back(t);
    }

    Json& m = report->machine();
    m["cores"] = cores;
    m["provider"] = Join(run_providers);
    m["transport"] = Join(run_transports);
    m["pm_mode"] = pm_.dir.empty() ? std::string("dram") : pm::PersistModeName(pm_.mode);
    m["target"] = target_process_ ? "child process (tcp/unix)" : "same process";
    m["nic_threads"] = nic_threads_;
    std::vector<std::string> spins;
    for (int sp : Spins()) spins.push_back(std::to_string(sp));
    m["spin_us"] = Join(spins);
    m["duration_s"] = std::chrono::duration<double>(budget_.duration).count();
    report->AddHeader("asymnvm-bench fabric: " + std::to_string(cores) +
                      " cores; initiator + target software NICs, application threads and floors "
                      "all share them.");
    report->AddHeader(
        "target " + std::string(target_process_ ? "in a child process" : "in this process") +
        "; regions in " + (pm_.dir.empty() ? "DRAM" : "a PM pool (" + pm_mode_ + ")") + "; " +
        std::to_string(std::chrono::duration<double>(budget_.duration).count()) +
        " s per measurement; floor = lock-step ping-pong (size bytes out, 8 B back), no fabric.");
    report->AddHeader(
        "lat x floor = p50 / floor p50 of the same transport and size (CAS: 8 B); "
        "x lock-step = ops/s / ops/s at 1 outstanding.");

    if (std::find(run_transports.begin(), run_transports.end(), "tcp+tls") !=
        run_transports.end()) {
      report->AddHeader(
          "tcp+tls: tcp with fabric TLS (TLS 1.3, a throwaway certificate; doc/fabric.md §TLS); "
          "its floor is the plain tcp ping-pong, so lat x floor includes the cost of TLS.");
    }
    for (const Json& s : skipped_) report->Add(s);
    std::set<std::string> floors_run;
    for (const std::string& t : run_transports) {
      if (floors_run.insert(FloorTransport(t)).second) {
        ASYMNVM_RETURN_IF_ERROR(RunFloors(FloorTransport(t), report));
      }
      for (const auto& [p, tt] : runs) {
        if (tt != t) continue;
        for (int spin : Spins()) ASYMNVM_RETURN_IF_ERROR(RunProvider(p, t, spin, report));
      }
    }
    if (!tls_dir_.empty()) std::filesystem::remove_all(tls_dir_);
    Summarize(report);
    report->set_columns(
        {{"lat x floor", "ratio_to_floor", 2}, {"x lock-step", "speedup_vs_lockstep", 2}});
    return Status::Ok();
  }

 private:
  std::vector<uint32_t> FloorSizes() const {
    std::vector<uint32_t> s;
    bool cas = std::find(ops_.begin(), ops_.end(), "CAS") != ops_.end();
    if (cas) s.push_back(8);
    for (uint32_t z : sizes_) {
      if (std::find(s.begin(), s.end(), z) == s.end()) s.push_back(z);
    }
    return s;
  }

  // The ping-pong floor a transport is compared with: tcp+tls against plain tcp.
  static std::string FloorTransport(const std::string& transport) {
    return transport == "tcp+tls" ? "tcp" : transport;
  }

  // A throwaway CA and node certificate for tcp+tls (made once per run, removed at its end).
  Status UseTls(FabricOptions* fo) {
    if (tls_dir_.empty()) {
      char tmpl[] = "/tmp/asymnvm-bench-tls.XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) return Status::IoError("mkdtemp", errno);
      tls_dir_ = tmpl;
      ASYMNVM_RETURN_IF_ERROR(WriteThrowawayCertificates(tls_dir_, {"node"}));
    }
    fo->tls_cert_file = tls_dir_ + "/node.crt";
    fo->tls_key_file = tls_dir_ + "/node.key";
    fo->tls_ca_cert_file = tls_dir_ + "/ca.crt";
    fo->tls_verify_peer = true;
    return Status::Ok();
  }

  Status RunFloors(const std::string& transport, Report* report) {
    for (uint32_t size : FloorSizes()) {
      std::cerr << "  floor/" << transport << " " << size << " B ...\n";
      ASYMNVM_ASSIGN_OR_RETURN(Measurement meas, RunFloor(transport, size, budget_));
      Json cfg{{"op", "pingpong"},
               {"size", size},
               {"outstanding", 1},
               {"transport", transport},
               {"provider", "none"}};
      Json rec = MakeRecord("floor/" + transport, cfg);
      Fill(&rec, &meas);
      rec["round_trips_per_op"] = 1.0;
      rec["bytes_per_op"] = static_cast<double>(size + kFloorReplyBytes);
      floor_p50_[{transport, size}] = rec["p50_us"].get<double>();
      report->Add(std::move(rec));
    }
    return Status::Ok();
  }

  static void Fill(Json* rec, Measurement* meas) {
    (*rec)["ops_per_sec"] = meas->ops_per_sec();
    (*rec)["p50_us"] = meas->latency.PercentileUs(50);
    (*rec)["p99_us"] = meas->latency.PercentileUs(99);
    (*rec)["ops"] = meas->ops;
  }

  // Spin values to run: --spin-us, or the provider default.
  std::vector<int> Spins() const {
    if (!spin_us_.empty()) return spin_us_;
    return {static_cast<int>(FabricOptions{}.spin.count())};
  }

  Status RunProvider(const std::string& provider, const std::string& transport, int spin_us,
                     Report* report) {
    FabricOptions fo;
    fo.provider = provider;
    fo.nic_threads = nic_threads_;
    fo.spin = std::chrono::microseconds(spin_us);
    static int seq = 0;
    seq++;
    std::string listen;
    if (transport == "tcp+tls") ASYMNVM_RETURN_IF_ERROR(UseTls(&fo));
    if (transport == "tcp" || transport == "tcp+tls") {
      listen = "tcp://127.0.0.1:0";
    } else if (transport == "unix") {
      listen = "unix:///tmp/asymnvm-bench-" + std::to_string(::getpid()) + "-" +
               std::to_string(seq) + ".sock";
    } else {
      listen = "inproc://asymnvm-bench-" + std::to_string(seq);
    }
    const std::string label =
        provider + "/" + transport + (Spins().size() > 1 ? " spin" + std::to_string(spin_us) : "");
    std::cerr << "  " << label << ": setting up\n";

    std::unique_ptr<ChildTarget> child;
    std::unique_ptr<BenchTarget> local;
    bool in_child = target_process_ && transport != "inproc";
    if (in_child) {
      ASYMNVM_ASSIGN_OR_RETURN(child, ChildTarget::Spawn(fo, listen, pm_));
    } else {
      ASYMNVM_ASSIGN_OR_RETURN(local, BenchTarget::Start(fo, listen, pm_));
    }
    auto in = std::make_unique<Initiator>();
    ASYMNVM_ASSIGN_OR_RETURN(in->fabric, Fabric::Open(fo));
    ASYMNVM_ASSIGN_OR_RETURN(in->pd, in->fabric->AllocPd());
    in->mem = AllocBuffer(kAreaBytes + kMaxOutstanding * sizeof(uint64_t));
    if (!in->mem) return Status::ResourceExhausted("initiator: out of memory");
    fabric::MemoryRegionOptions mo;
    mo.access = fabric::kLocalWrite;
    ASYMNVM_ASSIGN_OR_RETURN(
        in->mr, in->pd->RegisterMemory(in->mem.get(), kAreaBytes + kMaxOutstanding * 8, mo));
    fabric::CompletionQueueOptions cqo;
    cqo.capacity = 4096;
    ASYMNVM_ASSIGN_OR_RETURN(in->cq, in->fabric->CreateCq(cqo));
    ConnectionOptions co;
    co.send_cq = in->cq.get();
    co.recv_cq = in->cq.get();
    co.max_send_wr = 2 * kMaxOutstanding + 16;
    co.max_inline = 256;
    co.timeout = std::chrono::milliseconds(10000);
    // The target's re-posting thread shares two busy cores; give it ~100 ms before RNR fails.
    co.rnr_retry = 7;
    co.rnr_backoff = std::chrono::microseconds(800);
    std::string address = in_child ? child->address() : local->address();
    in->remote = in_child ? child->region() : local->region();
    if (in_child) {
      ASYMNVM_ASSIGN_OR_RETURN(in->conn, in->fabric->Connect(in->pd.get(), address, co));
    } else {
      Status accept_st;
      std::thread acceptor([&] { accept_st = local->AcceptOne(); });
      auto conn = in->fabric->Connect(in->pd.get(), address, co);
      acceptor.join();
      if (!conn.ok()) return conn.status().WithContext(label + ": connect " + address);
      ASYMNVM_RETURN_IF_ERROR(accept_st.WithContext(label + ": accept"));
      in->conn = std::move(conn).value();
    }

    struct Spec {
      std::string name;
      OpKind kind;
      uint32_t size;
    };
    std::vector<Spec> specs;
    for (const std::string& op : ops_) {
      if (op == "CAS") {
        specs.push_back({op, OpKind::kCas, 8});
        continue;
      }
      for (uint32_t size : sizes_) {
        if (op == "WRITE") specs.push_back({op, OpKind::kWrite, size});
        if (op == "READ") specs.push_back({op, OpKind::kRead, size});
        if (op == "SEND") specs.push_back({op, OpKind::kSendFlush, size});
      }
    }
    for (const Spec& spec : specs) {
      double lockstep_ops = 0;
      for (uint32_t outstanding : outstanding_) {
        std::cerr << "  " << label << " " << OpKindName(spec.kind) << " " << spec.size << " B x"
                  << outstanding << " ...\n";
        OpRunner warm(in.get(), spec.kind, spec.size, outstanding);
        ASYMNVM_ASSIGN_OR_RETURN(Measurement ignored, warm.Run(warmup_));
        (void)ignored;
        Counters before = in->conn->counters();
        OpRunner runner(in.get(), spec.kind, spec.size, outstanding);
        auto meas = runner.Run(budget_);
        if (!meas.ok()) {
          return meas.status().WithContext(label + " " + OpKindName(spec.kind) + " " +
                                           std::to_string(spec.size) + " B x" +
                                           std::to_string(outstanding));
        }
        Counters delta = in->conn->counters() - before;
        Json cfg{{"op", OpKindName(spec.kind)}, {"size", spec.size},
                 {"outstanding", outstanding},  {"transport", transport},
                 {"provider", provider},        {"spin_us", spin_us}};
        Json rec = MakeRecord(label + " " + OpKindName(spec.kind), cfg);
        Fill(&rec, &*meas);
        double ops = static_cast<double>(std::max<uint64_t>(1, meas->ops));
        rec["round_trips_per_op"] = static_cast<double>(delta.round_trips) / ops;
        rec["bytes_per_op"] = static_cast<double>(delta.bytes_out + delta.bytes_in) / ops;
        rec["payload_bytes_per_op"] = static_cast<double>(delta.payload_bytes) / ops;
        rec["rnr_events"] = delta.rnr_events;
        rec["target"] = in_child ? "child" : "same process";
        auto floor = floor_p50_.find({FloorTransport(transport), spec.size});
        if (floor != floor_p50_.end() && floor->second > 0) {
          rec["floor_p50_us"] = floor->second;
          if (outstanding == 1) rec["ratio_to_floor"] = rec["p50_us"].get<double>() / floor->second;
        }
        if (outstanding == 1) {
          lockstep_ops = meas->ops_per_sec();
        } else if (lockstep_ops > 0) {
          rec["speedup_vs_lockstep"] = meas->ops_per_sec() / lockstep_ops;
        }
        report->Add(std::move(rec));
      }
    }
    in.reset();
    local.reset();
    child.reset();
    return Status::Ok();
  }

  // Target checks (doc/fabric.md), one line each, also written as "summary" in the JSON.
  void Summarize(Report* report) {
    Json checks = Json::array();
    for (const Json& r : report->results()) {
      if (r.value("skipped", false) || !r.contains("config")) continue;
      const Json& c = r["config"];
      if (c["provider"] == "none") continue;
      int size = c["size"].get<int>();
      int outstanding = c["outstanding"].get<int>();
      if (outstanding == 1 && size <= 64 && r.contains("ratio_to_floor")) {
        double v = r["ratio_to_floor"].get<double>();
        checks.push_back(Json{{"check", r["variant"].get<std::string>() + " " +
                                            std::to_string(size) + " B latency / floor"},
                              {"value", v},
                              {"target", "<= 1.5"},
                              {"met", v <= 1.5}});
      }
      if (c["op"] == "WRITE" && size <= 64 && outstanding == 64 &&
          r.contains("speedup_vs_lockstep")) {
        double v = r["speedup_vs_lockstep"].get<double>();
        checks.push_back(Json{{"check", r["variant"].get<std::string>() + " " +
                                            std::to_string(size) + " B x64 throughput / lock-step"},
                              {"value", v},
                              {"target", ">= 5"},
                              {"met", v >= 5.0}});
      }
    }
    report->extra()["summary"] = checks;
    report->AddNote("");
    report->AddNote("targets:");
    for (const Json& ck : checks) {
      std::ostringstream os;
      os << "  " << (ck["met"].get<bool>() ? "MET   " : "MISSED") << "  "
         << ck["check"].get<std::string>() << " = " << std::fixed << std::setprecision(2)
         << ck["value"].get<double>() << " (target " << ck["target"].get<std::string>() << ")";
      report->AddNote(os.str());
    }
  }

  std::vector<std::string> providers_{"soft", "shm", "verbs"};
  std::vector<std::string> transports_{"tcp", "tcp+tls", "unix", "inproc"};
  std::vector<std::string> ops_{"WRITE", "READ", "CAS", "SEND"};
  std::vector<uint32_t> sizes_{64, 4096};
  std::vector<uint32_t> outstanding_{1, 8, 64};
  bool target_process_ = false;
  uint32_t nic_threads_ = 1;
  std::vector<int> spin_us_;
  std::string pm_dir_;
  std::string pm_mode_ = "flush";
  PmSpec pm_;
  Budget budget_;
  Budget warmup_;
  std::vector<Json> skipped_;
  std::map<std::pair<std::string, uint32_t>, double> floor_p50_;
  std::string tls_dir_;  // tcp+tls certificates (UseTls)
};

}  // namespace

ASYMNVM_REGISTER_SUITE(kFabricSuiteRegistered, "fabric",
                       "Fabric verbs (WRITE/READ/CAS/SEND+flush) vs a plain ping-pong floor",
                       FabricSuite);

}  // namespace asymnvm::bench
