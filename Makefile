# sar-bridge: build, test and run. `make run` and `make test` do all set-up themselves.
GO          ?= go
BIN         := bin/sar-bridge
CACHE_DIR   ?= $(or $(SAR_BRIDGE_CACHE),$(HOME)/.cache/sar-bridge)
RUN_DIR     ?= $(CURDIR)/.cache/run
# Every go test of make test has its timeout here, and every package must finish within a
# third of it on 2 quiet cores (test-times, below, prints the slowest and flags any over).
UNIT_TIMEOUT  ?= 10m
FUZZ_TIMEOUT  ?= 10m
IMAGE_TIMEOUT ?= 10m
CHART_TIMEOUT ?= 20m
E2E_TIMEOUT   ?= 20m
LEDGER_TIMEOUT ?= 20m
GO_SOURCES  := $(shell find . -name '*.go' -not -path './test/*' -not -path './hack/*' -not -path './.cache/*') go.mod go.sum \
               $(wildcard policies/rego/*.rego) $(wildcard policies/rules/*/*.rego)

# The build's identity: VERSION (git describe, see hack/version.sh) and the commit go into
# the binary; the image is tagged with the release in the VERSION file, which is the tag
# manifests/base names.
VERSION     := $(shell hack/version.sh)
REVISION    := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_REPO  ?= ghcr.io/sar-bridge/sar-bridge
IMAGE_TAG   := $(shell cat VERSION)
IMAGE_DIR   := bin/image
IMAGE_OCI   := $(IMAGE_DIR)/sar-bridge-$(IMAGE_TAG).oci.tar
IMAGE_DOCKER:= $(IMAGE_DIR)/sar-bridge-$(IMAGE_TAG).docker.tar
PLATFORMS   := linux/amd64 linux/arm64
HOST_ARCH   := $(shell $(GO) env GOARCH)
# The commit's time makes image builds reproducible; without git, now.
CREATED     := $(shell git log -1 --format=%ct 2>/dev/null)
LDFLAGS     := -s -w -X github.com/sar-bridge/sar-bridge/internal/version.version=$(VERSION) \
               -X github.com/sar-bridge/sar-bridge/internal/version.revision=$(REVISION)
# Static, with no build paths: the same binary runs in the image, on an edge node and here.
GO_BUILD    := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

export SAR_BRIDGE_CACHE := $(CACHE_DIR)

# go test's exit status must survive the pipe into test-times.
SHELL       := bash
.SHELLFLAGS := -o pipefail -c

# test-times prints what go test would (results, failing tests' output) from its -json
# events and records each package's and test's time; `make test-times` lists the slowest.
TEST_TIMES  := $(CURDIR)/bin/test-times
TIMES_DIR   := $(CURDIR)/.cache/test-times
times        = | $(TEST_TIMES) -record $(TIMES_DIR) -stage $(1) -timeout $(2)

.PHONY: all build test unit e2e ledger-test lint controlplane deps bench run fuzz rego-test clean help generate generate-check \
        binaries image image-test FORCE helm chart-test opa bench-deps bench-http bench-scale bench-ledger \
        test-times times-reset docs

all: build

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: $(BIN) ## Build bin/sar-bridge.

# Always relinked (Go's cache keeps it quick), so the stamped version follows the commit.
$(BIN): FORCE
	$(GO_BUILD) -o $@ .

binaries: $(foreach p,$(PLATFORMS),bin/$(subst /,-,$(p))/sar-bridge) ## Static release binaries for each platform.

bin/linux-%/sar-bridge: FORCE
	GOOS=linux GOARCH=$* $(GO_BUILD) -o $@ .

image: binaries ## Container image without a daemon: an OCI archive (amd64+arm64) and a docker-load tarball.
	cd hack/image && $(GO) run . $(foreach p,$(PLATFORMS),--binary $(p)=$(CURDIR)/bin/$(subst /,-,$(p))/sar-bridge) \
		--repository $(IMAGE_REPO) --tag $(IMAGE_TAG) --version $(VERSION) --revision $(REVISION) \
		$(if $(CREATED),--created $(CREATED)) --docker-arch $(HOST_ARCH) \
		--oci-archive $(CURDIR)/$(IMAGE_OCI) --docker-archive $(CURDIR)/$(IMAGE_DOCKER)
	@echo "image: $(IMAGE_REPO):$(IMAGE_TAG) ($(VERSION)) in $(IMAGE_OCI) and $(IMAGE_DOCKER)"

image-test: image deps $(TEST_TIMES) ## Open the built image archives and run each platform's entrypoint in the image's own root.
	cd hack/image && SAR_BRIDGE_IMAGE_OCI=$(CURDIR)/$(IMAGE_OCI) SAR_BRIDGE_IMAGE_DOCKER=$(CURDIR)/$(IMAGE_DOCKER) \
		SAR_BRIDGE_IMAGE_REPOSITORY=$(IMAGE_REPO) SAR_BRIDGE_IMAGE_TAG=$(IMAGE_TAG) \
		SAR_BRIDGE_IMAGE_VERSION=$(VERSION) SAR_BRIDGE_IMAGE_REVISION=$(REVISION) \
		$(GO) test -json -count=1 -timeout $(IMAGE_TIMEOUT) ./... $(call times,image,$(IMAGE_TIMEOUT))

FORCE:

deps: ## Install what the tests need (Debian packages), when missing.
	@hack/deps.sh

controlplane: ## Build kube-apiserver and etcd into $(CACHE_DIR)/bin (once).
	@hack/controlplane.sh >/dev/null

helm: ## Build helm and kubectl (the versions hack/helm.sh pins) into $(CACHE_DIR)/bin (once).
	@hack/helm.sh >/dev/null

# The Helm chart, the interLink post-renderer and the systemd unit: run by chart-test,
# skipped by e2e so that make test runs them once.
CHART_TESTS := ^(TestChart|TestHelmPostRender|TestSystemdUnit)
chart-test: build deps controlplane helm $(TEST_TIMES) ## helm lint, renderings applied to a real kube-apiserver, chart RBAC, post-renderer, systemd unit.
	cd test && SAR_BRIDGE_BINARY=$(CURDIR)/$(BIN) SAR_BRIDGE_CONTROLPLANE_BIN=$(CACHE_DIR)/bin \
		SAR_BRIDGE_HELM=$(CACHE_DIR)/bin/helm SAR_BRIDGE_KUBECTL=$(CACHE_DIR)/bin/kubectl \
		$(GO) test -json -count=1 -timeout $(CHART_TIMEOUT) -run '$(CHART_TESTS)' ./e2e/ $(call times,chart,$(CHART_TIMEOUT))

# A cold run (empty Go caches, no ~/.cache/sar-bridge) takes about 45 minutes on 2 cores,
# most of it compiling Kubernetes; a warm one about 12. The slowest packages and tests,
# with their share of their timeouts, close the run.
test: times-reset lint unit image-test chart-test e2e ledger-test ## Unit tests, the image, then end-to-end tests against a real control plane; the slowest packages and tests.
	@$(TEST_TIMES) summary -record $(TIMES_DIR)

test-times: $(TEST_TIMES) ## The slowest packages and tests of the last test run, with their share of their timeouts.
	@$(TEST_TIMES) summary -record $(TIMES_DIR)

times-reset:
	@rm -rf $(TIMES_DIR)

$(TEST_TIMES): test/cmd/test-times/main.go
	cd test && $(GO) build -o $@ ./cmd/test-times

# The race detector makes the policy's sameness and property tests about 8 times slower
# and adds nothing to what they check (the policy's logic): under -race they compare a
# sample of their corpora, and the second run compares every input without it
# (policies/corpus_test.go).
unit: deps $(TEST_TIMES) ## Unit tests (with the race detector), Rego tests and fuzz seed corpora included, the policy's full corpora, then a short fuzz run.
	$(GO) test -json -race -count=1 -timeout $(UNIT_TIMEOUT) ./... $(call times,unit,$(UNIT_TIMEOUT))
	$(GO) test -json -count=1 -timeout $(UNIT_TIMEOUT) ./policies/ -corpus=full $(call times,corpus,$(UNIT_TIMEOUT))
	$(MAKE) --no-print-directory fuzz FUZZTIME=5000x FUZZTIME_LARGE=50x

e2e: build deps controlplane helm opa registry $(TEST_TIMES) ## End-to-end tests: real kube-apiserver, etcd, memcached, kubectl, OPA, an OCI registry and the binary.
	cd test && SAR_BRIDGE_BINARY=$(CURDIR)/$(BIN) SAR_BRIDGE_CONTROLPLANE_BIN=$(CACHE_DIR)/bin \
		SAR_BRIDGE_KUBECTL=$(CACHE_DIR)/bin/kubectl SAR_BRIDGE_OPA=$(CACHE_DIR)/bin/opa \
		SAR_BRIDGE_REGISTRY=$(CACHE_DIR)/bin/registry \
		$(GO) test -json -count=1 -timeout $(E2E_TIMEOUT) -skip '$(CHART_TESTS)|$(LEDGER_TESTS)' ./... $(call times,e2e,$(E2E_TIMEOUT))

# The quota ledger's end-to-end tests (bursts through three replicas, a replica killed and
# the API server restarted, quota slices): a stage of their own, so that neither it nor
# e2e needs more than a third of its timeout; skipped by e2e, run once by make test.
LEDGER_TESTS := ^(TestLedger|TestQuota)
ledger-test: build deps controlplane helm opa registry $(TEST_TIMES) ## End-to-end tests of the quota ledger: replicas, bursts, a replica killed, the API server restarted.
	cd test && SAR_BRIDGE_BINARY=$(CURDIR)/$(BIN) SAR_BRIDGE_CONTROLPLANE_BIN=$(CACHE_DIR)/bin \
		SAR_BRIDGE_KUBECTL=$(CACHE_DIR)/bin/kubectl SAR_BRIDGE_OPA=$(CACHE_DIR)/bin/opa \
		SAR_BRIDGE_REGISTRY=$(CACHE_DIR)/bin/registry \
		$(GO) test -json -count=1 -timeout $(LEDGER_TIMEOUT) -run '$(LEDGER_TESTS)' ./e2e/ $(call times,ledger,$(LEDGER_TIMEOUT))

lint: generate-check ## gofmt and go vet, in both modules; the generated CRD and deepcopy code up to date.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test && $(GO) vet ./...
	cd hack/image && $(GO) vet ./...

bench: deps ## Benchmarks of the decision path, the policy and the cache tiers, as ratios to same-run baselines.
	hack/bench.sh

bench-deps: ## Install what bench-http needs (wrk), when missing.
	@hack/deps.sh bench

opa: ## Build the OPA server (the version go.mod pins) into $(CACHE_DIR)/bin (once).
	@hack/opa.sh >/dev/null

registry: ## Build the CNCF distribution registry (the version hack/registry.sh pins) into $(CACHE_DIR)/bin (once).
	@hack/registry.sh >/dev/null

# Not part of make test: it measures and prints, it asserts nothing about speed.
bench-http: build bench-deps controlplane opa ## The binary, the OPA server and a bare Go floor under wrk: req/s, latency, CPU per request (ROUNDS, DURATION).
	hack/bench-http.sh

# Not part of make test either: 20,000 pods take a few minutes to create on 2 cores.
bench-scale: build controlplane ## Memory against the cluster's size: start-up, RSS and heap with N pods on ordinary nodes and M on a virtual node (ORDINARY, VIRTUAL, BASELINE).
	hack/bench-scale.sh

# Not part of make test either: three replicas decide a 1,000-pod array job twice.
bench-ledger: build controlplane ## The quota ledger across replicas: API writes per admitted pod, conflicts, batch sizes, decision latency with charging against without (PODS, WORKERS, REPLICAS, ROUNDS).
	hack/bench-ledger.sh

# docs/reference/flags.md is every command's --help; test/docs fails while the committed
# page differs from what this writes.
docs: build ## Regenerate docs/reference/flags.md from the built binary's --help.
	cd test && $(GO) run ./cmd/docgen -binary $(CURDIR)/$(BIN) -o $(CURDIR)/docs/reference/flags.md

run: build deps controlplane ## A local control plane, example RBAC and the bridge on loopback; Ctrl-C stops it all.
	cd test && $(GO) build -o $(CURDIR)/bin/local-cluster ./cmd/local-cluster
	exec bin/local-cluster --bridge $(CURDIR)/$(BIN) --dir $(RUN_DIR)

CONTROLLER_TOOLS_VERSION := v0.19.0
# The OffloadTenant CRD and its deepcopy functions, generated from apis/v1alpha1's types
# (committed; generate-check, part of lint, fails when they are not what this generates).
generate: ## Regenerate the OffloadTenant CRD and deepcopy code with controller-gen.
	$(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION) \
		object paths=./apis/v1alpha1/... \
		crd:crdVersions=v1 output:crd:dir=manifests/crds paths=./apis/v1alpha1/...
	cp manifests/crds/sar-bridge.io_offloadtenants.yaml charts/sar-bridge/crds/

generate-check: ## Fail when the committed CRD or deepcopy code is not what controller-gen generates from the types.
	@CONTROLLER_TOOLS_VERSION=$(CONTROLLER_TOOLS_VERSION) GO=$(GO) hack/generate-check.sh

OPA_VERSION := $(shell awk '$$1 == "github.com/open-policy-agent/opa" {print $$2}' go.mod)
# The opa CLI does not know the cluster built-ins (k8s.get, k8s.list): the
# compatibility package and its tests are left to `go test ./policies/`.
rego-test: ## The Rego tests under the opa CLI itself (the version go.mod pins).
	$(GO) run github.com/open-policy-agent/opa@$(OPA_VERSION) test policies/ -v --timeout 2m --ignore 'kubernetes_api_client*' --ignore examples --ignore samples --ignore rule.json

# Budgets are counts of executions, not durations: Go 1.26's fuzz coordinator can fail a
# duration-bound run with a spurious "context deadline exceeded" (golang/go#75804).
FUZZTIME ?= 300000x
# Pods up to the largest Kubernetes stores take up to a second each.
FUZZTIME_LARGE ?= 2000x
# fuzz1 pkg,Target,executions: one fuzz target.
fuzz1 = $(GO) test -json -run '^$$' -fuzz '^$(2)$$' -fuzztime $(3) -timeout $(FUZZ_TIMEOUT) ./$(1)/ $(call times,fuzz-$(2),$(FUZZ_TIMEOUT))
fuzz: $(TEST_TIMES) ## Fuzz request decoding, the decision pipeline and the sbatch and container-option parsers, $(FUZZTIME) executions per target ($(FUZZTIME_LARGE) of the largest pods).
	$(call fuzz1,internal/server,FuzzDataAPI,$(FUZZTIME))
	$(call fuzz1,internal/authorizer,FuzzDecide,$(FUZZTIME))
	$(call fuzz1,internal/authorizer,FuzzAllowAllReviewer,$(FUZZTIME))
	$(call fuzz1,internal/strictjson,FuzzCheck,$(FUZZTIME))
	$(call fuzz1,internal/authorizer,FuzzLargePods,$(FUZZTIME_LARGE))
	$(call fuzz1,internal/slurmjob,FuzzParse,$(FUZZTIME))
	$(call fuzz1,internal/slurmjob,FuzzContainerArgs,$(FUZZTIME))

clean: ## Remove built binaries and local run state (not the control-plane cache).
	rm -rf bin test/bin .cache
