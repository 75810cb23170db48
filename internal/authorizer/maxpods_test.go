package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/policies"
)

// maximalPod is a pod as large as Kubernetes stores (issue 31: 5,000 containers with
// 63-character names, about 670 KiB of JSON), distinct per i: every container has a
// name, an image, requests and limits, so what the bridge derives and what the policy
// answers (default limits per container) are as large as they get.
func maximalPod(i, containers int) json.RawMessage {
	var b strings.Builder
	fmt.Fprintf(&b, `{"pod": {"metadata": {"name": "p-%d", "namespace": "team-a"}, "spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "containers": [`, i)
	for c := range containers {
		if c > 0 {
			b.WriteByte(',')
		}
		name := fmt.Sprintf("c%05d-%d-%s", c, i, strings.Repeat("x", 63))[:63]
		fmt.Fprintf(&b, `{"name": %q, "image": "busybox", "resources": {"requests": {"cpu": "1m"}}}`, name)
	}
	b.WriteString(`]}}}`)
	return json.RawMessage(b.String())
}

// heapAfterGC is the live heap, collected.
func heapAfterGC() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestMaximalPodsKeepBoundedMemory: distinct maximal pods, each decided twice (the memo
// keeps a result the second time), leave no more on the heap than the caches' bounds
// allow, however many are sent. Before issue 31 each one kept about 1.5 MiB in the spec
// cache and the memo.
func TestMaximalPodsKeepBoundedMemory(t *testing.T) {
	pods, containers := 24, 5000
	if raceEnabled {
		pods, containers = 12, 2000 // still over every cache's per-entry bound
	}
	eval := newFuzzEvaluator(t, t.TempDir()) // default limits: a decision names every container
	a := newTestAuthorizerWith(t, eval)
	decide := func(in json.RawMessage) {
		t.Helper()
		d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: in})
		if outcome, reason := summarize(d.Result, d.Defined); err != nil || outcome != "allowed" {
			t.Fatalf("decision %s %q, %v", outcome, reason, err)
		}
	}
	warm := 4
	for i := range warm {
		decide(maximalPod(i, containers))
		decide(maximalPod(i, containers))
	}
	before := heapAfterGC()
	for i := warm; i < pods; i++ {
		in := maximalPod(i, containers)
		decide(in)
		decide(in)
	}
	grew := heapAfterGC() - before
	t.Logf("%d more maximal pods (%d KiB each) grew the live heap by %d KiB; spec cache %d B, memo %d B",
		pods-warm, len(maximalPod(0, containers))>>10, grew>>10, a.specs.valid.Bytes(), eval.MemoBytes())
	if limit := int64(4 << 20); grew > limit {
		t.Errorf("%d more maximal pods grew the live heap by %d KiB, want at most %d KiB: a cache keeps them", pods-warm, grew>>10, limit>>10)
	}
	runtime.KeepAlive(a)
}

// TestDecisionInputBounded: an input over MaxInputBytes is refused before it is decoded.
func TestDecisionInputBounded(t *testing.T) {
	a := newTestAuthorizer(t, Config{}, &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}, newView())
	in := maximalPod(0, MaxInputBytes/90)
	if len(in) <= MaxInputBytes {
		t.Fatalf("test input of %d bytes is not over %d", len(in), MaxInputBytes)
	}
	_, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: in})
	var inputErr *InputError
	if !errors.As(err, &inputErr) || !strings.Contains(err.Error(), "over the 3145728 a pod decision takes") {
		t.Fatalf("error %v, want an InputError naming the bound", err)
	}
}

// TestDecisionBudgets: large inputs wait for each other within the request's deadline
// (then an UnavailableError), and never hold up ordinary pods.
func TestDecisionBudgets(t *testing.T) {
	b := newDecisionBudget()
	var held []func()
	for range largeBudgetBytes / MaxInputBytes {
		release, err := b.acquire(context.Background(), MaxInputBytes)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := b.acquire(ctx, smallInputBytes+1); !errors.As(err, new(*UnavailableError)) {
		t.Fatalf("a large input over the budget: %v, want an UnavailableError", err)
	}
	small, cancelSmall := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelSmall()
	release, err := b.acquire(small, 4<<10)
	if err != nil {
		t.Fatalf("an ordinary pod waited behind large ones: %v", err)
	}
	release()
	for _, r := range held {
		r()
	}
	if release, err := b.acquire(context.Background(), MaxInputBytes); err != nil {
		t.Fatalf("after release: %v", err)
	} else {
		release()
	}
}

func newTestAuthorizerWith(t testing.TB, eval *policies.Evaluator) *Authorizer {
	t.Helper()
	a := newTestAuthorizer(t, Config{}, &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}, newView())
	a.evaluator = eval
	return a
}

// FuzzLargePods feeds pods up to the largest Kubernetes stores: whatever their shape,
// a decision is made (or the input refused as too large), a service account without the
// grant is never allowed, and no cache holds more than its bound.
func FuzzLargePods(f *testing.F) {
	f.Add(uint16(5000), uint8(63), uint16(0), true, false)
	f.Add(uint16(5000), uint8(63), uint16(200), false, true)
	f.Add(uint16(1), uint8(4), uint16(5000), true, true)
	f.Add(uint16(700), uint8(20), uint16(10), true, false)
	eval := newFuzzEvaluator(f, f.TempDir())
	a := newTestAuthorizerWith(f, eval)
	f.Fuzz(func(t *testing.T, containers uint16, nameLen uint8, tolerations uint16, limits, intruder bool) {
		containers = 1 + (max(containers, 1)-1)%5000 // 1 to 5,000
		nameLen = 1 + (max(nameLen, 1)-1)%63
		tolerations %= 5001
		var b strings.Builder
		sa := "runner"
		if intruder {
			sa = "intruder"
		}
		fmt.Fprintf(&b, `{"pod": {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"serviceAccountName": %q, "nodeName": "vk-a", "containers": [`, sa)
		for c := range int(containers) {
			if c > 0 {
				b.WriteByte(',')
			}
			name := strings.Repeat("n", int(nameLen)) + fmt.Sprint(c)
			res := `{"requests": {"cpu": "1m"}}`
			if limits {
				res = `{"limits": {"cpu": "100m", "memory": "64Mi"}}`
			}
			fmt.Fprintf(&b, `{"name": %q, "image": "busybox", "resources": %s}`, name, res)
		}
		b.WriteString(`], "tolerations": [`)
		for i := range int(tolerations) {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"key": "k%d", "operator": "Exists"}`, i)
		}
		b.WriteString(`]}}}`)
		in := json.RawMessage(b.String())
		d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: in})
		switch outcome, _ := summarize(d.Result, d.Defined); {
		case len(in) > MaxInputBytes:
			if !errors.As(err, new(*InputError)) {
				t.Fatalf("%d bytes: %v, want an InputError", len(in), err)
			}
		case err != nil:
			t.Fatalf("%d bytes: %v", len(in), err)
		case intruder && outcome != "denied":
			t.Fatalf("an intruder's pod of %d bytes: %s", len(in), outcome)
		}
		if s, m := a.specs.valid.Bytes(), eval.MemoBytes(); s > specCacheBytes || m > 32<<20 {
			t.Fatalf("caches over their bounds: spec cache %d B, memo %d B", s, m)
		}
	})
}
