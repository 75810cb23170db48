#!/usr/bin/env bash
# Runs the benchmarks and reports each figure as a ratio to a baseline measured in the
# same run, since absolute times on a shared 2-core machine vary from run to run.
#
#   hack/bench.sh            # COUNT=5 by default; the fastest of the runs is kept
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench '^BenchmarkGetHit$' -benchtime 20000x -count "$count" ./internal/cache/ | tee -a "$out"
go test -run '^$' -bench '^BenchmarkOpen$' -benchmem -count "$count" ./internal/cache/ | tee -a "$out"
go test -run '^$' -bench '^(BenchmarkEvalDecision|BenchmarkDecide)$' -benchmem -count "$count" ./policies/ ./internal/authorizer/ | tee -a "$out"
# Tenant offload quotas: a decision with a quota and 10,000 pods on virtual nodes beside
# one without, and the ledger's own share.
go test -run '^$' -bench '^(BenchmarkDecideQuota|BenchmarkHold)$' -benchmem -benchtime 2000x -count "$count" ./internal/authorizer/ | tee -a "$out"
# The default policy against its general rules alone (without the precomputed tables, as
# the opa CLI evaluates it) and a trivial policy, all prepared queries on the input the bridge builds, with the
# garbage collector set as the server sets it (internal/app/serve_cmd.go: GOGC=400 unless GOGC is given);
# every case of the run shares the setting. POLICY_GOGC=100 gives Go's default. The counts
# go round the cases (each run measures every case once) rather than repeating one case
# back to back: the machine's speed drifts, and each case's fastest is then drawn from the
# same moments as the trivial policy's and the general rules'.
for _ in $(seq "$count"); do
  GOGC=${POLICY_GOGC:-400} go test -run '^$' -bench '^BenchmarkPolicy$' -benchmem -benchtime 2000x -count 1 ./policies/ | tee -a "$out"
done
echo
awk '
  /^Benchmark/ { name = $1; sub(/-[0-9]+$/, "", name); ns = $3 + 0
                 if (!(name in best) || ns < best[name]) best[name] = ns
                 for (i = 4; i < NF; i++) if ($(i + 1) == "allocs/op") allocs[name] = $i }
  function ratio(label, num, den) {
    if ((num in best) && (den in best))
      printf "  %-52s %9.0f ns / %9.0f ns = %7.2fx\n", label, best[num], best[den], best[num] / best[den]
  }
  END {
    print "ratios (fastest of each, same run):"
    ratio("cache: tiered front hit / memory hit", "BenchmarkGetHit/tiered", "BenchmarkGetHit/memory")
    ratio("cache: memcached hit / memory hit", "BenchmarkGetHit/memcached", "BenchmarkGetHit/memory")
    ratio("cache: signed memcached hit / unsigned memcached hit", "BenchmarkGetHit/memcached", "BenchmarkGetHit/memcached-unsigned")
    ratio("cache: HMAC verification / CRC check (no round trip)", "BenchmarkOpen/signed", "BenchmarkOpen/unsigned")
    ratio("cache: verification, 3 keys, last signed / 1 key", "BenchmarkOpen/signed-3-keys-last", "BenchmarkOpen/signed")
    ratio("decision (cached review) / policy evaluation alone", "BenchmarkDecide/cache-hit", "BenchmarkEvalDecision")
    ratio("policy: default / general rules alone (map input)", "BenchmarkPolicy/map", "BenchmarkPolicy/general-map")
    ratio("policy: default / general rules alone (parsed input)", "BenchmarkPolicy/parsed", "BenchmarkPolicy/general-parsed")
    ratio("policy: parsed input / map input", "BenchmarkPolicy/parsed", "BenchmarkPolicy/map")
    ratio("policy: default (parsed) / trivial policy (parsed)", "BenchmarkPolicy/parsed", "BenchmarkPolicy/trivial-parsed")
    ratio("policy: as the bridge evaluates / general rules alone (parsed)", "BenchmarkPolicy/bridge", "BenchmarkPolicy/general-parsed")
    ratio("policy: as the bridge evaluates / prepared query (parsed)", "BenchmarkPolicy/bridge", "BenchmarkPolicy/parsed")
    ratio("decision (fake API review) / decision (cached review)", "BenchmarkDecide/review-each-time", "BenchmarkDecide/cache-hit")
    ratio("decision: array job (memo hit) / distinct specs (cached review)", "BenchmarkDecide/array-job", "BenchmarkDecide/cache-hit")
    ratio("quota: decision with quota, 10,000 pods / without", "BenchmarkDecideQuota/quota-10000-pods", "BenchmarkDecideQuota/no-quota")
    ratio("quota: usage lookup (10,000 pods) / decision without", "BenchmarkHold", "BenchmarkDecideQuota/no-quota")
    print "allocations per operation (-benchmem):"
    for (n in allocs) printf "  %-52s %9d\n", n, allocs[n]
  }' "$out"
