// Prints doc/resp.md's generated compatibility table (the dispatch table is its only source).
#include <cstdio>

#include "kv/resp/commands.h"

int main() {
  std::fputs(asymnvm::kv::resp::GenerateCompatibilityTable().c_str(), stdout);
  return 0;
}
