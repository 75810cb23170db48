# sar-bridge: build, test and run. `make run` and `make test` do all set-up themselves.
GO          ?= go
BIN         := bin/sar-bridge
CACHE_DIR   ?= $(or $(SAR_BRIDGE_CACHE),$(HOME)/.cache/sar-bridge)
RUN_DIR     ?= $(CURDIR)/.cache/run
E2E_TIMEOUT ?= 20m
GO_SOURCES  := $(shell find . -name '*.go' -not -path './test/*' -not -path './.cache/*') go.mod go.sum \
               $(wildcard policies/rego/*.rego)

export SAR_BRIDGE_CACHE := $(CACHE_DIR)

.PHONY: all build test unit e2e lint controlplane deps bench run fuzz rego-test clean help

all: build

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: $(BIN) ## Build bin/sar-bridge.

$(BIN): $(GO_SOURCES)
	$(GO) build -trimpath -o $@ .

deps: ## Install what the tests need (Debian packages), when missing.
	@hack/deps.sh

controlplane: ## Build kube-apiserver and etcd into $(CACHE_DIR)/bin (once).
	@hack/controlplane.sh >/dev/null

test: lint unit e2e ## Unit tests, then end-to-end tests against a real control plane.

unit: ## Unit tests (with the race detector), Rego tests and fuzz seed corpora included, then a short fuzz run.
	$(GO) test -race -count=1 ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=5000x

e2e: build deps controlplane ## End-to-end tests: real kube-apiserver, etcd, memcached and the binary.
	cd test && SAR_BRIDGE_BINARY=$(CURDIR)/$(BIN) SAR_BRIDGE_CONTROLPLANE_BIN=$(CACHE_DIR)/bin \
		$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./...

lint: ## gofmt and go vet, in both modules.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test && $(GO) vet ./...

bench: deps ## Benchmarks of the decision path, the policy and the cache tiers, as ratios to same-run baselines.
	hack/bench.sh

run: build controlplane ## A local control plane, example RBAC and the bridge on loopback; Ctrl-C stops it all.
	cd test && $(GO) build -o $(CURDIR)/bin/local-cluster ./cmd/local-cluster
	exec bin/local-cluster --bridge $(CURDIR)/$(BIN) --dir $(RUN_DIR)

OPA_VERSION := $(shell awk '$$1 == "github.com/open-policy-agent/opa" {print $$2}' go.mod)
rego-test: ## The Rego tests under the opa CLI itself (the version go.mod pins).
	$(GO) run github.com/open-policy-agent/opa@$(OPA_VERSION) test policies/ -v

# Budgets are counts of executions, not durations: Go 1.26's fuzz coordinator can fail a
# duration-bound run with a spurious "context deadline exceeded" (golang/go#75804).
FUZZTIME ?= 300000x
fuzz: ## Fuzz request decoding and the decision pipeline, $(FUZZTIME) executions per target.
	$(GO) test -run '^$$' -fuzz '^FuzzDataAPI$$' -fuzztime $(FUZZTIME) ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $(FUZZTIME) ./authorizer/
	$(GO) test -run '^$$' -fuzz '^FuzzAllowAllReviewer$$' -fuzztime $(FUZZTIME) ./authorizer/

clean: ## Remove built binaries and local run state (not the control-plane cache).
	rm -rf bin test/bin .cache
