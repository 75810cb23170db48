#!/usr/bin/env bash
# make bench-ledger: what the tenants' quota ledger (OffloadTenant status, issue 33)
# costs. In one test control plane (kube-apiserver and etcd), REPLICAS bridge processes
# share the ledger and elect one reconciler; an array job of PODS pods (stored and bound
# to a virtual node, each its own name, UID and completion index) is decided through the
# Data API, WORKERS at a time, round-robin over the replicas: once for a tenant without
# hard amounts, once for a tenant whose hard.pods admits the whole job, then for tenants
# whose hard.pods is exactly the job's size and half of it (all admitted; exactly half).
# It prints the decision latency (p50, p90, p99, max) of each, and for the charged jobs the ledger writes
# per admitted pod (sar_bridge_ledger_writes_total{result="success"} of every replica),
# the conflicts, the charges per write, the status writes the API server served, and how
# long the decision path's ledger rounds took (sar_bridge_ledger_write_seconds) and how
# many creates waited for the ledger at all (sar_bridge_ledger_wait_seconds); and where
# each phase's time went: when the creates slower than the uncharged p99 + 20 ms started
# in the burst (windows of 250 ms, allowed and refused apart), the CPU seconds of the API
# server and the replicas, and the API server's requests by verb and resource. It
# measures only: nothing here passes or fails on a figure.
#
#   hack/bench-ledger.sh                          # needs bin/sar-bridge and the control plane
#   PODS=200 hack/bench-ledger.sh                 # a quick run
#   BRIDGE=/tmp/other/sar-bridge hack/bench-ledger.sh
#
# Environment: PODS (1000), WORKERS (32 decisions in flight), REPLICAS (3), ROUNDS (1:
# how many times the pair without/with charging is run, each with a job of its own),
# BRIDGE (bin/sar-bridge), BRIDGE_ARGS (extra flags for every replica, e.g.
# "--kube.qps=500 --kube.burst=1000"), BENCH_KEEP=1 keeps the working directory (logs),
# SAR_BRIDGE_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

. hack/lib/bench.sh
bench_init bench-ledger

args=(--bridge "$bridge" --pods "${PODS:-1000}" --workers "${WORKERS:-32}" --replicas "${REPLICAS:-3}" --rounds "${ROUNDS:-1}")
for a in ${BRIDGE_ARGS:-}; do args+=(--bridge-arg "$a"); done
bench_run "${args[@]}"
