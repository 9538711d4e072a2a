#!/usr/bin/env python3
"""Compares asymnvm-bench JSON reports of two builds (A = base, B = head) run alternately.

Usage: bench_compare.py [--min-slip PCT] [--json OUT] A_DIR B_DIR

Each directory holds the reports of one build: `<suite>.<round>.json`, as written by
`asymnvm-bench SUITE --json FILE` (doc/tools.md). Records are matched across builds by
(suite, variant, config). For every numeric top-level field whose direction is known (below), the
table shows the median of A, the median of B, B / A, and the noise: the largest relative spread
((max - min) / median) that either build showed across its own rounds for that figure. A figure
*slips* when it moves the wrong way by more than max(noise, --min-slip); a count that is meant to
be exact (round trips, bytes, syncs, persists per operation) slips on any rise above 0.5 % when
neither build showed noise in it. Exit code: 0 no slip, 1 at least one slip, 2 bad input.

Only the standard library is used (Debian's python3).
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

# Direction of a figure, from its name. Checked in order; the first match decides.
HIGHER_BETTER = re.compile(r"(ops_per_sec|per_sec$|throughput|speedup|_ratio$|ratio_|mbps|gbps)")
LOWER_BETTER = re.compile(
    r"(_us$|_ms$|_ns$|_seconds$|_per_op$|_per_txn$|_per_update$|latency|cpu|lost|abort)")
# Figures that a run should reproduce exactly when the code does the same work.
EXACT = re.compile(r"(round_trips|bytes_per|syncs|persists|flushes|fences|rpcs|messages)_?")
SKIP = re.compile(r"^(variant|config|seed|threads|clients|ops|keys|duration.*|value_bytes|n|kills|pauses)$")


def direction(name):
    if SKIP.match(name):
        return 0
    if HIGHER_BETTER.search(name):
        return +1
    if LOWER_BETTER.search(name):
        return -1
    return 0


def load(dir_path):
    """Returns {(suite, variant, config_json): {field: [values per round]}}."""
    figures = {}
    files = sorted(glob.glob(os.path.join(dir_path, "*.json")))
    if not files:
        raise ValueError(f"no reports in {dir_path}")
    for path in files:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        suite = report.get("suite", os.path.basename(path).split(".")[0])
        for rec in report.get("results", []):
            key = (suite, str(rec.get("variant", "")),
                   json.dumps(rec.get("config", {}), sort_keys=True))
            slot = figures.setdefault(key, {})
            for field, value in rec.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                slot.setdefault(field, []).append(float(value))
    return figures


def spread(values):
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    if med == 0:
        return 0.0 if max(values) == min(values) else float("inf")
    return (max(values) - min(values)) / abs(med)


def compare(a, b, min_slip):
    rows = []
    for key in sorted(set(a) & set(b)):
        for field in sorted(set(a[key]) & set(b[key])):
            d = direction(field)
            if d == 0:
                continue
            va, vb = a[key][field], b[key][field]
            ma, mb = statistics.median(va), statistics.median(vb)
            noise = max(spread(va), spread(vb))
            if ma == 0:
                ratio = 1.0 if mb == 0 else float("inf")
            else:
                ratio = mb / ma
            # Relative change in the bad direction (positive = worse).
            worse = (1.0 - ratio) if d > 0 else (ratio - 1.0)
            exact = bool(EXACT.search(field))
            if exact and noise == 0:
                threshold = 0.005
            else:
                threshold = max(noise, min_slip)
            slip = worse > threshold
            rows.append({
                "suite": key[0], "variant": key[1], "config": json.loads(key[2]), "figure": field,
                "a_median": ma, "b_median": mb, "ratio": ratio, "noise": noise,
                "a_runs": va, "b_runs": vb, "better": "higher" if d > 0 else "lower",
                "slip": slip,
            })
    missing = sorted(set(a) ^ set(b))
    return rows, missing


def varying_keys(rows):
    """{(suite, variant): the config keys whose values differ between that variant's rows}: the
    keys that tell its rows apart (a structure name, a batch size), printed first."""
    by = {}
    for r in rows:
        by.setdefault((r["suite"], r["variant"]), []).append(r["config"])
    out = {}
    for key, cfgs in by.items():
        names = sorted({k for c in cfgs for k in c})
        out[key] = [k for k in names
                    if len({json.dumps(c.get(k), sort_keys=True) for c in cfgs}) > 1]
    return out


def short_config(cfg, first=()):
    if not cfg:
        return ""
    keys = [k for k in first if k in cfg] + [k for k in cfg if k not in first]
    text = ",".join(f"{k}={cfg[k]}" for k in keys)
    return text if len(text) <= 28 else text[:25] + "..."


def fmt(x):
    if x == float("inf"):
        return "inf"
    if abs(x) >= 1e5:
        return f"{x:.0f}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a_dir")
    ap.add_argument("b_dir")
    ap.add_argument("--min-slip", type=float, default=5.0,
                    help="smallest relative change (percent) called a slip (default 5)")
    ap.add_argument("--json", help="write the comparison rows to this file")
    ap.add_argument("--all", action="store_true", help="print every figure, not only headlines")
    args = ap.parse_args()
    try:
        a, b = load(args.a_dir), load(args.b_dir)
    except (OSError, ValueError) as e:
        print(f"bench-compare: {e}", file=sys.stderr)
        return 2
    rows, missing = compare(a, b, args.min_slip / 100.0)
    headline = re.compile(r"^(ops_per_sec|p50_us|p99_us|round_trips_per_op|bytes_per_op)$|syncs|ratio")
    shown = [r for r in rows if args.all or r["slip"] or headline.search(r["figure"])]
    varying = varying_keys(rows)
    print(f"{'suite':<11} {'variant':<22} {'config':<28} {'figure':<22} {'A':>10} {'B':>10} "
          f"{'B/A':>7} {'noise':>7}  verdict")
    for r in shown:
        verdict = "SLIP" if r["slip"] else ("better" if (r["ratio"] > 1) == (r["better"] == "higher")
                                            and r["ratio"] != 1 else "same")
        if not r["slip"]:
            worse = (1 - r["ratio"]) if r["better"] == "higher" else (r["ratio"] - 1)
            if abs(worse) <= max(r["noise"], args.min_slip / 100.0):
                verdict = "within noise"
        config = short_config(r["config"], varying[(r["suite"], r["variant"])])
        print(f"{r['suite']:<11} {r['variant'][:22]:<22} {config:<28} "
              f"{r['figure'][:22]:<22} {fmt(r['a_median']):>10} {fmt(r['b_median']):>10} "
              f"{fmt(r['ratio']):>7} {r['noise'] * 100:>6.1f}%  {verdict}")
    for key in missing:
        side = "A" if key in a else "B"
        print(f"only in {side}: {key[0]} {key[1]} {key[2]}")
    slips = [r for r in rows if r["slip"]]
    rounds = max((len(v) for fig in a.values() for v in fig.values()), default=0)
    print(f"\n{len(rows)} figures compared ({len(shown)} shown), {rounds} round(s) per build; "
          f"slips: {len(slips)} (a change worse than max(noise, {args.min_slip:g} %); "
          f"exact counts: any rise > 0.5 %)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "missing": [list(k) for k in missing]}, f, indent=1)
    return 1 if slips else 0


if __name__ == "__main__":
    sys.exit(main())
