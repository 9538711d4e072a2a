// The shm provider's direct path (doc/fabric.md §The shm provider): what the conformance suite
// cannot tell apart from the channel — that valid one-sided requests really are the initiator's own
// loads and stores (the target's NIC serves none, no wire bytes), on DRAM (SharedMemory) and on a
// pool file mapped by pm::Pool; that grants follow rights (read-only regions are mapped read-only),
// protection domains (a token of another domain gets nothing) and deregistration; and that FLUSH
// of a pool in msync mode completes without the channel or the target's persister.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/shared_memory.h"

namespace asymnvm::fabric {
namespace {

using std::chrono::milliseconds;

struct Side {
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
};

Side OpenSide() {
  Side s;
  FabricOptions o;
  o.provider = "shm";
  auto f = Fabric::Open(o);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return s;
  s.fabric = std::move(f).value();
  EXPECT_EQ(s.fabric->provider(), "shm");
  s.pd = std::move(s.fabric->AllocPd()).value();
  s.cq = std::move(s.fabric->CreateCq({})).value();
  return s;
}

class ShmDirect : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = OpenSide();
    init_ = OpenSide();
    ASSERT_TRUE(target_.fabric && init_.fabric);
    address_ = "unix:///tmp/asymnvm-shm-direct-" + std::to_string(getpid()) + "-" +
               std::to_string(counter_++) + ".sock";
    auto l = target_.fabric->Listen(target_.pd.get(), address_);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
    local_mem_ = std::move(SharedMemory::Allocate(4096)).value();
    local_ = std::move(init_.pd->RegisterMemory(local_mem_->data(), 4096, {.access = kLocalWrite}))
                 .value();
  }

  // Connects init_ (in `pd`, default init_.pd) to target_.
  std::unique_ptr<Connection> Connect() {
    ConnectionOptions to;
    to.send_cq = target_.cq.get();
    to.recv_cq = target_.cq.get();
    auto accepted = std::async(std::launch::async, [&] { return listener_->Accept(to); });
    ConnectionOptions io;
    io.send_cq = init_.cq.get();
    auto c = init_.fabric->Connect(init_.pd.get(), address_, io);
    auto a = accepted.get();
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (!c.ok() || !a.ok()) return nullptr;
    accepted_.push_back(std::move(a).value());
    return std::move(c).value();
  }

  WorkRequest Wr(Opcode op, uint64_t id, const MemoryRegion& remote, size_t off, uint32_t len) {
    WorkRequest w;
    w.wr_id = id;
    w.opcode = op;
    w.local_addr = local_mem_->data();
    w.local_mr = local_.get();
    w.length = len;
    w.remote_addr = reinterpret_cast<uint64_t>(remote.addr()) + off;
    w.rkey = remote.rkey();
    return w;
  }

  Completion One(Connection* c, const WorkRequest& w) {
    EXPECT_TRUE(c->Post(std::span<const WorkRequest>(&w, 1)).ok());
    Completion out[1];
    auto n = init_.cq->Wait(out, std::chrono::microseconds(10'000'000));
    EXPECT_TRUE(n.ok() && *n == 1) << "no completion";
    return out[0];
  }

  static inline int counter_ = 0;
  Side target_, init_;
  std::string address_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Connection>> accepted_;
  std::unique_ptr<SharedMemory> local_mem_;
  std::unique_ptr<MemoryRegion> local_;
};

TEST_F(ShmDirect, OneSidedOnSharedMemory_InitiatorExecutesThem) {
  auto mem = std::move(SharedMemory::Allocate(8192)).value();
  auto mr =
      std::move(target_.pd->RegisterMemory(mem->data(), 8192, {.access = kAllRemote})).value();
  auto c = Connect();
  ASSERT_TRUE(c);
  const Counters t0 = target_.fabric->counters();
  std::memcpy(local_mem_->data(), "direct!!", 8);
  Completion w = One(c.get(), Wr(Opcode::kWrite, 1, *mr, 100, 8));
  EXPECT_EQ(w.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(mem->data() + 100, "direct!!", 8), 0);
  std::memcpy(mem->data() + 200, "fromtarg", 8);
  Completion r = One(c.get(), Wr(Opcode::kRead, 2, *mr, 200, 8));
  EXPECT_EQ(r.status, CompletionStatus::kSuccess);
  EXPECT_EQ(r.byte_len, 8u);
  EXPECT_EQ(std::memcmp(local_mem_->data(), "fromtarg", 8), 0);
  WorkRequest cas = Wr(Opcode::kCompareSwap, 3, *mr, 256, 8);
  cas.compare_add = 0;
  cas.swap = 77;
  EXPECT_EQ(One(c.get(), cas).status, CompletionStatus::kSuccess);
  WorkRequest faa = Wr(Opcode::kFetchAdd, 4, *mr, 256, 8);
  faa.compare_add = 5;
  EXPECT_EQ(One(c.get(), faa).status, CompletionStatus::kSuccess);
  uint64_t orig;
  std::memcpy(&orig, local_mem_->data(), 8);
  EXPECT_EQ(orig, 77u);
  uint64_t now;
  std::memcpy(&now, mem->data() + 256, 8);
  EXPECT_EQ(now, 82u);
  WorkRequest fl = Wr(Opcode::kFlush, 5, *mr, 0, 0);
  EXPECT_EQ(One(c.get(), fl).status, CompletionStatus::kSuccess);
  // None of it reached the target's NIC, nor the wire.
  const Counters t = target_.fabric->counters() - t0;
  EXPECT_EQ(t.remote_ops_served, 0u);
  EXPECT_EQ(t.bytes_in, 0u);
  EXPECT_EQ(c->counters().bytes_out, 0u);
  EXPECT_EQ(c->counters().writes, 1u);
  EXPECT_EQ(c->counters().round_trips, 5u);
}

TEST_F(ShmDirect, HeapRegion_UsesTheChannel) {
  std::vector<uint8_t> heap(4096, 0);
  auto mr =
      std::move(target_.pd->RegisterMemory(heap.data(), 4096, {.access = kAllRemote})).value();
  auto c = Connect();
  ASSERT_TRUE(c);
  std::memcpy(local_mem_->data(), "channel!", 8);
  EXPECT_EQ(One(c.get(), Wr(Opcode::kWrite, 1, *mr, 0, 8)).status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(heap.data(), "channel!", 8), 0);
  EXPECT_EQ(target_.fabric->counters().remote_ops_served, 1u);
}

TEST_F(ShmDirect, ReadOnlyRegion_WriteRejectedReadDirect) {
  auto mem = std::move(SharedMemory::Allocate(4096)).value();
  std::memcpy(mem->data(), "readonly", 8);
  auto mr =
      std::move(target_.pd->RegisterMemory(mem->data(), 4096, {.access = kRemoteRead})).value();
  auto c = Connect();
  ASSERT_TRUE(c);
  Completion r = One(c.get(), Wr(Opcode::kRead, 1, *mr, 0, 8));
  EXPECT_EQ(r.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(local_mem_->data(), "readonly", 8), 0);
  EXPECT_EQ(target_.fabric->counters().remote_ops_served, 0u);  // read directly
  // The initiator maps it read-only: exactly one PROT_READ-only shared mapping of its size here
  // besides the target's read-write one (both live in this process).
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int ro = 0;
  while (std::getline(maps, line)) {
    if (line.find("asymnvm-region") != std::string::npos &&
        line.find(" r--s ") != std::string::npos)
      ro++;
  }
  EXPECT_GE(ro, 1) << "no read-only mapping of the granted memfd";
  std::memcpy(local_mem_->data(), "scribble", 8);
  Completion w = One(c.get(), Wr(Opcode::kWrite, 2, *mr, 0, 8));
  EXPECT_EQ(w.status, CompletionStatus::kRemoteAccessError) << CompletionStatusName(w.status);
  EXPECT_EQ(std::memcmp(mem->data(), "readonly", 8), 0);
  EXPECT_EQ(c->state(), ConnectionState::kError);
}

TEST_F(ShmDirect, OutOfBoundsAndDeregistered_RejectedNothingWritten) {
  auto mem = std::move(SharedMemory::Allocate(8192)).value();
  std::memset(mem->data(), 0xA5, 8192);
  // Registered: the first 4 KiB only; the page behind it is mapped by nobody else.
  auto mr =
      std::move(target_.pd->RegisterMemory(mem->data(), 4096, {.access = kAllRemote})).value();
  auto c = Connect();
  ASSERT_TRUE(c);
  EXPECT_EQ(One(c.get(), Wr(Opcode::kWrite, 1, *mr, 0, 8)).status, CompletionStatus::kSuccess);
  Completion oob = One(c.get(), Wr(Opcode::kWrite, 2, *mr, 4092, 8));
  EXPECT_EQ(oob.status, CompletionStatus::kRemoteAccessError);
  for (size_t i = 4092; i < 8192; i++) ASSERT_EQ(mem->data()[i], 0xA5) << i;
  // Deregistration revokes the grant: a new connection maps it, then it is deregistered.
  auto c2 = Connect();
  ASSERT_TRUE(c2);
  EXPECT_EQ(One(c2.get(), Wr(Opcode::kWrite, 3, *mr, 8, 8)).status, CompletionStatus::kSuccess);
  const WorkRequest later = Wr(Opcode::kWrite, 4, *mr, 16, 8);
  mr.reset();
  std::memset(mem->data() + 16, 0, 8);
  Completion gone = One(c2.get(), later);
  EXPECT_EQ(gone.status, CompletionStatus::kRemoteAccessError) << CompletionStatusName(gone.status);
  for (size_t i = 16; i < 24; i++) ASSERT_EQ(mem->data()[i], 0) << i;
}

TEST_F(ShmDirect, OtherProtectionDomain_NotGranted) {
  auto other_pd = std::move(target_.fabric->AllocPd()).value();
  auto mem = std::move(SharedMemory::Allocate(4096)).value();
  auto mr = std::move(other_pd->RegisterMemory(mem->data(), 4096, {.access = kAllRemote})).value();
  auto c = Connect();  // accepted in target_.pd, not other_pd
  ASSERT_TRUE(c);
  std::memcpy(local_mem_->data(), "otherpd!", 8);
  Completion w = One(c.get(), Wr(Opcode::kWrite, 1, *mr, 0, 8));
  EXPECT_EQ(w.status, CompletionStatus::kRemoteAccessError);
  for (int i = 0; i < 8; i++) ASSERT_EQ(mem->data()[i], 0);
}

TEST_F(ShmDirect, PoolFileInMsyncMode_DirectWriteAndFlushLandInTheFile) {
  const std::string path = "/tmp/asymnvm-shm-direct-" + std::to_string(getpid()) + ".pool";
  std::filesystem::remove(path);
  pm::PoolOptions po;
  po.mode = pm::PersistMode::kMsync;
  auto pool = std::move(pm::Pool::Create(path, 1 << 20, po)).value();
  auto mr =
      std::move(target_.pd->RegisterMemory(pool->user_base(), 64 * 1024,
                                           {.access = kAllRemote, .persister = pool->persister()}))
          .value();
  auto c = Connect();
  ASSERT_TRUE(c);
  const auto syncs0 = pool->sync_stats().syncs;
  std::memcpy(local_mem_->data(), "durable!", 8);
  ASSERT_EQ(One(c.get(), Wr(Opcode::kWrite, 1, *mr, 4096 + 3, 8)).status,
            CompletionStatus::kSuccess);
  ASSERT_EQ(One(c.get(), Wr(Opcode::kFlush, 2, *mr, 0, 0)).status, CompletionStatus::kSuccess);
  EXPECT_EQ(target_.fabric->counters().remote_ops_served, 0u);
  EXPECT_EQ(pool->sync_stats().syncs, syncs0) << "the target's persister was not involved";
  // The file (read through a separate descriptor) holds the bytes at their pool offset: the grant
  // mapped the right part of the right file.
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(pm::kSuperblockSize + 4096 + 3));
  char got[8] = {};
  f.read(got, 8);
  EXPECT_EQ(std::memcmp(got, "durable!", 8), 0);
  mr.reset();
  pool.reset();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace asymnvm::fabric
