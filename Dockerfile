# One container: the gateway plus redis-server for the embedded default (unused when REDIS_URL is set).
FROM oven/bun:1.3-debian
RUN apt-get update && apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile --production
COPY src ./src
COPY lua ./lua
COPY migrations ./migrations
COPY config ./config
ENV DATA_DIR=/data PORT=8080
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
CMD ["bun", "src/main.ts", "serve"]
