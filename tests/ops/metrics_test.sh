#!/usr/bin/env bash
# Prometheus metrics of the daemons (doc/operations.md §Metrics), against real processes:
#   promtool  — asymnvm-backend, asymnvm-mirror and asymnvm-kv each serve --metrics-listen; every
#               output passes `promtool check metrics`; the figures agree with `asymnvm-ctl status`
#               and with a known workload (N status requests, N Redis SETs → N keys);
#   prometheus — a real prometheus server (1 s scrape interval, temp dir, free port) scrapes a
#               back-end and a KV server and its HTTP query API returns their series.
# Usage: metrics_test.sh BUILD_DIR promtool|prometheus. Exit 77 (skipped) when promtool /
# prometheus / redis-cli are missing (scripts/setup.sh installs them).
set -euo pipefail
BUILD=$1
MODE=$2
BE=$BUILD/backend/asymnvm-backend
MI=$BUILD/mirror/asymnvm-mirror
KV=$BUILD/kv/asymnvm-kv
CTL=$BUILD/tools/asymnvm-ctl
for t in promtool curl redis-cli python3; do
  command -v $t >/dev/null || { echo "SKIP: $t missing"; exit 77; }
done
[ "$MODE" != prometheus ] || command -v prometheus >/dev/null || { echo "SKIP: prometheus missing"; exit 77; }
T=$(mktemp -d /tmp/asymnvm-metrics.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.err; do echo "--- $f"; tail -5 "$f"; done >&2; exit 1; }

# wait_line FILE KEY: the value of the first "KEY value" line of FILE (a daemon's stdout), waiting
# with growing sleeps up to 120 s.
wait_line() {
  local d=0.05 i
  for i in $(seq 1 200); do
    local v
    v=$(awk -v k="$2" '$1 == k { print $2; exit }' "$1" 2>/dev/null || true)
    if [ -n "$v" ]; then echo "$v"; return 0; fi
    sleep $d
    d=$(python3 -c "print(min($d * 1.5, 1.0))")
  done
  return 1
}
# metric TEXT NAME_WITH_LABELS: the value of that exact series in a scrape.
metric() { awk -v n="$2" '$1 == n { print $2; exit }' <<<"$1"; }
scrape() { curl -sf "http://$1/metrics"; }
check() {  # check NAME TEXT: promtool on one daemon's output
  local out
  if ! out=$(promtool check metrics <<<"$2" 2>&1); then
    echo "$2" | head -40 >&2
    fail "promtool check metrics on $1: $out"
  fi
  echo "promtool check metrics ($1): OK ($(grep -c '^asymnvm_' <<<"$2") samples)"
}

export ASYMNVM_LOG_LEVEL=warn
if [ "$MODE" = promtool ]; then
  # A mirror, then its primary (which copies the pool to it before it serves).
  "$MI" --pool "$T/m.pool" --coord none --listen tcp://127.0.0.1:0 --data-listen tcp://127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 --log-level info --log-format json >"$T/m.out" 2>"$T/m.err" &
  PIDS+=($!)
  MCTL=$(wait_line "$T/m.out" listening) || fail "mirror did not start"
  MMET=$(wait_line "$T/m.out" metrics) || fail "mirror printed no metrics address"
  "$BE" --pool "$T/b.pool" --size 64M --coord none --mirror "$MCTL" --metrics-listen 127.0.0.1:0 \
    --log-level info --log-format json >"$T/b.out" 2>"$T/b.err" &
  PIDS+=($!)
  BADDR=$(wait_line "$T/b.out" listening) || fail "backend did not start"
  BMET=$(wait_line "$T/b.out" metrics) || fail "backend printed no metrics address"
  N=7
  for i in $(seq 1 $N); do "$CTL" status "$BADDR" --json >"$T/status.json"; done
  B=$(scrape "$BMET") || fail "scrape $BMET"
  check asymnvm-backend "$B"
  # Known workload: N status requests (the scrape itself sends none).
  [ "$(metric "$B" 'asymnvm_backend_requests_total{type="status"}')" = "$N" ] ||
    fail "requests_total{status} = $(metric "$B" 'asymnvm_backend_requests_total{type="status"}'), want $N"
  [ "$(metric "$B" 'asymnvm_backend_request_duration_seconds_count{type="status"}')" = "$N" ] ||
    fail "request_duration_seconds_count{status} != $N"
  # Agreement with asymnvm-ctl status (taken after N-1 status requests: the same pool facts).
  for k in txns_applied:asymnvm_backend_txns_applied_total \
           mirrors_in_sync:asymnvm_backend_mirrors_in_sync \
           log_segments:asymnvm_backend_blog_segments; do
    want=$(python3 -c "import json,sys; print(json.load(open('$T/status.json'))['${k%%:*}'])")
    got=$(metric "$B" "${k##*:}")
    [ "$got" = "$want" ] || fail "${k##*:} = $got, asymnvm-ctl status ${k%%:*} = $want"
  done
  used=$(python3 -c "import json; print(json.load(open('$T/status.json'))['alloc']['blocks_used'])")
  [ "$(metric "$B" 'asymnvm_backend_alloc_blocks{state="used"}')" = "$used" ] || fail "alloc used"
  # Every msync the pool counted was timed: the histogram's count equals the sync counter (a few
  # scrapes: a background sync may fall between the two reads of one scrape).
  for try in 1 2 3; do
    S=$(scrape "$BMET") || fail "scrape $BMET"
    syncs=$(metric "$S" 'asymnvm_pm_syncs_total{component="backend"}')
    timed=$(metric "$S" 'asymnvm_pm_sync_duration_seconds_count{component="backend"}')
    [ -n "$syncs" ] && [ "$syncs" = "$timed" ] && break
  done
  [ -n "$syncs" ] && [ "$syncs" != 0 ] && [ "$syncs" = "$timed" ] ||
    fail "pm syncs $syncs, timed syncs $timed"
  [ "$(metric "$B" "asymnvm_backend_mirror_in_sync{mirror=\"$MCTL\"}")" = 1 ] ||
    fail "mirror $MCTL not in sync in the back-end's metrics"
  M=$(scrape "$MMET") || fail "scrape $MMET"
  check asymnvm-mirror "$M"
  [ "$(metric "$M" 'asymnvm_mirror_state{state="in-sync"}')" = 1 ] || fail "mirror state"

  # A stand-alone KV server with its Redis gateway: N SETs of distinct keys.
  "$KV" --pool "$T/kv.pool" --size 64M --coord none --resp-port 0 --metrics-listen 127.0.0.1:0 \
    --log-level info --log-format json >"$T/k.out" 2>"$T/k.err" &
  PIDS+=($!)
  RESP=$(wait_line "$T/k.out" resp) || fail "kv did not start"
  KMET=$(wait_line "$T/k.out" metrics) || fail "kv printed no metrics address"
  N=25
  for i in $(seq 1 $N); do echo "SET key:$i value-$i"; done |
    redis-cli -h "${RESP%:*}" -p "${RESP##*:}" >/dev/null
  redis-cli -h "${RESP%:*}" -p "${RESP##*:}" GET key:1 >/dev/null
  K=$(scrape "$KMET") || fail "scrape $KMET"
  check asymnvm-kv "$K"
  [ "$(metric "$K" 'asymnvm_resp_commands_total{command="set"}')" = "$N" ] ||
    fail "resp set calls = $(metric "$K" 'asymnvm_resp_commands_total{command="set"}'), want $N"
  [ "$(metric "$K" 'asymnvm_resp_commands_total{command="get"}')" = 1 ] || fail "resp get calls"
  [ "$(metric "$K" asymnvm_kv_keys)" = "$N" ] || fail "kv keys = $(metric "$K" asymnvm_kv_keys)"
  # A taken port is a clear start-up error.
  if "$KV" --pool "$T/kv2.pool" --coord none --resp-port -1 --metrics-listen "$KMET" \
      >/dev/null 2>"$T/taken.err"; then fail "second exposer on $KMET started"; fi
  grep -q "metrics-listen" "$T/taken.err" || fail "no clear error for a taken metrics port"
  if "$KV" --pool "$T/kv2.pool" --coord none --resp-port -1 --metrics-listen nonsense \
      >/dev/null 2>"$T/bad.err"; then fail "bad address accepted"; fi
  grep -q "not HOST:PORT" "$T/bad.err" || fail "no clear error for a malformed address"
  # --log-format json: every line each daemon logged is one JSON object with the five fields.
  for f in m b k; do
    python3 - "$T/$f.err" <<'PY' || fail "$f.err: not JSON log lines"
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
assert lines, "no log line at info level"
for l in lines:
    j = json.loads(l)
    assert list(j) == ["time", "level", "component", "pid", "message"], l
    assert j["level"] in ("debug", "info", "warn", "error"), l
PY
  done
  echo "metrics_test promtool: OK"
  exit 0
fi

# MODE=prometheus
"$BE" --pool "$T/b.pool" --size 64M --coord none --metrics-listen 127.0.0.1:0 --log-level warn \
  >"$T/b.out" 2>"$T/b.err" &
PIDS+=($!)
BADDR=$(wait_line "$T/b.out" listening) || fail "backend did not start"
BMET=$(wait_line "$T/b.out" metrics) || fail "backend printed no metrics address"
"$KV" --pool "$T/kv.pool" --size 64M --coord none --resp-port -1 --metrics-listen 127.0.0.1:0 \
  --log-level warn >"$T/k.out" 2>"$T/k.err" &
PIDS+=($!)
KMET=$(wait_line "$T/k.out" metrics) || fail "kv printed no metrics address"
"$CTL" status "$BADDR" >/dev/null
PORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
cat >"$T/prometheus.yml" <<CFG
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: asymnvm-backend
    static_configs: [{targets: ['$BMET']}]
  - job_name: asymnvm-kv
    static_configs: [{targets: ['$KMET']}]
CFG
promtool check config "$T/prometheus.yml" >/dev/null || fail "promtool check config"
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
  --web.listen-address="127.0.0.1:$PORT" --log.level=warn >"$T/prom.out" 2>"$T/prom.err" &
PIDS+=($!)
query() {
  curl -sf --get "http://127.0.0.1:$PORT/api/v1/query" --data-urlencode "query=$1" 2>/dev/null || true
}
found() {  # found QUERY: the API returned at least one series
  python3 -c "import json,sys
try: r = json.loads(sys.argv[1])
except Exception: sys.exit(1)
sys.exit(0 if r.get('status') == 'success' and r['data']['result'] else 1)" "$1"
}
deadline=$((SECONDS + 120))
ok=0
while [ $SECONDS -lt $deadline ]; do
  a=$(query 'asymnvm_backend_requests_total{job="asymnvm-backend",type="status"}')
  b=$(query 'asymnvm_kv_keys{job="asymnvm-kv"}')
  c=$(query 'up{job="asymnvm-kv"} == 1 and up{job="asymnvm-backend"} == 1 or up{job="asymnvm-kv"} == 1')
  if found "$a" && found "$b" && found "$c"; then ok=1; break; fi
  sleep 1
done
[ $ok = 1 ] || fail "prometheus returned no asymnvm series within 120 s: $a / $b"
echo "prometheus query asymnvm_backend_requests_total{type=\"status\"}: $a"
echo "prometheus query asymnvm_kv_keys: $b"
echo "metrics_test prometheus: OK"
