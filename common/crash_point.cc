#include "common/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "common/thread_annotations.h"

namespace asymnvm {
namespace {

struct State {
  Mutex mu;
  std::string name ASYMNVM_GUARDED_BY(mu);
  uint64_t remaining ASYMNVM_GUARDED_BY(mu) = 0;
  std::atomic<bool> armed{false};
  State() {
    MutexLock lock(mu);  // uncontended (a function-local static)
    const char* env = std::getenv("ASYMNVM_CRASH_AT");
    if (env == nullptr || *env == '\0') return;
    std::string spec(env);
    uint64_t n = 1;
    auto colon = spec.rfind(':');
    if (colon != std::string::npos) {
      n = std::strtoull(spec.c_str() + colon + 1, nullptr, 10);
      spec.resize(colon);
      if (n == 0) n = 1;
    }
    name = spec;
    remaining = n;
    armed = true;
  }
};

State& GetState() {
  static State state;
  return state;
}

}  // namespace

void ArmCrashPoint(const std::string& name, uint64_t nth) {
  State& s = GetState();
  MutexLock lock(s.mu);
  s.name = name;
  s.remaining = nth == 0 ? 1 : nth;
  s.armed = true;
}

void DisarmCrashPoints() {
  State& s = GetState();
  MutexLock lock(s.mu);
  s.armed = false;
}

bool CrashPointsArmed() { return GetState().armed.load(std::memory_order_relaxed); }

void ReachCrashPointSlow(const char* name) {
  State& s = GetState();
  MutexLock lock(s.mu);
  if (!s.armed || s.name != name) return;
  if (--s.remaining > 0) return;
  std::fprintf(stderr, "crash point '%s' reached: killing process %d\n", name, getpid());
  std::fflush(stderr);
  kill(getpid(), SIGKILL);
  _exit(137);
}

}  // namespace asymnvm
