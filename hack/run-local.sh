#!/usr/bin/env bash
# Runs sar-bridge against a local control plane (etcd + kube-apiserver, built once by
# hack/controlplane.sh) with manifests/base RBAC and manifests/examples applied.
#
#   hack/run-local.sh [extra sar-bridge flags...]
#
# The bridge listens on :8080 (decisions) and :8081 (/live, /ready, /metrics) unless
# flags say otherwise, and authenticates as the ServiceAccount sar-bridge/sar-bridge.
# Ctrl-C stops the bridge and the control plane.
#
# Environment: SAR_BRIDGE_LOCAL_DIR (default ${TMPDIR:-/tmp}/sar-bridge-local) receives
# admin.kubeconfig, sar-bridge.kubeconfig and policy-data.yaml; SAR_BRIDGE_CACHE as for
# hack/controlplane.sh.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${SAR_BRIDGE_LOCAL_DIR:-${TMPDIR:-/tmp}/sar-bridge-local}
mkdir -p "$dir" "$root/bin" "$root/test/bin"

log() { printf 'run-local: %s\n' "$*" >&2; }

bins=$("$root/hack/controlplane.sh")
log "building bin/sar-bridge and test/bin/local-cluster"
(cd "$root" && go build -o bin/sar-bridge .)
(cd "$root/test" && go build -o bin/local-cluster ./cmd/local-cluster)

rm -f "$dir/ready"
"$root/test/bin/local-cluster" --dir "$dir" --root "$root" --bin-dir "$bins" &
cluster_pid=$!
bridge_pid=

cleanup() {
  trap - EXIT INT TERM
  if [ -n "$bridge_pid" ] && kill -0 "$bridge_pid" 2>/dev/null; then
    kill -TERM "$bridge_pid" 2>/dev/null || true
    wait "$bridge_pid" 2>/dev/null || true
  fi
  if kill -0 "$cluster_pid" 2>/dev/null; then
    kill -TERM "$cluster_pid" 2>/dev/null || true
    wait "$cluster_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

for _ in $(seq 1 240); do
  [ -f "$dir/ready" ] && break
  kill -0 "$cluster_pid" 2>/dev/null || { log "local-cluster exited"; exit 1; }
  sleep 0.5
done
[ -f "$dir/ready" ] || { log "local-cluster not ready after 120s"; exit 1; }

log "starting sar-bridge (Ctrl-C to stop)"
"$root/bin/sar-bridge" \
  --kubeconfig="$dir/sar-bridge.kubeconfig" \
  --openshift.mappings=team-a=interlink.io \
  --policies.data="$dir/policy-data.yaml" \
  "$@" &
bridge_pid=$!
wait "$bridge_pid"
