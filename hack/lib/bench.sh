# Sourced by hack/bench-ledger.sh and hack/bench-scale.sh (from the repository root, as
# root=$PWD): what both do around their Go helper, test/cmd/NAME.
#
#   bench_init NAME    # log and die prefixed with NAME; $bridge (BRIDGE, default
#                      # bin/sar-bridge), checked; $controlplane_bin; $tmp, removed on exit
#                      # unless BENCH_KEEP=1; the helper built into $tmp/NAME
#   bench_run ARGS...  # the helper on the control plane, working in $tmp/run (kept with $tmp)

bench_init() {
  bench_name=$1
  bridge=${BRIDGE:-$root/bin/sar-bridge}
  [ -x "$bridge" ] || die "$bridge is missing: make build"
  controlplane_bin=$(hack/controlplane.sh)

  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sar-bridge-$bench_name.XXXXXX")
  trap bench_cleanup EXIT

  log "building the helper (test/cmd/$bench_name)"
  (cd test && go build -o "$tmp/$bench_name" "./cmd/$bench_name")
}

log() { printf '%s: %s\n' "$bench_name" "$*" >&2; }
die() { log "$*"; exit 1; }

bench_cleanup() {
  if [ "${BENCH_KEEP:-}" = 1 ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}

bench_run() {
  SAR_BRIDGE_ROOT=$root "$tmp/$bench_name" --bin-dir "$controlplane_bin" --dir "$tmp/run" --keep "$@"
}
