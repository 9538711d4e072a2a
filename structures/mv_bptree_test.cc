// Multi-version B+tree: the multi-version suite of mv_bst_test.cc, run with a small fan-out (4)
// so every test splits and collapses nodes.
#define MV_TEST_KIND Kind::kMvBPlusTree
#define MV_TEST_PARAM 4
#include "structures/mv_bst_test.cc"  // NOLINT(bugprone-suspicious-include)
