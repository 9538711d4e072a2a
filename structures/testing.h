// Helpers of the structure suites; their fixture is the shared in-process back-end one.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"
#include "backend/backend.h"
#include "tests/common/backend_fixture.h"

namespace asymnvm::structures::testing {

// The in-process back-end fixture (tests/common/backend_fixture.h).
inline backend::BackendOptions TestBackendOptions(const std::string& path) {
  return asymnvm::test_support::SmallBackendOptions(path);
}
using StructuresTest = asymnvm::test_support::BackendTest;

inline std::vector<uint8_t> TestValue(uint64_t key, uint64_t version, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; i++) v[i] = static_cast<uint8_t>(key * 31 + version * 7 + i);
  return v;
}

inline const frontend::Level kAllLevels[] = {frontend::Level::kNaive, frontend::Level::kR,
                                             frontend::Level::kRc, frontend::Level::kRcb};

}  // namespace asymnvm::structures::testing
