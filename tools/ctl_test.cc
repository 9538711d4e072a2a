// asymnvm-ctl: a pool built by an in-process back-end (names, a front-end record, slabs and a large
// extent), then inspect / check clean, check naming each injected corruption (naming slot, back-end
// header, bitmap chunk, superblock) with exit 3, status against a running back-end, the pool lock,
// and bad arguments — through RunCtl and through the built binary.
#include "tools/ctl.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "asymnvm/fabric.h"
#include "asymnvm/structures/structure.h"
#include "backend/backend.h"
#include "backend/naming.h"
#include "backend/rpc.h"
#include "fabric/oq/oq.h"
#include "tests/common/backend_fixture.h"

namespace asymnvm::tools {
namespace {

namespace fs = std::filesystem;
using backend::PayloadReader;
using backend::PayloadWriter;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / ("asymnvm-ctl-" + std::to_string(getpid()) + "-" + name))
      .string();
}

struct CtlRun {
  int rc;
  std::string out, err;
};

CtlRun Ctl(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int rc = RunCtl(args, out, err);
  return {rc, out.str(), err.str()};
}

// 16 MiB pool, 4 OQ buffers (the shared small back-end, smaller).
backend::BackendOptions SmallOptions(const std::string& path) {
  auto o = test_support::SmallBackendOptions(path);
  o.pool_size = 16ull << 20;
  o.oq_buffers = 4;
  return o;
}

// A connected OQ client of a back-end.
struct Conn {
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<oq::Client> oq;
  explicit Conn(const std::string& address) {
    fabric = std::move(fabric::Fabric::Open(fabric::FabricOptions{}).value());
    pd = std::move(fabric->AllocPd().value());
    oq::ClientOptions co;
    co.fabric = fabric.get();
    co.pd = pd.get();
    co.server_address = address;
    oq = std::move(oq::Client::Connect(co).value());
  }
  std::vector<uint8_t> Call(uint16_t type, std::span<const uint8_t> payload) {
    std::vector<uint8_t> response;
    Status s = oq->Call(0, type, payload, &response);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return response;
  }
  uint64_t Addr(uint16_t type, std::span<const uint8_t> payload) {
    auto r = Call(type, payload);
    PayloadReader rd(r, "addr");
    return rd.U64();
  }
};

// Populates a running back-end: front-end 7, two structures, 3 slabs (one freed), one large extent.
void Populate(Conn& c) {
  PayloadWriter reg;
  reg.U64(7);
  c.Call(backend::kRegister, reg.bytes());
  for (const std::string name : {"tree", "queue"}) {
    c.Call(backend::kNamingCreate, backend::EncodeNamingCreate(name, 9, {64, 16, 0, 0}));
  }
  std::vector<uint64_t> slabs;
  for (int i = 0; i < 3; i++) slabs.push_back(c.Addr(backend::kAllocSlab, {}));
  PayloadWriter large;
  large.U64(3 * 4096);
  EXPECT_NE(c.Addr(backend::kAllocLarge, large.bytes()), 0u);
  PayloadWriter f;
  f.U64(slabs[1]);
  c.Call(backend::kFree, f.bytes());
}

class CtlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = new std::string(TempPath("golden.pool"));
    fs::remove(*pool_);
    auto be = backend::Backend::Start(SmallOptions(*pool_));
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    {
      Conn c((*be)->address());
      Populate(c);
    }
    (*be)->Stop();
  }
  static void TearDownTestSuite() {
    fs::remove(*pool_);
    delete pool_;
  }
  void TearDown() override {
    for (const auto& p : copies_) fs::remove(p);
  }
  // A private copy of the golden pool.
  std::string CopyPool(const std::string& name) {
    std::string p = TempPath(name);
    fs::copy_file(*pool_, p, fs::copy_options::overwrite_existing);
    copies_.push_back(p);
    return p;
  }
  static void Flip(const std::string& path, uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(static_cast<std::streamoff>(offset));
    char b = 0;
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x5A);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&b, 1);
  }
  static nlohmann::json InspectJson(const std::string& path) {
    CtlRun r = Ctl({"inspect", path, "--json"});
    EXPECT_EQ(r.rc, kCtlOk) << r.err;
    return nlohmann::json::parse(r.out);
  }
  static std::string* pool_;
  std::vector<std::string> copies_;
};
std::string* CtlTest::pool_ = nullptr;

TEST_F(CtlTest, InspectShowsEverything) {
  CtlRun r = Ctl({"inspect", *pool_});
  ASSERT_EQ(r.rc, kCtlOk) << r.err;
  EXPECT_NE(r.out.find("layout asymnvm-backend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("naming: 3 live"), std::string::npos) << r.out;  // tree, queue, fe:7
  EXPECT_NE(r.out.find("] tree"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("] queue"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fe 7  LPN 0  OPN 0"), std::string::npos) << r.out;
  // 2 slabs + 3-block extent live.
  EXPECT_NE(r.out.find("bitmap: 5 / "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in 3 extents"), std::string::npos) << r.out;

  nlohmann::json j = InspectJson(*pool_);
  EXPECT_EQ(j["naming"]["entries"].size(), 2u);
  EXPECT_EQ(j["frontends"].size(), 1u);
  EXPECT_EQ(j["frontends"][0]["id"], 7);
  EXPECT_EQ(j["bitmap"]["blocks_used"], 5);
  EXPECT_EQ(j["layout"]["block_size"], 4096);
  EXPECT_TRUE(j["problems"].empty());
}

TEST_F(CtlTest, InspectDoesNotWriteThePool) {
  const std::string p = CopyPool("ro.pool");
  // A torn bitmap copy makes the allocator's recovery rewrite its (DRAM) copy, never the file.
  nlohmann::json j = InspectJson(p);
  Flip(p, j["layout"]["bitmap"]["offset"].get<uint64_t>() + 256 + 44);
  auto slurp = [&] {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  };
  const std::string before = slurp();
  ASSERT_EQ(Ctl({"check", p}).rc, kCtlOk);
  ASSERT_EQ(Ctl({"inspect", p}).rc, kCtlOk);
  EXPECT_TRUE(before == slurp());
}

// The golden pool's entries are of an application's own type (9), which the structure walk
// does not know: leaks are not computed (a note), and the pool is clean.
TEST_F(CtlTest, CheckClean) {
  CtlRun r = Ctl({"check", *pool_});
  EXPECT_EQ(r.rc, kCtlOk) << r.out << r.err;
  EXPECT_NE(r.out.find("clean"), std::string::npos);
  EXPECT_NE(r.out.find("note: leaks: not computed: the structure walk failed: NotSupported: "
                       "structure 'queue' (type 9): unknown type"),
            std::string::npos)
      << r.out;
}

TEST_F(CtlTest, CheckNamesCorruptNamingSlot) {
  const std::string p = CopyPool("naming.pool");
  nlohmann::json j = InspectJson(p);
  uint64_t slot = 0;
  for (const auto& e : j["naming"]["entries"]) {
    if (e["name"] == "tree") slot = e["slot"];
  }
  const uint64_t naming = j["layout"]["naming"]["offset"];
  const uint64_t slot_off = naming + slot * backend::kNamingSlotSize;
  Flip(p, slot_off + 20);  // a name byte (inside the CRC)
  CtlRun r = Ctl({"check", p});
  EXPECT_EQ(r.rc, kCtlCorrupt) << r.out;
  EXPECT_NE(r.out.find("naming slot " + std::to_string(slot) + ": live but checksum mismatch"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pool offset " + std::to_string(slot_off)), std::string::npos) << r.out;
  // inspect still works and no longer lists the slot.
  CtlRun i = Ctl({"inspect", p});
  EXPECT_EQ(i.rc, kCtlOk);
  EXPECT_EQ(i.out.find("] tree"), std::string::npos);
  EXPECT_NE(i.out.find("PROBLEM: naming slot"), std::string::npos);
}

TEST_F(CtlTest, CheckNamesBadSlotState) {
  const std::string p = CopyPool("state.pool");
  nlohmann::json j = InspectJson(p);
  const uint64_t naming = j["layout"]["naming"]["offset"];
  const uint64_t slot = j["frontends"][0]["slot"];
  Flip(p, naming + slot * backend::kNamingSlotSize + 4);  // state word 1 → 0x5B
  CtlRun r = Ctl({"check", p, "--json"});
  EXPECT_EQ(r.rc, kCtlCorrupt) << r.out;
  auto out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out["problems"].size(), 1u) << r.out;
  const std::string problem = out["problems"][0];
  EXPECT_NE(problem.find("slot " + std::to_string(slot) + ": unknown state 91"), std::string::npos)
      << problem;
  EXPECT_NE(problem.find("pool offset " + std::to_string(naming + slot * backend::kNamingSlotSize)),
            std::string::npos)
      << problem;
}

TEST_F(CtlTest, CheckNamesCorruptHeader) {
  const std::string p = CopyPool("header.pool");
  Flip(p, backend::kBackendHeaderOffset + 24);  // block size (inside the CRC)
  CtlRun r = Ctl({"check", p});
  EXPECT_EQ(r.rc, kCtlCorrupt) << r.out;
  EXPECT_NE(r.out.find("PROBLEM: back-end header @4096"), std::string::npos) << r.out;
}

TEST_F(CtlTest, CheckNamesCorruptBitmapChunk) {
  const std::string p = CopyPool("bitmap.pool");
  nlohmann::json j = InspectJson(p);
  const uint64_t bitmap = j["layout"]["bitmap"]["offset"];
  Flip(p, bitmap + 256 + 40);        // chunk 0, copy A payload
  Flip(p, bitmap + 256 + 256 + 40);  // chunk 0, copy B payload
  CtlRun r = Ctl({"check", p});
  EXPECT_EQ(r.rc, kCtlCorrupt) << r.out;
  EXPECT_NE(r.out.find("PROBLEM: bitmap @" + std::to_string(bitmap)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunk 0"), std::string::npos) << r.out;
}

TEST_F(CtlTest, OneTornBitmapCopyIsANoteNotCorruption) {
  const std::string p = CopyPool("torn.pool");
  nlohmann::json j = InspectJson(p);
  const uint64_t bitmap = j["layout"]["bitmap"]["offset"];
  // Damage whichever copy of chunk 0 is newer: try A; if that was the older one, B.
  Flip(p, bitmap + 256 + 40);
  CtlRun r = Ctl({"check", p});
  EXPECT_EQ(r.rc, kCtlOk) << r.out;
}

TEST_F(CtlTest, CheckNamesCorruptSuperblock) {
  const std::string p = CopyPool("sb.pool");
  Flip(p, 40);
  CtlRun r = Ctl({"check", p});
  EXPECT_EQ(r.rc, kCtlCorrupt) << r.out << r.err;
  EXPECT_NE(r.out.find("PROBLEM: superblock @0"), std::string::npos) << r.out;
}

TEST_F(CtlTest, StatusOfARunningBackendAndThePoolLock) {
  const std::string p = CopyPool("live.pool");
  auto be = backend::Backend::Start(SmallOptions(p));
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  {
    Conn c((*be)->address());
    PayloadWriter reg;
    reg.U64(9);
    c.Call(backend::kRegister, reg.bytes());
    c.Addr(backend::kAllocSlab, {});
  }
  CtlRun r = Ctl({"status", (*be)->address()});
  ASSERT_EQ(r.rc, kCtlOk) << r.err;
  EXPECT_NE(r.out.find("front-ends:  2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fe 7  LPN 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fe 9  LPN 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data blocks: 6 / "), std::string::npos) << r.out;

  CtlRun js = Ctl({"status", (*be)->address(), "--json"});
  ASSERT_EQ(js.rc, kCtlOk) << js.err;
  auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["frontends"].size(), 2u);
  EXPECT_EQ(j["alloc"]["blocks_used"], 6);

  // The running back-end holds the pool: inspect/check refuse with a pointer to `status`.
  CtlRun held = Ctl({"check", p});
  EXPECT_EQ(held.rc, kCtlFailed);
  EXPECT_NE(held.err.find("status"), std::string::npos) << held.err;
  (*be)->Stop();
  be->reset();
  EXPECT_EQ(Ctl({"check", p}).rc, kCtlOk);
}

TEST(CtlArgs, BadArgumentsAndUnreachableTargets) {
  EXPECT_EQ(Ctl({}).rc, kCtlUsage);
  EXPECT_EQ(Ctl({"frobnicate"}).rc, kCtlUsage);
  EXPECT_EQ(Ctl({"check"}).rc, kCtlUsage);
  EXPECT_EQ(Ctl({"status"}).rc, kCtlUsage);
  EXPECT_EQ(Ctl({"status", "tcp://127.0.0.1:1", "--timeout-ms", "0"}).rc, kCtlUsage);
  EXPECT_EQ(Ctl({"inspect", "a", "b"}).rc, kCtlUsage);
  EXPECT_EQ(Ctl({"--help"}).rc, kCtlOk);

  CtlRun missing = Ctl({"check", TempPath("does-not-exist.pool")});
  EXPECT_EQ(missing.rc, kCtlFailed);
  EXPECT_NE(missing.err.find("does-not-exist"), std::string::npos) << missing.err;

  // A file that is not a pool at all: the superblock check reports it.
  const std::string junk = TempPath("junk.pool");
  {
    std::ofstream f(junk, std::ios::binary);
    std::string zeros(1 << 20, 'x');
    f << zeros;
  }
  CtlRun j = Ctl({"check", junk});
  EXPECT_EQ(j.rc, kCtlCorrupt) << j.out << j.err;
  fs::remove(junk);

  CtlRun dead = Ctl({"status", "tcp://127.0.0.1:1", "--timeout-ms", "500"});
  EXPECT_EQ(dead.rc, kCtlFailed);
  EXPECT_FALSE(dead.err.empty());
}

// A pm pool of another layout is refused, not reported as corruption.
TEST(CtlArgs, ForeignPoolLayout) {
  const std::string p = TempPath("foreign.pool");
  fs::remove(p);
  {
    pm::PoolOptions po;
    po.layout = "someone-else";
    auto pool = pm::Pool::Create(p, 8ull << 20, po);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  }
  CtlRun r = Ctl({"inspect", p});
  EXPECT_EQ(r.rc, kCtlFailed);
  EXPECT_NE(r.err.find("someone-else"), std::string::npos) << r.err;
  fs::remove(p);
}

// The binary: exit codes as documented.
TEST_F(CtlTest, BinaryExitCodes) {
  auto run = [](const std::string& args) {
    const int s =
        std::system((std::string(ASYMNVM_CTL_BIN) + " " + args + " >/dev/null 2>&1").c_str());
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  };
  EXPECT_EQ(run("check " + *pool_), 0);
  EXPECT_EQ(run("inspect " + *pool_ + " --json"), 0);
  const std::string p = CopyPool("bin.pool");
  Flip(p, backend::kBackendHeaderOffset + 24);
  EXPECT_EQ(run("check " + p), 3);
  EXPECT_EQ(run("check /nonexistent/x.pool"), 1);
  EXPECT_EQ(run("bogus"), 2);
}

}  // namespace
}  // namespace asymnvm::tools

namespace asymnvm::tools {
namespace {

// `asymnvm-bench alloc` black box: every variant reports alloc and free, and the two-tier ÷
// RPC-only ratios are in the JSON (values are timing, not asserted).
TEST(BenchAlloc, QuickRunWritesRecordsAndRatios) {
  const std::string json = TempPath("alloc.json");
  const std::string cmd = std::string(ASYMNVM_BENCH_BIN) +
                          " alloc --quick --duration 0.05 --batch 300 --variants "
                          "two-tier-128,two-tier-1k,rpc-only,glibc --json " +
                          json + " >/dev/null 2>&1";
  const int s = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << cmd;
  std::ifstream f(json);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["suite"], "alloc");
  ASSERT_EQ(j["results"].size(), 8u);
  for (const auto& r : j["results"]) {
    EXPECT_GT(r["ops_per_sec"].get<double>(), 0) << r.dump();
    if (r["variant"] == "rpc-only") {
      EXPECT_DOUBLE_EQ(r["round_trips_per_op"].get<double>(), 1.0);
    }
    if (r["variant"] == "glibc") {
      EXPECT_DOUBLE_EQ(r["round_trips_per_op"].get<double>(), 0.0);
    }
  }
  ASSERT_EQ(j["two_tier_vs_rpc"].size(), 2u);
  EXPECT_GT(j["two_tier_vs_rpc"][1]["alloc_ratio"].get<double>(), 0);
  fs::remove(json);
  // Bad arguments: exit 2.
  const int bad = std::system(
      (std::string(ASYMNVM_BENCH_BIN) + " alloc --variants nope >/dev/null 2>&1").c_str());
  EXPECT_TRUE(WIFEXITED(bad) && WEXITSTATUS(bad) == 2);
}

}  // namespace
}  // namespace asymnvm::tools

namespace asymnvm::tools {
namespace {

// ---- leaks: check's report and gc (tools/ctl_gc.cc; doc/tools.md §Leaks) ----

// The shared in-process back-end fixture, with deferred frees that stay pending.
class CtlGcTest : public test_support::BackendTest {
 protected:
  backend::BackendOptions BackendOptionsFor(const std::string& path) override {
    auto o = test_support::SmallBackendOptions(path);
    o.reclaim_delay = std::chrono::hours(1);
    return o;
  }
  std::string PoolTag() const override { return "ctlgc"; }
  void StopBackend() {
    be_->Stop();
    be_.reset();
  }
  static nlohmann::json CheckJson(const std::string& path, int want_rc) {
    CtlRun r = Ctl({"check", path, "--json"});
    EXPECT_EQ(r.rc, want_rc) << r.out << r.err;
    return nlohmann::json::parse(r.out);
  }
  static uint64_t BlocksUsed(const std::string& path) {
    CtlRun r = Ctl({"inspect", path, "--json"});
    EXPECT_EQ(r.rc, kCtlOk) << r.err;
    return nlohmann::json::parse(r.out)["bitmap"]["blocks_used"].get<uint64_t>();
  }
};

constexpr structures::Kind kGcKinds[] = {
    structures::Kind::kBPlusTree, structures::Kind::kHashTable, structures::Kind::kSkipList,
    structures::Kind::kBst,       structures::Kind::kMvBst,     structures::Kind::kMvBPlusTree};

std::string GcName(structures::Kind k) { return std::string("gc-") + structures::KindName(k); }

// Structures of every map kind and a stack (with deletes and pops), hand-made leaks (one slab of
// unlinked objects of a session, one unlinked 3-block object) and one pending deferred free:
// check names exactly the two leaks (exit 5) and counts the pending block apart; gc --dry-run
// frees nothing; gc frees exactly them; check is then clean with used = reachable + pending; the
// data verifies and the freed blocks are allocated again by later writes.
TEST_F(CtlGcTest, CheckReportsHandMadeLeaksAndGcFreesExactlyThem) {
  std::map<uint64_t, structures::Value> model;
  {
    auto s = OpenSession(11, frontend::Level::kRcb);
    ASSERT_TRUE(s);
    for (structures::Kind k : kGcKinds) {
      structures::Options o;
      if (k == structures::Kind::kHashTable) o.param = 64;
      auto m = structures::OpenMap(*s, k, GcName(k), o);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      for (uint64_t key = 0; key < 300; key++) {
        ASSERT_TRUE((*m)->Put(key, structures::Value(40, static_cast<uint8_t>(key))).ok());
      }
      for (uint64_t key = 0; key < 300; key += 3) ASSERT_TRUE((*m)->Delete(key).ok());
    }
    auto st = structures::OpenSequence(*s, structures::Kind::kStack, "gc-stack");
    ASSERT_TRUE(st.ok());
    for (int i = 0; i < 40; i++) ASSERT_TRUE((*st)->Push(structures::Value(8, 1)).ok());
    structures::Value v;
    for (int i = 0; i < 10; i++) ASSERT_TRUE((*st)->Pop(&v).ok());
  }
  for (uint64_t key = 0; key < 300; key++) {
    if (key % 3 != 0) model[key] = structures::Value(40, static_cast<uint8_t>(key));
  }
  uint64_t slab = 0, large = 0, pending = 0;
  {
    auto s = OpenSession(12, frontend::Level::kRcb);
    ASSERT_TRUE(s);
    for (int i = 0; i < 3; i++) {
      auto a = s->Malloc(64);
      ASSERT_TRUE(a.ok());
      slab = s->data_begin() + (*a - s->data_begin()) / 4096 * 4096;
    }
    auto a = s->Malloc(3 * 4096);
    ASSERT_TRUE(a.ok());
    large = *a;
    Conn c(be_->address());
    pending = c.Addr(backend::kAllocSlab, {});
    PayloadWriter w;
    w.U64(pending);
    c.Call(backend::kFreeDeferred, w.bytes());
  }
  StopBackend();
  const uint64_t used_before = BlocksUsed(path_);

  CtlRun text = Ctl({"check", path_});
  EXPECT_EQ(text.rc, kCtlLeaks) << text.out << text.err;
  EXPECT_NE(text.out.find("LEAK: data @" + std::to_string(large) + ": 12288 bytes (3 block(s))"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("LEAK: data @" + std::to_string(slab) + ": 4096 bytes (1 block(s))"),
            std::string::npos)
      << text.out;
  nlohmann::json j = CheckJson(path_, kCtlLeaks)["leaks"];
  ASSERT_EQ(j["leaked"].size(), 2u) << j.dump();
  std::set<uint64_t> leaked;
  for (const auto& x : j["leaked"]) leaked.insert(x["addr"].get<uint64_t>());
  EXPECT_EQ(leaked, (std::set<uint64_t>{slab, large}));
  EXPECT_EQ(j["leaked_blocks"], 4);
  EXPECT_EQ(j["blocks_pending_free"], 1);
  EXPECT_EQ(j["blocks_used"].get<uint64_t>(), used_before);
  EXPECT_EQ(j["blocks_used"].get<uint64_t>(), j["blocks_reachable"].get<uint64_t>() + 1 + 4);
  EXPECT_EQ(j["structures"].size(), std::size(kGcKinds) + 1);
  EXPECT_GT(j["blocks_reachable"].get<uint64_t>(), 7u);

  CtlRun dry = Ctl({"gc", path_, "--dry-run"});
  EXPECT_EQ(dry.rc, kCtlOk) << dry.out << dry.err;
  EXPECT_NE(dry.out.find("would free 2 extent(s), 4 block(s)"), std::string::npos) << dry.out;
  EXPECT_EQ(BlocksUsed(path_), used_before);

  CtlRun gc = Ctl({"gc", path_});
  EXPECT_EQ(gc.rc, kCtlOk) << gc.out << gc.err;
  EXPECT_NE(gc.out.find("freed 2 extent(s), 4 block(s)"), std::string::npos) << gc.out;
  // And the two front-ends' ownership journals (gc clears them and frees their block each).
  EXPECT_EQ(BlocksUsed(path_), used_before - 4 - 2);
  j = CheckJson(path_, kCtlOk)["leaks"];
  EXPECT_TRUE(j["leaked"].empty()) << j.dump();
  EXPECT_EQ(j["blocks_used"].get<uint64_t>(), j["blocks_reachable"].get<uint64_t>() + 1);
  CtlRun again = Ctl({"gc", path_});
  EXPECT_NE(again.out.find("freed 0 extent(s), 0 block(s)"), std::string::npos) << again.out;
  // The walk's own front-end record does not stay behind.
  nlohmann::json fes = nlohmann::json::parse(Ctl({"inspect", path_, "--json"}).out)["frontends"];
  ASSERT_EQ(fes.size(), 2u) << fes.dump();  // 11 and 12
  for (const auto& f : fes) EXPECT_NE(f["id"].get<uint64_t>(), kWalkFrontendId);

  // The data is intact, and the freed blocks serve new writes without damaging it.
  StartBackend();
  auto s = OpenSession(11, frontend::Level::kRcb);
  ASSERT_TRUE(s);
  for (structures::Kind k : kGcKinds) {
    auto m = structures::OpenMap(*s, k, GcName(k));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (uint64_t key = 300; key < 500; key++) {
      ASSERT_TRUE((*m)->Put(key, structures::Value(40, static_cast<uint8_t>(key))).ok());
    }
    ASSERT_TRUE((*m)->Verify().ok()) << structures::KindName(k);
    for (uint64_t key = 0; key < 300; key++) {
      structures::Value v;
      Status st = (*m)->Get(key, &v);
      if (model.count(key) != 0) {
        ASSERT_TRUE(st.ok()) << structures::KindName(k) << " key " << key << ": " << st.ToString();
        EXPECT_EQ(v, model[key]);
      } else {
        EXPECT_EQ(st.code(), StatusCode::kNotFound);
      }
    }
  }
  auto st = structures::OpenSequence(*s, structures::Kind::kStack, "gc-stack");
  ASSERT_TRUE(st.ok());
  auto n = (*st)->Count();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 30u);
}

// gc never frees when it cannot tell what is reachable: a naming entry of a type the walk does
// not know, or a structure whose Verify fails (a damaged anchor), makes it refuse (exit 6) with
// the bitmap untouched; check says in a note why it computed no leaks. A running back-end's pool
// is refused too.
TEST_F(CtlGcTest, GcRefusesWhenAStructureWalkFails) {
  uint64_t anchor = 0;
  {
    auto s = OpenSession(21, frontend::Level::kRcb);
    ASSERT_TRUE(s);
    auto m = structures::OpenMap(*s, structures::Kind::kHashTable, "h");
    ASSERT_TRUE(m.ok());
    for (uint64_t key = 0; key < 50; key++)
      ASSERT_TRUE((*m)->Put(key, structures::Value{1, 2, 3}).ok());
    ASSERT_TRUE(s->CreateRoot("registers", 42).ok());
    ASSERT_TRUE(s->Malloc(3 * 4096).ok());  // a leak gc would free
    auto w = s->ReadWord((*m)->structure().root_addr);
    ASSERT_TRUE(w.ok());
    anchor = *w;
  }
  CtlRun held = Ctl({"gc", path_});
  EXPECT_EQ(held.rc, kCtlFailed);
  EXPECT_NE(held.err.find("in use"), std::string::npos) << held.err;
  StopBackend();
  const uint64_t used = BlocksUsed(path_);

  CtlRun unknown = Ctl({"gc", path_});
  EXPECT_EQ(unknown.rc, kCtlRefused) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("'registers' (type 42): unknown type"), std::string::npos)
      << unknown.err;
  EXPECT_NE(unknown.err.find("nothing freed"), std::string::npos) << unknown.err;
  EXPECT_EQ(BlocksUsed(path_), used);
  CtlRun check = Ctl({"check", path_});
  EXPECT_EQ(check.rc, kCtlOk) << check.out;
  EXPECT_NE(check.out.find("note: leaks: not computed"), std::string::npos) << check.out;

  // Without the unknown entry gc would free the leak; with the anchor damaged it refuses.
  StartBackend();
  {
    auto s = OpenSession(21, frontend::Level::kRcb);
    ASSERT_TRUE(s);
    ASSERT_TRUE(s->RemoveRoot("registers").ok());
  }
  StopBackend();
  {
    pm::PoolOptions po;
    po.layout = "asymnvm-backend";
    auto pool = pm::Pool::Open(path_, po);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    (*pool)->base()[anchor] ^= 0x5A;
    (*pool)->persister()->Persist((*pool)->base() + anchor, 1);
  }
  CtlRun corrupt = Ctl({"gc", path_});
  EXPECT_EQ(corrupt.rc, kCtlRefused) << corrupt.out << corrupt.err;
  EXPECT_NE(corrupt.err.find("structure 'h'"), std::string::npos) << corrupt.err;
  EXPECT_EQ(BlocksUsed(path_), used);
  CtlRun bad = Ctl({"check", path_});
  EXPECT_EQ(bad.rc, kCtlOk) << bad.out;
  EXPECT_NE(bad.out.find("note: leaks: not computed: the structure walk failed: Corruption: "
                         "structure 'h'"),
            std::string::npos)
      << bad.out;
}

}  // namespace
}  // namespace asymnvm::tools
