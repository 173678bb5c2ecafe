#!/usr/bin/env bash
# Fails when a tracked C++ source differs from .clang-format (the tree is formatted once; every
# change keeps it so). Fix with: git ls-files -z '*.cc' '*.h' | xargs -0 clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -d .git || -f .git ]] && command -v git >/dev/null; then
  mapfile -d '' files < <(git ls-files -z -- '*.cc' '*.h')
else
  mapfile -d '' files < <(find common relayd controld client tests \( -name '*.cc' -o -name '*.h' \) -print0)
fi
echo "== format: clang-format --dry-run over ${#files[@]} files"
report=$(mktemp)
if ! clang-format --dry-run --Werror "${files[@]}" 2>"$report"; then
  grep -E '^[^ ].*: (error|warning):' "$report" | cut -d: -f1 | sort -u | sed 's/^/differs from .clang-format: /' >&2
  rm -f "$report"
  echo "format check failed: run clang-format -i on the files above" >&2
  exit 1
fi
rm -f "$report"
echo "format: clean"
