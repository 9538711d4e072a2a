#!/usr/bin/env bash
# Plots `asymnvm-bench structures --json FILE` output as PNGs (gnuplot + python3).
#
#   scripts/plot_structures.sh structures.json [out-prefix]
#
# <prefix>-table3.png: throughput of each structure per level, normalised to naive (Table 3 style,
#   log scale), with the paper's RCB/naive ratio as a marker. The symmetric baselines (levels
#   symmetric, symmetric-b) and rcb-v (vector operations, ordered maps) are bars too when the run
#   had them (missing cells are left empty).
# <prefix>-sweeps.png: throughput vs batch size (rcb) and vs cache size (rc), when the run had
#   --sweep rows.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  echo "usage: $0 STRUCTURES.json [OUT-PREFIX]" >&2
  exit 2
fi
json="$1"
prefix="${2:-${json%.json}}"
[[ -r "$json" ]] || { echo "$0: cannot read $json" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not installed" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python3 - "$json" "$tmp" <<'PY'
import json, sys, os
src, tmp = sys.argv[1], sys.argv[2]
d = json.load(open(src))
if d.get("suite") != "structures":
    sys.exit(f"{src}: suite is {d.get('suite')!r}, expected 'structures'")
paper = {t["structure"]: t["paper"] for t in d.get("table3", [])}
levels = ["naive", "r", "rc", "rcb", "rcb-v", "symmetric", "symmetric-b"]
tput = {}
order = []
for r in d["results"]:
    c = r["config"]
    if c.get("sweep"):
        continue
    s = c["structure"]
    if s not in order:
        order.append(s)
    tput[(s, r["variant"])] = r["ops_per_sec"]
with open(os.path.join(tmp, "t3.dat"), "w") as f:
    f.write("structure " + " ".join(levels) + " paper\n")
    for s in order:
        base = tput.get((s, "naive")) or 0
        vals = [(tput.get((s, l), 0) / base) if base else 0 for l in levels]
        f.write(s + " " + " ".join(f"{v:.3f}" for v in vals) + f" {paper.get(s, 0)}\n")
sw = {"batch": [], "cache": []}
for r in d["results"]:
    c = r["config"]
    if c.get("sweep") == "batch":
        sw["batch"].append((c["batch"], r["ops_per_sec"]))
    elif c.get("sweep") == "cache":
        sw["cache"].append((c["cache_pct"], r["ops_per_sec"]))
for k, pts in sw.items():
    with open(os.path.join(tmp, k + ".dat"), "w") as f:
        for x, y in sorted(pts):
            f.write(f"{x} {y:.1f}\n")
m = d.get("machine", {})
with open(os.path.join(tmp, "title"), "w") as f:
    f.write(f"asymnvm-bench structures ({m.get('cores', '?')} cores)")
PY

title=$(cat "$tmp/title")
gnuplot <<GP
set terminal pngcairo size 1200,600 noenhanced
set output '${prefix}-table3.png'
set title "$title: throughput normalised to naive (points: paper RCB/naive)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.5:*]
set grid ytics
set key top left
set ylabel 'x naive'
plot '$tmp/t3.dat' using 2:xtic(1) title 'naive', '' using 3 title 'r', '' using 4 title 'rc', \
     '' using 5 title 'rcb', '' using 6 title 'rcb-v (vectors)', '' using 7 title 'symmetric', \
     '' using 8 title 'symmetric-b', '' using 0:9 with points pt 7 ps 1.5 lc rgb 'black' title 'paper rcb/naive'
GP
if [[ -s "$tmp/batch.dat" || -s "$tmp/cache.dat" ]]; then
  gnuplot <<GP
set terminal pngcairo size 1200,500 noenhanced
set output '${prefix}-sweeps.png'
set multiplot layout 1,2 title "$title: sweeps"
set grid
set ylabel 'ops/s'
set logscale x 2
set xlabel 'batch size (ops per transaction, rcb)'
plot '$tmp/batch.dat' using 1:2 with linespoints title 'rcb'
set logscale x 10
set xlabel 'cache size (% of data, rc)'
plot '$tmp/cache.dat' using 1:2 with linespoints title 'rc'
unset multiplot
GP
  echo "wrote ${prefix}-table3.png ${prefix}-sweeps.png"
else
  echo "wrote ${prefix}-table3.png"
fi
