#!/usr/bin/env bash
# Plots `asymnvm-bench fabric --json FILE` output as a PNG (gnuplot + python3, no jq needed).
#
#   scripts/plot_fabric.sh fabric.json [out.png]
#
# Top panel: lock-step (1 outstanding) p50 latency per variant with its p99, next to the floor of
# the same transport and size (log scale). Bottom panel: throughput vs outstanding operations for
# every op/size/transport. Skipped variants (e.g. verbs without a device) are listed in the title.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  echo "usage: $0 FABRIC.json [OUT.png]" >&2
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
if d.get("suite") != "fabric":
    sys.exit(f"{src}: suite is {d.get('suite')!r}, expected 'fabric'")
res = [r for r in d["results"] if not r.get("skipped")]
skipped = [r["variant"] + " (" + r.get("reason", "") + ")" for r in d["results"] if r.get("skipped")]
m = d.get("machine", {})
with open(os.path.join(tmp, "title"), "w") as f:
    t = f"fabric: {m.get('cores','?')} cores, provider {m.get('provider','?')}, PM {m.get('pm_mode','?')}"
    if skipped:
        t += "; skipped: " + ", ".join(skipped)
    f.write(t.replace('"', "'"))
# Lock-step latency, grouped per transport: floors first, then the ops.
def key(r):
    c = r["config"]
    return (c["transport"], 0 if c["provider"] == "none" else 1, c["op"], c["size"])
with open(os.path.join(tmp, "lat.dat"), "w") as f:
    for r in sorted((r for r in res if r["config"]["outstanding"] == 1), key=key):
        c = r["config"]
        name = r["variant"]
        label = f"{name} {c['size']}B".replace('"', "'")
        kind = 0 if c["provider"] == "none" else 1
        f.write(f"\"{label}\" {r['p50_us']:.3f} {r['p99_us']:.3f} {kind}\n")
# Throughput vs outstanding: one block per (variant, size), separated by two blank lines.
series = {}
for r in res:
    c = r["config"]
    if c["provider"] == "none":
        continue
    series.setdefault((r["variant"], c["size"]), []).append((c["outstanding"], r["ops_per_sec"]))
with open(os.path.join(tmp, "tput.dat"), "w") as f, open(os.path.join(tmp, "tput.names"), "w") as n:
    for (v, size), pts in sorted(series.items()):
        n.write(f"{v} {size}B\n".replace('"', "'"))
        for o, ops in sorted(pts):
            f.write(f"{o} {ops:.1f}\n")
        f.write("\n\n")
PY

title="$(cat "$tmp/title")"
nseries=$(wc -l < "$tmp/tput.names")
gnuplot <<GP
set terminal pngcairo size 1600,1200 noenhanced font ",10"
set output "$out"
set multiplot layout 2,1 title "$title"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set logscale y
set ylabel "latency, us (log)"
set title "lock-step latency (1 outstanding): p50 and p99; floor = plain ping-pong, same transport and size"
set xtics rotate by -45 scale 0
set grid ytics
set key top left
plot "$tmp/lat.dat" using 2:xtic(1) title "p50" lc rgb "#3366cc", \
     "" using 3 title "p99" lc rgb "#dd8833"
unset style
set style data linespoints
set title "throughput vs outstanding operations"
set xlabel "outstanding operations"
set ylabel "ops/s (log)"
set logscale x 2
set xtics norotate
set key outside right
names = system("cat $tmp/tput.names | tr ' ' '_'")
plot for [i=0:${nseries}-1] "$tmp/tput.dat" index i using 1:2 with linespoints title word(names, i+1)
unset multiplot
GP
echo "wrote $out"
