#!/usr/bin/env bash
# Builds the chart tests' tools from the Go module proxy into the cache directory, once,
# each in a throwaway module (as hack/controlplane.sh does for the control plane), so the
# project's go.mod never requires them: helm, and kubectl (for `kubectl auth can-i`, at
# the control plane's Kubernetes version). A version change rebuilds.
#
#   hack/helm.sh        # build what is missing, print helm's path (kubectl is beside it)
#
# Environment: SAR_BRIDGE_CACHE (default $HOME/.cache/sar-bridge),
#              HELM_VERSION (default v3.21.4), KUBECTL_VERSION (default v0.34.4, the
#              k8s.io/kubectl module of Kubernetes v1.34.4).
set -euo pipefail

helm_version=${HELM_VERSION:-v3.21.4}
kubectl_version=${KUBECTL_VERSION:-v0.34.4}
cache=${SAR_BRIDGE_CACHE:-$HOME/.cache/sar-bridge}
bin="$cache/bin"
dir="$cache/src/helm-$helm_version"
mkdir -p "$bin" "$dir"

exec 9>"$cache/.helm.lock"
flock 9

have() { [ -x "$bin/$1" ] && [ "$(cat "$bin/$1.version" 2>/dev/null)" = "$2" ]; }

build_helm() {
  printf 'helm: building helm %s (first time only: a few minutes)\n' "$helm_version" >&2
  cat >"$dir/go.mod" <<MOD
module sar-bridge.local/helm

go 1.24.0

require helm.sh/helm/v3 $helm_version
MOD
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package helm

import _ "helm.sh/helm/v3/cmd/helm"
GO
  (cd "$dir" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  # helm reports its version from internal/version; stamp it as its own Makefile does.
  (cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    -o "$bin/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$bin/helm.tmp" "$bin/helm"
  echo "$helm_version" >"$bin/helm.version"
}

# kubectl's main lives in k8s.io/kubernetes; these few lines are all it does.
build_kubectl() {
  local kdir="$cache/src/kubectl-$kubectl_version"
  mkdir -p "$kdir"
  printf 'helm: building kubectl %s (first time only: a few minutes)\n' "$kubectl_version" >&2
  cat >"$kdir/go.mod" <<MOD
module sar-bridge.local/kubectl

go 1.24.0

require k8s.io/kubectl $kubectl_version
MOD
  cat >"$kdir/main.go" <<'GO'
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
GO
  (cd "$kdir" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  # kubectl v1.X.Y is built from the k8s.io/kubectl module v0.X.Y; stamp the version it reports.
  local gv="v1.${kubectl_version#v0.}" ldflags="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$gv -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$gv" | cut -d. -f2) -X $p.gitTreeState=clean"
  done
  (cd "$kdir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/kubectl.tmp" .)
  mv "$bin/kubectl.tmp" "$bin/kubectl"
  echo "$kubectl_version" >"$bin/kubectl.version"
}

have helm "$helm_version" || build_helm
have kubectl "$kubectl_version" || build_kubectl
echo "$bin/helm"
