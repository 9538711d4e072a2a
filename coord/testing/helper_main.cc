// coord_test_helper: the other process of the coordinator conformance suite.
//
//   coord_test_helper register URI PATH [--sequential] [--session-ms N]
//       creates PATH (ephemeral; its parent must exist), prints "ready <created path> <session>"
//       and then "state <name>" on every session state change, until killed. The ZooKeeper
//       session timeout is 1000 ms unless --session-ms says otherwise.
//   coord_test_helper alloc URI PATH N       prints N ids from AllocateId(PATH), one per line
//   coord_test_helper incr URI PATH N        N compare-and-set increments of the decimal counter
//                                            in PATH; prints "conflicts K" at the end
// Any failure: a line "error <status>" on stdout and exit code 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "asymnvm/coord.h"

using asymnvm::coord::Coordinator;

namespace {

int Fail(const asymnvm::Status& st) {
  std::printf("error %s\n", st.ToString().c_str());
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s register|alloc|incr URI PATH [...]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], uri = argv[2], path = argv[3];
  asymnvm::coord::Options options;
  options.session_timeout = std::chrono::milliseconds(1000);  // tests wait less for expiry
  bool sequential = false;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sequential") sequential = true;
    if (a == "--session-ms" && i + 1 < argc) {
      options.session_timeout = std::chrono::milliseconds(std::atoi(argv[++i]));
    }
  }
  auto c = Coordinator::Open(uri, options);
  if (!c.ok()) return Fail(c.status());
  Coordinator& coord = **c;

  if (mode == "register") {
    const uint32_t flags =
        asymnvm::coord::kEphemeral | (sequential ? asymnvm::coord::kSequential : 0u);
    auto created = coord.Create(path, std::to_string(getpid()), flags);
    if (!created.ok()) return Fail(created.status());
    std::printf("ready %s %llu\n", created->c_str(),
                static_cast<unsigned long long>(coord.session_id()));
    std::fflush(stdout);
    auto last = coord.state();
    // Report state changes (the test reads "state expired" after a SIGSTOP outlived the session).
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto now = coord.state();
      if (now != last) {
        std::printf("state %s\n", std::string(asymnvm::coord::SessionStateName(now)).c_str());
        std::fflush(stdout);
        last = now;
      }
    }
  }
  if (mode == "alloc" && argc >= 5) {
    const int n = std::atoi(argv[4]);
    for (int i = 0; i < n; ++i) {
      auto id = coord.AllocateId(path);
      if (!id.ok()) return Fail(id.status());
      std::printf("%llu\n", static_cast<unsigned long long>(*id));
    }
    std::fflush(stdout);
    return 0;
  }
  if (mode == "incr" && argc >= 5) {
    const int n = std::atoi(argv[4]);
    uint64_t conflicts = 0;
    for (int i = 0; i < n;) {
      auto node = coord.Get(path);
      if (!node.ok()) return Fail(node.status());
      const long long v = node->data.empty() ? 0 : std::atoll(node->data.c_str());
      auto set = coord.Set(path, std::to_string(v + 1), node->version);
      if (set.ok()) {
        ++i;
      } else if (set.status().code() == asymnvm::StatusCode::kAborted) {
        ++conflicts;
      } else {
        return Fail(set.status());
      }
    }
    std::printf("conflicts %llu\n", static_cast<unsigned long long>(conflicts));
    std::fflush(stdout);
    return 0;
  }
  std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
  return 2;
}
