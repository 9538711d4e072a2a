#!/usr/bin/env bash
# Plots `asymnvm-bench tatp|smallbank --json FILE` output as a PNG (gnuplot + python3).
#
#   scripts/plot_txn.sh txn.json [out.png]
#
# Committed transactions/s per level (naive, r, rc, rcb, symmetric), one bar group per front-end
# count (log scale); records whose invariant checks failed are marked with "!" in the key.
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  echo "usage: $0 TXN.json [OUT.png]" >&2
  exit 2
fi
json="$1"
out="${2:-${json%.json}.png}"
[[ -r "$json" ]] || { echo "$0: cannot read $json" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not installed" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - "$json" "$tmp/data.tsv" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
if d.get("suite") not in ("tatp", "smallbank"):
    sys.exit(f"{sys.argv[1]}: suite is {d.get('suite')!r}, expected tatp or smallbank")
levels = ["naive", "r", "rc", "rcb", "symmetric"]
cells, fes = {}, []
for r in d["results"]:
    f = r["config"]["frontends"]
    if f not in fes:
        fes.append(f)
    cells[(r["variant"], f)] = (r["ops_per_sec"], r.get("invariants_ok", False))
with open(sys.argv[2], "w") as o:
    o.write("level\t" + "\t".join(f"{f} fe" for f in fes) + "\n")
    for l in levels:
        if not any((l, f) in cells for f in fes):
            continue
        bad = any((l, f) in cells and not cells[(l, f)][1] for f in fes)
        o.write((l + ("!" if bad else "")) + "\t" + "\t".join(str(cells.get((l, f), (0,))[0] or "NaN") for f in fes) + "\n")
print(d["suite"])
PY
suite="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["suite"])' "$json")"
ncols="$(head -1 "$tmp/data.tsv" | awk -F'\t' '{print NF}')"
gnuplot <<GP
set terminal pngcairo size 900,500
set output "$out"
set title "$suite: committed transactions/s per level and front-ends"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel "committed txn/s"
set key top left
set datafile separator "\t"
plot for [i=2:$ncols] "$tmp/data.tsv" using i:xtic(1) title columnheader(i)
GP
echo "wrote $out"
