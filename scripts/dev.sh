#!/usr/bin/env bash
# Local playground: sets up (see setup.sh), then starts a dev chain (anvil from npm) with the test USDC/USDT
# deployed at fixed addresses and a funded payer, the echo model, and the gateway on the local catalog (see
# scripts/dev.ts). Ports: PORT (8080), ECHO_PORT (8081), DEV_CHAIN_PORT (8545). `bun scripts/topup.ts 5` pays a
# real top-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bun scripts/dev.ts
