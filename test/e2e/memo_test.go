package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"
)

const memoTotal = "sar_bridge_decision_memo_total"

// TestDecisionMemoFollowsRBAC: the pods of one array job share a policy evaluation
// (memo hits from the third pod on), and a RoleBinding removed still denies the next
// decision once the allowing review has expired: the memo never outlives the review it
// used.
func TestDecisionMemoFollowsRBAC(t *testing.T) {
	const allowedTTL = 3 * time.Second
	b := newBridge(t, "--cache.allowed-ttl=3s", "--cache.denied-ttl=1s")
	ctx := context.Background()
	rb := bindOffloader(t, "team-a", "memo")
	granted := allow(`RoleBinding "memo/team-a" of ClusterRole "interlink-offloader" to ServiceAccount "memo/team-a"`)
	arrayPod := func(i int) map[string]any {
		return input("create", newPod("team-a", "memo", fmt.Sprintf("array-%d", i), withContainer("main", "500m", "1Gi")))
	}

	// The new binding reaches the API server's authorizer through an informer.
	if took, ok := poll(10*time.Second, 100*time.Millisecond, func() bool {
		r, err := b.Decide(arrayPod(0))
		return err == nil && r.Status == 200 && r.Allowed()
	}); !ok {
		t.Fatalf("RoleBinding created: not allowed after %s", took)
	}
	// The memo keeps a result the second time its key is evaluated: from the third pod on,
	// every pod of the job is a hit.
	misses := metric(t, b, memoTotal, map[string]string{"result": "miss"})
	decide(t, b, arrayPod(1), granted)
	if got := metric(t, b, memoTotal, map[string]string{"result": "miss"}); got != misses+1 {
		t.Fatalf("pod 1 of the array job: %s{result=\"miss\"} %v -> %v, want +1", memoTotal, misses, got)
	}
	ids := map[string]bool{}
	for i := 2; i <= 6; i++ {
		hits := metric(t, b, memoTotal, map[string]string{"result": "hit"})
		r := decide(t, b, arrayPod(i), granted)
		if got := metric(t, b, memoTotal, map[string]string{"result": "hit"}); got != hits+1 {
			t.Fatalf("pod %d of the array job: %s{result=\"hit\"} %v -> %v, want +1", i, memoTotal, hits, got)
		}
		if id := r.DecisionID; id == "" || ids[id] {
			t.Fatalf("pod %d: decision_id %q missing or reused", i, id)
		}
		ids[r.DecisionID] = true
	}

	if err := suite.cluster.Delete(ctx, rb); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	i := 100
	nextPod := func() map[string]any { i++; return arrayPod(i) }
	last, took, ok := pollDecision(t, b, allowedTTL+5*time.Second, nextPod, deniedAnswer)
	if !ok {
		t.Fatalf("RoleBinding deleted: pods of the same job still allowed after %s (allowed TTL %s); last %s", took, allowedTTL, last)
	}
	checkDecision(t, last, deny(mayNot(sa("team-a", "memo"), "create", "pods.interlink.io", "team-a")...))
	t.Logf("denied %s after the RoleBinding was deleted", time.Since(deleted).Round(time.Millisecond))
}
