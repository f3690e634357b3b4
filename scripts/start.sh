#!/usr/bin/env bash
# Sets up (see setup.sh) and starts the gateway. With no REDIS_URL / DATABASE_URL it runs on embedded defaults:
# a private redis-server and PGlite, both keeping their data in DATA_DIR (./data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bun src/main.ts serve
