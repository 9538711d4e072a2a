// Suite "alloc": the two-tier allocator against its alternatives, in one run
// (AsymNVM paper §5.2, Table 2; doc/tools.md).
//
// Variants (object sizes uniform in [32, 128] B, single thread, closed loop):
//   two-tier-128 / two-tier-1k  FrontendAllocator over an RPC SlabSource: slabs (128 B / 1 KiB
//                               back-end blocks) come from an in-process backend::Backend through
//                               OQ Calls (kAllocSlab / kAllocLarge / kFree) over the soft fabric
//   rpc-only                    every malloc/free is an OQ Call (kAllocLarge with the size rounded
//                               up to a 128 B block / kFree) — the paper's "RPC allocator"
//   frontend-local-1k           the front-end tier alone (1 KiB slabs from a BackendAllocator in
//                               the same process, DRAM bitmap): its own cost per operation
//   pmemobj                     pmemobj_alloc / pmemobj_free in a local pool file (libpmemobj,
//                               loaded with dlopen; skipped with a note when it is not installed)
//   glibc                       malloc / free
// Each measurement repeats rounds of `--batch` allocations, then frees them in a random order;
// alloc and free are reported separately (as Table 2 does): throughput over the time spent in that
// phase, per-operation p50/p99, and back-end round trips per operation (OQ Calls; 0 for local
// allocators). The note and the JSON field "two_tier_vs_rpc" give the two-tier ÷ RPC-only
// throughput ratios (paper: 6.42 / 0.33 ≈ 19× for alloc with 1 KiB slabs; target ≥ 10×).
//
// The back-end persists its bitmap with --pm-mode (flush = cache-line flush + fence, the model of
// real PM; msync = page write-back). libpmemobj is given PMEM_IS_PMEM_FORCE=1 under flush so both
// persistent allocators use the same flush primitive on this machine (no real PM here).
#include <dlfcn.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <map>
#include <random>
#include <sstream>

#include "alloc/frontend_allocator.h"
#include "alloc/slab_source.h"
#include "asymnvm/fabric.h"
#include "backend/backend.h"
#include "backend/rpc.h"
#include "fabric/oq/oq.h"
#include "workloads/bench/bench.h"
#include "workloads/bench/latency.h"

namespace asymnvm::bench {
namespace {

// The allocators under test, behind one interface. Addresses are opaque numbers.
class TestAllocator {
 public:
  virtual ~TestAllocator() = default;
  virtual Result<uint64_t> Alloc(uint64_t size) = 0;
  virtual Status Free(uint64_t addr) = 0;
  virtual uint64_t round_trips() const { return 0; }
};

// An OQ client of an in-process back-end (its own software NIC).
struct BackendRig {
  std::string pool_path;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<oq::Client> client;
  std::atomic<uint64_t> calls{0};

  static Result<std::unique_ptr<BackendRig>> Start(uint32_t block_size, uint64_t pool_bytes,
                                                   pm::PersistMode mode, const std::string& dir) {
    auto rig = std::make_unique<BackendRig>();
    rig->pool_path = dir + "/asymnvm-bench-alloc-" + std::to_string(getpid()) + "-" +
                     std::to_string(block_size) + ".pool";
    std::filesystem::remove(rig->pool_path);
    backend::BackendOptions bo;
    bo.pool_path = rig->pool_path;
    bo.pool_size = pool_bytes;
    bo.persist_mode = mode;
    bo.block_size = block_size;
    bo.log_segment = 256 * 1024;
    bo.oq_buffers = 8;
    ASYMNVM_ASSIGN_OR_RETURN(rig->backend, backend::Backend::Start(bo));
    ASYMNVM_ASSIGN_OR_RETURN(rig->fabric, fabric::Fabric::Open(fabric::FabricOptions{}));
    ASYMNVM_ASSIGN_OR_RETURN(rig->pd, rig->fabric->AllocPd());
    oq::ClientOptions co;
    co.fabric = rig->fabric.get();
    co.pd = rig->pd.get();
    co.server_address = rig->backend->address();
    ASYMNVM_ASSIGN_OR_RETURN(rig->client, oq::Client::Connect(co));
    return rig;
  }
  ~BackendRig() {
    client.reset();
    if (backend) backend->Stop();
    backend.reset();
    if (!pool_path.empty()) std::filesystem::remove(pool_path);
  }
  Result<uint64_t> CallAddr(uint16_t type, std::span<const uint8_t> payload) {
    calls.fetch_add(1, std::memory_order_relaxed);
    std::vector<uint8_t> response;
    ASYMNVM_RETURN_IF_ERROR(client->Call(0, type, payload, &response));
    backend::PayloadReader r(response, "alloc reply");
    const uint64_t a = r.U64();
    ASYMNVM_RETURN_IF_ERROR(r.status());
    return a;
  }
  Status CallFree(uint64_t addr) {
    calls.fetch_add(1, std::memory_order_relaxed);
    backend::PayloadWriter w;
    w.U64(addr);
    std::vector<uint8_t> response;
    return client->Call(0, backend::kFree, w.bytes(), &response);
  }
  Result<uint64_t> AllocLarge(uint64_t bytes) {
    backend::PayloadWriter w;
    w.U64(bytes);
    return CallAddr(backend::kAllocLarge, w.bytes());
  }
};

// The front-end's slabs come from the back-end over the OQ.
class RpcSlabSource : public alloc::SlabSource {
 public:
  explicit RpcSlabSource(BackendRig* rig) : rig_(rig) {}
  Result<uint64_t> AllocSlab() override { return rig_->CallAddr(backend::kAllocSlab, {}); }
  Result<uint64_t> AllocLarge(uint64_t bytes) override { return rig_->AllocLarge(bytes); }
  Status Free(uint64_t addr) override { return rig_->CallFree(addr); }
  uint32_t slab_size() const override { return rig_->backend->layout().block_size; }
  uint64_t data_begin() const override { return rig_->backend->layout().data.offset; }
  uint64_t data_end() const override { return rig_->backend->layout().data.end(); }

 private:
  BackendRig* rig_;
};

class TwoTier : public TestAllocator {
 public:
  static Result<std::unique_ptr<TwoTier>> Open(std::unique_ptr<BackendRig> rig) {
    auto t = std::unique_ptr<TwoTier>(new TwoTier(std::move(rig)));
    alloc::FrontendOptions fo;
    fo.source = &t->source_;
    ASYMNVM_ASSIGN_OR_RETURN(t->fe_, alloc::FrontendAllocator::Open(fo));
    return t;
  }
  Result<uint64_t> Alloc(uint64_t size) override { return fe_->Malloc(size); }
  Status Free(uint64_t addr) override { return fe_->Free(addr); }
  uint64_t round_trips() const override { return rig_->calls.load(std::memory_order_relaxed); }

 private:
  explicit TwoTier(std::unique_ptr<BackendRig> rig) : rig_(std::move(rig)), source_(rig_.get()) {}
  std::unique_ptr<BackendRig> rig_;
  RpcSlabSource source_;
  std::unique_ptr<alloc::FrontendAllocator> fe_;
};

// The front-end tier alone: FrontendAllocator over a BackendAllocator in the same process (bitmap
// in DRAM, no persistence, no network) — isolates the front-end's own cost per operation.
class FrontendLocal : public TestAllocator {
 public:
  static Result<std::unique_ptr<FrontendLocal>> Open(uint32_t block_size) {
    auto f = std::unique_ptr<FrontendLocal>(new FrontendLocal());
    const uint64_t data = 64ull << 20;
    const uint64_t bytes = alloc::BackendAllocator::BitmapBytes(data, block_size);
    f->bitmap_.resize((bytes + 63) / 64);
    alloc::BackendOptions bo;
    bo.data_begin = 1ull << 20;
    bo.data_size = data;
    bo.block_size = block_size;
    bo.bitmap = reinterpret_cast<uint8_t*>(f->bitmap_.data());
    bo.bitmap_size = f->bitmap_.size() * 64;
    bo.persister = pm::DramPersister();
    ASYMNVM_ASSIGN_OR_RETURN(f->backend_, alloc::BackendAllocator::Open(bo));
    f->source_ = std::make_unique<alloc::LocalSlabSource>(f->backend_.get());
    alloc::FrontendOptions fo;
    fo.source = f->source_.get();
    ASYMNVM_ASSIGN_OR_RETURN(f->fe_, alloc::FrontendAllocator::Open(fo));
    return f;
  }
  Result<uint64_t> Alloc(uint64_t size) override { return fe_->Malloc(size); }
  Status Free(uint64_t addr) override { return fe_->Free(addr); }

 private:
  FrontendLocal() = default;
  struct alignas(64) Line {
    uint8_t b[64];
  };
  std::vector<Line> bitmap_;
  std::unique_ptr<alloc::BackendAllocator> backend_;
  std::unique_ptr<alloc::LocalSlabSource> source_;
  std::unique_ptr<alloc::FrontendAllocator> fe_;
};

class RpcOnly : public TestAllocator {
 public:
  explicit RpcOnly(std::unique_ptr<BackendRig> rig) : rig_(std::move(rig)) {}
  Result<uint64_t> Alloc(uint64_t size) override {
    const uint64_t block = rig_->backend->layout().block_size;
    return rig_->AllocLarge((size + block - 1) / block * block);
  }
  Status Free(uint64_t addr) override { return rig_->CallFree(addr); }
  uint64_t round_trips() const override { return rig_->calls.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<BackendRig> rig_;
};

class Glibc : public TestAllocator {
 public:
  Result<uint64_t> Alloc(uint64_t size) override {
    void* p = std::malloc(size);
    if (p == nullptr) return Status::ResourceExhausted("malloc");
    return reinterpret_cast<uint64_t>(p);
  }
  Status Free(uint64_t addr) override {
    std::free(reinterpret_cast<void*>(addr));
    return Status::Ok();
  }
};

// libpmemobj through dlopen (no build-time dependency). The ABI used: PMEMoid {u64 uuid, u64 off}.
class PmemObj : public TestAllocator {
 public:
  struct Oid {
    uint64_t pool_uuid_lo;
    uint64_t off;
  };
  using CreateFn = void* (*)(const char*, const char*, size_t, mode_t);
  using CloseFn = void (*)(void*);
  using AllocFn = int (*)(void*, Oid*, size_t, uint64_t, void*, void*);
  using FreeFn = void (*)(Oid*);
  using ErrFn = const char* (*)();

  static Result<std::unique_ptr<PmemObj>> Open(const std::string& dir, uint64_t pool_bytes) {
    void* lib = dlopen("libpmemobj.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      return Status::NotSupported(std::string("libpmemobj not available: ") + dlerror());
    }
    auto p = std::unique_ptr<PmemObj>(new PmemObj());
    p->lib_ = lib;
    p->create_ = reinterpret_cast<CreateFn>(dlsym(lib, "pmemobj_create"));
    p->close_ = reinterpret_cast<CloseFn>(dlsym(lib, "pmemobj_close"));
    p->alloc_ = reinterpret_cast<AllocFn>(dlsym(lib, "pmemobj_alloc"));
    p->free_ = reinterpret_cast<FreeFn>(dlsym(lib, "pmemobj_free"));
    p->err_ = reinterpret_cast<ErrFn>(dlsym(lib, "pmemobj_errormsg"));
    if (!p->create_ || !p->close_ || !p->alloc_ || !p->free_ || !p->err_) {
      return Status::NotSupported("libpmemobj: missing symbols");
    }
    p->path_ = dir + "/asymnvm-bench-alloc-" + std::to_string(getpid()) + ".pmemobj";
    std::filesystem::remove(p->path_);
    p->pop_ = p->create_(p->path_.c_str(), "asymnvm-bench-alloc", pool_bytes, 0600);
    if (p->pop_ == nullptr) {
      return Status::IoError("pmemobj_create " + p->path_ + ": " + p->err_());
    }
    return p;
  }
  ~PmemObj() override {
    if (pop_) close_(pop_);
    if (!path_.empty()) std::filesystem::remove(path_);
    // lib_ stays loaded: libpmem keeps process-wide state.
  }
  Result<uint64_t> Alloc(uint64_t size) override {
    Oid oid{};
    if (alloc_(pop_, &oid, size, 0, nullptr, nullptr) != 0) {
      return Status::ResourceExhausted(std::string("pmemobj_alloc: ") + err_());
    }
    uuid_ = oid.pool_uuid_lo;
    return oid.off;
  }
  Status Free(uint64_t addr) override {
    Oid oid{uuid_, addr};
    free_(&oid);
    return Status::Ok();
  }

 private:
  PmemObj() = default;
  void* lib_ = nullptr;
  void* pop_ = nullptr;
  std::string path_;
  uint64_t uuid_ = 0;
  CreateFn create_ = nullptr;
  CloseFn close_ = nullptr;
  AllocFn alloc_ = nullptr;
  FreeFn free_ = nullptr;
  ErrFn err_ = nullptr;
};

struct PhaseResult {
  uint64_t ops = 0;
  double seconds = 0;
  uint64_t round_trips = 0;
  LatencySampler latency;
};

class AllocSuite : public Suite {
 public:
  void AddOptions(CLI::App* cmd) override {
    cmd->add_option("--variants", variants_,
                    "two-tier-128,two-tier-1k,rpc-only,frontend-local-1k,pmemobj,glibc")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--batch", batch_, "Objects allocated per round before they are all freed")
        ->capture_default_str();
    cmd->add_option("--min-size", min_size_, "Smallest object (B)")->capture_default_str();
    cmd->add_option("--max-size", max_size_, "Largest object (B)")->capture_default_str();
    cmd->add_option("--pm-mode", pm_mode_, "Back-end persistence: flush|msync")
        ->capture_default_str();
    cmd->add_option("--dir", dir_, "Directory for the pool files")->capture_default_str();
  }

  Status Validate(const CommonOptions& common) override {
    static const std::vector<std::string> kKnown = {"two-tier-128",      "two-tier-1k", "rpc-only",
                                                    "frontend-local-1k", "pmemobj",     "glibc"};
    for (const auto& v : variants_) {
      if (std::find(kKnown.begin(), kKnown.end(), v) == kKnown.end()) {
        return Status::InvalidArgument("--variants: unknown variant '" + v + "'");
      }
    }
    if (batch_ < 1 || batch_ > 10000000)
      return Status::InvalidArgument("--batch must be in 1..1e7");
    if (min_size_ < 1 || max_size_ < min_size_ || max_size_ > 4096) {
      return Status::InvalidArgument("--min-size/--max-size: need 1 <= min <= max <= 4096");
    }
    if (pm_mode_ != "flush" && pm_mode_ != "msync") {
      return Status::InvalidArgument("--pm-mode must be flush or msync");
    }
    return Status::Ok();
  }

  Status Run(const CommonOptions& common, Report* report) override {
    const double seconds = common.duration_s > 0 ? common.duration_s : common.quick ? 0.3 : 2.0;
    if (common.quick && batch_ == 10000) batch_ = 2000;
    if (pm_mode_ == "flush" && std::getenv("PMEM_IS_PMEM_FORCE") == nullptr) {
      setenv("PMEM_IS_PMEM_FORCE", "1", 0);  // before libpmem is loaded
    }
    Json& m = report->machine();
    m["cores"] = MachineCores();
    m["provider"] = "soft";
    m["transport"] = "tcp";
    m["backend"] = "same process, own software NIC; OQ Call per back-end request";
    m["pm_mode"] = pm_mode_;
    m["pmem_is_pmem_force"] =
        std::getenv("PMEM_IS_PMEM_FORCE") ? std::getenv("PMEM_IS_PMEM_FORCE") : "";
    report->AddHeader("asymnvm-bench alloc: objects " + std::to_string(min_size_) + "-" +
                      std::to_string(max_size_) + " B uniform, rounds of " +
                      std::to_string(batch_) + " allocs then frees in random order, 1 thread, " +
                      std::to_string(MachineCores()) + " cores shared with the back-end.");
    std::map<std::string, std::pair<Json, Json>> by_variant;  // alloc, free records
    for (const auto& v : variants_) {
      auto a = Make(v);
      if (!a.ok()) {
        if (a.status().code() == StatusCode::kNotSupported) {
          report->AddNote("skipped " + v + ": " + a.status().message());
          continue;
        }
        return Status(a.status().code(), v + ": " + a.status().message());
      }
      PhaseResult alloc_r, free_r;
      ASYMNVM_RETURN_IF_ERROR(Measure(v, a->get(), seconds, common, &alloc_r, &free_r));
      a->reset();
      Json recs[2];
      int k = 0;
      for (auto* pr : {&alloc_r, &free_r}) {
        const char* op = k == 0 ? "alloc" : "free";
        Json rec = MakeRecord(
            v, Json{{"op", op},
                    {"size", std::to_string(min_size_) + "-" + std::to_string(max_size_)}});
        rec["ops_per_sec"] = pr->seconds > 0 ? static_cast<double>(pr->ops) / pr->seconds : 0;
        rec["p50_us"] = pr->latency.PercentileUs(50);
        rec["p99_us"] = pr->latency.PercentileUs(99);
        rec["round_trips_per_op"] =
            pr->ops ? static_cast<double>(pr->round_trips) / static_cast<double>(pr->ops) : 0;
        rec["bytes_per_op"] = 0;
        rec["op"] = op;
        rec["ops"] = pr->ops;
        rec["mops"] = pr->seconds > 0 ? static_cast<double>(pr->ops) / pr->seconds / 1e6 : 0;
        report->Add(rec);
        recs[k++] = rec;
      }
      by_variant[v] = {recs[0], recs[1]};
    }
    report->set_columns({{"op", "op", 0}, {"Mops/s", "mops", 3}});
    // Same-run ratios against the RPC-only allocator.
    Json ratios = Json::array();
    auto rpc = by_variant.find("rpc-only");
    report->AddNote("");
    report->AddNote(
        "paper Table 2 (MOPS alloc/free): glibc 21.0/57.0, pmem 1.42/1.38, RPC 0.33/0.88, "
        "two-tier 128 B 1.33/2.41, 1 KiB 6.42/13.90 (1 KiB alloc ÷ RPC ≈ 19x).");
    if (rpc != by_variant.end()) {
      for (const std::string tt : {"two-tier-128", "two-tier-1k"}) {
        auto t = by_variant.find(tt);
        if (t == by_variant.end()) continue;
        const double pa = tt == "two-tier-1k" ? 6.42 / 0.33 : 1.33 / 0.33;
        const double pf = tt == "two-tier-1k" ? 13.90 / 0.88 : 2.41 / 0.88;
        const double ra = Ratio(t->second.first, rpc->second.first);
        const double rf = Ratio(t->second.second, rpc->second.second);
        ratios.push_back({{"variant", tt},
                          {"alloc_ratio", ra},
                          {"free_ratio", rf},
                          {"paper_alloc_ratio", pa},
                          {"paper_free_ratio", pf}});
        std::ostringstream os;
        os << std::fixed << std::setprecision(1) << tt << " / rpc-only: alloc x" << ra
           << " (paper x" << pa << "), free x" << rf << " (paper x" << pf << ")";
        if (tt == "two-tier-1k")
          os << (ra >= 10 ? "  [target >= 10x: met]" : "  [target >= 10x: NOT met]");
        report->AddNote(os.str());
      }
    }
    report->extra()["two_tier_vs_rpc"] = ratios;
    return Status::Ok();
  }

 private:
  static double Ratio(const Json& a, const Json& b) {
    const double x = a["ops_per_sec"], y = b["ops_per_sec"];
    return y > 0 ? x / y : 0;
  }

  Result<std::unique_ptr<TestAllocator>> Make(const std::string& v) {
    const pm::PersistMode mode =
        pm_mode_ == "flush" ? pm::PersistMode::kFlushOnly : pm::PersistMode::kMsync;
    const uint64_t pool_bytes = 64ull << 20;
    if (v == "two-tier-128" || v == "two-tier-1k") {
      ASYMNVM_ASSIGN_OR_RETURN(
          auto rig, BackendRig::Start(v == "two-tier-128" ? 128 : 1024, pool_bytes, mode, dir_));
      ASYMNVM_ASSIGN_OR_RETURN(auto t, TwoTier::Open(std::move(rig)));
      return std::unique_ptr<TestAllocator>(std::move(t));
    }
    if (v == "rpc-only") {
      ASYMNVM_ASSIGN_OR_RETURN(auto rig, BackendRig::Start(128, pool_bytes, mode, dir_));
      return std::unique_ptr<TestAllocator>(new RpcOnly(std::move(rig)));
    }
    if (v == "frontend-local-1k") {
      ASYMNVM_ASSIGN_OR_RETURN(auto f, FrontendLocal::Open(1024));
      return std::unique_ptr<TestAllocator>(std::move(f));
    }
    if (v == "pmemobj") {
      ASYMNVM_ASSIGN_OR_RETURN(auto p, PmemObj::Open(dir_, pool_bytes));
      return std::unique_ptr<TestAllocator>(std::move(p));
    }
    return std::unique_ptr<TestAllocator>(new Glibc());
  }

  Status Measure(const std::string& v, TestAllocator* a, double seconds,
                 const CommonOptions& common, PhaseResult* alloc_r, PhaseResult* free_r) {
    std::mt19937_64 rng(common.seed);
    std::uniform_int_distribution<uint64_t> size(min_size_, max_size_);
    std::vector<uint64_t> live(batch_);
    std::vector<uint64_t> sizes(batch_);
    double spent = 0;
    alloc_r->latency.Reserve(1 << 20);
    free_r->latency.Reserve(1 << 20);
    while (spent < seconds && (common.ops == 0 || alloc_r->ops < common.ops)) {
      for (auto& s : sizes) s = size(rng);
      uint64_t rt0 = a->round_trips();
      auto p0 = Clock::now();
      for (uint64_t i = 0; i < batch_; i++) {
        const auto t0 = Clock::now();
        auto r = a->Alloc(sizes[i]);
        const auto t1 = Clock::now();
        if (!r.ok()) {
          return Status(r.status().code(), v + " alloc: " + r.status().message());
        }
        live[i] = *r;
        alloc_r->latency.Add(ElapsedNs(t0, t1));
      }
      auto p1 = Clock::now();
      alloc_r->ops += batch_;
      alloc_r->seconds += std::chrono::duration<double>(p1 - p0).count();
      alloc_r->round_trips += a->round_trips() - rt0;
      std::shuffle(live.begin(), live.end(), rng);
      rt0 = a->round_trips();
      p0 = Clock::now();
      for (uint64_t i = 0; i < batch_; i++) {
        const auto t0 = Clock::now();
        Status s = a->Free(live[i]);
        const auto t1 = Clock::now();
        if (!s.ok()) return Status(s.code(), v + " free: " + s.message());
        free_r->latency.Add(ElapsedNs(t0, t1));
      }
      p1 = Clock::now();
      free_r->ops += batch_;
      free_r->seconds += std::chrono::duration<double>(p1 - p0).count();
      free_r->round_trips += a->round_trips() - rt0;
      spent = alloc_r->seconds + free_r->seconds;
    }
    return Status::Ok();
  }

  std::vector<std::string> variants_ = {"two-tier-128",      "two-tier-1k", "rpc-only",
                                        "frontend-local-1k", "pmemobj",     "glibc"};
  uint64_t batch_ = 10000;
  uint64_t min_size_ = 32, max_size_ = 128;
  std::string pm_mode_ = "flush";
  std::string dir_ = "/tmp";
};

}  // namespace

ASYMNVM_REGISTER_SUITE(kAllocSuiteRegistered, "alloc",
                       "Two-tier allocator vs RPC-only, libpmemobj and glibc (paper Table 2)",
                       AllocSuite);

}  // namespace asymnvm::bench
