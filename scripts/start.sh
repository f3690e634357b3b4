#!/usr/bin/env bash
# Sets up (see setup.sh) and starts the gateway. With no REDIS_URL / DATABASE_URL it runs on embedded defaults:
# a private redis-server and PGlite, both keeping their data in DATA_DIR (./data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The gateway's memory hint for JavaScriptCore's heap growth (see the Dockerfile); an operator's value wins.
export BUN_JSC_forceRAMSize="${BUN_JSC_forceRAMSize:-536870912}"
exec bun src/main.ts serve
