# The quick start, after `PORT=9090 bash scripts/start.sh` (another terminal) logs "gateway listening". Run from
# the repository root. With no provider key set the gateway serves local/echo, a local test model.
export PORT=${PORT:-9090}
eval "$(bun scripts/signin.ts)"                             # a new wallet signs in (SIWE) and gets an API key: sets WALLET, KEY
bun src/main.ts admin grant "$WALLET" 5 --reason quickstart # 5 USD of credit, no payment
curl -s "localhost:$PORT/v1/chat/completions" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \
  -d '{"model":"local/echo","messages":[{"role":"user","content":"Hello, gateway"}]}'
