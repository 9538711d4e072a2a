// asymnvm-ctl: see tools/ctl.h and doc/tools.md.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "tools/ctl.h"

int main(int argc, char** argv) {
  asymnvm::LogLevel level;
  const char* env = std::getenv("ASYMNVM_LOG_LEVEL");
  if (asymnvm::ParseLogLevel(env != nullptr ? env : "warn", &level)) asymnvm::SetLogLevel(level);
  std::vector<std::string> args(argv + 1, argv + argc);
  return asymnvm::tools::RunCtl(args, std::cout, std::cerr);
}
