#include "common/proc_stat.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace asymnvm {

Result<double> ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close_paren = s.rfind(')');
  if (s.empty() || close_paren == std::string::npos || close_paren + 2 > s.size()) {
    return Status::IoError("cannot read /proc/" + std::to_string(pid) + "/stat");
  }
  // Fields after the command name: 3 state ... 14 utime, 15 stime (clock ticks).
  std::istringstream rest(s.substr(close_paren + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; i++) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace asymnvm
