#!/usr/bin/env bash
# asymnvm-ctl cluster against a real cluster (doc/operations.md §Cluster view): one back-end with
# one mirror and three KV servers at rf 3, all on one embedded coordinator. Healthy → exit
# 0 and the table names them; one KV server killed → exit 7 (degraded: shards with fewer synced
# backups than rf - 1); the mirror killed too → exit 8 (the group's only mirror out of sync).
# Usage: cluster_test.sh BUILD_DIR. Prints the table of each state (the note's example output).
set -euo pipefail
BUILD=$1
BE=$BUILD/backend/asymnvm-backend
MI=$BUILD/mirror/asymnvm-mirror
KV=$BUILD/kv/asymnvm-kv
CTL=$BUILD/tools/asymnvm-ctl
T=$(mktemp -d /tmp/asymnvm-cluster.XXXXXX)
COORD="dir:$T/coord"
declare -A PID
cleanup() {
  for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PID[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  "$CTL" cluster --coord "$COORD" >&2 || true
  for f in "$T"/*.err; do echo "--- $f" >&2; tail -5 "$f" >&2; done
  exit 1
}
wait_line() {  # wait_line FILE KEY: value of the first "KEY value" line, up to ~120 s
  local d=0.05 i v
  for i in $(seq 1 200); do
    v=$(awk -v k="$2" '$1 == k { print $2; exit }' "$1" 2>/dev/null || true)
    if [ -n "$v" ]; then echo "$v"; return 0; fi
    sleep $d
    d=$(awk -v d=$d 'BEGIN { d *= 1.5; print (d > 1 ? 1 : d) }')
  done
  return 1
}
# wait_rc CODE: poll `asymnvm-ctl cluster` until it exits CODE (growing sleeps, 180 s).
wait_rc() {
  local d=0.1 end=$((SECONDS + 180)) rc
  while [ $SECONDS -lt $end ]; do
    rc=0
    "$CTL" cluster --coord "$COORD" --timeout-ms 2000 >"$T/view.txt" 2>&1 || rc=$?
    [ $rc = "$1" ] && return 0
    sleep $d
    d=$(awk -v d=$d 'BEGIN { d *= 1.5; print (d > 2 ? 2 : d) }')
  done
  echo "last exit $rc:" >&2; cat "$T/view.txt" >&2
  return 1
}
export ASYMNVM_LOG_LEVEL=warn
mkdir -p "$T/m" "$T/b" "$T/k1" "$T/k2" "$T/k3"
"$MI" --pool "$T/m/pool" --coord "$COORD" --name mirror-1 --listen tcp://127.0.0.1:0 \
  --data-listen tcp://127.0.0.1:0 --no-promote --log-level warn >"$T/m.out" 2>"$T/m.err" &
PID[m]=$!
MCTL=$(wait_line "$T/m.out" listening) || fail "mirror did not start"
"$BE" --pool "$T/b/pool" --size 64M --coord "$COORD" --name primary-1 --mirror "$MCTL" \
  --mirror-timeout-ms 1000 --log-level warn >"$T/b.out" 2>"$T/b.err" &
PID[b]=$!
BADDR=$(wait_line "$T/b.out" listening) || fail "backend did not start"
for i in 1 2 3; do
  "$KV" --pool "$T/k$i/pool" --size 64M --coord "$COORD" --cluster shop --rf 3 --shards 4 \
    --resp-port -1 --metrics-listen 127.0.0.1:0 --log-level warn >"$T/k$i.out" 2>"$T/k$i.err" &
  PID[k$i]=$!
done
declare -A KMET
for i in 1 2 3; do
  wait_line "$T/k$i.out" listening >/dev/null || fail "kv $i did not start"
  KMET[$i]=$(wait_line "$T/k$i.out" metrics) || fail "kv $i printed no metrics address"
done
# metric SERVER NAME_WITH_LABELS: one series of a KV server's scrape (0 when absent).
metric() {
  curl -sf "http://${KMET[$1]}/metrics" | awk -v n="$2" '$1 == n { v = $2 } END { print v + 0 }'
}
# led_total SERVERS...: the shards the given servers say they lead, summed.
led_total() {
  local n=0 i
  for i in "$@"; do n=$((n + $(metric "$i" asymnvm_kv_shards_led))); done
  echo $n
}
wait_rc 0 || fail "cluster never became healthy (exit 0)"
echo "=== healthy (exit 0)"
cat "$T/view.txt"
grep -q "primary-1" "$T/view.txt" || fail "the table does not name the group's primary"
grep -q "$MCTL=in-sync" "$T/view.txt" || fail "the table does not show the mirror in sync"
grep -q "KV CLUSTER shop" "$T/view.txt" || fail "the table does not show the KV cluster"
"$CTL" cluster --coord "$COORD" --json >"$T/view.json"
python3 - "$T/view.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
assert v["health"] == "healthy" and v["exit_code"] == 0, v["problems"]
g = v["backend_groups"]
assert len(g) == 1 and g[0]["term"] >= 1 and g[0]["mirrors_in_sync"] == 1, g
k = v["kv_clusters"]
assert len(k) == 1 and k[0]["rf"] == 3 and len(k[0]["shards"]) == 4, k
for s in k[0]["shards"]:
    assert s["primary_live"] and s["synced_backups"] == 2, s
PY
# The servers' metrics say the same: every shard led once, each with 2 synced backups.
for i in 1 2 3; do
  out=$(curl -sf "http://${KMET[$i]}/metrics") || fail "scrape kv $i"
  pc=$(promtool check metrics <<<"$out" 2>&1) || fail "promtool check metrics on kv $i: $pc"
  if grep '^asymnvm_kv_synced_backups{' <<<"$out" | grep -qv ' 2$'; then
    fail "kv $i: a led shard without 2 synced backups: $(grep synced_backups <<<"$out")"
  fi
done
[ "$(led_total 1 2 3)" = 4 ] || fail "asymnvm_kv_shards_led sums to $(led_total 1 2 3), want 4"
K3_LED=$(metric 3 asymnvm_kv_shards_led)
PROMOTED0=$(($(metric 1 asymnvm_kv_promotions_total) + $(metric 2 asymnvm_kv_promotions_total)))

kill -KILL "${PID[k3]}"
wait "${PID[k3]}" 2>/dev/null || true
unset 'PID[k3]'
wait_rc 7 || fail "one KV server killed: exit 7 (degraded) never came"
echo "=== one KV server killed (exit 7)"
cat "$T/view.txt"
# Its shards failed over: the two survivors lead all 4 (once they adopted the new map), and count
# the promotions.
end=$((SECONDS + 120))
while [ "$(led_total 1 2)" != 4 ] && [ $SECONDS -lt $end ]; do sleep 0.2; done
[ "$(led_total 1 2)" = 4 ] || fail "after the kill the survivors lead $(led_total 1 2) shards"
PROMOTED=$(($(metric 1 asymnvm_kv_promotions_total) + $(metric 2 asymnvm_kv_promotions_total)))
[ $((PROMOTED - PROMOTED0)) -ge "$K3_LED" ] ||
  fail "asymnvm_kv_promotions_total rose by $((PROMOTED - PROMOTED0)), kv 3 led $K3_LED"
echo "metrics: kv 3 led $K3_LED shards; survivors' promotions_total +$((PROMOTED - PROMOTED0))"

kill -KILL "${PID[m]}"
wait "${PID[m]}" 2>/dev/null || true
unset 'PID[m]'
wait_rc 8 || fail "mirror killed: exit 8 (group without an in-sync mirror) never came"
echo "=== and the mirror killed (exit 8)"
cat "$T/view.txt"
echo "cluster_test: OK"
