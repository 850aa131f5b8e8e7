# syntax=docker/dockerfile:1.7
#
# The provider image: a statically linked `caapf` (musl) and a pinned helm, on distroless
# static, running as a non-root numeric user with a read-only root file system (helm's home,
# cache, configuration and data are under /tmp, an emptyDir in the Deployment).
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     -t ghcr.io/example/cluster-api-addon-provider-fleet:dev .
#
# Not built in this repository's CI (no container engine there): tests/packaging.rs checks this
# file statically (ports, user, pinned helm, entrypoint). See docs/development.md.

ARG RUST_VERSION=1.95
ARG ALPINE_VERSION=3.22
# helm 3.8+ and helm 4 are supported (docs/fleet-installation.md); the image ships the helm the
# tests run by default (./bin/helm). This ARG is the one place the version is pinned:
# hack/install-helm.sh and hack/build-image.sh (make image) read it and fail when ./bin/helm is
# another version, and tests/packaging.rs checks the same. Checksums of the official archives, as
# published in the release notes (https://github.com/helm/helm/releases/tag/v4.1.4; also
# https://get.helm.sh/helm-<version>-linux-<arch>.tar.gz.sha256sum).
ARG HELM_VERSION=v4.1.4
ARG HELM_SHA256_AMD64=70b2c30a19da4db264dfd68c8a3664e05093a361cefd89572ffb36f8abfa3d09
ARG HELM_SHA256_ARM64=13d03672be289045d2ff00e4e345d61de1c6f21c1257a45955a30e8ae036d8f1

# Build on the target platform: Rust on Alpine targets musl and links statically by default.
FROM rust:${RUST_VERSION}-alpine${ALPINE_VERSION} AS builder
RUN apk add --no-cache musl-dev gcc
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --package cluster-api-addon-provider-fleet --bin caapf \
    && install -m 0755 target/release/caapf /caapf \
    && /caapf --version

FROM alpine:${ALPINE_VERSION} AS helm
ARG HELM_VERSION
ARG HELM_SHA256_AMD64
ARG HELM_SHA256_ARM64
ARG TARGETARCH
RUN apk add --no-cache curl \
    && case "${TARGETARCH}" in \
         amd64) sum="${HELM_SHA256_AMD64}" ;; \
         arm64) sum="${HELM_SHA256_ARM64}" ;; \
         *) echo "no pinned helm checksum for ${TARGETARCH}" >&2; exit 1 ;; \
       esac \
    && curl -fsSLo /tmp/helm.tar.gz "https://get.helm.sh/helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz" \
    && echo "${sum}  /tmp/helm.tar.gz" | sha256sum -c - \
    && tar -xzf /tmp/helm.tar.gz -C /tmp \
    && install -m 0755 "/tmp/linux-${TARGETARCH}/helm" /helm

# CA certificates (helm fetches charts over HTTPS), /tmp, no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=builder /caapf /caapf
COPY --from=helm /helm /usr/local/bin/helm
ENV HELM_BIN=/usr/local/bin/helm \
    HOME=/tmp/helm \
    HELM_CACHE_HOME=/tmp/helm/cache \
    HELM_CONFIG_HOME=/tmp/helm/config \
    HELM_DATA_HOME=/tmp/helm/data
USER 65532:65532
# metrics (--metrics-bind-address), health (--health-probe-bind-address), Runtime SDK extension
# (--webhook-port): the flag defaults.
EXPOSE 8080 9440 9443
ENTRYPOINT ["/caapf"]
