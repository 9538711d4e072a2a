// ASSERT_OK(expr) / EXPECT_OK(expr): gtest assertions that a Status or a Result<T> is OK, printing
// the expression and the Status (ToString: code, sub-code, message, errno) when it is not, as
// RocksDB's ASSERT_OK does. `ASSERT_TRUE(s.ok())` prints only "Value of: s.ok(), Actual: false".
// The expression is evaluated once; more context can be streamed: ASSERT_OK(s) << "restart " << i.
// (The helpers live in asymnvm::status_assert, not asymnvm::testing: that name would hide gtest's
// ::testing in tests written inside namespace asymnvm.)
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "asymnvm/status.h"

namespace asymnvm::status_assert {

// What a failed assertion prints: the Status of a Status or Result<T>; for another type with
// ok(), its ToString() or status().ToString() when it has one.
template <typename S>
std::string Describe(const S& s) {
  if constexpr (requires { s.status().ToString(); }) {
    return s.status().ToString();
  } else if constexpr (requires { s.ToString(); }) {
    return s.ToString();
  } else {
    return "not OK";
  }
}

template <typename S>
::testing::AssertionResult IsOk(const char* expr, const S& s) {
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr << " is not OK: " << Describe(s);
}

}  // namespace asymnvm::status_assert

#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::asymnvm::status_assert::IsOk, expr)
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::asymnvm::status_assert::IsOk, expr)
