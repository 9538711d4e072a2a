#!/usr/bin/env bash
# Regenerates doc/resp.md's compatibility table from the RESP gateway's dispatch table.
# Usage: scripts/gen-resp-doc.sh [build-dir]   (builds asymnvm-resp-doc first)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cmake --build "$build" --target asymnvm-resp-doc >/dev/null
table=$("$build/kv/resp/asymnvm-resp-doc")
python3 - "$root/doc/resp.md" "$table" <<'PY'
import sys
path, table = sys.argv[1], sys.argv[2] + "\n"
doc = open(path).read()
b = "<!-- BEGIN GENERATED: asymnvm-resp-doc -->\n"
e = "<!-- END GENERATED -->"
i, j = doc.index(b) + len(b), doc.index(e)
open(path, "w").write(doc[:i] + table + doc[j:])
PY
echo "doc/resp.md updated"
