# The same image `make image` builds without a daemon, for those who build with Docker or
# Buildah. Build the static binaries first, then the image:
#
#   make binaries
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION="$(hack/version.sh)" --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t ghcr.io/sar-bridge/sar-bridge:"$(cat VERSION)" .
#
# Nothing is compiled here: the binary is static (CGO_ENABLED=0), so the base is empty —
# no shell, no package manager.
FROM scratch
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG REVISION=unknown
COPY bin/linux-${TARGETARCH}/sar-bridge /sar-bridge
LABEL org.opencontainers.image.source="https://github.com/sar-bridge/sar-bridge" \
      org.opencontainers.image.title="sar-bridge" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/sar-bridge"]
