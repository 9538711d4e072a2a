#!/usr/bin/env python3
"""Tests scripts/bench_compare.py on synthetic reports: what must slip slips, what is noise is not.

Run: bench_compare_test.py PATH/TO/bench_compare.py (ctest: bench_compare_test, label unit).
"""
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]


def write(dir_path, suite, rounds):
    """rounds: list of record lists, one per round."""
    os.makedirs(dir_path, exist_ok=True)
    for i, records in enumerate(rounds, 1):
        with open(os.path.join(dir_path, f"{suite}.{i}.json"), "w", encoding="utf-8") as f:
            json.dump({"suite": suite, "machine": {}, "results": records}, f)


def rec(ops, p99, rt, variant="rcb", extra=None):
    r = {"variant": variant, "config": {"structure": "stack"}, "ops_per_sec": ops, "p50_us": p99 / 2,
         "p99_us": p99, "round_trips_per_op": rt, "bytes_per_op": 100.0}
    r.update(extra or {})
    return r


def run(a_rounds, b_rounds):
    with tempfile.TemporaryDirectory() as tmp:
        write(os.path.join(tmp, "A"), "structures", a_rounds)
        write(os.path.join(tmp, "B"), "structures", b_rounds)
        out = os.path.join(tmp, "cmp.json")
        p = subprocess.run([sys.executable, SCRIPT, "--json", out, os.path.join(tmp, "A"),
                            os.path.join(tmp, "B")], capture_output=True, text=True, check=False)
        rows = json.load(open(out, encoding="utf-8"))["rows"] if os.path.exists(out) else []
        return p.returncode, p.stdout + p.stderr, {r["figure"]: r for r in rows}


failures = []


def expect(name, cond, detail):
    if not cond:
        failures.append(f"{name}: {detail}")


base = [[rec(10000, 200, 1.0)], [rec(10400, 210, 1.0)], [rec(9800, 190, 1.0)]]  # ~6 % noise

# Identical builds: no slip.
rc, out, rows = run(base, base)
expect("same", rc == 0, f"exit {rc}\n{out}")
expect("same ratio", abs(rows["ops_per_sec"]["ratio"] - 1.0) < 1e-9, rows.get("ops_per_sec"))

# Throughput 3 % lower, inside the 6 % noise: not a slip.
rc, out, rows = run(base, [[rec(r[0]["ops_per_sec"] * 0.97, 200, 1.0)] for r in base])
expect("noise", rc == 0 and not rows["ops_per_sec"]["slip"], f"exit {rc}\n{out}")

# Throughput 30 % lower: a slip, exit 1.
rc, out, rows = run(base, [[rec(r[0]["ops_per_sec"] * 0.7, 200, 1.0)] for r in base])
expect("throughput slip", rc == 1 and rows["ops_per_sec"]["slip"], f"exit {rc}\n{out}")
expect("SLIP printed", "SLIP" in out, out)

# One more round trip per op (an exact count): a slip although throughput is unchanged.
rc, out, rows = run(base, [[rec(r[0]["ops_per_sec"], 200, 2.0)] for r in base])
expect("round trip slip", rc == 1 and rows["round_trips_per_op"]["slip"], f"exit {rc}\n{out}")

# An extra sync per update: any field named *syncs* is an exact count.
a = [[rec(10000, 200, 1.0, extra={"syncs_per_op": 1.2})] for _ in range(3)]
b = [[rec(10000, 200, 1.0, extra={"syncs_per_op": 2.2})] for _ in range(3)]
rc, out, rows = run(a, b)
expect("sync slip", rc == 1 and rows["syncs_per_op"]["slip"], f"exit {rc}\n{out}")

# Better figures are never slips.
rc, out, rows = run(base, [[rec(r[0]["ops_per_sec"] * 2, 100, 0.5)] for r in base])
expect("better", rc == 0, f"exit {rc}\n{out}")

# p99 twice as high: a slip (lower is better).
rc, out, rows = run(base, [[rec(r[0]["ops_per_sec"], 400, 1.0)] for r in base])
expect("latency slip", rc == 1 and rows["p99_us"]["slip"], f"exit {rc}\n{out}")

# A record present on one side only is listed, not compared.
rc, out, rows = run(base, [r + [rec(1, 1, 1, variant="new")] for r in base])
expect("only in B", rc == 0 and "only in B" in out, f"exit {rc}\n{out}")

# No reports: usage error.
with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "A"))
    os.makedirs(os.path.join(tmp, "B"))
    p = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "A"), os.path.join(tmp, "B")],
                       capture_output=True, text=True, check=False)
    expect("empty", p.returncode == 2 and "no reports" in p.stderr, p.stderr)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("bench_compare_test: all cases passed")
