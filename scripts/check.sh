#!/usr/bin/env bash
# The fast lane, about a minute on two idle cores: types (tsc), formatting (Prettier), promises left floating
# (typescript-eslint, eslint.config.mjs) and the unit tests (test/*.unit.test.ts: no redis-server, no Postgres).
# scripts/test.sh runs it first, so CI stops here on the cheap mistakes before the ~6 minute suite.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# tsc and eslint each build the whole TypeScript program (~20 s of CPU apiece): side by side, one per core.
bun run typecheck >"$out/typecheck" 2>&1 &
tsc=$!
bun run lint >"$out/lint" 2>&1 &
lint=$!
failed=()
bun run format:check >"$out/format" 2>&1 || failed+=(format)
bun test --timeout 30000 ./test/*.unit.test.ts >"$out/unit" 2>&1 || failed+=(unit)
wait "$tsc" || failed+=(typecheck)
wait "$lint" || failed+=(lint)
for step in typecheck format lint unit; do
  if [[ " ${failed[*]} " == *" $step "* ]]; then
    echo "check: $step FAILED" >&2
    cat "$out/$step" >&2
  else
    echo "check: $step ok" >&2
  fi
done
if ((${#failed[@]})); then
  echo "check: failed: ${failed[*]} ('bun run format' fixes formatting)" >&2
  exit 1
fi
