#!/usr/bin/env bash
# Acceptance of the RESP gateway with real Redis clients no one here wrote (redis-tools):
#   acceptance_test.sh ASYMNVM_KV_BINARY cli        redis-cli: interactive (pty), --pipe, --scan,
#                                                    --latency -i, --stat, errors keep the connection
#   acceptance_test.sh ASYMNVM_KV_BINARY benchmark  redis-benchmark -t ping,set,get,incr,mset at
#                                                    -P 1 and -P 16: no warning or error in its output
# Starts its own asymnvm-kv (by PID, on a temporary pool, ephemeral ports) and stops it with SIGTERM.
# Waits for observable state with generous deadlines; never asserts on time.
set -euo pipefail
KV=$1
MODE=$2
N=${RESP_BENCH_N:-200}
for tool in redis-cli redis-benchmark script timeout; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed (scripts/setup.sh installs redis-tools)"; exit 77; }
done
dir=$(mktemp -d /tmp/asymnvm-resp-accept.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server stderr:"; tail -20 "$dir/err" || true; exit 1; }

"$KV" --pool "$dir/kv.pool" --size 64M --resp-port 0 --log-level warn >"$dir/out" 2>"$dir/err" &
pid=$!
for _ in $(seq 1 600); do
  grep -q '^resp ' "$dir/out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || fail "asymnvm-kv exited before serving"
  sleep 0.1
done
grep -q '^resp ' "$dir/out" || fail "no 'resp' line from asymnvm-kv within 60 s"
PORT=$(awk '/^resp /{n=split($2,a,":"); print a[n]}' "$dir/out")
echo "asymnvm-kv pid $pid, RESP port $PORT"
cli() { redis-cli -p "$PORT" "$@"; }

if [ "$MODE" = cli ]; then
  [ "$(cli PING)" = PONG ] || fail "PING"
  # Interactive mode on a pseudo-terminal (TERM=dumb: linenoise reads plain lines). It asks
  # COMMAND DOCS for its help, which `help get` prints.
  out=$(printf 'SET greeting hello\nGET greeting\nhelp get\nNOSUCHCMD x\nINCR greeting\nQUIT\n' |
        TERM=dumb timeout 30 script -qfc "redis-cli -p $PORT" /dev/null | tr -d '\r' | sed -E 's/\x1b\[[0-9;]*m//g')
  echo "$out" | grep -q '> OK' || fail "interactive SET: $out"
  echo "$out" | grep -q '> "hello"' || fail "interactive GET: $out"
  echo "$out" | grep -q 'summary: Returns the string value of a key.' || fail "interactive help: $out"
  echo "$out" | grep -q "(error) ERR unknown command 'NOSUCHCMD'" || fail "unknown command: $out"
  echo "$out" | grep -q '(error) ERR value is not an integer' || fail "INCR error: $out"
  # --pipe bulk load of RESP-encoded commands.
  : >"$dir/pipe2.resp"
  for i in $(seq 1 200); do
    k="pipe:$i"; v="value-$i"
    printf '*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n' ${#k} "$k" ${#v} "$v" >>"$dir/pipe2.resp"
  done
  pipe_out=$(cli --pipe <"$dir/pipe2.resp" 2>&1)
  echo "$pipe_out" | grep -q 'errors: 0, replies: 200' || fail "--pipe: $pipe_out"
  [ "$(cli GET pipe:123)" = value-123 ] || fail "GET after --pipe"
  # --scan over every shard.
  # --scan over every shard: each key exactly once on a static keyspace (tools count its output).
  n=$(cli --scan --pattern 'pipe:*' | wc -l)
  [ "$n" = 200 ] || fail "--scan returned $n lines for 200 keys"
  [ "$(cli --scan --pattern 'pipe:*' | sort -u | wc -l)" = 200 ] || fail "--scan missed keys"
  [ "$(cli --scan | wc -l)" = 201 ] || fail "--scan of every key: $(cli --scan | wc -l), want 201"
  [ "$(cli DBSIZE)" = 201 ] || fail "DBSIZE $(cli DBSIZE), want 201"
  # --latency for a bounded time (-i 1 with --raw prints one line and exits).
  lat=$(timeout 30 redis-cli -p "$PORT" --latency -i 1 --raw </dev/null)
  echo "$lat" | grep -Eq '^[0-9]+ [0-9]+ [0-9.]+ [0-9]+$' || fail "--latency: $lat"
  # --stat: two samples, then stop it.
  stat=$(TERM=dumb timeout 2 script -qfc "redis-cli -p $PORT --stat -i 1" /dev/null </dev/null | tr -d '\r' || true)
  echo "$stat" | grep -Eq '^201 +[0-9]' || fail "--stat: $stat"
  # Oversized bulk length (Redis's "$2000000000"): answered at once, without waiting for the
  # payload, then the connection closes (as Redis does); the server serves the next one.
  exec 4<>/dev/tcp/127.0.0.1/"$PORT"
  printf '*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000000\r\n' >&4
  read -r -t 30 line1 <&4 || fail "no reply to an oversized bulk header"
  if read -r -t 30 line2 <&4; then fail "connection still open after a protocol error: $line2"; fi
  exec 4>&-
  echo "$line1" | grep -q '^-ERR Protocol error: invalid bulk length' || fail "oversized: $line1"
  [ "$(cli PING)" = PONG ] || fail "PING after a protocol error"
  echo "PASS cli"
elif [ "$MODE" = benchmark ]; then
  for P in 1 16; do
    out=$(redis-benchmark -p "$PORT" -t ping,set,get,incr,mset -n "$N" -c 20 -P "$P" -q 2>&1 |
          tr '\r' '\n' | grep -v 'rps=' | grep -v '^ *$')
    echo "-P $P:"; echo "$out"
    echo "$out" | grep -Eiq 'warn|err|could not' && fail "redis-benchmark -P $P reported: $out"
    for t in PING_INLINE PING_MBULK SET GET INCR 'MSET (10 keys)'; do
      echo "$out" | grep -Fq "$t: " || fail "redis-benchmark -P $P: no result for $t"
    done
  done
  [ "$(cli GET counter:__rand_int__)" -ge 1 ] || fail "INCR counter missing"
  echo "PASS benchmark"
else
  echo "usage: $0 ASYMNVM_KV cli|benchmark"; exit 2
fi
