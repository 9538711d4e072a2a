#!/usr/bin/env bash
# Fails when a tracked C++ file differs from what clang-format makes of it with the repository's
# .clang-format (Google style, 100 columns). Fix with: scripts/check-format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
CF=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$CF" ]; then
  echo "check-format: clang-format not found (scripts/setup.sh installs the Debian package)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = "--fix" ]; then
  "$CF" --style=file -i "${files[@]}"
  exit 0
fi
# One clang-format process for every file (one per file took most of a minute); only when it
# finds a difference is each file checked alone, to name them.
if "$CF" --style=file --dry-run -Werror "${files[@]}" >/dev/null 2>&1; then
  echo "check-format: ${#files[@]} files formatted"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$CF" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check-format: %d file(s) differ from clang-format (%s):\n' "${#bad[@]}" "$("$CF" --version)" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix with: scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
