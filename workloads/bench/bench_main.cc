// asymnvm-bench: see workloads/bench/bench.h and workloads/README.md.
#include "workloads/bench/bench.h"

int main(int argc, char** argv) { return asymnvm::bench::RunBenchCli(argc, argv); }
