#!/usr/bin/env bash
# The Redis test suite as a judge of the RESP gateway (doc/resp.md §Conformance).
#
#   scripts/redis-conformance.sh [--build DIR | --kv BINARY] [--units "type/string expire ..."]
#                                [--min-ratio R] [--json FILE] [--tests-out FILE] [--keep]
#
# Extracts Valkey's copy of the Redis Tcl test suite (../shared/conformance, BSD-3; never copied into
# this repository) into a temporary directory, starts a fresh asymnvm-kv (default options, fresh
# pool, --resp-port on a free port) and Debian's redis-server (no persistence, free port) as the
# baseline, runs each unit against both in external-server mode (flags as the suite's README says)
# and prints per unit: passed / failed / errors / skipped for both servers and our passes as % of
# redis's, then a total. failed = an assertion failed; errors = the test raised (an error reply
# where none was expected, a broken connection); a unit that does not finish (its runner exits
# before "done", or it exceeds the per-unit timeout) is marked ABORTED.
#   --min-ratio R   exit 1 when a unit's pass ratio (ours / redis's) is below R (0..1), or a unit
#                   aborts on our server but not on redis's
#   --json FILE     per-unit counts and, per server, the names of passed / failed tests
#   --tests-out F   the tests redis-server passes and asymnvm-kv does not, one per line, per unit
# Both servers are killed (by PID) on exit. Exit 77 when tclsh or redis-server is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build"
units="type/string type/incr expire keyspace protocol multi scan info-command quit"
KV=""
min_ratio=""
json=""
tests_out=""
keep=0
unit_timeout=${REDIS_CONFORMANCE_UNIT_TIMEOUT:-600}
suite=${REDIS_CONFORMANCE_SUITE:-"$root/../shared/conformance/valkey-tests-55bbbe0.tar.gz"}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --kv) KV=$2; shift 2 ;;
    --units) units=$2; shift 2 ;;
    --min-ratio) min_ratio=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --tests-out) tests_out=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "redis-conformance: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$suite" ] || suite=/work/shared/conformance/valkey-tests-55bbbe0.tar.gz
for tool in tclsh redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed (scripts/setup.sh)"; exit 77; }
done
[ -f "$suite" ] || { echo "SKIP: suite archive $suite not found"; exit 77; }
KV=${KV:-"$build/kv/asymnvm-kv"}
[ -x "$KV" ] || { echo "redis-conformance: $KV not built" >&2; exit 2; }

dir=$(mktemp -d /tmp/asymnvm-redis-conformance.XXXXXX)
kv_pid=""
redis_pid=""
stop() {
  local p=$1
  [ -n "$p" ] || return 0
  if kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  fi
  wait "$p" 2>/dev/null || true
}
cleanup() {
  stop "$kv_pid"
  stop "$redis_pid"
  if [ "$keep" = 1 ]; then echo "kept $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tar -xzf "$suite" -C "$dir"
src="$dir/valkey-tests"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# redis-server: no persistence, a free port, its own directory.
mkdir -p "$dir/redis"
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/redis" \
  --daemonize no >"$dir/redis/out" 2>&1 &
redis_pid=$!
# asymnvm-kv: a fresh pool, default options, the gateway on a free port.
mkdir -p "$dir/kv"
kport=$(free_port)
"$KV" --pool "$dir/kv/kv.pool" --resp-port "$kport" --log-level warn >"$dir/kv/out" 2>"$dir/kv/err" &
kv_pid=$!
for _ in $(seq 1 600); do
  if redis-cli -p "$rport" PING 2>/dev/null | grep -q PONG &&
     grep -q '^resp ' "$dir/kv/out" 2>/dev/null; then break; fi
  kill -0 "$kv_pid" 2>/dev/null || { echo "asymnvm-kv exited:"; tail -20 "$dir/kv/err"; exit 1; }
  kill -0 "$redis_pid" 2>/dev/null || { echo "redis-server exited:"; tail -20 "$dir/redis/out"; exit 1; }
  sleep 0.1
done
kport=$(awk '/^resp /{n=split($2,a,":"); print a[n]}' "$dir/kv/out")
[ -n "$kport" ] || { echo "asymnvm-kv printed no resp line"; exit 1; }
echo "redis-server $(redis-server --version | sed -E 's/.*v=([^ ]*).*/\1/') pid $redis_pid port $rport;" \
  "asymnvm-kv pid $kv_pid port $kport; suite $(basename "$suite")" >&2

run_unit() {  # server-name port unit baseport (the runners' own ports: distinct for the two)
  local name=$1 port=$2 unit=$3 base=$4 log
  log="$dir/$name.$(echo "$unit" | tr / _).log"
  ( cd "$src" && timeout -k 10 "$unit_timeout" tclsh tests/test_helper.tcl --host 127.0.0.1 \
      --port "$port" --singledb --durable --ignore-encoding --ignore-digest --clients 1 \
      --timeout "$unit_timeout" --baseport "$base" --portcount 1000 --single "unit/$unit" --tags -needs:debug --tags -needs:repl \
      --tags -needs:config-maxmemory --tags -needs:save --tags -needs:reset ) >"$log" 2>&1 || true
}

# The runners' own listening ports start at these bases; an offset per run keeps two runs of this
# script at once (ctest -j2) off each other's ports (the suite takes a free one in a window of 32).
port_off=$(( ($$ % 20) * 100 ))
for unit in $units; do
  echo "running unit/$unit ..." >&2
  # The two servers at once: they are independent and the suite mostly waits on round trips.
  run_unit redis "$rport" "$unit" $((21111 + port_off)) &
  rp=$!
  run_unit asymnvm "$kport" "$unit" $((23111 + port_off))
  wait "$rp" || true
  if ! kill -0 "$kv_pid" 2>/dev/null; then echo "asymnvm-kv died during unit/$unit" >&2; fi
done

python3 "$here/redis_conformance.py" --dir "$dir" --units "$units" \
  ${min_ratio:+--min-ratio "$min_ratio"} ${json:+--json "$json"} ${tests_out:+--tests-out "$tests_out"}
