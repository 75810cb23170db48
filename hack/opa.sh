#!/usr/bin/env bash
# Builds the OPA server (the opa CLI) at the version go.mod pins into the cache directory,
# once, for make bench-http (the bridge is compared with the very evaluator it embeds) and for
# the e2e tests that build, sign and serve OPA bundles (opa build, opa run).
# `go install pkg@version` builds outside any module, so the project's go.mod is not
# touched. A version change (go.mod bumps OPA) rebuilds.
#
#   hack/opa.sh        # build when missing or stale, print opa's path
#
# Environment: SAR_BRIDGE_CACHE (default $HOME/.cache/sar-bridge),
#              OPA_VERSION (default: the github.com/open-policy-agent/opa version in go.mod).
set -euo pipefail
cd "$(dirname "$0")/.."

opa_version=${OPA_VERSION:-$(awk '$1 == "github.com/open-policy-agent/opa" {print $2}' go.mod)}
[ -n "$opa_version" ] || { echo "opa: no github.com/open-policy-agent/opa in go.mod" >&2; exit 1; }
cache=${SAR_BRIDGE_CACHE:-$HOME/.cache/sar-bridge}
bin="$cache/bin"
mkdir -p "$bin"

exec 9>"$cache/.opa.lock"
flock 9

if [ ! -x "$bin/opa" ] || [ "$(cat "$bin/opa.version" 2>/dev/null)" != "$opa_version" ]; then
  printf 'opa: building opa %s (first time only: a few minutes)\n' "$opa_version" >&2
  # Into a scratch GOBIN first, so an interrupted build never leaves a stale opa behind
  # a fresh stamp.
  tmp=$(mktemp -d "$bin/.opa-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  GOBIN=$tmp CGO_ENABLED=0 go install -trimpath -ldflags '-s -w' \
    "github.com/open-policy-agent/opa@$opa_version"
  mv "$tmp/opa" "$bin/opa"
  echo "$opa_version" >"$bin/opa.version"
fi
echo "$bin/opa"
