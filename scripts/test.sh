#!/usr/bin/env bash
# README command (2): install what is missing, check the format, build, and run every test suite:
#   0. scripts/check-format.sh (clang-format with the repository's .clang-format);
#   1. the default build (RelWithDebInfo);
#   2. the CMake package: install to a staging prefix and build an application against it; the
#      Debian packages (tests/package/deb_test.sh: cpack, dpkg -x, the installed daemons and units);
#   3. the default build's process suites: every ctest label but unit, conformance and long (crash,
#      partition, ops, redis, ...: the daemons users run, as they are built for them);
#   4. an ASan+UBSan build (-O1) running the unit and conformance suites;
#   5. every libFuzzer target for a bounded time each (FUZZ_SECONDS, default 16) when clang exists.
# Every test runs once: the unit and conformance suites in the sanitizer build, which checks all
# the default build's assertions and more (with SKIP_ASAN=1 they run in the default build).
# Environment: SKIP_ASAN=1 / SKIP_FUZZ=1 skip steps 4 / 5; TSAN=1 adds a ThreadSanitizer build
# running the unit suites (off by default: it doubles the run time); CTEST_ARGS replaces step 3's
# label selection (e.g. CTEST_ARGS="-L long" runs the long campaigns, "-LE long" every default
# suite in the default build).
# Builds use Ninja, ccache and line-table debug information (-g1) when available (scripts/common.sh);
# the stages' cold and warm times are in tests/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
scripts/setup.sh
. scripts/common.sh
JOBS=$(nproc)
START=$(date +%s)
if [ -n "${CTEST_ARGS:-}" ]; then
  DEFAULT_LABELS=$CTEST_ARGS
elif [ "${SKIP_ASAN:-0}" = 1 ]; then
  DEFAULT_LABELS="-LE long"
else
  DEFAULT_LABELS="-LE long|unit|conformance"
fi

step() { printf '\n=== %s (at %d s) ===\n' "$*" $(($(date +%s) - START)); }

step "format: every C++ file as clang-format makes it (.clang-format)"
scripts/check-format.sh

step "build (RelWithDebInfo)"
asymnvm_configure build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASYMNVM_WERROR=ON \
  -DASYMNVM_LINE_TABLES_ONLY=ON
cmake --build build -j"$JOBS"

step "CMake package: install + find_package(AsymNVM) from an application"
rm -rf build/stage build/package-consumer
cmake --install build --prefix "$ROOT/build/stage" >/dev/null
cmake -S tests/package -B build/package-consumer -DCMAKE_PREFIX_PATH="$ROOT/build/stage" >/dev/null
cmake --build build/package-consumer -j"$JOBS" >/dev/null
LD_LIBRARY_PATH="$ROOT/build/stage/lib" build/package-consumer/asymnvm_package_consumer
LD_LIBRARY_PATH="$ROOT/build/stage/lib" build/package-consumer/asymnvm_sdk_consumer \
  "$ROOT/build/stage/bin/asymnvm-backend"

step "Debian packages: cpack, unpacked with dpkg -x, installed binaries and CMake package, systemd units"
tests/package/deb_test.sh build

step "process suites (default build): ctest $DEFAULT_LABELS"
# shellcheck disable=SC2086  # the label selection is several words
ctest --test-dir build $DEFAULT_LABELS --output-on-failure -j"$JOBS"

if [ "${SKIP_ASAN:-0}" != 1 ]; then
  # -O1, as ASan's authors advise: the suites run about twice as fast as at -O0; assert()s stay on.
  # GCC's -Wmaybe-uninitialized is not reliable at -O1 (it flagged the read after a [[noreturn]]
  # check in Result::value()); the default build's -O2 keeps it as an error.
  step "ASan+UBSan build: unit and conformance suites"
  asymnvm_configure build-asan -DCMAKE_BUILD_TYPE=Debug -DASYMNVM_WERROR=ON \
    -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g -Wno-maybe-uninitialized" \
    -DASYMNVM_LINE_TABLES_ONLY=ON \
    -DASYMNVM_SANITIZE=address,undefined \
    -DASYMNVM_BUILD_BENCH=OFF
  cmake --build build-asan -j"$JOBS"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -L "unit|conformance" --output-on-failure -j"$JOBS"
fi

if [ "${TSAN:-0}" = 1 ]; then
  step "ThreadSanitizer build: unit suites (suppressions: tests/tsan.supp, the soft NIC's DMA only)"
  asymnvm_configure build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASYMNVM_WERROR=ON \
    -DASYMNVM_LINE_TABLES_ONLY=ON -DASYMNVM_SANITIZE=thread \
    -DASYMNVM_BUILD_BENCH=OFF
  cmake --build build-tsan -j"$JOBS"
  TSAN_OPTIONS="halt_on_error=1 history_size=7 suppressions=$ROOT/tests/tsan.supp" \
    ctest --test-dir build-tsan -L unit --output-on-failure -j"$JOBS"
fi

if [ "${SKIP_FUZZ:-0}" != 1 ] && command -v clang++ >/dev/null; then
  # Every libFuzzer target (doc/fuzz.md) for FUZZ_SECONDS each from its checked-in seeds
  # (tests/fuzz/corpus/<target>) plus what earlier runs found (build-fuzz/corpus/<target>); a
  # crash, a failed property, a leak or a 10 s hang fails the script with the input saved.
  FUZZ_SECONDS=${FUZZ_SECONDS:-16}
  step "fuzz targets (${FUZZ_SECONDS} s each)"
  asymnvm_configure build-fuzz -DASYMNVM_WERROR=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DASYMNVM_BUILD_FUZZ=ON -DASYMNVM_BUILD_TESTS=OFF -DASYMNVM_BUILD_BENCH=OFF
  cmake --build build-fuzz -j"$JOBS" --target asymnvm_fuzz_targets
  mkdir -p build-fuzz/artifacts
  nfuzz=0
  for f in $(find build-fuzz -maxdepth 4 -type f -name '*_fuzz' -perm -u+x | sort); do
    n=$(basename "$f")
    nfuzz=$((nfuzz + 1))
    mkdir -p "build-fuzz/corpus/$n" "tests/fuzz/corpus/$n"
    log="build-fuzz/corpus/$n.log"
    if ! "$f" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="build-fuzz/artifacts/$n-" "build-fuzz/corpus/$n" "tests/fuzz/corpus/$n" \
        >"$log" 2>&1; then
      tail -n 40 "$log"
      echo "fuzz target $n FAILED: the input is in build-fuzz/artifacts/ (reproduce: $f <file>)"
      exit 1
    fi
    printf '%-20s %10s runs, coverage %s\n' "$n" \
      "$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")" \
      "$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)"
  done
  echo "$nfuzz fuzz targets ran"
fi

step "all green"
echo "README command (2) passed in $(($(date +%s) - START)) s"
