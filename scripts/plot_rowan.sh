#!/usr/bin/env bash
# Plots `asymnvm-bench rowan --json FILE` output as PNGs (gnuplot + python3, no jq needed).
#
#   scripts/plot_rowan.sh rowan.json [OUT_PREFIX]
#
# Writes OUT_PREFIX-dlwa.png (DLWA from the XPLine model vs concurrent write streams, one line per
# variant × entry size, with the 1.03 target) and OUT_PREFIX-latency.png (p50 append latency vs
# throughput, one line per variant × entry size, points in stream-count order). OUT_PREFIX defaults
# to the JSON path without ".json".
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  echo "usage: $0 ROWAN.json [OUT_PREFIX]" >&2
  exit 2
fi
json="$1"
prefix="${2:-${json%.json}}"
[[ -r "$json" ]] || { echo "$0: cannot read $json" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not installed" >&2; exit 1; }
command -v python3 >/dev/null || { echo "$0: python3 not installed" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python3 - "$json" "$tmp" <<'PY'
import json, sys, os
src, tmp = sys.argv[1], sys.argv[2]
d = json.load(open(src))
if d.get("suite") != "rowan":
    sys.exit(f"{src}: suite is {d.get('suite')!r}, expected 'rowan'")
m = d.get("machine", {})
res = [r for r in d["results"] if not r.get("skipped") and r.get("dlwa") is not None]
if not res:
    sys.exit(f"{src}: no results")
window = sorted({r["config"].get("window", 1) for r in res})
with open(os.path.join(tmp, "title"), "w") as f:
    f.write((f"rowan: {m.get('cores','?')} cores, soft NIC over {m.get('transport','?')}, "
             f"{m.get('driver_threads','?')} driver threads, window {','.join(map(str, window))}, "
             f"XPLine {m.get('xpline_buffer_bytes','?')} B buffer / {m.get('xpline_line_bytes','?')} B lines"
             ).replace('"', "'"))
series = {}
for r in res:
    c = r["config"]
    series.setdefault((r["variant"], c["entry_size"], c.get("window", 1)), []).append(
        (c["streams"], r["dlwa"], r["ops_per_sec"], r["p50_us"], r["p99_us"]))
order = {"rowan": 0, "rwrite": 1, "share": 2, "batch": 3}
keys = sorted(series, key=lambda k: (order.get(k[0], 9), k[1], k[2]))
with open(os.path.join(tmp, "data"), "w") as f, open(os.path.join(tmp, "names"), "w") as n:
    for k in keys:
        v, size, w = k
        label = f"{v}_{size}B" + (f"_w{w}" if len(window) > 1 else "")
        n.write(label + "\n")
        for streams, dlwa, ops, p50, p99 in sorted(series[k]):
            f.write(f"{streams} {dlwa:.4f} {ops:.1f} {p50:.3f} {p99:.3f}\n")
        f.write("\n\n")
PY

title="$(cat "$tmp/title")"
nseries=$(wc -l < "$tmp/names")
names="$(tr '\n' ' ' < "$tmp/names")"
gnuplot <<GP
set terminal pngcairo size 1200,800 noenhanced font ",10"
names = "$names"
set output "${prefix}-dlwa.png"
set title "DLWA (XPLine model) vs concurrent write streams\n$title"
set xlabel "concurrent write streams"
set ylabel "DLWA = media bytes / requested bytes"
set logscale x 2
set grid
set key outside right
set yrange [0.9:*]
plot for [i=0:${nseries}-1] "$tmp/data" index i using 1:2 with linespoints title word(names, i+1), \
     1.03 with lines dt 2 lc rgb "black" title "target 1.03"
set output "${prefix}-latency.png"
set title "p50 append latency vs throughput (points: stream counts, ascending)\n$title"
set xlabel "throughput, entries/s"
set ylabel "p50 latency, us (log)"
unset logscale x
set logscale y
set yrange [*:*]
plot for [i=0:${nseries}-1] "$tmp/data" index i using 3:4 with linespoints title word(names, i+1)
GP
echo "wrote ${prefix}-dlwa.png ${prefix}-latency.png"
