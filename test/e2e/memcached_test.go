package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	a := newBridge(t, memcachedArgs(t, mc)...)
	b := newBridge(t, memcachedArgs(t, mc)...)

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

const (
	cacheSetsTotal      = "sar_bridge_cache_sets_total"
	cacheSetErrorsTotal = "sar_bridge_cache_set_errors_total"
	reviewCacheErrors   = "sar_bridge_review_cache_errors_total"
)

var (
	memcachedHit   = map[string]string{"tier": "memcached", "result": "hit"}
	memcachedError = map[string]string{"tier": "memcached", "result": "error"}
	memcachedTier  = map[string]string{"tier": "memcached"}
)

// streamCase is one kind of decision of a steady stream, with its exact answer.
type streamCase struct {
	name string
	in   func(i int) map[string]any
	want want
}

// streamCases mixes allowed and denied decisions over several ServiceAccounts, tenants
// and operations; some repeat one review (create reviews carry no pod name), some use a
// few pod names, one is new at every step (so memcached is asked even while the
// in-process tier still holds the others).
func streamCases() []streamCase {
	offloadA := `RoleBinding "offload/team-a" of ClusterRole "interlink-offloader" to ServiceAccount "runner/team-a"`
	return []streamCase{
		{"runner create", func(i int) map[string]any { return input("create", newPod("team-a", "runner", fmt.Sprintf("s-%d", i))) }, allow(offloadA)},
		{"runner status, few names", func(i int) map[string]any {
			return input("status", newPod("team-a", "runner", fmt.Sprintf("s-%d", i%7)))
		}, allow(offloadA)},
		{"stranger create", func(i int) map[string]any { return input("create", newPod("team-a", "stream-stranger", "s")) },
			deny(mayNot(sa("team-a", "stream-stranger"), "create", "pods.interlink.io", "team-a")...)},
		{"watcher status", func(i int) map[string]any {
			return input("status", newPod("team-a", "watcher", fmt.Sprintf("w-%d", i%5)))
		},
			allow(`RoleBinding "watcher/team-a" of Role "pod-reader" to ServiceAccount "watcher/team-a"`)},
		{"watcher create", func(i int) map[string]any { return input("create", newPod("team-a", "watcher", "w")) },
			deny(mayNot(sa("team-a", "watcher"), "create", "pods.interlink.io", "team-a")...)},
		{"cleaner delete job-1", func(i int) map[string]any { return input("delete", newPod("team-a", "cleaner", "job-1")) },
			allow(`RoleBinding "cleaner/team-a" of Role "pod-deleter" to ServiceAccount "cleaner/team-a"`)},
		{"cleaner delete job-2", func(i int) map[string]any { return input("delete", newPod("team-a", "cleaner", "job-2")) },
			deny(mayNot(sa("team-a", "cleaner"), "delete", "pods.interlink.io", "team-a")...)},
		{"tenant-b runner create", func(i int) map[string]any { return input("create", newPod("project-b", "runner", "b")) },
			allow(`RoleBinding "offload/project-b" of ClusterRole "tenant-b-offloader" to ServiceAccount "runner/project-b"`)},
		{"tenant-b legacy create", func(i int) map[string]any { return input("create", newPod("project-b", "legacy", "b")) },
			deny(mayNot(sa("project-b", "legacy"), "create", "pods.tenant-b.interlink.io", "project-b")...)},
		{"unmapped tenant", func(i int) map[string]any { return input("create", newPod("orphan", "runner", "o")) }, deny(`tenant "orphan"`)},
		{"runner status, new name", func(i int) map[string]any { return input("status", newPod("team-a", "runner", fmt.Sprintf("u-%d", i))) }, allow(offloadA)},
		{"stranger status, new name", func(i int) map[string]any {
			return input("status", newPod("team-a", "stream-stranger", fmt.Sprintf("u-%d", i)))
		},
			deny(mayNot(sa("team-a", "stream-stranger"), "get", "pods.interlink.io", "team-a")...)},
	}
}

// decisionProblem returns what is wrong with an answer, or "".
func decisionProblem(r *cluster.Response, w want) string {
	if r.Status != http.StatusOK {
		return "want HTTP 200, got " + r.String()
	}
	if r.Result == nil || r.Result.Allowed == nil {
		return "no result.allowed: " + r.String()
	}
	if r.Allowed() != w.allowed {
		return fmt.Sprintf("want allowed=%v, got %s", w.allowed, r)
	}
	for _, s := range w.reason {
		if !strings.Contains(r.Reason(), s) {
			return fmt.Sprintf("reason %q lacks %q", r.Reason(), s)
		}
	}
	return ""
}

// memcached killed while a stream of decisions runs: every answer stays exact (live
// reviews), the error metrics rise; memcached back on the same port: the same bridge
// processes share reviews through it again.
func TestMemcachedKilledMidStreamAndRestarted(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "memcached.log")
	mc, err := cluster.StartMemcached(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { mc.Stop() }()
	flags := memcachedArgs(t, mc, "--cache.front-ttl=1s")
	a := newBridge(t, flags...)
	b := newBridge(t, flags...)

	// B talks to memcached before the kill, so it holds pooled connections that die.
	decide(t, b, input("status", newPod("team-a", "runner", "b-warm")), allow(`RoleBinding "offload/team-a"`))

	const total, killAt, workers = 200, 70, 4
	cases := streamCases()
	jobs := make(chan int)
	var (
		mu       sync.Mutex
		problems []string
		answered int
	)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				c := cases[i%len(cases)]
				r, err := a.Decide(c.in(i))
				p := ""
				if err != nil {
					p = err.Error()
				} else {
					p = decisionProblem(r, c.want)
				}
				mu.Lock()
				answered++
				if p != "" {
					problems = append(problems, fmt.Sprintf("decision %d (%s): %s", i, c.name, p))
				}
				mu.Unlock()
				time.Sleep(30 * time.Millisecond) // a steady stream, not a burst
			}
		}()
	}
	var errorsBefore, getErrorsBefore, setErrorsBefore, setsBefore float64
	start := time.Now()
	var killedAfter time.Duration
	for i := 0; i < total; i++ {
		if i == killAt {
			errorsBefore = metric(t, a, cacheTierTotal, memcachedError)
			getErrorsBefore = metric(t, a, reviewCacheErrors, map[string]string{"op": "get"})
			setErrorsBefore = metric(t, a, cacheSetErrorsTotal, memcachedTier)
			setsBefore = metric(t, a, cacheSetsTotal, memcachedTier) - metric(t, a, cacheSetErrorsTotal, memcachedTier)
			mc.Stop() // SIGKILL while the workers have decisions in flight
			killedAfter = time.Since(start)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("%d decisions in %s, memcached killed after %s", answered, time.Since(start).Round(time.Millisecond), killedAfter.Round(time.Millisecond))
	if answered != total {
		t.Errorf("%d of %d decisions answered", answered, total)
	}
	for i, p := range problems {
		if i == 10 {
			t.Errorf("... and %d more", len(problems)-10)
			break
		}
		t.Error(p)
	}
	if setsBefore == 0 {
		t.Errorf("replica A stored nothing in memcached before the kill")
	}
	errorsAfter := metric(t, a, cacheTierTotal, memcachedError)
	if errorsAfter <= errorsBefore {
		t.Errorf(`%s{tier="memcached",result="error"} did not rise with memcached killed: %v -> %v`, cacheTierTotal, errorsBefore, errorsAfter)
	}
	if got := metric(t, a, reviewCacheErrors, map[string]string{"op": "get"}); got <= getErrorsBefore {
		t.Errorf(`%s{op="get"} did not rise with memcached killed: %v -> %v`, reviewCacheErrors, getErrorsBefore, got)
	}
	if got := metric(t, a, cacheSetErrorsTotal, memcachedTier); got <= setErrorsBefore {
		t.Errorf(`%s{tier="memcached"} did not rise with memcached killed: %v -> %v`, cacheSetErrorsTotal, setErrorsBefore, got)
	}
	t.Logf("memcached errors on A: %v -> %v", errorsBefore, errorsAfter)

	// memcached back on the same address; neither bridge restarts.
	mc, err = mc.Restart(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if a.Exited() || b.Exited() {
		t.Fatal("a bridge exited while memcached was down")
	}

	// A decision B stores after the restart is a memcached hit on A. The first exchange
	// on B's stale pooled connections may still fail, so allow a few fresh decisions.
	var attempts int
	took, ok := poll(5*time.Second, 100*time.Millisecond, func() bool {
		attempts++
		in := input("status", newPod("team-a", "runner", fmt.Sprintf("after-restart-%d", attempts)))
		decide(t, b, in, allow(`RoleBinding "offload/team-a"`))
		reviews := metric(t, a, reviewsTotal, nil)
		hits := metric(t, a, cacheTierTotal, memcachedHit)
		decide(t, a, in, allow(`RoleBinding "offload/team-a"`))
		return metric(t, a, cacheTierTotal, memcachedHit) == hits+1 && metric(t, a, reviewsTotal, nil) == reviews
	})
	if !ok {
		t.Fatalf("after the restart: replica A never reused a review replica B stored in memcached (%d attempts in %s)", attempts, took)
	}
	t.Logf("shared through memcached again %s after the restart (%d attempt(s))", took.Round(time.Millisecond), attempts)
	if attempts > 2 {
		t.Errorf("replica A needed %d attempts to get a memcached hit after the restart, want at most 2", attempts)
	}

	// A repeated decision on A after its front tier expired is a memcached hit too.
	in := input("status", newPod("team-a", "watcher", "after-restart-front"))
	w := allow(`RoleBinding "watcher/team-a" of Role "pod-reader"`)
	decide(t, a, in, w)
	reviews := metric(t, a, reviewsTotal, nil)
	hits := metric(t, a, cacheTierTotal, memcachedHit)
	time.Sleep(1200 * time.Millisecond) // --cache.front-ttl=1s
	decide(t, a, in, w)
	if got := metric(t, a, cacheTierTotal, memcachedHit); got != hits+1 {
		t.Errorf("repeated decision after the front TTL: memcached hits %v -> %v, want +1", hits, got)
	}
	if got := metric(t, a, reviewsTotal, nil); got != reviews {
		t.Errorf("repeated decision after the front TTL sent a review: %s %v -> %v", reviewsTotal, reviews, got)
	}
}

// TTLs hold across both tiers with memcached on: a new RoleBinding is seen within the
// denied TTL and a removed one within --memcached.expire, on both replicas, although
// each replica keeps reviews in its own in-process tier too.
func TestMemcachedTTLsAcrossReplicas(t *testing.T) {
	const deniedTTL, allowedTTL = 2 * time.Second, 3 * time.Second
	mc, err := cluster.StartMemcached(filepath.Join(t.TempDir(), "memcached.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Stop()
	// --cache.allowed-ttl stays 5m: --memcached.expire must take its place.
	flags := memcachedArgs(t, mc, "--memcached.expire=3", "--cache.front-ttl=1s", "--cache.denied-ttl=2s")
	a := newBridge(t, flags...)
	b := newBridge(t, flags...)
	ctx := context.Background()

	in := input("create", newPod("team-a", "mc-late", "mc-late-1"))
	denied := deny(mayNot(sa("team-a", "mc-late"), "create", "pods.interlink.io", "team-a")...)
	allowed := allow(`RoleBinding "mc-late/team-a" of ClusterRole "interlink-offloader" to ServiceAccount "mc-late/team-a"`)
	decide(t, a, in, denied)
	decide(t, b, in, denied)
	if got := metric(t, b, reviewsTotal, nil); got != 0 {
		t.Fatalf("replica B sent %v reviews for a denial replica A had stored in memcached, want 0", got)
	}

	rb, err := suite.cluster.ApplyYAML(ctx, `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: mc-late
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: mc-late, namespace: team-a}
`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), rb) })

	// until polls both replicas until each gives the wanted answer once.
	until := func(what string, w want, deadline time.Duration) {
		t.Helper()
		for _, br := range []struct {
			name string
			b    *cluster.Bridge
		}{{"A", a}, {"B", b}} {
			var last *cluster.Response
			took, ok := poll(deadline, 200*time.Millisecond, func() bool {
				r, err := br.b.Decide(in)
				if err != nil {
					t.Fatalf("POST decision: %v", err)
				}
				last = r
				return r.Status == http.StatusOK && r.Allowed() == w.allowed
			})
			if !ok {
				t.Fatalf("replica %s, %s: still allowed=%v after %s; last %s", br.name, what, !w.allowed, took, last)
			}
			checkDecision(t, last, w)
			t.Logf("replica %s: %s, answer changed within %s", br.name, what, took.Round(time.Millisecond))
		}
	}
	changed := time.Now()
	until("RoleBinding created", allowed, deniedTTL+4*time.Second)
	if d := time.Since(changed); d > deniedTTL+4*time.Second {
		t.Errorf("both replicas allowed only %s after the RoleBinding was created (denied TTL %s)", d, deniedTTL)
	}

	if err := suite.cluster.Delete(ctx, rb); err != nil {
		t.Fatal(err)
	}
	changed = time.Now()
	until("RoleBinding deleted", denied, allowedTTL+4*time.Second)
	if d := time.Since(changed); d > allowedTTL+4*time.Second {
		t.Errorf("both replicas denied only %s after the RoleBinding was deleted (memcached.expire %s)", d, allowedTTL)
	}
}
