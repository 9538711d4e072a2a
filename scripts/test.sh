#!/usr/bin/env bash
# README command (2): install what is missing, build, and run every test suite:
#   1. the default build, all ctest suites except those labelled "long";
#   2. the CMake package: install to a staging prefix and build an application against it;
#   3. an ASan+UBSan build running the unit and conformance suites;
#   4. the libFuzzer targets for a bounded time each (FUZZ_SECONDS, default 30) when clang exists.
# Environment: SKIP_ASAN=1 / SKIP_FUZZ=1 skip steps 3 / 4; TSAN=1 adds a ThreadSanitizer build
# running the unit suites (off by default: it doubles the run time); CTEST_ARGS adds ctest arguments
# (e.g. CTEST_ARGS="-L long" runs the long campaigns instead).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
scripts/setup.sh
JOBS=$(nproc)
CTEST_ARGS=${CTEST_ARGS:--LE long}

step() { printf '\n=== %s ===\n' "$*"; }

step "build (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASYMNVM_WERROR=ON >/dev/null
cmake --build build -j"$JOBS"

step "CMake package: install + find_package(AsymNVM) from an application"
rm -rf build/stage build/package-consumer
cmake --install build --prefix "$ROOT/build/stage" >/dev/null
cmake -S tests/package -B build/package-consumer -DCMAKE_PREFIX_PATH="$ROOT/build/stage" >/dev/null
cmake --build build/package-consumer -j"$JOBS" >/dev/null
LD_LIBRARY_PATH="$ROOT/build/stage/lib" build/package-consumer/asymnvm_package_consumer
LD_LIBRARY_PATH="$ROOT/build/stage/lib" build/package-consumer/asymnvm_sdk_consumer \
  "$ROOT/build/stage/bin/asymnvm-backend"

if [ "${SKIP_ASAN:-0}" != 1 ]; then
  step "ASan+UBSan build: unit and conformance suites"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DASYMNVM_WERROR=ON \
    -DASYMNVM_SANITIZE=address,undefined \
    -DASYMNVM_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$JOBS"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -L "unit|conformance" --output-on-failure -j"$JOBS"
fi

if [ "${TSAN:-0}" = 1 ]; then
  step "ThreadSanitizer build: unit suites (suppressions: tests/tsan.supp, the soft NIC's DMA only)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASYMNVM_WERROR=ON \
    -DASYMNVM_SANITIZE=thread \
    -DASYMNVM_BUILD_BENCH=OFF >/dev/null
  cmake --build build-tsan -j"$JOBS"
  TSAN_OPTIONS="halt_on_error=1 history_size=7 suppressions=$ROOT/tests/tsan.supp" \
    ctest --test-dir build-tsan -L unit --output-on-failure -j"$JOBS"
fi

if [ "${SKIP_FUZZ:-0}" != 1 ] && command -v clang++ >/dev/null; then
  step "fuzz targets (${FUZZ_SECONDS:-30} s each)"
  cmake -S . -B build-fuzz -DASYMNVM_WERROR=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DASYMNVM_BUILD_FUZZ=ON -DASYMNVM_BUILD_TESTS=OFF -DASYMNVM_BUILD_BENCH=OFF >/dev/null
  cmake --build build-fuzz -j"$JOBS"
  for f in $(find build-fuzz -maxdepth 3 -type f -name '*_fuzz' -perm -u+x | sort); do
    echo "fuzzing $(basename "$f")"
    mkdir -p "build-fuzz/corpus/$(basename "$f")"
    "$f" -max_total_time="${FUZZ_SECONDS:-30}" -print_final_stats=1 \
      "build-fuzz/corpus/$(basename "$f")" 2>&1 | tail -n 3
  done
fi

step "test suites (default build)"
# Last, so its summary line is the run's closing line.
ctest --test-dir build $CTEST_ARGS --output-on-failure -j"$JOBS"
