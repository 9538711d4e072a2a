// Linearizability checker for histories of read/write registers (Wing & Gong's search with Lowe's
// memoization of (linearized set, register value)). Used by the OQ, KV and structure tests to check
// histories recorded by concurrent clients.
//
// A history is a set of operations on keys; each key is an independent register (linearizability
// is local, so keys are checked one by one). An operation has an invocation and a response time
// from one monotonic clock; an operation whose response never arrived (error, timeout, crash) has
// response_ns == kNoResponse: a pending write may or may not have taken effect (at any point after
// its invocation); a pending read constrains nothing and is ignored.
//
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::testing {

inline constexpr int64_t kNoResponse = std::numeric_limits<int64_t>::max();

struct RegisterOp {
  int client = 0;
  uint64_t key = 0;
  bool is_write = false;
  uint64_t value = 0;  // written value, or the value the read returned (0 = absent)
  int64_t invoke_ns = 0;
  int64_t response_ns = kNoResponse;
};

struct CheckOptions {
  uint64_t initial_value = 0;               // every key's value before the history
  uint64_t max_states_per_key = 5'000'000;  // search budget; exceeded → kResourceExhausted
};

// OK when every key's sub-history is linearizable. kFailedPrecondition names the first key that is
// not, with the longest linearizable prefix found and the operations that could not be placed next.
// kInvalidArgument for malformed input (response before invocation). kResourceExhausted when the
// search budget runs out (inconclusive, never reported as a pass).
Status CheckRegisterHistory(std::vector<RegisterOp> ops, const CheckOptions& options = {});

// Convenience overload matching the common case.
inline Status CheckRegisterHistory(std::vector<RegisterOp> ops, uint64_t initial_value) {
  CheckOptions o;
  o.initial_value = initial_value;
  return CheckRegisterHistory(std::move(ops), o);
}

std::string DescribeOp(const RegisterOp& op);

}  // namespace asymnvm::testing
