#!/usr/bin/env bash
# The Debian packages (doc/operations.md §Packages), as README command (2) runs them:
#   cpack -G DEB in BUILD_DIR → asymnvm_*.deb and libasymnvm-dev_*.deb; both unpacked with
#   `dpkg -x` into a scratch root; the installed binaries answer --help; a back-end starts from the
#   packaged configuration (on a temp pool) and stops cleanly on SIGTERM; the default configs name
#   every option of their daemon; an application builds against the installed CMake package and
#   runs; `systemd-analyze verify` accepts the units (skipped, and said, when systemd-analyze is
#   missing).
# Usage: deb_test.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/asymnvm-deb.XXXXXX)
BPID=
cleanup() {
  [ -z "$BPID" ] || kill "$BPID" 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

(cd "$BUILD" && cpack -G DEB -B "$T/out" >"$T/cpack.log" 2>&1) || { cat "$T/cpack.log"; fail "cpack"; }
RT=$(ls "$T"/out/asymnvm_*.deb) || fail "no asymnvm package"
DEV=$(ls "$T"/out/libasymnvm-dev_*.deb) || fail "no libasymnvm-dev package"
for p in "$RT" "$DEV"; do
  echo "$(basename "$p"): $(du -h "$p" | cut -f1)"
  dpkg-deb -f "$p" Package Version Depends | sed 's/^/  /'
done
dpkg-deb -f "$RT" Depends | grep -q libprometheus-cpp || fail "asymnvm does not depend on prometheus-cpp"
dpkg-deb -f "$DEV" Depends | grep -q "asymnvm (=" || fail "libasymnvm-dev does not depend on asymnvm"
dpkg-deb -e "$RT" "$T/control"
grep -q "^/etc/asymnvm/backend-default.conf$" "$T/control/conffiles" ||
  fail "the default configurations are not conffiles"
R=$T/root
dpkg -x "$RT" "$R"
dpkg -x "$DEV" "$R"
for f in usr/bin/asymnvm-backend usr/bin/asymnvm-mirror usr/bin/asymnvm-kv usr/bin/asymnvm-ctl \
         lib/systemd/system/asymnvm-backend@.service lib/systemd/system/asymnvm-mirror@.service \
         lib/systemd/system/asymnvm-kv@.service etc/asymnvm/kv-default.conf \
         usr/lib/sysusers.d/asymnvm.conf usr/include/asymnvm/metrics.h; do
  [ -e "$R/$f" ] || fail "$f not in the packages"
done
LIBDIR=$(dirname "$(find "$R/usr/lib" -name 'libasymnvm_common.so' | head -1)")
[ -n "$LIBDIR" ] || fail "libasymnvm_common.so not in the packages"
CMAKEDIR=$(dirname "$(find "$R/usr/lib" -name AsymNVMConfig.cmake | head -1)")
[ -n "$CMAKEDIR" ] || fail "AsymNVMConfig.cmake not in libasymnvm-dev"
export LD_LIBRARY_PATH=$LIBDIR
for d in backend mirror kv; do
  "$R/usr/bin/asymnvm-$d" --help >"$T/$d.help" || fail "asymnvm-$d --help"
  # Every option of the daemon is in its default configuration (active or commented).
  for o in $(grep -oE '^  (-\w,)?--[a-z][a-z0-9-]*' "$T/$d.help" | sed 's/.*--//'); do
    case $o in help|config) continue ;; esac
    grep -qE "^#? ?$o = ?" "$R/etc/asymnvm/$d-default.conf" ||
      fail "option --$o of asymnvm-$d is not in $d-default.conf"
  done
done
"$R/usr/bin/asymnvm-ctl" --help >/dev/null || fail "asymnvm-ctl --help"
echo "installed binaries: --help OK; default configurations name every option"

# A back-end from the packaged configuration, its pool and ports moved to the scratch space (the
# command line overrides the file, as the units allow).
mkdir -p "$T/state"
"$R/usr/bin/asymnvm-backend" --config "$R/etc/asymnvm/backend-default.conf" \
  --pool "$T/state/pool" --size 64M --coord "dir:$T/state/coord" --listen tcp://127.0.0.1:0 \
  --log-listen tcp://127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$T/b.out" 2>"$T/b.err" &
BPID=$!
for i in $(seq 1 240); do
  grep -q '^metrics ' "$T/b.out" 2>/dev/null && break
  kill -0 "$BPID" 2>/dev/null || { cat "$T/b.err"; fail "packaged back-end exited"; }
  sleep 0.25
done
ADDR=$(awk '$1 == "listening" { print $2 }' "$T/b.out")
[ -n "$ADDR" ] || fail "packaged back-end did not serve"
"$R/usr/bin/asymnvm-ctl" status "$ADDR" >/dev/null || fail "asymnvm-ctl status of the packaged back-end"
kill -TERM "$BPID"
rc=0
wait "$BPID" || rc=$?
BPID=
[ $rc = 0 ] || { cat "$T/b.err"; fail "packaged back-end exit $rc on SIGTERM"; }
echo "packaged back-end: started from backend-default.conf, served, stopped with exit 0"

# An application against the installed CMake package.
cmake -S "$SRC/tests/package" -B "$T/consumer" -DCMAKE_PREFIX_PATH="$R/usr" >"$T/consumer.log" 2>&1 ||
  { cat "$T/consumer.log"; fail "configure against the installed package"; }
cmake --build "$T/consumer" -j2 >>"$T/consumer.log" 2>&1 || { cat "$T/consumer.log"; fail "build"; }
grep -q "$CMAKEDIR" "$T/consumer/CMakeCache.txt" || fail "the consumer did not use the installed package"
"$T/consumer/asymnvm_package_consumer" >/dev/null || fail "the consumer does not run"
if [ -x "$T/consumer/asymnvm_sdk_consumer" ]; then
  "$T/consumer/asymnvm_sdk_consumer" "$R/usr/bin/asymnvm-backend" >/dev/null ||
    fail "the SDK consumer against the packaged back-end"
fi
echo "application built against the installed CMake package: OK"

if command -v systemd-analyze >/dev/null; then
  # verify checks ExecStart's binary exists: point the units at the scratch root's.
  mkdir -p "$T/units"
  for u in "$R"/lib/systemd/system/*.service; do
    sed "s|/usr/bin/|$R/usr/bin/|" "$u" >"$T/units/$(basename "$u")"
  done
  out=$(cd "$T/units" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no \
    asymnvm-backend@x.service asymnvm-mirror@x.service asymnvm-kv@x.service 2>&1) ||
    fail "systemd-analyze verify: $out"
  if [ -n "$out" ]; then fail "systemd-analyze verify warns: $out"; fi
  echo "systemd-analyze verify: OK (3 units)"
else
  echo "systemd-analyze not available: units not verified"
fi
echo "deb_test: OK"
