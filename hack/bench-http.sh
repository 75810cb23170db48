#!/usr/bin/env bash
# make bench-http: the real bridge binary, the OPA server (the version go.mod pins, same
# policy, data and input) and a bare Go net/http floor, each loaded by wrk in rotated
# rounds, for three workloads: distinct pod specs, a 1,000-pod array job and HPC pods
# (sbatch flags with values, a flavor, a mount, a uid; the tenant's HPC settings added to
# the policy data of both servers). Before any
# timing, a sample of each workload must get the same result from the bridge and OPA.
# It prints, per workload and target, the medians of req/s at 32 connections, p50, p99,
# req/s at 1 connection and server CPU per request, then the bridge's ratios to OPA and
# to the floor. It measures only: nothing here passes or fails on a figure.
#
#   hack/bench-http.sh                     # needs bin/sar-bridge, wrk, the control plane
#   ROUNDS=1 DURATION=3s hack/bench-http.sh   # a quick smoke run
#
# Environment: ROUNDS (3), DURATION (10s per wrk run), WARMUP (2s per target and
# workload), CONNECTIONS (32), THREADS (1: wrk and the servers share the machine's
# cores), BRIDGE_ARGS (extra sar-bridge flags, split on spaces), SAR_BRIDGE_CACHE,
# BENCH_KEEP=1 keeps the temporary directory (logs, bodies, raw results),
# PROFILE=DIR writes a CPU profile of the bridge under each workload's first 32-connection
# round to DIR/<workload>.pprof (`go tool pprof -top bin/sar-bridge DIR/arrayjob.pprof`;
# the bridge then runs with --web.enable-pprof), WORKLOADS (distinct arrayjob hpc) runs
# only those.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
warmup=${WARMUP:-2s}
connections=${CONNECTIONS:-32}
threads=${THREADS:-1}
bridge_bin=$root/bin/sar-bridge
lua=$root/hack/benchhttp/workload.lua
# The tenant the example RBAC (manifests/examples) sets up, and its API group.
namespace=team-a
group=interlink.io

log() { printf 'bench-http: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ -x "$bridge_bin" ] || die "$bridge_bin is missing: make build"
command -v wrk >/dev/null 2>&1 || die "wrk is missing: hack/deps.sh bench"
opa=$(hack/opa.sh)
controlplane_bin=$(hack/controlplane.sh)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sar-bridge-bench-http.XXXXXX")
pids=()
cleanup() {
  local pid
  # Newest first: the bridge goes before the control plane it watches.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid=${pids[i]}
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ "${BENCH_KEEP:-}" = 1 ]; then
    log "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building the helpers (test/cmd/bench-http, test/cmd/local-cluster)"
(cd test && go build -o "$tmp/bench-http" ./cmd/bench-http && go build -o "$tmp/local-cluster" ./cmd/local-cluster)
helper=$tmp/bench-http

# The control plane with manifests/base and manifests/examples applied (as make run).
log "starting the control plane (logs in $tmp/cluster.log)"
"$tmp/local-cluster" --dir "$tmp/cluster" --bin-dir "$controlplane_bin" --memcached=false >"$tmp/cluster.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do
  [ -e "$tmp/cluster/ready" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$tmp/cluster.log" >&2; die "the control plane did not start"; }
  sleep 0.5
done
[ -e "$tmp/cluster/ready" ] || die "the control plane was not ready in 5 minutes"
# ADMIN_KUBECONFIG, SAR_BRIDGE_KUBECONFIG, SAR_BRIDGE_POLICY_DATA (the ConfigMap's data).
# shellcheck disable=SC1091
. "$tmp/cluster/env"

"$helper" prepare --kubeconfig "$ADMIN_KUBECONFIG" --out "$tmp/bodies" --namespace "$namespace" --group "$group" \
  --policy-data "$SAR_BRIDGE_POLICY_DATA"
# The cluster's policy data plus the tenant's HPC settings (the hpc workload's), for both.
policy_data=$tmp/bodies/policy-data.json

mapfile -t port < <("$helper" ports 4)
bridge_url=http://127.0.0.1:${port[0]}/v1/data/interlink/authz/decision
opa_url=http://127.0.0.1:${port[2]}/v1/data/interlink/authz/decision
floor_url=http://127.0.0.1:${port[3]}/

# The bridge as make run starts it, less memcached: reviews are cached in process.
pprof_flag=()
[ -z "${PROFILE:-}" ] || pprof_flag=(--web.enable-pprof)
# shellcheck disable=SC2086 # BRIDGE_ARGS is a list of flags
"$bridge_bin" --kubeconfig="$SAR_BRIDGE_KUBECONFIG" --openshift.mappings="$namespace=$group" "${pprof_flag[@]}" \
  --policies.data="$policy_data" \
  --web.listen="127.0.0.1:${port[0]}" --web.internal.listen="127.0.0.1:${port[1]}" ${BRIDGE_ARGS:-} >"$tmp/bridge.log" 2>&1 &
pids+=($!)
bridge_pid=$!
# The policy files the bridge embeds (policies/rego and each rule's in policies/rules,
# tests aside), the same data; not the kubernetes.api.client package, which calls the
# bridge's own k8s.* built-ins.
mapfile -t rego < <(find policies/rego policies/rules -name '*.rego' ! -name '*_test.rego' ! -name 'kubernetes_api_client*' | sort)
"$opa" run --server --skip-version-check --addr "127.0.0.1:${port[2]}" "${rego[@]}" "$policy_data" >"$tmp/opa.log" 2>&1 &
pids+=($!)
opa_pid=$!
"$helper" floor --listen "127.0.0.1:${port[3]}" >"$tmp/floor.log" 2>&1 &
pids+=($!)
floor_pid=$!

"$helper" wait "http://127.0.0.1:${port[1]}/ready" "http://127.0.0.1:${port[2]}/health" "$floor_url" ||
  { tail -n 20 "$tmp/bridge.log" "$tmp/opa.log" >&2; die "a server did not start"; }
log "bridge $("$bridge_bin" --version 2>&1 | head -n 1), OPA $("$opa" version | sed -n 's/^Version: //p')"

"$helper" check --bodies "$tmp/bodies" --bridge "$bridge_url" --opa "$opa_url" --floor "$floor_url" ||
  { tail -n 5 "$tmp/bridge.log" >&2; die "the bridge and the OPA server must agree before anything is timed"; }

# cpu_ticks PID: user + system time of a process so far, in clock ticks (all threads).
cpu_ticks() {
  local stat rest
  stat=$(<"/proc/$1/stat")
  rest=${stat##*) } # after the command name, which may hold spaces
  read -ra f <<<"$rest"
  echo $((f[11] + f[12])) # fields 14 and 15: utime, stime
}
clk_tck=$(getconf CLK_TCK)

declare -A url=([floor]=$floor_url [opa]=$opa_url [bridge]=$bridge_url)
declare -A pid=([floor]=$floor_pid [opa]=$opa_pid [bridge]=$bridge_pid)
declare -A body=([floor]=bridge [opa]=opa [bridge]=bridge) # the floor gets the bridge's request
targets=(floor opa bridge)
results=$tmp/results
: >"$results"
seq_no=0

# load WORKLOAD TARGET CONNECTIONS DURATION [ROUND]: one wrk run; with ROUND, its figures
# go to the results.
load() {
  local workload=$1 target=$2 conns=$3 dur=$4 round=${5:-} out before after line mode
  # Distinct pods stay distinct across runs: each run numbers from its own range.
  seq_no=$((seq_no + 1))
  if [ -n "${PROFILE:-}" ] && [ "$target" = bridge ] && [ "$round" = 1 ] && [ "$conns" = "$connections" ]; then
    mkdir -p "$PROFILE"
    # The profile spans the run but its first and last second, when wrk ramps.
    curl -fsS -o "$PROFILE/$workload.pprof" \
      "http://127.0.0.1:${port[1]}/debug/pprof/profile?seconds=$(( ${dur%s} > 3 ? ${dur%s} - 2 : 1 ))" &
  fi
  before=$(cpu_ticks "${pid[$target]}")
  # The hpc workload's pods are numbered as distinct ones: each a new pod.
  mode=distinct
  [ "$workload" != arrayjob ] || mode=arrayjob
  out=$(wrk -t"$threads" -c"$conns" -d"$dur" --timeout 10s -s "$lua" "${url[$target]}" -- \
    "$tmp/bodies/$workload.${body[$target]}.json" "$mode" $((100000000 + seq_no * 10000000)) "$threads")
  after=$(cpu_ticks "${pid[$target]}")
  line=$(grep '^BENCH ' <<<"$out") || { printf '%s\n' "$out" >&2; die "wrk printed no figures"; }
  [ -n "$round" ] || return 0
  # "BENCH requests=R duration_us=D p50_us=P p99_us=Q errors=E" -> R D P Q E
  read -r requests duration_us p50 p99 errors < <(sed 's/[a-z0-9_]*=//g; s/^BENCH //' <<<"$line")
  echo "$workload $target $conns $round $requests $duration_us $p50 $p99 $errors $((after - before)) $clk_tck" >>"$results"
  log "$(printf '%-8s round %s %-6s c%-3s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  errors %s' "$workload" "$round" "$target" "$conns" \
    "$(awk -v r="$requests" -v d="$duration_us" 'BEGIN { print r / (d / 1e6) }')" \
    "$(awk -v v="$p50" 'BEGIN { print v / 1000 }')" "$(awk -v v="$p99" 'BEGIN { print v / 1000 }')" "$errors")"
}

for workload in ${WORKLOADS:-distinct arrayjob hpc}; do
  for target in "${targets[@]}"; do
    load "$workload" "$target" "$connections" "$warmup"
  done
  # Rotated so that no target always runs first, or right after the same neighbour.
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < ${#targets[@]}; k++)); do
      target=${targets[(r + k) % ${#targets[@]}]}
      load "$workload" "$target" "$connections" "$duration" $((r + 1))
      load "$workload" "$target" 1 "$duration" $((r + 1))
    done
  done
done

echo
echo "make bench-http: $rounds round(s) of $duration per target, wrk -t$threads -c$connections and -c1, $(nproc) cores shared by wrk and the servers"
"$helper" report "$results"
