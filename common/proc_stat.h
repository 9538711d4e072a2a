// CPU time of a live process, from /proc (benchmarks report server CPU per operation).
//
// Thread safety: pure function.
#pragma once

#include <sys/types.h>

#include "asymnvm/status.h"

namespace asymnvm {

// User + system CPU seconds process `pid` has used so far (/proc/PID/stat). kIoError when the
// process does not exist or the file cannot be parsed.
Result<double> ProcessCpuSeconds(pid_t pid);

}  // namespace asymnvm
