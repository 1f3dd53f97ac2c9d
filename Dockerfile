# syntax=docker/dockerfile:1
# channel-bridge container image.
#   docker build -t channel-bridge .
#   docker run --rm -e DATABASE_URL=postgres://… channel-bridge migrate
#   docker run --rm -p 8080:8080 -e DATABASE_URL=postgres://… -e CB_SECRETS_KEY channel-bridge   # serve
#   docker run --rm -e DATABASE_URL=… -e CB_SECRETS_KEY -e CB_METRICS_BIND=0.0.0.0:9090 channel-bridge serve --http false   # worker
# serve needs CB_SECRETS_KEY (`-e CB_SECRETS_KEY` passes it from your environment, not on the
# command line), or CB_SECRETS_PLAINTEXT=true: docs/security.md#secrets-at-rest.
# Migrations are embedded in the binary; `migrate` applies them (and creates the database).

FROM rust:1-slim-bookworm AS builder
# jemalloc, the gateway's allocator, is built with make, which the slim image lacks.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# sqlx query macros must not look for a live database during the image build.
ENV SQLX_OFFLINE=true \
    CARGO_TERM_COLOR=never
COPY . .
# The registry and target directories are BuildKit caches, so a rebuild after a source
# change recompiles only this crate, not its dependencies. The binary is copied out of the
# cached target directory within the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin channel-bridge \
    && install -D -m 0755 target/release/channel-bridge /out/channel-bridge

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 channel-bridge \
    && useradd --system --uid 10001 --gid channel-bridge --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin channel-bridge
COPY --from=builder /out/channel-bridge /usr/local/bin/channel-bridge
ENV CB_BIND=0.0.0.0:8080 \
    CB_LOG_FORMAT=json
# Numeric so that Kubernetes runAsNonRoot can verify it (uid 10001 = channel-bridge).
USER 10001:10001
EXPOSE 8080
# The image has no curl: the binary asks /readyz itself (of CB_METRICS_BIND when set, else
# of CB_BIND on loopback), so a worker-only container needs CB_METRICS_BIND.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["channel-bridge", "healthcheck", "--timeout-secs", "4"]
ENTRYPOINT ["channel-bridge"]
CMD ["serve"]
