# spiderpool: two commands do everything.
#   make demo   tools, Postgres, Temporal dev server + Web UI, 3 nodes, a crawl, a summary
#   make test   tools, then unit, workflow, replay and integration tests
SHELL := bash
.DEFAULT_GOAL := help

TEMPORAL_CLI_VERSION := v1.5.1
BIN := $(CURDIR)/bin
GO ?= go
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export SPIDERPOOL_TEMPORAL_BIN := $(BIN)/temporal

# What `spiderpool version` prints: the nearest tag (or the commit) and the
# commit, stamped by the linker. A build without them (go install, go run)
# falls back to the VCS stamp Go records itself.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The image docker-compose.yml and deploy/kubernetes run. ENGINE is docker
# or podman, whichever is installed.
IMAGE ?= spiderpool:local
ENGINE ?= $(shell command -v docker || command -v podman)

.PHONY: help tools postgres pgbouncer build image cross test test-unit test-integration test-tools demo dev histories fuzz vet clean bench bench-scale bench-polite bench-nodes bench-render bench-frontier

help:
	@echo "make demo   - run the local stack and crawl the bundled synthetic web"
	@echo "make test   - everything the tests need, then all tests"
	@echo "make dev    - run the local stack until Ctrl-C (bin/spiderpool dev)"
	@echo "make image  - the container image docker-compose.yml and deploy/kubernetes run (IMAGE=$(IMAGE))"
	@echo "make histories - record this release's workflow histories (HISTORY_SET) for the replay tests"
	@echo "make fuzz   - run each fuzz target for FUZZTIME (default 30s)"
	@echo "make bench  - spiderpool vs Colly on a 100k-page web, and the hot paths; updates docs/performance.md"
	@echo "make bench-scale - spiderpool at 10k, 100k and 1M pages; updates docs/performance.md"
	@echo "make bench-polite - politeness efficiency: 500 polite hosts, slow hosts, campaigns sharing nodes or hosts; updates docs/performance.md"
	@echo "make bench-nodes - one polite campaign on pools of 3 to 1,000 nodes, a kill and a drain at scale; writes docs/pool.md"
	@echo "make bench-render - one browser node vs Crawlee's PuppeteerCrawler on a single-page app, same Chromium; updates docs/performance.md"
	@echo "make bench-frontier - plans and latency of a lease and an idle poll over a 10M-row frontier; writes docs/scale-10m.txt"

tools: $(BIN)/temporal postgres

# What the tests need beyond tools: Node.js and npm (the TypeScript
# processor example, warcio.js), Chromium (the WACZ replay test) and
# PgBouncer (devstack's tests run the store through it; Debian puts it in
# /usr/sbin). docker-compose.yml needs nothing: the tests load it with
# compose's own loader library (tests/harness.LoadCompose).
test-tools:
	@missing=""; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing="$$missing pgbouncer"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "installing Debian packages:$$missing"; \
	$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null

# The Temporal CLI whose dev server we develop against. Later versions carry
# a replace directive and cannot be go-installed.
$(BIN)/temporal:
	@echo "installing temporal CLI $(TEMPORAL_CLI_VERSION) into ./bin (a few minutes the first time)"
	GOBIN=$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

# A Postgres server binary for throwaway clusters, unless DATABASE_URL
# points at a server.
postgres:
	@if [ -n "$$DATABASE_URL" ]; then exit 0; fi; \
	if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi; \
	echo "installing Postgres (Debian package postgresql)"; \
	$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/spiderpool ./cmd/spiderpool
	$(GO) build -o $(BIN)/synthweb ./tests/cmd/synthweb
	$(GO) build -o $(BIN)/demo ./tests/cmd/demo

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

image:
	@test -n "$(ENGINE)" || { echo "make image needs docker or podman"; exit 1; }
	$(ENGINE) build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

# The binary builds for macOS and for arm64 Linux too, and every package
# vets for macOS, test files included: Linux-only calls sit in _linux.go
# files (tests/cli/failfast_linux_test.go proves a bounded TCP connect with
# a Linux-only socket trick).
CROSS := darwin/arm64 linux/arm64
cross:
	for p in $(CROSS); do GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./... || exit 1; done
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...

test: tools test-tools vet cross test-unit test-integration

# Every package outside tests/, under the race detector (some start their
# own Postgres); a package added later is tested without being listed here.
test-unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/tests/')

# Real Postgres and the real Temporal dev server, started by the tests.
# tests/integration runs its nodes in-process, so it runs under the race
# detector (286s against 226s without it, on a 2-core machine); the other
# suites, whose nodes are processes killed and restarted for real, run
# beside it one at a time, so two test binaries share the machine, as one
# `go test ./tests/...` had.
test-integration: tools
	$(GO) test -race -count=1 -timeout 30m ./tests/integration/ & raced=$$!; \
	$(GO) test -p 1 -count=1 -timeout 20m $$($(GO) list ./tests/... | grep -v '/tests/integration$$'); rest=$$?; \
	wait $$raced && exit $$rest

demo: tools build
	$(BIN)/demo

dev: tools build
	$(BIN)/spiderpool dev

# Histories are recorded once per release into workflows/testdata/$(HISTORY_SET)
# and never written over: replay guards every release's runs.
HISTORY_SET ?= v0.12.0
histories: tools
	SPIDERPOOL_RECORD_HISTORIES=$(HISTORY_SET) $(GO) test -count=1 -run 'TestCrawlFetchesEveryPageExactlyOnce|TestReweightAndDrainMidCampaign|TestTemporalCLIStartsCampaignWithDefaults' ./tests/integration/
	SPIDERPOOL_RECORD_HISTORIES=$(HISTORY_SET) $(GO) test -count=1 -run 'TestKilledNodeLosesNothing|TestDrainThenStop' ./tests/chaos/
	SPIDERPOOL_RECORD_HISTORIES=$(HISTORY_SET) $(GO) test -count=1 -run 'TestGoProcessorItemsEqualTheShop' ./tests/processors/
	$(GO) test -count=1 -run TestReplayRecordedHistories ./workflows/

# The benchmark is its own module (bench/go.mod): Colly never enters spiderpool's.
# Five pairs: one crawl here varies by up to 15% from run to run, and the
# medians of three moved the processor ratio by as much.
BENCH_PAIRS ?= 5
bench: tools build
	cd bench && $(GO) build -o $(BIN)/bench . && $(BIN)/bench run -pairs $(BENCH_PAIRS) -spiderpool $(BIN)/spiderpool \
		&& $(BIN)/bench micro && $(BIN)/bench readme

bench-scale: tools build
	cd bench && $(GO) build -o $(BIN)/bench . && $(BIN)/bench scale -spiderpool $(BIN)/spiderpool && $(BIN)/bench readme

bench-polite: tools build
	cd bench && $(GO) build -o $(BIN)/bench . && $(BIN)/bench polite -spiderpool $(BIN)/spiderpool && $(BIN)/bench readme

# The polite campaign of issue 30 on pools of 3 and 48 node processes and
# of 100, 300 and 1,000 node identities (worker --replicas), behind
# PgBouncer in front of a Postgres with max_connections 100, then a kill -9
# of 100 identities and a drain of 100 mid-crawl (about 35 minutes).
# BENCH_NODES_FLAGS passes more, e.g. -only "3 nodes,48 nodes" -scale 0.25.
BENCH_NODES_FLAGS ?=
bench-nodes: tools pgbouncer build
	cd bench && $(GO) build -o $(BIN)/bench . && $(BIN)/bench nodes -spiderpool $(BIN)/spiderpool $(BENCH_NODES_FLAGS)

# One browser node against Crawlee's PuppeteerCrawler (bench/crawlee, its
# versions pinned by package-lock.json) on the synthetic single-page app,
# both rendering in Debian's Chromium (test-tools installs it, Node.js and
# npm). BENCH_RENDER_FLAGS passes more, e.g. -pairs 3 or -items 400.
BENCH_RENDER_FLAGS ?=
bench-render: tools test-tools build bench/crawlee/node_modules/.package-lock.json
	cd bench && $(GO) build -o $(BIN)/bench . && $(BIN)/bench render -spiderpool $(BIN)/spiderpool $(BENCH_RENDER_FLAGS) && $(BIN)/bench readme

bench/crawlee/node_modules/.package-lock.json: bench/crawlee/package.json bench/crawlee/package-lock.json
	cd bench/crawlee && npm ci --no-audit --no-fund

# PgBouncer (Debian package pgbouncer), for bench-nodes and the tests that
# run a pool behind it.
pgbouncer:
	@if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then exit 0; fi; \
	echo "installing PgBouncer (Debian package pgbouncer)"; \
	$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null

# Postgres alone: a 10M-row frontier loaded into a throwaway cluster (about
# 5 minutes; FRONTIER_DIR keeps it for the next run), every statement of a
# lease and an idle poll explained, LeaseHosts timed. It fails if one of
# them scans a table.
FRONTIER_ROWS ?= 10000000
FRONTIER_DIR ?=
FRONTIER_OUT ?= ../docs/scale-10m.txt
bench-frontier: postgres
	cd bench && $(GO) build -o $(BIN)/bench . && $(BIN)/bench frontier -rows $(FRONTIER_ROWS) -dir "$(if $(FRONTIER_DIR),$(abspath $(FRONTIER_DIR)))" -out $(FRONTIER_OUT)

FUZZTIME ?= 30s
fuzz:
	for f in FuzzCanonicalize FuzzResolve FuzzFastPathAgrees FuzzExtractLinks FuzzRobots FuzzRobotsGarbageLine FuzzSitemap; do \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./crawl/ || exit 1; \
	done

clean:
	rm -rf $(BIN) .spiderpool
