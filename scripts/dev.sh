#!/usr/bin/env bash
# Local top-up playground: sets up (see setup.sh), then starts a dev chain (anvil from npm) with the test
# USDC/USDT deployed and a funded payer, and the gateway on it. `bun scripts/topup.ts 5` pays a real top-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bun scripts/dev.ts
