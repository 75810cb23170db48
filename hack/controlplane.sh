#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from the Go module proxy into a
# cache directory, once. Later runs reuse the binaries; a version change rebuilds.
#
# Each binary is built in a throwaway module under the cache directory, so the project's own
# go.mod never requires k8s.io/kubernetes.
#
#   hack/controlplane.sh        # build what is missing, print the bin directory
#
# Environment: SAR_BRIDGE_CACHE (default $HOME/.cache/sar-bridge),
#              KUBE_VERSION (default v1.34.4), ETCD_VERSION (default v3.6.5).
set -euo pipefail

kube_version=${KUBE_VERSION:-v1.34.4}
etcd_version=${ETCD_VERSION:-v3.6.5}
cache=${SAR_BRIDGE_CACHE:-$HOME/.cache/sar-bridge}
bin="$cache/bin"
src="$cache/src"
mkdir -p "$bin" "$src"

log() { printf 'controlplane: %s\n' "$*" >&2; }

# One builder at a time: make test and make run may start together.
exec 9>"$cache/.build.lock"
flock 9

# have NAME VERSION: the binary exists and was built for this version.
have() { [ -x "$bin/$1" ] && [ "$(cat "$bin/$1.version" 2>/dev/null)" = "$2" ]; }

build_kube_apiserver() {
  local dir="$src/kube-apiserver-$kube_version" staging="v0${kube_version#v1}"
  mkdir -p "$dir"
  log "building kube-apiserver $kube_version (first time only: ~7 min on 2 cores, ~4 GB of Go caches)"
  local modfile
  modfile=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$kube_version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  {
    echo "module sar-bridge.local/controlplane"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $kube_version"
    echo
    echo "replace ("
    # Every staging module the kubernetes module replaces with a local path is taken
    # from the proxy at the matching v0 version instead.
    sed -n '/^replace (/,/^)/p' "$modfile" | awk -v v="$staging" '$2 == "=>" {print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$dir/go.mod"
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package controlplane

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  local pkg=k8s.io/component-base/version cgv=k8s.io/client-go/pkg/version
  local major minor date
  major=$(echo "$kube_version" | sed -E 's/^v([0-9]+)\..*/\1/')
  minor=$(echo "$kube_version" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ldflags=""
  for p in $pkg $cgv; do
    ldflags+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  (cd "$dir" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" \
    -o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
  echo "$kube_version" >"$bin/kube-apiserver.version"
}

build_etcd() {
  local dir="$src/etcd-$etcd_version"
  mkdir -p "$dir"
  log "building etcd $etcd_version (first time only: ~1 min)"
  cat >"$dir/go.mod" <<MOD
module sar-bridge.local/etcd

go 1.24.0

require go.etcd.io/etcd/server/v3 $etcd_version
MOD
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package etcd

import _ "go.etcd.io/etcd/server/v3"
GO
  (cd "$dir" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$bin/etcd.tmp" "$bin/etcd"
  echo "$etcd_version" >"$bin/etcd.version"
}

have etcd "$etcd_version" || build_etcd
have kube-apiserver "$kube_version" || build_kube_apiserver
echo "$bin"
