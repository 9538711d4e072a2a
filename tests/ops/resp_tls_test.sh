#!/usr/bin/env bash
# TLS on the Redis gateway of asymnvm-kv (doc/resp.md §TLS), with the real redis-cli against real
# daemons and certificates made here by the openssl command line (a throwaway CA, a server and a
# client certificate, and a second CA that the server does not trust):
#   1. --tls-port beside --resp-port, tls-auth-clients yes, the TLS options from a --config file:
#      SET/GET, 1000 pipelined SETs (--pipe), a 1 MiB value both ways (many TLS records), 8 MiB
#      of replies to a Python ssl client reading through a 4 KiB window (writes that wait for the
#      socket: resp_tls_slow_reader.py); the plain port sees the same data; a client without a
#      certificate is refused (handshake) and one with a certificate of another CA too; plaintext
#      on the TLS port closes that connection with a log line; a client that never finishes its
#      handshake does not hold the (single) loop thread; after each, the server still serves.
#   2. --resp-port -1 --tls-auth-clients optional: only the TLS endpoint is printed; clients with
#      and without a certificate are served, one with a certificate of an untrusted CA is refused.
#   3. Start-up errors: a key that does not match the certificate, a missing key file, a file that
#      is not a certificate, a missing CA file: a clear message and exit status 1; --tls-port
#      without a certificate: exit status 2.
# Usage: resp_tls_test.sh BUILD_DIR. Exit 77 (skipped) when redis-cli or openssl is missing
# (scripts/setup.sh installs both).
set -euo pipefail
BUILD=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
KV=$BUILD/kv/asymnvm-kv
for t in redis-cli openssl python3; do
  command -v $t >/dev/null || { echo "SKIP: $t missing"; exit 77; }
done
T=$(mktemp -d /tmp/asymnvm-tls.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.err; do echo "--- $f"; tail -5 "$f"; done >&2; exit 1; }

# wait_line FILE KEY PID: the value of the first "KEY value" line of FILE (the stdout of daemon
# PID), waiting with growing sleeps up to ~120 s while the daemon runs.
wait_line() {
  local d=0.05 i
  for i in $(seq 1 200); do
    local v
    v=$(awk -v k="$2" '$1 == k { print $2; exit }' "$1" 2>/dev/null || true)
    if [ -n "$v" ]; then echo "$v"; return 0; fi
    kill -0 "$3" 2>/dev/null || return 1
    sleep $d
    d=$(python3 -c "print(min($d * 1.5, 1.0))")
  done
  return 1
}

# --- Certificates (EC P-256: quick to make) ---------------------------------------------------
cd "$T"
EC=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
for ca in ca other; do
  openssl req -x509 "${EC[@]}" -keyout $ca.key -out $ca.crt -days 2 -subj "/CN=asymnvm test $ca" \
    2>>openssl.log || fail "openssl: CA $ca"
done
cert() {  # cert NAME CA
  openssl req "${EC[@]}" -keyout $1.key -out $1.csr -subj "/CN=$1" 2>>openssl.log &&
    openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key -CAcreateserial -out $1.crt -days 2 \
      -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost') 2>>openssl.log ||
    fail "openssl: certificate $1"
}
cert server ca
cert client ca
cert stranger other

export ASYMNVM_LOG_LEVEL=info
# cli PORT [redis-cli args...]: a TLS redis-cli with the client certificate (bounded wait).
cli() { local p=$1; shift; timeout 60 redis-cli --tls --cacert ca.crt --cert client.crt --key client.key -p "$p" "$@"; }
alive() { kill -0 "$1" 2>/dev/null || fail "asymnvm-kv exited"; }

# --- 1. TLS beside the plain port, client certificates required, options from --config -------
cat >a.conf <<EOF
tls-port = 0
tls-cert-file = $T/server.crt
tls-key-file = $T/server.key
tls-ca-cert-file = $T/ca.crt
tls-auth-clients = yes
EOF
"$KV" --pool a.pool --size 64M --coord none --resp-port 0 --config a.conf --log-level info \
  >a.out 2>a.err &
A=$!
PIDS+=($A)
RESP=$(wait_line a.out resp $A) || fail "kv did not start"
TLS=$(wait_line a.out tls $A) || fail "kv printed no tls endpoint"
PT=${TLS##*:}
PP=${RESP##*:}
[ "$PT" != "$PP" ] || fail "TLS and plain port are the same ($PT)"

[ "$(cli $PT set greeting hello)" = OK ] || fail "TLS SET"
[ "$(cli $PT get greeting)" = hello ] || fail "TLS GET"
[ "$(timeout 60 redis-cli -p $PP get greeting)" = hello ] || fail "plain port does not see the TLS SET"
for i in $(seq 1 1000); do printf 'SET key:%d value:%d\r\n' $i $i; done >cmds.txt
cli $PT --pipe <cmds.txt >pipe.out 2>&1 || fail "redis-cli --pipe: $(cat pipe.out)"
grep -q "errors: 0, replies: 1000" pipe.out || fail "pipe: $(cat pipe.out)"
[ "$(cli $PT get key:777)" = value:777 ] || fail "pipelined SET key:777 not read back"
[ "$(timeout 60 redis-cli -p $PP get key:1000)" = value:1000 ] || fail "pipelined key on the plain port"
# 1 MiB value both ways (printable, no newline: redis-cli -x sends it verbatim).
head -c 786432 /dev/urandom | base64 -w0 >big.txt
[ "$(cli $PT -x set big <big.txt)" = OK ] || fail "1 MiB SET"
cli $PT --raw get big >big.got || fail "1 MiB GET"
truncate -s -1 big.got  # --raw's newline
cmp -s big.txt big.got || fail "1 MiB value differs after the round trip ($(stat -c %s big.got) bytes)"
# 8 pipelined GETs of it through a 4 KiB receive window: the server's TLS writes wait for the
# socket again and again (Python's ssl module, the one redis-py's ssl=True uses).
timeout 120 python3 "$HERE/resp_tls_slow_reader.py" $PT ca.crt client.crt client.key big big.txt 8 ||
  fail "slow TLS reader"
echo "TLS: SET/GET, 1000 pipelined SETs, 1 MiB round trip, slow reader: OK"

# No client certificate: the handshake fails, the command never runs, the server goes on.
timeout 60 redis-cli --tls --cacert ca.crt -p $PT set nocert x >nocert.out 2>&1 || true
! grep -qx OK nocert.out || fail "a client without a certificate was served"
# A certificate from a CA the server does not trust.
timeout 60 redis-cli --tls --cacert ca.crt --cert stranger.crt --key stranger.key -p $PT \
  set stranger x >stranger.out 2>&1 || true
! grep -qx OK stranger.out || fail "an untrusted client certificate was accepted"
alive $A
[ -z "$(timeout 60 redis-cli -p $PP get nocert)" ] || fail "the refused client's SET ran"
[ -z "$(timeout 60 redis-cli -p $PP get stranger)" ] || fail "the untrusted client's SET ran"
grep -q "TLS handshake failed.*peer did not return a certificate" a.err ||
  fail "no log line for the client without a certificate"
grep -q "TLS handshake failed.*certificate verify failed" a.err ||
  fail "no log line for the untrusted client certificate"
[ "$(cli $PT get greeting)" = hello ] || fail "TLS port stopped serving after refused clients"
echo "TLS: clients without / with an untrusted certificate refused: OK"

# Plaintext on the TLS port: the connection is closed (cat ends: EOF or reset), with a log line.
exec 3<>/dev/tcp/127.0.0.1/$PT
printf 'PING\r\n' >&3
rc=0
timeout 60 cat <&3 >plain.got 2>/dev/null || rc=$?
exec 3<&-
[ $rc -ne 124 ] || fail "plaintext on the TLS port: the connection stayed open"
! grep -q PONG plain.got || fail "plaintext on the TLS port was answered"
grep -q "TLS handshake failed.*wrong version number" a.err || fail "no log line for plaintext"
alive $A

# A handshake that never completes (the first 3 bytes of a record) holds no loop thread: with the
# one loop thread (--resp-threads 1, the default) other clients still get answers meanwhile.
exec 4<>/dev/tcp/127.0.0.1/$PT
printf '\x16\x03\x01' >&4
[ "$(cli $PT get greeting)" = hello ] || fail "a stalled handshake blocked the loop"
[ "$(timeout 60 redis-cli -p $PP get greeting)" = hello ] || fail "a stalled handshake blocked the plain port"
exec 4<&-
[ "$(cli $PT get greeting)" = hello ] || fail "TLS port after the stalled handshake"
echo "TLS: plaintext and a stalled handshake: closed / waiting, server serving: OK"
kill $A
wait $A || fail "asymnvm-kv did not stop cleanly"

# --- 2. TLS only, client certificates optional ------------------------------------------------
"$KV" --pool b.pool --size 64M --coord none --resp-port -1 --tls-port 0 \
  --tls-cert-file server.crt --tls-key-file server.key --tls-ca-cert-file ca.crt \
  --tls-auth-clients optional >b.out 2>b.err &
B=$!
PIDS+=($B)
TLS=$(wait_line b.out tls $B) || fail "kv (TLS only) did not start"
PT=${TLS##*:}
! grep -q '^resp ' b.out || fail "--resp-port -1 printed a resp endpoint"
[ "$(timeout 60 redis-cli --tls --cacert ca.crt -p $PT set anon 1)" = OK ] ||
  fail "optional: a client without a certificate was refused"
[ "$(cli $PT get anon)" = 1 ] || fail "optional: a client with a certificate was refused"
timeout 60 redis-cli --tls --cacert ca.crt --cert stranger.crt --key stranger.key -p $PT \
  get anon >stranger2.out 2>&1 || true
! grep -qx 1 stranger2.out || fail "optional: an untrusted certificate was accepted"
alive $B
echo "TLS only, tls-auth-clients optional: OK"
kill $B
wait $B || fail "asymnvm-kv (TLS only) did not stop cleanly"

# --- 3. Start-up errors -------------------------------------------------------------------------
start_err() {  # start_err WANT_STATUS PATTERN ARGS...: the daemon must exit WANT_STATUS saying PATTERN
  local want=$1 pat=$2 rc=0
  shift 2
  timeout 120 "$KV" --pool c.pool --size 64M --coord none --resp-port 0 "$@" >c.out 2>c.err || rc=$?
  [ $rc -eq "$want" ] || fail "$* exited $rc, want $want: $(cat c.err)"
  grep -q "$pat" c.err || fail "$*: no clear message ($pat): $(cat c.err)"
  ! grep -q '^listening' c.out || fail "$*: started serving"
}
TLSF=(--tls-port 0 --tls-cert-file server.crt --tls-ca-cert-file ca.crt)
start_err 1 "tls-key-file '.*client.key': does not match tls-cert-file" "${TLSF[@]}" --tls-key-file client.key
start_err 1 "tls-key-file '.*missing.key': No such file" "${TLSF[@]}" --tls-key-file missing.key
start_err 1 "tls-key-file '.*ca.crt': not an unencrypted PEM private key" "${TLSF[@]}" --tls-key-file ca.crt
start_err 1 "tls-cert-file '.*server.key': not a PEM certificate" --tls-port 0 --tls-cert-file server.key \
  --tls-key-file server.key --tls-ca-cert-file ca.crt
start_err 1 "tls-ca-cert-file '.*nope.crt': No such file" --tls-port 0 --tls-cert-file server.crt \
  --tls-key-file server.key --tls-ca-cert-file nope.crt
start_err 1 "tls-ca-cert-file is required" --tls-port 0 --tls-cert-file server.crt --tls-key-file server.key
start_err 2 "needs --tls-cert-file and --tls-key-file" --tls-port 0
echo "TLS start-up errors: OK"
echo PASS
