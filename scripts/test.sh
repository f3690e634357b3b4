#!/usr/bin/env bash
# Sets up (see setup.sh), installs Chromium when missing and runs the whole test suite. Tests start their own
# redis-server; for Postgres they use TEST_DATABASE_URL (a fresh database per test file), else the machine's
# Postgres on 127.0.0.1:5432 when it answers, else in-memory PGlite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The dashboard's browser tests drive the OS's Chromium through playwright-core (no browser download); only the
# tests need it, so setup.sh (which start.sh runs too) leaves it out.
if [ -z "${CHROMIUM_PATH:-}" ] && ! [ -x /usr/bin/chromium ]; then
  echo "tests: installing chromium from the OS packages (dashboard browser tests)" >&2
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >&2
fi
if [ -z "${TEST_DATABASE_URL:-}" ] && command -v pg_isready >/dev/null 2>&1 \
   && pg_isready -q -h 127.0.0.1 -p 5432 -U postgres 2>/dev/null \
   && psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
  export TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
fi
echo "tests: Postgres = ${TEST_DATABASE_URL:-embedded PGlite}" >&2
# The fast lane first (types, Prettier's formatting, floating promises, unit tests: scripts/check.sh), about a
# minute; `bun run format` fixes what its formatting step refuses.
bun run check
# bunfig.toml's [test] timeout is not applied by this Bun (tests and hooks stop at 5 s): the flag is.
exec bun test --timeout 30000 "$@"
