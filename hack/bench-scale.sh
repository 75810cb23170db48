#!/usr/bin/env bash
# make bench-scale: what the size of the cluster costs the bridge. In one test control
# plane (kube-apiserver and etcd, no scheduler: pods are bound by spec.nodeName), with
# M pods on a virtual node and a quota for their tenant (an OffloadTenant, the M pods
# charged and confirmed: the bridge, the only replica, leads the ledger's reconciler and
# follows them), the
# built binary is started three times: with no other pod, with M + VIRTUAL_MORE virtual
# pods (the cost per virtual pod), and with N pods on ordinary nodes. It prints, for
# each, the time to /ready and, SETTLE after it, RSS, peak RSS and heap in use, then the
# growth with N (issue 35 bounds it at 10 %) and the cost per virtual pod. It measures
# only: nothing here passes or fails on a figure.
#
#   hack/bench-scale.sh                          # needs bin/sar-bridge and the control plane
#   ORDINARY=2000 hack/bench-scale.sh            # a quick run
#   BASELINE=/tmp/old/sar-bridge hack/bench-scale.sh   # also measure another binary (e.g. a release)
#
# The live heap is read right after the collection /debug/pprof/heap?gc=1 runs, so the
# bridge runs with --web.enable-pprof on loopback; a BASELINE that needs flags takes them
# after commas (BASELINE=/path/sar-bridge,--web.enable-pprof). A BASELINE from before
# OffloadTenants finds its quota in the policy data instead: add ,quotas=data
# (BASELINE=/tmp/v0.1/sar-bridge,quotas=data).
#
# Environment: ORDINARY (N, 20000), VIRTUAL (M, 200), VIRTUAL_MORE (1800), WORKERS (32
# concurrent creates), SETTLE (8s), BRIDGE (bin/sar-bridge), BASELINE (another binary to
# measure beside it), STREAMING_OFF=1 also measures the binary with client-go's streaming
# lists off (KUBE_FEATURE_WatchListClient=false), PROFILES=DIR writes each bridge's heap
# profile after the collection to DIR/<phase>-<bridge>.pprof, BENCH_KEEP=1 keeps the
# working directory (logs), SAR_BRIDGE_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

. hack/lib/bench.sh
bench_init bench-scale

args=(--ordinary "${ORDINARY:-20000}" --virtual "${VIRTUAL:-200}" --virtual-more "${VIRTUAL_MORE:-1800}"
  --workers "${WORKERS:-32}" --settle "${SETTLE:-8s}" --bridge "sar-bridge=$bridge,--web.enable-pprof")
[ "${STREAMING_OFF:-}" = 1 ] && args+=(--bridge "no-streaming=$bridge,--web.enable-pprof,KUBE_FEATURE_WatchListClient=false")
[ -n "${BASELINE:-}" ] && args+=(--bridge "baseline=$BASELINE")
if [ -n "${PROFILES:-}" ]; then
  mkdir -p "$PROFILES"
  args+=(--profiles "$PROFILES")
fi
bench_run "${args[@]}"
