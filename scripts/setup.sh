#!/usr/bin/env bash
# Installs what the gateway needs on a fresh Debian machine that has Node/npm: Bun, redis-server, the packages.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v bun >/dev/null 2>&1; then
  echo "setup: installing Bun from npm" >&2
  npm install -g bun >&2
fi
# redis-cli (Debian's redis-tools, a dependency of redis-server) creates the Redis Cluster of the cluster tests.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "setup: installing redis-server and redis-cli from the OS packages" >&2
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server redis-tools >&2
fi
if ! command -v wrk >/dev/null 2>&1; then
  # The benchmark's persistent-connection latency run (bench/tail.ts); nothing else needs it.
  echo "setup: installing wrk from the OS packages (for bench/)" >&2
  { as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq wrk; } >&2 || echo "setup: wrk not installed; the bench skips its wrk figures" >&2
fi
bun install --frozen-lockfile >&2
# The test token of the local dev chain: compiled from contracts/*.sol by solc-js (no download).
bun scripts/build-contracts.ts >&2
