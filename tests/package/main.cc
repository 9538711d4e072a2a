// Links against the installed package and does real work through it: a soft-NIC loopback WRITE +
// READ over inproc://. Exit code 0 only if the bytes round-trip.
#include <asymnvm/fabric.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <thread>

using namespace asymnvm::fabric;
using asymnvm::Result;
using asymnvm::Status;

int main() {
  FabricOptions fo;
  auto a = Fabric::Open(fo);
  auto b = Fabric::Open(fo);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "open: %s\n", (a.ok() ? b.status() : a.status()).ToString().c_str());
    return 1;
  }
  auto pda = (*a)->AllocPd();
  auto pdb = (*b)->AllocPd();
  std::array<char, 64> target{}, local{};
  auto mr_t = (*pdb)->RegisterMemory(target.data(), target.size(), {.access = kAllRemote});
  auto mr_l = (*pda)->RegisterMemory(local.data(), local.size(), {.access = kLocalWrite});
  auto cq_a = (*a)->CreateCq({});
  auto cq_b = (*b)->CreateCq({});
  auto listener = (*b)->Listen(pdb->get(), "inproc://package-consumer");
  if (!mr_t.ok() || !mr_l.ok() || !cq_a.ok() || !cq_b.ok() || !listener.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  ConnectionOptions co;
  co.send_cq = cq_a->get();
  co.recv_cq = cq_a->get();
  ConnectionOptions so;
  so.send_cq = cq_b->get();
  so.recv_cq = cq_b->get();
  Result<std::unique_ptr<Connection>> server = Status::Internal("not accepted");
  std::thread acceptor([&] { server = (*listener)->Accept(so); });
  auto conn = (*a)->Connect(pda->get(), "inproc://package-consumer", co);
  acceptor.join();
  if (!conn.ok() || !server.ok()) {
    std::fprintf(stderr, "connect failed\n");
    return 1;
  }
  std::memcpy(local.data(), "hello from an installed AsymNVM", 32);
  WorkRequest wrs[2];
  wrs[0] = {.wr_id = 1,
            .opcode = Opcode::kWrite,
            .signaled = false,
            .local_addr = local.data(),
            .length = 32,
            .local_mr = mr_l->get(),
            .remote_addr = reinterpret_cast<uint64_t>(target.data()),
            .rkey = (*mr_t)->rkey()};
  wrs[1] = wrs[0];
  wrs[1].wr_id = 2;
  wrs[1].opcode = Opcode::kRead;
  wrs[1].signaled = true;
  wrs[1].local_addr = local.data() + 32;
  if (!(*conn)->Post(wrs).ok()) return 1;
  Completion c;
  auto n = (*cq_a)->Wait({&c, 1}, std::chrono::seconds(5));
  if (!n.ok() || *n != 1 || c.status != CompletionStatus::kSuccess) {
    std::fprintf(stderr, "no completion\n");
    return 1;
  }
  bool ok = std::memcmp(local.data(), local.data() + 32, 32) == 0;
  std::printf("package consumer: %s\n", ok ? "WRITE+READ round trip ok" : "MISMATCH");
  return ok ? 0 : 1;
}
