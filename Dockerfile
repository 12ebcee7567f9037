# linkgate: the gateway and the demo tiny-URL service in one small image.
#   docker build -t linkgate .
#   docker run --rm linkgate version
# The entrypoint is the gateway; run the demo with --entrypoint tinyurl.
# Plain Dockerfile syntax, no BuildKit-only instruction (RUN --mount, ...):
# Debian 12's docker.io 20.10 and docker-compose 1.29.2 build it with the
# classic builder as they do by default (configs/deploy_test.go checks it).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# The modules in a layer of their own: it is rebuilt only when go.mod or
# go.sum change, so a change of the sources does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git, so Go records no revision: pass it, as in
#   docker build --build-arg VERSION=v1.2.0 --build-arg REVISION=$(git rev-parse HEAD) .
ARG VERSION=dev
ARG REVISION=
# CGO off: a static binary for the distroless image (pebble falls back to
# pure-Go compression without cgo).
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/gateway ./cmd/gateway && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/tinyurl ./cmd/tinyurl && \
    mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /out/tinyurl /usr/local/bin/
COPY configs/gateway.compose.yaml /etc/linkgate/gateway.yaml
# The embedded analytics store (./data/analytics) and the journal of counts
# not stored yet (./data/analytics-journal) land in the user's home. The data
# folder exists in the image, owned by nonroot, so that a named volume mounted
# there (docker-compose.yml) starts with that owner and the gateway can write.
COPY --from=build --chown=nonroot:nonroot /out/data /home/nonroot/data
WORKDIR /home/nonroot
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["-config", "/etc/linkgate/gateway.yaml"]
