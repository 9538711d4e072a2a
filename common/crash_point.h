// Named crash points: a test arms a point by name and the process kills itself (SIGKILL, no
// cleanup, as a power cut or kill -9 would) the Nth time execution reaches it.
//
// Arming: ASYMNVM_CRASH_AT="name[:N]" in the environment of the process (N defaults to 1), or
// ArmCrashPoint() in-process. Unarmed points cost one relaxed atomic load.
// Thread safety: all functions are thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace asymnvm {

void ArmCrashPoint(const std::string& name, uint64_t nth = 1);
void DisarmCrashPoints();
bool CrashPointsArmed();
void ReachCrashPointSlow(const char* name);

}  // namespace asymnvm

#define ASYMNVM_CRASH_POINT(name)                                            \
  do {                                                                       \
    if (::asymnvm::CrashPointsArmed()) ::asymnvm::ReachCrashPointSlow(name); \
  } while (0)
