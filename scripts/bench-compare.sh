#!/usr/bin/env bash
# Compares the benchmark figures of two commits, run alternately in one session.
#
#   scripts/bench-compare.sh [--suites "structures oq"] [--rounds N] [--bench-args "..."]
#                            [--min-slip PCT] BASE [HEAD]
#
# BASE and HEAD are git revisions; HEAD defaults to HEAD. The word `.` for HEAD means the working
# tree as it is (uncommitted changes included), built in ./build. Every other revision is checked
# out in a worktree under build-compare/ and built there (only asymnvm-bench and the daemons it
# starts; ccache is used when installed). Then, for every round and every suite, A and B run back
# to back, alternating which goes first (A B, B A, A B, ...), each writing its JSON report.
# scripts/bench_compare.py matches the records of both builds and prints, per headline figure,
# A's and B's medians, B / A and the noise (the largest spread either build showed across its own
# rounds); a figure that got worse by more than max(noise, --min-slip) is a SLIP, and exact counts
# (round trips, bytes, syncs per op) slip on any rise. Exit code 0: no slip; 1: a slip; 2: usage
# or build failure.
#
# Defaults: --suites "structures oq sdk" --rounds 3 --bench-args "--quick" --min-slip 5.
# Results stay in build-compare/run-<time>/{A,B}/<suite>.<round>.json with compare.{txt,json}; the
# worktrees and their builds stay in build-compare/ and are reused by the next comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

SUITES="structures oq sdk"
ROUNDS=3
BENCH_ARGS="--quick"
MIN_SLIP=5
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --suites) SUITES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --bench-args) BENCH_ARGS=$2; shift 2 ;;
    --min-slip) MIN_SLIP=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "bench-compare: unknown option $1" >&2; usage ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] || usage
BASE=${args[0]}
HEAD_REV=${args[1]:-HEAD}
case "$ROUNDS" in ''|*[!0-9]*) echo "bench-compare: --rounds wants a number" >&2; exit 2 ;; esac

LAUNCHER=()
if command -v ccache >/dev/null; then
  # Paths relative to the parent folder and the build directory left out of the hash: the two
  # worktrees (and the main tree) share their compiled objects; debug info may name the other tree.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$ROOT")} CCACHE_NOHASHDIR=1
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
TARGETS=(asymnvm-bench asymnvm-backend asymnvm-mirror asymnvm-kv)

# build REV -> prints the build directory holding workloads/asymnvm-bench.
build_rev() {
  local rev=$1 src dir
  if [ "$rev" = . ]; then
    src=$ROOT
  else
    local sha
    sha=$(git rev-parse --verify --quiet "$rev^{commit}") || {
      echo "bench-compare: unknown revision $rev" >&2; exit 2; }
    src=$ROOT/build-compare/wt-${sha:0:12}
    if [ ! -d "$src" ]; then
      git worktree add --detach "$src" "$sha" >/dev/null 2>&1 || {
        echo "bench-compare: git worktree add failed for $rev" >&2; exit 2; }
    fi
  fi
  dir=$src/build
  {
    cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DASYMNVM_WERROR=ON \
      "${LAUNCHER[@]}" >/dev/null &&
      cmake --build "$dir" -j"$(nproc)" --target "${TARGETS[@]}" >/dev/null
  } >&2 || { echo "bench-compare: build of $rev failed (in $dir)" >&2; exit 2; }
  echo "$dir"
}

echo "bench-compare: building A = $BASE" >&2
A_BUILD=$(build_rev "$BASE")
echo "bench-compare: building B = $HEAD_REV" >&2
B_BUILD=$(build_rev "$HEAD_REV")

RUN=$ROOT/build-compare/run-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RUN/A" "$RUN/B"
{
  echo "A = $BASE ($(git rev-parse --short "$BASE" 2>/dev/null || echo '?')) in $A_BUILD"
  echo "B = $HEAD_REV ($( [ "$HEAD_REV" = . ] && echo 'working tree' || git rev-parse --short "$HEAD_REV")) in $B_BUILD"
  echo "suites: $SUITES; rounds: $ROUNDS; bench args: $BENCH_ARGS"
} | tee "$RUN/README" >&2

run_one() {  # side build suite round
  local side=$1 build=$2 suite=$3 round=$4
  local out=$RUN/$side/$suite.$round.json
  # shellcheck disable=SC2086
  if ! "$build/workloads/asymnvm-bench" "$suite" $BENCH_ARGS --json "$out" \
      >"$RUN/$side/$suite.$round.log" 2>&1; then
    echo "bench-compare: $side $suite round $round failed; see $RUN/$side/$suite.$round.log" >&2
    tail -n 20 "$RUN/$side/$suite.$round.log" >&2
    exit 2
  fi
}

for ((r = 1; r <= ROUNDS; r++)); do
  for suite in $SUITES; do
    echo "bench-compare: round $r/$ROUNDS, $suite" >&2
    if ((r % 2)); then
      run_one A "$A_BUILD" "$suite" "$r"; run_one B "$B_BUILD" "$suite" "$r"
    else
      run_one B "$B_BUILD" "$suite" "$r"; run_one A "$A_BUILD" "$suite" "$r"
    fi
  done
done

rc=0
python3 "$ROOT/scripts/bench_compare.py" --min-slip "$MIN_SLIP" --json "$RUN/compare.json" \
  "$RUN/A" "$RUN/B" | tee "$RUN/compare.txt" || rc=$?
echo "bench-compare: reports and table in $RUN (worktrees stay in build-compare/ for the next" \
  "comparison; 'git worktree prune' after deleting them)" >&2
exit "$rc"
