#!/usr/bin/env python3
"""Measure `asymnvm-ctl status` against a back-end whose OQ listener holds hostile connections.

    tools/handshake_flood.py --build build [--silent 500] [--garbage 500] [--rounds 5]

Starts build/backend/asymnvm-backend on a fresh pool, opens --silent connections that never
speak and --garbage ones that send 64 junk bytes, then runs `asymnvm-ctl status --timeout-ms 5000`
--rounds times and prints each wall time and exit code, then the same with no flood.
(doc/fabric.md §Handshake; a measurement, not a test.)
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time


def status(build, addr):
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(build, "tools/asymnvm-ctl"), "status", addr,
                        "--timeout-ms", "5000"], capture_output=True, text=True)
    return time.monotonic() - t0, r.returncode, r.stderr.strip().splitlines()[-1:] if r.returncode else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--silent", type=int, default=500)
    ap.add_argument("--garbage", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="asymnvm-flood-")
    be = subprocess.Popen([os.path.join(a.build, "backend/asymnvm-backend"), "--pool",
                           os.path.join(d, "p.pool"), "--size", "32M", "--log-level", "error"],
                          stdout=subprocess.PIPE, text=True)
    try:
        addr = be.stdout.readline().split()[1]
        host, port = addr[len("tcp://"):].rsplit(":", 1)
        for label, silent, garbage in (("no flood", 0, 0),
                                       (f"{a.silent} silent + {a.garbage} garbage", a.silent, a.garbage)):
            socks = []
            for i in range(silent + garbage):
                s = socket.create_connection((host, int(port)), timeout=10)
                if i >= silent:
                    try:
                        s.sendall(bytes((0xA5 ^ (i + j)) & 0xFF for j in range(64)))
                    except OSError:
                        pass
                socks.append(s)
            for r in range(a.rounds):
                t, rc, err = status(a.build, addr)
                print(f"{label}: round {r}: status exit {rc} in {t * 1000:.0f} ms {err}", flush=True)
            for s in socks:
                s.close()
    finally:
        be.terminate()
        be.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
