// fabric_test_peer: a target process for the conformance suite's peer-death tests.
//
//   fabric_test_peer --provider soft --listen tcp://127.0.0.1:0 [--secret S] [--size BYTES]
//   fabric_test_peer --provider soft --connect ADDRESS --region HEX64
//
// Target mode (--listen): opens a fabric, registers one zeroed region with every remote right,
// listens, prints
//   READY <listen address> <64 hex chars: the 32-byte region descriptor>
// on stdout, then accepts and serves connections until killed.
// Initiator mode (--connect): connects through a FaultyFabric (no faults; its named crash points
// fire when ASYMNVM_CRASH_AT is set), prints "CONNECTED", then WRITEs 64-byte records
// {pid, seq, pattern} to consecutive slots of the region, one signaled WRITE per Post, waiting for
// each, until the region is full or the process is killed (e.g. at a crash point).
// Either way it dies with its parent.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/shared_memory.h"
#include "fabric/faulty_fabric.h"

using namespace asymnvm;
using namespace asymnvm::fabric;

namespace {

int RunInitiator(const FabricOptions& fo, const std::string& address, const std::string& hex) {
  uint8_t raw[RegionDescriptor::kEncodedSize] = {};
  if (hex.size() != 2 * sizeof(raw)) return 2;
  for (size_t i = 0; i < sizeof(raw); i++) {
    raw[i] = static_cast<uint8_t>(std::strtoul(hex.substr(2 * i, 2).c_str(), nullptr, 16));
  }
  auto region = RegionDescriptor::Decode(raw, sizeof(raw));
  if (!region.ok()) return 2;
  auto fabric = FaultyFabric::Open(fo, FaultOptions{});
  if (!fabric.ok()) {
    std::fprintf(stderr, "fabric_test_peer: %s\n", fabric.status().ToString().c_str());
    return 1;
  }
  auto pd = (*fabric)->AllocPd();
  auto cq = (*fabric)->CreateCq({});
  if (!pd.ok() || !cq.ok()) return 1;
  std::vector<uint8_t> buf(64, 0);
  auto mr = (*pd)->RegisterMemory(buf.data(), buf.size(), MemoryRegionOptions{});
  if (!mr.ok()) return 1;
  ConnectionOptions co;
  co.send_cq = cq->get();
  auto conn = (*fabric)->Connect(pd->get(), address, co);
  if (!conn.ok()) {
    std::fprintf(stderr, "fabric_test_peer: connect: %s\n", conn.status().ToString().c_str());
    return 1;
  }
  std::printf("CONNECTED\n");
  std::fflush(stdout);
  const uint64_t pid = static_cast<uint64_t>(getpid());
  for (uint64_t seq = 0; (seq + 1) * 64 <= region->length; seq++) {
    std::memcpy(buf.data(), &pid, 8);
    std::memcpy(buf.data() + 8, &seq, 8);
    for (size_t i = 16; i < 64; i++) buf[i] = static_cast<uint8_t>(pid + seq + i);
    WorkRequest wr;
    wr.wr_id = seq;
    wr.local_addr = buf.data();
    wr.length = 64;
    wr.local_mr = mr->get();
    wr.remote_addr = region->addr + seq * 64;
    wr.rkey = region->rkey;
    if (!(*conn)->Post(std::span<const WorkRequest>(&wr, 1)).ok()) return 1;
    Completion c;
    Result<size_t> n = size_t{0};
    while ((n = (*cq)->Wait(std::span<Completion>(&c, 1), std::chrono::seconds(1))).ok() &&
           *n == 0) {
    }
    if (!n.ok() || c.status != CompletionStatus::kSuccess) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  FabricOptions fo;
  std::string listen = "tcp://127.0.0.1:0";
  std::string connect, region_hex;
  size_t size = 1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--provider")
      fo.provider = v;
    else if (k == "--listen")
      listen = v;
    else if (k == "--secret")
      fo.cluster_secret = v;
    else if (k == "--size")
      size = std::strtoull(v.c_str(), nullptr, 0);
    else if (k == "--connect")
      connect = v;
    else if (k == "--region")
      region_hex = v;
    else {
      std::fprintf(stderr, "fabric_test_peer: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (!connect.empty()) return RunInitiator(fo, connect, region_hex);
  auto fabric = Fabric::Open(fo);
  if (!fabric.ok()) {
    std::fprintf(stderr, "fabric_test_peer: %s\n", fabric.status().ToString().c_str());
    return 1;
  }
  auto pd = (*fabric)->AllocPd();
  if (!pd.ok()) return 1;
  // Shareable memory: on shm the initiator maps it, so peer death is seen by the direct path.
  auto memory = SharedMemory::Allocate(size);
  if (!memory.ok()) return 1;
  MemoryRegionOptions mo;
  mo.access = kAllRemote;
  auto mr = (*pd)->RegisterMemory((*memory)->data(), (*memory)->size(), mo);
  auto cq = (*fabric)->CreateCq({});
  if (!mr.ok() || !cq.ok()) return 1;
  auto listener = (*fabric)->Listen(pd->get(), listen);
  if (!listener.ok()) {
    std::fprintf(stderr, "fabric_test_peer: listen: %s\n", listener.status().ToString().c_str());
    return 1;
  }
  uint8_t raw[RegionDescriptor::kEncodedSize];
  (*mr)->descriptor().EncodeTo(raw);
  std::printf("READY %s ", (*listener)->address().c_str());
  for (uint8_t b : raw) std::printf("%02x", b);
  std::printf("\n");
  std::fflush(stdout);
  std::vector<std::unique_ptr<Connection>> conns;
  ConnectionOptions co;
  co.send_cq = cq->get();
  co.recv_cq = cq->get();
  co.timeout = std::chrono::milliseconds(1000);
  while (true) {
    auto c = (*listener)->Accept(co);
    if (c.ok()) conns.push_back(std::move(c).value());
    Completion out[64];
    (void)(*cq)->Poll(out);
  }
}
