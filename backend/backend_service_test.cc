// The back-end service end to end over the soft fabric: registration, naming, allocation,
// memory-log transactions through the Ordered Queue (applied in order, duplicates skipped, bad
// ones rejected and recorded), restart on the same pool, and the daemon's command line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/log_format.h"
#include "backend/naming.h"
#include "backend/rpc.h"
#include "fabric/oq/oq.h"
#include "fabric/rowan/sender.h"
#include "tests/common/backend_fixture.h"

namespace asymnvm::backend {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) { return test_support::TempPath("be", name); }

// 16 MiB pool, 4 OQ buffers (the shared small back-end, smaller).
BackendOptions SmallOptions(const std::string& path) {
  auto o = test_support::SmallBackendOptions(path);
  o.pool_size = 16ull << 20;
  o.oq_buffers = 4;
  return o;
}

struct Client {
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<oq::Client> oq;

  static Client Connect(const std::string& address) {
    Client c;
    c.fabric = std::move(fabric::Fabric::Open(fabric::FabricOptions{}).value());
    c.pd = std::move(c.fabric->AllocPd().value());
    oq::ClientOptions co;
    co.fabric = c.fabric.get();
    co.pd = c.pd.get();
    co.server_address = address;
    auto cl = oq::Client::Connect(co);
    EXPECT_TRUE(cl.ok()) << cl.status().ToString();
    if (cl.ok()) c.oq = std::move(*cl);
    return c;
  }
  Result<std::vector<uint8_t>> Call(uint16_t type, std::span<const uint8_t> payload) {
    std::vector<uint8_t> response;
    ASYMNVM_RETURN_IF_ERROR(oq->Call(0, type, payload, &response));
    return response;
  }
  RegisterReply Register(uint64_t fe) {
    PayloadWriter w;
    w.U64(fe);
    auto r = Call(kRegister, w.bytes());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    auto reply = DecodeRegisterReply(*r);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? *reply : RegisterReply{};
  }
  Result<NamingEntry> Create(const std::string& name, uint32_t type) {
    ASYMNVM_ASSIGN_OR_RETURN(auto r,
                             Call(kNamingCreate, EncodeNamingCreate(name, type, {1, 2, 3, 4})));
    return DecodeNamingEntry(r);
  }
  Result<uint64_t> AllocSlab() {
    ASYMNVM_ASSIGN_OR_RETURN(auto r, Call(kAllocSlab, {}));
    PayloadReader rd(r, "addr");
    uint64_t a = rd.U64();
    ASYMNVM_RETURN_IF_ERROR(rd.status());
    return a;
  }
  Status Txn(uint64_t fe, uint64_t seq, uint64_t seq_addr, uint64_t addr, uint8_t fill) {
    TxnBuilder b;
    std::vector<uint8_t> data(64, fill);
    b.Write(addr, data);
    auto bytes = b.Finish(fe, seq, seq, seq_addr);
    return oq->Submit(0, kTxn, bytes);
  }
  nlohmann::json StatusJson() {
    auto r = Call(kStatus, {});
    EXPECT_TRUE(r.ok());
    return nlohmann::json::parse(std::string(r->begin(), r->end()));
  }
};

// Library code never ends the process: a back-end that can be fenced (it reports its in-sync
// mirrors to a group, so a mirror may be promoted over it) must be told what fencing does. The
// daemons pass a callback that exits 5 (mirror_test checks that exit).
TEST(BackendService, ReplicationThatCanBeFencedNeedsAFencedCallback) {
  const std::string path = TempPath("fence-callback.pool");
  std::remove(path.c_str());
  BackendOptions o = SmallOptions(path);
  o.replication.joinable = true;
  o.replication.on_insync = [](const std::array<uint8_t, 16>&, const std::vector<std::string>&) {
    return Status::Ok();
  };
  auto refused = Backend::Start(o);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
  o.replication.fenced = [](const Status&) {};
  auto be = Backend::Start(o);
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  (*be)->Stop();
  std::remove(path.c_str());
}

// A writer that logs an op and dies before the transaction that covers it (its OPN) leaves the op
// log in the segment being filled; each restart of the back-end hands that segment, and the empty
// ones posted before the crash, to the consumer. Only the segments that hold uncovered op logs may
// stay live: the torture series that found this filled all 31 segments of a job's b-log after ~8
// such restarts (empty segments queued behind a pinned one) and every writer then failed on RNR.
// Once the front-end covers the op logs (replay, then a transaction with its OPN) all are recycled.
TEST(BackendService, UncoveredOpLogsAcrossRestartsDoNotExhaustTheLog) {
  const std::string path = TempPath("pinned.pool");
  std::remove(path.c_str());
  BackendOptions o = SmallOptions(path);
  o.log_bytes = 16 * o.log_segment;
  constexpr uint64_t kFe = 7;
  constexpr int kRestarts = 6;
  const std::vector<uint8_t> params(100, 0x5A);
  auto append = [&](const std::string& log_address, uint64_t op_seq) -> Status {
    auto fabric = fabric::Fabric::Open(fabric::FabricOptions{});
    ASYMNVM_RETURN_IF_ERROR(fabric.status());
    auto pd = (*fabric)->AllocPd();
    ASYMNVM_RETURN_IF_ERROR(pd.status());
    rowan::SenderOptions so;
    so.fabric = fabric->get();
    so.pd = pd->get();
    so.address = log_address;
    ASYMNVM_ASSIGN_OR_RETURN(auto sender, rowan::Sender::Connect(so));
    OpLogRecord rec;
    rec.frontend_id = kFe;
    rec.op_seq = op_seq;
    rec.structure_id = 1;
    rec.op_type = 1;
    rec.payload = params;
    return sender->Append({kOpLogRowanType, static_cast<uint16_t>(kFe), op_seq}, EncodeOpLog(rec));
  };
  auto wait_for = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
  };
  uint64_t last_op = 0;
  for (int i = 0; i < kRestarts; i++) {
    auto be = Backend::Start(o);
    ASSERT_TRUE(be.ok()) << "restart " << i << ": " << be.status().ToString();
    Client c = Client::Connect((*be)->address());
    ASSERT_TRUE(c.oq);
    c.Register(kFe);
    last_op = (uint64_t(i) + 1) << 32 | 1;  // this incarnation's first op
    Status st = append((*be)->log_address(), last_op);
    ASSERT_TRUE(st.ok()) << "restart " << i << ": the b-log refused an op log: " << st.ToString()
                         << "; status " << (*be)->StatusJson();
    // The consumer has seen the earlier incarnations' segments: each holds one uncovered op log.
    EXPECT_TRUE(wait_for([&] { return (*be)->stats().log_segments_pinned == uint64_t(i); }))
        << "restart " << i << ": " << (*be)->StatusJson();
    (*be)->Stop();
  }
  auto be = Backend::Start(o);
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  EXPECT_TRUE(wait_for([&] { return (*be)->stats().log_segments_pinned == kRestarts; }))
      << (*be)->StatusJson();
  // The front-end comes back and covers every op log with its next transaction's OPN.
  Client c = Client::Connect((*be)->address());
  ASSERT_TRUE(c.oq);
  auto reg = c.Register(kFe);
  EXPECT_EQ(reg.opn, 0u);
  TxnBuilder b;
  ASSERT_TRUE(c.oq->Submit(0, kTxn, b.Finish(kFe, reg.lpn + 1, last_op, 0)).ok());
  EXPECT_TRUE(wait_for([&] {
    const BackendStats st = (*be)->stats();
    return st.log_segments_pinned == 0 && st.log_segments_recycled >= uint64_t{kRestarts};
  })) << (*be)->StatusJson();
  nlohmann::json status = c.StatusJson();
  EXPECT_EQ(status["log_segments_pinned"], 0);
  EXPECT_GT(status["log_segments"], kRestarts);
  EXPECT_TRUE(append((*be)->log_address(), last_op + 1).ok());
  (*be)->Stop();
  std::remove(path.c_str());
}

TEST(BackendService, RegisterNamingAllocAndTransactionsSurviveRestart) {
  const std::string path = TempPath("svc.pool");
  std::remove(path.c_str());
  uint64_t slab = 0, seq_addr = 0;
  {
    auto be = Backend::Start(SmallOptions(path));
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    Client c = Client::Connect((*be)->address());
    ASSERT_TRUE(c.oq);
    auto reg = c.Register(7);
    EXPECT_EQ(reg.lpn, 0u);
    EXPECT_LT(reg.data_begin, reg.data_end);
    auto e = c.Create("reg", 5);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    seq_addr = e->seq_addr;
    auto again = c.Create("reg", 5);  // create-or-open with the same type
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->root_addr, e->root_addr);
    EXPECT_EQ(c.Create("reg", 6).status().code(), StatusCode::kAlreadyExists);
    auto a = c.AllocSlab();
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    slab = *a;
    EXPECT_GE(slab, reg.data_begin);
    for (uint64_t s = 1; s <= 5; s++) {
      ASSERT_TRUE(c.Txn(7, s, seq_addr, slab, static_cast<uint8_t>(s)).ok());
    }
    ASSERT_TRUE(c.Txn(7, 3, seq_addr, slab, 0xEE).ok());  // a duplicate: skipped
    auto reg2 = c.Register(7);  // a Call after the Submits executes after them (queue order)
    EXPECT_EQ(reg2.lpn, 5u);
    EXPECT_EQ(c.StatusJson()["frontends"][0]["incarnation"], 2);  // one per register call
    EXPECT_EQ(reg2.rejected, 0u);
    auto st = c.StatusJson();
    EXPECT_EQ(st["txns_applied"], 5);
    EXPECT_EQ(st["txns_skipped"], 1);
    // A gap and a write outside the data area are rejected, never applied, and recorded.
    ASSERT_TRUE(c.Txn(7, 9, seq_addr, slab, 0x99).ok());
    ASSERT_TRUE(c.Txn(7, 6, seq_addr, 16, 0x99).ok());
    auto reg3 = c.Register(7);
    EXPECT_EQ(reg3.lpn, 5u);
    EXPECT_EQ(reg3.rejected, 9u);
    EXPECT_EQ(c.StatusJson()["txns_rejected"], 2);
    PayloadWriter cr;
    cr.U64(7);
    ASSERT_TRUE(c.Call(kClearRejected, cr.bytes()).ok());
    EXPECT_EQ(c.Register(7).rejected, 0u);
    PayloadWriter unknown;
    unknown.U64(12345);
    EXPECT_EQ(c.Call(kClearRejected, unknown.bytes()).status().code(), StatusCode::kNotFound);
    // Corrupt bytes are rejected too.
    std::vector<uint8_t> junk(100, 0x41);
    ASSERT_TRUE(c.oq->Submit(0, kTxn, junk).ok());
    EXPECT_EQ(c.StatusJson()["txns_rejected"], 3);
    // Bad requests get clear errors.
    EXPECT_EQ(c.Call(kAllocLarge, {}).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.Call(999, {}).status().code(), StatusCode::kInvalidArgument);
    PayloadWriter fw;
    fw.U64(slab + 1);
    EXPECT_EQ(c.Call(kFree, fw.bytes()).status().code(), StatusCode::kInvalidArgument);
    c.oq.reset();
    (*be)->Stop();
  }
  {
    // The pool file holds the applied data, the naming entry and the front-end's LPN.
    auto be = Backend::Start(SmallOptions(path));
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    Client c = Client::Connect((*be)->address());
    auto reg = c.Register(7);
    EXPECT_EQ(reg.lpn, 5u);
    auto e = c.Create("reg", 5);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->seq_addr, seq_addr);
    auto a = c.AllocSlab();
    ASSERT_TRUE(a.ok());
    EXPECT_NE(*a, slab);  // the first slab is still allocated after the restart
    c.oq.reset();
    (*be)->Stop();
  }
  pm::PoolOptions po;
  po.layout = "asymnvm-backend";
  auto pool = pm::Pool::Open(path, po);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  for (int i = 0; i < 64; i++) EXPECT_EQ((*pool)->base()[slab + i], 5) << i;
  pool->reset();
  std::remove(path.c_str());
}

// Requests 20–22 with the ownership-journal trailer (frontend/alloc_journal.h): the back-end
// writes the entry with the allocation and clears it with the free, in one request each; an
// entry holding something else ("fenced") undoes the allocation / refuses the free; a bad entry
// address or tag is refused with nothing allocated.
TEST(BackendService, JournaledAllocationsAndFreesWriteTheirEntryInTheSameRequest) {
  const std::string path = TempPath("jrnl.pool");
  std::remove(path.c_str());
  auto be = Backend::Start(SmallOptions(path));
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  Client c = Client::Connect((*be)->address());
  ASSERT_TRUE(c.oq);
  c.Register(9);
  auto journal = c.AllocSlab();  // stands for the journal extent
  ASSERT_TRUE(journal.ok());
  const uint64_t entry = *journal + 32;
  auto used = [&] { return (*be)->Extents().size(); };
  auto alloc = [&](uint64_t e, uint64_t tag, uint64_t large = 0) -> Result<uint64_t> {
    PayloadWriter w;
    if (large) w.U64(large);
    w.U64(e);
    w.U64(tag);
    ASYMNVM_ASSIGN_OR_RETURN(auto r, c.Call(large ? kAllocLarge : kAllocSlab, w.bytes()));
    PayloadReader rd(r, "addr");
    const uint64_t a = rd.U64();
    ASYMNVM_RETURN_IF_ERROR(rd.status());
    return a;
  };
  auto free_with = [&](uint64_t addr, uint64_t e, uint64_t expected) {
    PayloadWriter w;
    w.U64(addr);
    w.U64(e);
    w.U64(expected);
    return c.Call(kFree, w.bytes()).status();
  };
  const size_t before = used();
  auto a = alloc(entry, 5);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(used(), before + 1);
  // The entry is taken: a second allocation into it is fenced and undone.
  auto b = alloc(entry, 6);
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("fenced"), std::string::npos) << b.status().ToString();
  EXPECT_EQ(used(), before + 1);
  // A large extent through the next entry.
  auto l = alloc(entry + 8, 5, 3 * 4096);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  // Bad entries and tags: nothing allocated.
  EXPECT_EQ(alloc(entry + 4, 5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc(16, 5).status().code(), StatusCode::kInvalidArgument);  // outside the data area
  EXPECT_EQ(alloc(entry + 16, 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(used(), before + 2);
  // A free whose expected value is stale is refused and frees nothing; the right one clears the
  // entry and frees.
  EXPECT_EQ(free_with(*a, entry, *a | 7).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(used(), before + 2);
  EXPECT_EQ(free_with(*a, entry, *l | 5).code(), StatusCode::kInvalidArgument);  // another block
  ASSERT_TRUE(free_with(*a, entry, *a | 5).ok());  // the entry held exactly a | 5
  EXPECT_EQ(used(), before + 1);
  ASSERT_TRUE(free_with(*l, entry + 8, *l | 5).ok());
  EXPECT_EQ(used(), before);
  // Both entries are clear again: allocations into them succeed.
  auto again = alloc(entry, 1);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(free_with(*again, entry, *again | 1).ok());
  c.oq.reset();
  (*be)->Stop();
  std::remove(path.c_str());
}

// ---- the daemon ----

struct ShellRun {
  int code = -1;
  std::string out;
};

ShellRun Sh(const std::string& cmd) {
  ShellRun r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

const std::string kBin = ASYMNVM_BACKEND_BIN;

TEST(BackendDaemon, CommandLineAndPoolErrors) {
  EXPECT_EQ(Sh(kBin + " --help").code, 0);
  for (const char* args :
       {"", "--pool", "--pool x --size 12Q", "--pool x --fabric carrier",
        "--pool x --block-size 1000", "--pool x --log-segment 5", "--pool x --bogus"}) {
    ShellRun r = Sh(kBin + " " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_FALSE(r.out.empty()) << args;
  }
  const std::string junk = TempPath("junk.pool");
  {
    std::ofstream f(junk);
    for (int i = 0; i < 100000; i++) f << static_cast<char>('a' + i % 26);
  }
  ShellRun r = Sh(kBin + " --pool " + junk);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not an AsymNVM pool"), std::string::npos) << r.out;
  std::remove(junk.c_str());
  const std::string tiny = TempPath("tiny.pool");
  std::remove(tiny.c_str());
  r = Sh(kBin + " --pool " + tiny + " --size 1M");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("at least"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(tiny)) << "a pool that cannot work must not be created";
}

TEST(BackendDaemon, LockedPoolIsRefusedAndSigtermStopsCleanly) {
  const std::string path = TempPath("daemon.pool");
  std::remove(path.c_str());
  int out_pipe[2];
  ASSERT_EQ(pipe(out_pipe), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    close(out_pipe[0]);
    execl(kBin.c_str(), kBin.c_str(), "--pool", path.c_str(), "--size", "16M", "--log-level",
          "warn", nullptr);
    _exit(127);
  }
  close(out_pipe[1]);
  FILE* out = fdopen(out_pipe[0], "r");
  char line[256] = {0};
  ASSERT_NE(fgets(line, sizeof(line), out), nullptr);
  EXPECT_EQ(std::string(line).rfind("listening ", 0), 0u) << line;
  ShellRun second = Sh(kBin + " --pool " + path);
  EXPECT_EQ(second.code, 1) << second.out;
  EXPECT_NE(second.out.find("in use"), std::string::npos) << second.out;
  kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  fclose(out);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace asymnvm::backend
