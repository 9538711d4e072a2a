#!/usr/bin/env bash
# README command (1): install what is missing, build, and run the main job on the embedded
# defaults (soft fabric on loopback, a PM pool file in ./data). Extra arguments go to the job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/common.sh
BUILD_DIR=${BUILD_DIR:-build}
asymnvm_configure "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j"$(nproc)" --target asymnvm-job asymnvm-backend
exec "$BUILD_DIR/workloads/asymnvm-job" --data-dir "${DATA_DIR:-data}" "$@"
