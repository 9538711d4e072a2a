#!/usr/bin/env bash
# Plots `asymnvm-bench oq --json FILE` output as a PNG (gnuplot + python3).
#
#   scripts/plot_oq.sh oq.json [out.png]
#
# Left: nilext-set p50 latency vs throughput, one line per policy × set share (points = client
# thread counts). Right: set p99 vs throughput, same series.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  echo "usage: $0 OQ.json [OUT.png]" >&2
  exit 2
fi
json="$1"
out="${2:-${json%.json}.png}"
[[ -r "$json" ]] || { echo "$0: cannot read $json" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not installed" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python3 - "$json" "$tmp" <<'PY'
import json, sys, os
src, tmp = sys.argv[1], sys.argv[2]
d = json.load(open(src))
if d.get("suite") != "oq":
    sys.exit(f"{src}: suite is {d.get('suite')!r}, expected 'oq'")
m = d.get("machine", {})
with open(os.path.join(tmp, "title"), "w") as f:
    f.write(f"OQ: {m.get('cores','?')} cores, {m.get('transport','?')}, {m.get('pm_mode','?')}".replace('"', "'"))
series = {}
for r in d["results"]:
    c = r["config"]
    if c["set_percent"] == 0:
        continue
    series.setdefault((r["variant"], c["set_percent"]), []).append(
        (r["ops_per_sec"], r["set_p50_us"], r["set_p99_us"], c["clients"]))
with open(os.path.join(tmp, "d.dat"), "w") as f, open(os.path.join(tmp, "names"), "w") as n:
    for (v, sp), pts in sorted(series.items()):
        n.write(f"{v} {sp}% sets\n")
        for ops, p50, p99, cl in sorted(pts, key=lambda x: x[3]):
            f.write(f"{ops:.1f} {p50:.3f} {p99:.3f} {cl}\n")
        f.write("\n\n")
PY

n=$(wc -l < "$tmp/names")
title=$(cat "$tmp/title")
{
  echo "set terminal pngcairo size 1400,560 noenhanced"
  echo "set output '$out'"
  echo "set multiplot layout 1,2 title \"$title\""
  echo "set grid; set key top left; set xlabel 'throughput (ops/s)'; set logscale y"
  for panel in 2 3; do
    if [[ $panel == 2 ]]; then echo "set ylabel 'set p50 (us)'"; else echo "set ylabel 'set p99 (us)'"; fi
    printf "plot "
    for ((i = 0; i < n; i++)); do
      name=$(sed -n "$((i + 1))p" "$tmp/names")
      [[ $i -gt 0 ]] && printf ", "
      printf "'%s' index %d using 1:%d with linespoints title '%s'" "$tmp/d.dat" "$i" "$panel" "$name"
    done
    echo
  done
  echo "unset multiplot"
} > "$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "wrote $out"
