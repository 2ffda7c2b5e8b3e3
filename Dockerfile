# syntax=docker/dockerfile:1
#
# One image per binary, each a static Go binary on distroless/static running
# as the unprivileged user 65532 (numeric, so Kubernetes can verify
# runAsNonRoot):
#   docker build --target gravelerd   --build-arg VERSION=<tag> -t graveler/gravelerd:<tag> .
#   docker build --target cleaner     --build-arg VERSION=<tag> -t graveler/cleaner:<tag> .
#   docker build --target gravelerctl --build-arg VERSION=<tag> -t graveler/gravelerctl:<tag> .
#   docker build --target gravelerfsck --build-arg VERSION=<tag> -t graveler/gravelerfsck:<tag> .
# VERSION is what --version, the start-up log, graveler_build_info and
# GetServerVersion report ("dev" when not given).
# The last stage (gravelerd) is the default target.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
ARG VERSION=dev
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w -X graveler/buildinfo.Version=${VERSION}" -o /out/ ./cmd/gravelerd ./cmd/cleaner ./cmd/gravelerctl ./cmd/gravelerfsck

FROM gcr.io/distroless/static-debian12:nonroot AS gravelerctl
COPY --from=build /out/gravelerctl /usr/local/bin/gravelerctl
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gravelerctl"]

FROM gcr.io/distroless/static-debian12:nonroot AS cleaner
COPY --from=build /out/cleaner /usr/local/bin/cleaner
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cleaner"]

FROM gcr.io/distroless/static-debian12:nonroot AS gravelerfsck
COPY --from=build /out/gravelerfsck /usr/local/bin/gravelerfsck
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gravelerfsck"]

FROM gcr.io/distroless/static-debian12:nonroot AS gravelerd
COPY --from=build /out/gravelerd /usr/local/bin/gravelerd
USER 65532:65532
# gravelerd's defaults (gRPC on 127.0.0.1:7070, no metrics listener) are
# unreachable from outside a container: listen on every interface, on the
# ports exposed below (gRPC API and health service; /metrics, and
# /debug/pprof with GRAVELER_ENABLE_PPROF=true). The data directory defaults to ./graveler-data under the
# image's WORKDIR, /home/nonroot. Kubernetes sets all of these itself.
ENV GRAVELER_LISTEN=:7070 GRAVELER_METRICS_LISTEN=:9090
EXPOSE 7070 9090
ENTRYPOINT ["/usr/local/bin/gravelerd"]
