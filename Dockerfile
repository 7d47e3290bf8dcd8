# One image with both binaries, for docker-compose.yml. muster-server needs
# cgo (SQLite); the runtime image needs only libc and CA roots.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/bin/muster-server /src/bin/muster-agent /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/muster-server"]
