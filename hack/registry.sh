#!/usr/bin/env bash
# Builds the CNCF distribution registry (the `registry` command of
# github.com/distribution/distribution/v3) into the cache directory, once, for the end-to-end
# tests that serve OPA bundles from a real OCI registry. `go install pkg@version` builds
# outside any module, from the Go module proxy, so the project's go.mod is not touched (the
# module has no replace directives, which `go install pkg@version` would refuse). A version
# change rebuilds.
#
#   hack/registry.sh        # build when missing or stale, print the registry's path
#
# Environment: SAR_BRIDGE_CACHE (default $HOME/.cache/sar-bridge),
#              DISTRIBUTION_VERSION (default v3.1.2). Not REGISTRY_VERSION: the registry
#              reads REGISTRY_* variables as configuration overrides.
set -euo pipefail

version=${DISTRIBUTION_VERSION:-v3.1.2}
pkg=github.com/distribution/distribution/v3
cache=${SAR_BRIDGE_CACHE:-$HOME/.cache/sar-bridge}
bin="$cache/bin"
mkdir -p "$bin"

exec 9>"$cache/.registry.lock"
flock 9

if [ ! -x "$bin/registry" ] || [ "$(cat "$bin/registry.version" 2>/dev/null)" != "$version" ]; then
  printf 'registry: building distribution registry %s (first time only: a few minutes)\n' "$version" >&2
  # Into a scratch GOBIN first, so an interrupted build never leaves a stale registry
  # behind a fresh stamp.
  tmp=$(mktemp -d "$bin/.registry-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # The version is stamped as the project's own Makefile does (`registry --version`).
  GOBIN=$tmp CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X $pkg/version.version=$version -X $pkg/version.mainpkg=$pkg" \
    "$pkg/cmd/registry@$version"
  mv "$tmp/registry" "$bin/registry"
  echo "$version" >"$bin/registry.version"
fi
echo "$bin/registry"
