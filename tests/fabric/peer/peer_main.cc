// fabric_test_peer: a target process for the conformance suite's peer-death tests.
//
//   fabric_test_peer --provider soft --listen tcp://127.0.0.1:0 [--secret S] [--size BYTES]
//
// Opens a fabric, registers one zeroed region with every remote right, listens, prints
//   READY <listen address> <64 hex chars: the 32-byte region descriptor>
// on stdout, then accepts and serves connections until killed. It dies with its parent.
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

using namespace asymnvm;
using namespace asymnvm::fabric;

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  FabricOptions fo;
  std::string listen = "tcp://127.0.0.1:0";
  size_t size = 1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--provider") fo.provider = v;
    else if (k == "--listen") listen = v;
    else if (k == "--secret") fo.cluster_secret = v;
    else if (k == "--size") size = std::strtoull(v.c_str(), nullptr, 0);
    else {
      std::fprintf(stderr, "fabric_test_peer: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  auto fabric = Fabric::Open(fo);
  if (!fabric.ok()) {
    std::fprintf(stderr, "fabric_test_peer: %s\n", fabric.status().ToString().c_str());
    return 1;
  }
  auto pd = (*fabric)->AllocPd();
  if (!pd.ok()) return 1;
  std::vector<uint8_t> memory(size, 0);
  MemoryRegionOptions mo;
  mo.access = kAllRemote;
  auto mr = (*pd)->RegisterMemory(memory.data(), memory.size(), mo);
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
