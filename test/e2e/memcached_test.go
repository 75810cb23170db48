package e2e

import (
	"path/filepath"
	"testing"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const cacheTierTotal = "sar_bridge_cache_requests_total"

// Two replicas sharing memcached: a review one replica made is reused by the other
// without a SubjectAccessReview; with memcached gone, reviews are asked live.
func TestSharedCacheMemcached(t *testing.T) {
	mc, err := cluster.StartMemcached(filepath.Join(t.TempDir(), "memcached.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Stop()
	a := newBridge(t, "--memcached="+mc.Addr)
	b := newBridge(t, "--memcached="+mc.Addr)

	in := input("status", newPod("team-a", "runner", "shared-1"))
	decide(t, a, in, allow(`RoleBinding "offload/team-a"`))
	if got := metric(t, a, reviewsTotal, nil); got != 1 {
		t.Fatalf("replica A: %s = %v, want 1", reviewsTotal, got)
	}
	decide(t, b, in, allow(`RoleBinding "offload/team-a"`))
	if got := metric(t, b, reviewsTotal, nil); got != 0 {
		t.Errorf("replica B sent %v reviews for a decision replica A already reviewed, want 0", got)
	}
	if got := metric(t, b, cacheTierTotal, map[string]string{"tier": "memcached", "result": "hit"}); got != 1 {
		t.Errorf(`replica B: %s{tier="memcached",result="hit"} = %v, want 1`, cacheTierTotal, got)
	}

	// memcached down: answers stay correct, reviewed live.
	mc.Stop()
	before := metric(t, b, reviewsTotal, nil)
	decide(t, b, input("status", newPod("team-a", "runner", "shared-2")), allow(`RoleBinding "offload/team-a"`))
	decide(t, b, input("status", newPod("team-a", "stranger", "shared-2")),
		deny(mayNot(sa("team-a", "stranger"), "get", "pods.interlink.io", "team-a")...))
	if got := metric(t, b, reviewsTotal, nil); got != before+2 {
		t.Errorf("with memcached down: %s %v -> %v, want +2 (live reviews)", reviewsTotal, before, got)
	}
}
