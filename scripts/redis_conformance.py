#!/usr/bin/env python3
"""Parses the Redis test suite's output for redis-conformance.sh: one log per server and unit."""
import argparse
import collections
import json
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STATUS = re.compile(r"^\[(ok|err|skip|ignore|exception|timeout)\]: (.*)$")
DONE = re.compile(r"^\[\d+/\d+ done\]: ")
OK_TIME = re.compile(r" \(\d+ ms\)$")


def parse(path):
    """Returns dict: passed/failed/errors/skipped name lists and aborted flag."""
    r = {"passed": [], "failed": [], "errors": [], "skipped": [], "aborted": True, "abort_reason": ""}
    try:
        with open(path, errors="replace") as f:
            lines = [ANSI.sub("", l.rstrip("\n")) for l in f]
    except OSError:
        r["abort_reason"] = "no output"
        return r
    i = 0
    while i < len(lines):
        line = lines[i]
        if DONE.match(line):
            r["aborted"] = False
        m = STATUS.match(line)
        if not m:
            i += 1
            continue
        kind, text = m.groups()
        if kind == "ok":
            r["passed"].append(OK_TIME.sub("", text))
        elif kind in ("skip", "ignore"):
            r["skipped"].append(text)
        elif kind == "err":
            # "NAME in FILE", then the message; a raised error (not an assertion) carries its
            # Tcl stack trace ("while executing").
            name = re.sub(r" in tests/\S+$", "", text)
            j = i + 1
            body = []
            while j < len(lines) and not STATUS.match(lines[j]) and not DONE.match(lines[j]):
                body.append(lines[j])
                j += 1
            raised = any("while executing" in b or "invoked from within" in b for b in body)
            msg = body[0].strip() if body else ""
            (r["errors"] if raised else r["failed"]).append(name + (" -- " + msg[:160] if msg else ""))
            i = j
            continue
        elif kind in ("exception", "timeout"):
            r["abort_reason"] = (text + " " + " ".join(lines[i + 1:i + 3]))[:300]
        i += 1
    if r["aborted"] and not r["abort_reason"]:
        r["abort_reason"] = "the runner stopped before the unit's end (timeout or crash)"
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--units", required=True)
    ap.add_argument("--min-ratio", type=float)
    ap.add_argument("--json")
    ap.add_argument("--tests-out")
    a = ap.parse_args()
    units = a.units.split()
    rows = []
    tot = collections.Counter()
    bad = []
    missing = []
    report = {"units": {}}
    for u in units:
        f = u.replace("/", "_")
        red = parse(f"{a.dir}/redis.{f}.log")
        our = parse(f"{a.dir}/asymnvm.{f}.log")
        rp, op = len(red["passed"]), len(our["passed"])
        ratio = (op / rp) if rp else (1.0 if op == 0 else 1.0)
        for k, s in (("r", red), ("a", our)):
            for c in ("passed", "failed", "errors", "skipped"):
                tot[k + c] += len(s[c])
        rows.append((u, red, our, ratio))
        # Tests redis passes and we do not (by name, counting repeats).
        ours = collections.Counter(our["passed"])
        lost = []
        for n in red["passed"]:
            if ours[n] > 0:
                ours[n] -= 1
            else:
                why = next((x for x in our["failed"] + our["errors"] if x.split(" -- ")[0] == n), "")
                lost.append((n, why.split(" -- ", 1)[1] if " -- " in why else
                             ("not run (unit aborted)" if our["aborted"] else "not reported")))
        missing.append((u, lost))
        if a.min_ratio is not None and (ratio < a.min_ratio or (our["aborted"] and not red["aborted"])):
            bad.append(u)
        report["units"][u] = {
            "redis": {k: (len(v) if isinstance(v, list) else v) for k, v in red.items()},
            "asymnvm": {k: (len(v) if isinstance(v, list) else v) for k, v in our.items()},
            "ratio": ratio,
            "redis_tests": {k: red[k] for k in ("passed", "failed", "errors")},
            "asymnvm_tests": {k: our[k] for k in ("passed", "failed", "errors")},
            "redis_passes_asymnvm_does_not": [{"test": n, "reason": w} for n, w in lost],
        }
    hdr = ("unit", "redis p/f/e/s", "asymnvm p/f/e/s", "ours/redis")
    fmt = "{:<16} {:>18} {:>18} {:>11}"
    print(fmt.format(*hdr))
    for u, red, our, ratio in rows:
        def cell(s):
            t = "%d/%d/%d/%d" % (len(s["passed"]), len(s["failed"]), len(s["errors"]), len(s["skipped"]))
            return t + (" ABORTED" if s["aborted"] else "")
        print(fmt.format(u, cell(red), cell(our), "%.1f%%" % (100 * ratio)))
    tr = tot["rpassed"]
    tratio = tot["apassed"] / tr if tr else 1.0
    print(fmt.format("total", "%d/%d/%d/%d" % (tot["rpassed"], tot["rfailed"], tot["rerrors"], tot["rskipped"]),
                     "%d/%d/%d/%d" % (tot["apassed"], tot["afailed"], tot["aerrors"], tot["askipped"]),
                     "%.1f%%" % (100 * tratio)))
    print("(p/f/e/s = passed / failed (assertion) / errors (raised) / skipped; ABORTED = the unit did not finish)")
    for u, red, our, _ in rows:
        for name, s in (("redis-server", red), ("asymnvm-kv", our)):
            if s["aborted"]:
                print(f"  unit/{u} aborted on {name}: {s['abort_reason']}")
    report["total"] = {"redis_passed": tot["rpassed"], "asymnvm_passed": tot["apassed"], "ratio": tratio}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    if a.tests_out:
        with open(a.tests_out, "w") as f:
            for u, lost in missing:
                for n, w in lost:
                    f.write(f"{u}\t{n}\t{w}\n")
    if bad:
        print(f"FAIL: below --min-ratio {a.min_ratio}: {' '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
