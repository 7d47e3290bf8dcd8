# Muster — build, run, test, generate.
# `make run` builds and starts the server on embedded SQLite; `make test` runs every test.

GO        ?= go
BIN       := bin
DATA_DIR  ?= muster-data
# `make run` serves on loopback only: a demo should not open a port to the
# network. To serve it: make run BIND_ADDRESS=0.0.0.0 ADVERTISE_ADDRESS=<this machine's IP>
# (agents move to the address a server advertises, so it must be one they reach).
BIND_ADDRESS      ?= 127.0.0.1
ADVERTISE_ADDRESS ?= $(if $(filter 127.%,$(BIND_ADDRESS)),$(BIND_ADDRESS),)
HTTPS_PORT        ?= 9443
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# /version (kubectl version) reports, as k3s does, the Kubernetes API
# machinery it is built on with muster's version as build metadata:
# v1.37.2+muster.<version>. Kubernetes reads it from these link-time variables.
KUBE_VERSION  = $(shell $(GO) list -m -f '{{.Version}}' k8s.io/apiserver 2>/dev/null | sed 's/^v0\./v1./')
GIT_COMMIT    = $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS    = -X github.com/muster-io/muster/internal/version.Version=$(VERSION) \
	$(if $(KUBE_VERSION),-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION)+muster.$(subst /,-,$(VERSION))) \
	$(if $(GIT_COMMIT),-X k8s.io/component-base/version.gitCommit=$(GIT_COMMIT))
# Test binaries are few and big (kine + apiserver); one package at a time keeps
# memory and the shared 2 cores in check, and long timeouts cover a cold cache.
# Inside test/e2e, tests that share no port, directory or process run four at
# a time (-parallel 4): most of an e2e test is waiting on real processes.
TEST_FLAGS ?= -p 1 -parallel 4 -count=1 -timeout 45m

.DEFAULT_GOAL := all

# `make ha` starts PostgreSQL, three servers on 127.0.0.1-3 and agents (hack/ha.sh).
.PHONY: release release-agents docs screenshots all build run peer s3 oidc ha ha-stop test test-unit test-e2e vet fuzz generate verify-generated bench bench-peer postgres-start postgres-stop clean

all: build

# The agent is stripped (-s -w): it runs on every machine of the fleet, and a
# panic's stack trace survives stripping.
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/muster-server ./cmd/server
	$(GO) build -ldflags '$(LDFLAGS) -s -w' -o $(BIN)/muster-agent ./cmd/agent
	$(GO) build -ldflags '$(LDFLAGS) -s -w' -o $(BIN)/kubectl-muster ./cmd/kubectl-muster

# Release binaries for every architecture, with SHA256SUMS, in RELEASE_DIR
# (hack/release.sh): the agent for linux/amd64, arm64 and arm (GOARM=7)
# without cgo, the server for linux/amd64 and arm64 with cgo (SQLite; arm64
# needs apt-get install gcc-aarch64-linux-gnu). A server run from that
# directory publishes every agent beside it (install.sh picks the host's).
# release-agents builds the agents only (CI: test/e2e/arch_test.go runs them
# under qemu-user).
RELEASE_DIR ?= dist
release:
	RELEASE_DIR=$(RELEASE_DIR) LDFLAGS='$(LDFLAGS)' GO=$(GO) hack/release.sh
release-agents:
	RELEASE_DIR=$(RELEASE_DIR) RELEASE_WHAT=agents LDFLAGS='$(LDFLAGS)' GO=$(GO) hack/release.sh

# ARGS passes more flags: make run ARGS='--with-agent --agent-binaries-dir ./agents'
ARGS ?=
run: build
	$(BIN)/muster-server --data-dir $(DATA_DIR) --https-port $(HTTPS_PORT) --bind-address $(BIND_ADDRESS) $(if $(ADVERTISE_ADDRESS),--advertise-address $(ADVERTISE_ADDRESS)) $(ARGS)

# HA_PORT=9544 make ha runs beside another server on 9443.
ha: build
	HA_PORT=$(or $(HA_PORT),9443) hack/ha.sh start muster-ha $(or $(AGENTS),3)

# The peer: a real kube-apiserver v1.37.2 and a standalone kine, built from
# the Go module proxy in their own modules (hack/peer/) into a cache dir
# outside the checkout; aggregated-mode tests and bench-peer run them.
peer:
	hack/peer.sh

# The S3 server the snapshot upload tests run: versitygw v1.8.0, built from
# the Go module proxy in its own module (hack/s3/versitygw) into
# ~/.cache/muster/s3 (internal/testenv/s3test runs it).
s3:
	hack/s3.sh

# The OpenID provider the sign-in tests run: zitadel/oidc v3.52.0's
# provider package in its own module (hack/oidc/provider), built into
# ~/.cache/muster/oidc (internal/testenv/oidctest runs it).
oidc:
	hack/oidc.sh

ha-stop:
	hack/ha.sh stop muster-ha

vet:
	$(GO) vet ./...

# Every test: unit, storage conformance (SQLite and PostgreSQL), and end-to-end
# with real server processes and real kubectl. PostgreSQL is started by the
# tests themselves (hack/postgres.sh) unless MUSTER_TEST_POSTGRES_DSN is set.
# The peer kube-apiserver, the S3 server and the OpenID provider are built once per machine
# (cached outside the checkout), so that every test runs, not only under CI.
test: build peer s3 oidc
	$(GO) vet ./...
	MUSTER_SERVER_BIN=$(CURDIR)/$(BIN)/muster-server MUSTER_AGENT_BIN=$(CURDIR)/$(BIN)/muster-agent $(GO) test $(TEST_FLAGS) ./...

# The figures users choose us for, beside the datastore ceiling measured in
# the same run: registration and restart storms, plan fan-out and latency, an
# idle fleet, on SQLite and PostgreSQL (test/bench; `make test` runs the same
# harness at smoke scale). Then whole-server figures (cold start, RSS, kubectl
# apply of 1,000 objects, a plan-set rollout to 1,000 simulated machines), the
# 10,000-object migrate, and a restore from S3 older than a fleet of 1,000
# simulated and 20 real agents (time to Running; `make test` runs it at smoke scale).
# Prints them; asserts nothing about speed.
# MUSTER_BENCH_AGENTS=1000 MUSTER_BENCH_IDLE=60s make bench for a shorter run.
bench: build
	mkdir -p bench/out
	MUSTER_BENCH_SCALE=full MUSTER_SERVER_BIN=$(CURDIR)/$(BIN)/muster-server $(GO) test -count=1 -run '^TestBench$$' -v -timeout 180m ./test/bench | tee bench/out/bench.txt
	MUSTER_SERVER_BIN=$(CURDIR)/$(BIN)/muster-server MUSTER_AGENT_BIN=$(CURDIR)/$(BIN)/muster-agent $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./test/e2e | tee bench/out/server.txt
	MUSTER_MOVE_OBJECTS=10000 MUSTER_SERVER_BIN=$(CURDIR)/$(BIN)/muster-server MUSTER_AGENT_BIN=$(CURDIR)/$(BIN)/muster-agent $(GO) test -count=1 -run 'TestDatastoreMoveHistory' -v -timeout 60m ./test/e2e | tee bench/out/datastore-move.txt
	MUSTER_RESTORE_SIMULATED=1000 MUSTER_RESTORE_REAL=20 MUSTER_RESTORE_CHANGES=200 MUSTER_RESTORE_JOINS=50 MUSTER_SERVER_BIN=$(CURDIR)/$(BIN)/muster-server MUSTER_AGENT_BIN=$(CURDIR)/$(BIN)/muster-agent $(GO) test -count=1 -run '^TestRestoreFleetFromS3$$' -v -timeout 60m ./test/e2e | tee bench/out/restore-fleet.txt

# Muster beside what Fleet/Rancher/k3s users run for the job: a real
# kube-apiserver serving the Muster kinds as CRDs (converted from muster's
# own OpenAPI) on a standalone kine on SQLite, one client-go workload against
# both (TestBenchPeer; `make test` runs it at smoke scale). Prints a table of
# figures, Muster, peer and their ratio; asserts nothing about speed.
# MUSTER_BENCH_PEER_OBJECTS=2000 make bench-peer for a shorter run.
MUSTER_BENCH_PEER_OBJECTS ?= 5000
MUSTER_BENCH_PEER_WATCHES ?= 2000
bench-peer: build
	hack/peer.sh
	mkdir -p bench/out
	MUSTER_BENCH_PEER_OBJECTS=$(MUSTER_BENCH_PEER_OBJECTS) MUSTER_BENCH_PEER_WATCHES=$(MUSTER_BENCH_PEER_WATCHES) \
	MUSTER_SERVER_BIN=$(CURDIR)/$(BIN)/muster-server MUSTER_AGENT_BIN=$(CURDIR)/$(BIN)/muster-agent \
	$(GO) test -p 1 -count=1 -run '^TestBenchPeer$$' -v -timeout 90m ./test/e2e | tee bench/out/bench-peer.txt

# Fuzz the parsers and checks that take hostile input: the join-token
# parser, the CSR checks and plan validation, each for FUZZTIME. go test
# fuzzes one target per package per run, hence the loop. Failing inputs are
# written to the package's testdata/fuzz/ and rerun by every `go test`.
# FUZZFLAGS=-parallel=1 keeps to one core.
FUZZTIME  ?= 20s
FUZZFLAGS ?=
FUZZ_TARGETS := ./internal/jointoken:FuzzParse ./internal/pki:FuzzCSR ./pkg/apis/muster/validation:FuzzValidatePlanSpec

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzzing $$fn in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg; \
	done

generate:
	hack/update-codegen.sh

# Docs made from the code: the role table in docs/security.md is what the
# authorizer answers (TestRoleTableInDocs fails when they differ).
docs:
	MUSTER_UPDATE_DOCS=1 $(GO) test -count=1 -run '^TestRoleTableInDocs$$' ./internal/apiserver

verify-generated:
	hack/verify-codegen.sh

clean:
	rm -rf $(BIN)

# The web console's screenshots, from TestConsole and TestConsolePages in a real headless
# chromium (apt-get install chromium): docs/console.png is what the README shows.
screenshots: build
	mkdir -p $(BIN)/screenshots
	MUSTER_SCREENSHOT_DIR=$(CURDIR)/$(BIN)/screenshots MUSTER_SERVER_BIN=$(CURDIR)/$(BIN)/muster-server MUSTER_AGENT_BIN=$(CURDIR)/$(BIN)/muster-agent $(GO) test -count=1 -run '^TestConsole(Pages)?$$' ./test/e2e
	cp $(BIN)/screenshots/fleet.png docs/console.png
	cp $(BIN)/screenshots/machine.png docs/console-machine.png
	cp $(BIN)/screenshots/tokens.png docs/console-tokens.png
	cp $(BIN)/screenshots/rollouts.png docs/console-rollouts.png
