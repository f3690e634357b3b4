# One container, one binary: the gateway compiled with Bun (Lua scripts, migrations, default catalog and PGlite
# embedded), plus redis-server for the embedded default. Set REDIS_URL / DATABASE_URL to use external services.
FROM oven/bun:1-debian AS build
WORKDIR /src
COPY package.json bun.lock ./
# A fix to postgres.js, applied by the install (see src/store/db.ts).
COPY patches ./patches
RUN bun install --frozen-lockfile
COPY tsconfig.json ./
COPY src ./src
COPY lua ./lua
COPY migrations ./migrations
COPY config ./config
RUN bun build --compile --minify src/main.ts --outfile /out/gateway

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends redis-server ca-certificates \
  && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/gateway /usr/local/bin/gateway
COPY config /app/config
WORKDIR /app
ENV DATA_DIR=/data PORT=8080
# The gateway gives JavaScriptCore its heap hint itself (src/heapHint.ts; docs/operating.md, BUN_JSC_forceRAMSize).
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["gateway"]
CMD ["serve"]
