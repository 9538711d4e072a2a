// rowan_test_receiver: a Rowan receiver in its own process, for the kill -9 test
// (rowan_kill_test.cc). Opens (or creates) the pool file, opens the b-log on it (recovering what a
// killed predecessor left), prints "ADDR <address>" on stdout and serves until stdin closes.
// It does not consume: used segments stay used, so the test can scan every entry afterwards.
//
//   rowan_test_receiver POOL_PATH [SEGMENT_BYTES]
// Exit codes: 0 after stdin EOF, 1 on any setup error (the message goes to stderr).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "fabric/rowan/receiver.h"

using namespace asymnvm;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s POOL_PATH [SEGMENT_BYTES]\n", argv[0]);
    return 1;
  }
  const std::string path = argv[1];
  const size_t segment = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64 * 1024;
  auto pool = pm::Pool::OpenOrCreate(path, 16u << 20,
                                     {.mode = pm::PersistMode::kFlushOnly, .layout = "rowan-test"});
  if (!pool.ok()) {
    std::fprintf(stderr, "pool: %s\n", pool.status().ToString().c_str());
    return 1;
  }
  auto fab = fabric::Fabric::Open({});
  if (!fab.ok()) {
    std::fprintf(stderr, "fabric: %s\n", fab.status().ToString().c_str());
    return 1;
  }
  auto pd = (*fab)->AllocPd();
  if (!pd.ok()) return 1;
  rowan::ReceiverOptions o;
  o.fabric = fab->get();
  o.pd = pd->get();
  o.area = (*pool)->user_base();
  o.area_size = (*pool)->user_size() / 4096 * 4096;
  o.persister = (*pool)->persister();
  o.segment_size = segment;
  o.grace = std::chrono::microseconds(500);
  auto rx = rowan::Receiver::Open(o);
  if (!rx.ok()) {
    std::fprintf(stderr, "receiver: %s\n", rx.status().ToString().c_str());
    return 1;
  }
  std::printf("ADDR %s\n", (*rx)->address().c_str());
  std::fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  (*rx)->Close();
  return 0;
}
