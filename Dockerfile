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
# JavaScriptCore sizes its heap growth from the machine's RAM, not the container's limit: without a hint the heap
# of a busy gateway grows well past what it keeps live before it is collected. 512 MiB (Bun's documented
# equivalent of --max-old-space-size) keeps the peak near 150 MiB at no measured CPU cost (bench/README.md);
# raise it with the container's memory limit.
ENV BUN_JSC_forceRAMSize=536870912
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["gateway"]
CMD ["serve"]
