package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// TestLedgerSlicesKill: quota slices (issue 41) with three bridges, one SIGKILLed in
// the middle of a burst, for a quota the burst fits in (the dead bridge's slice and
// unreported charges must be taken back) and for one it overflows (slices shrink and go
// back near the end). Stored pods of the tenant are decided through the Data API,
// round-robin; bridge c is killed after 90 answers. At every poll the ledger holds no
// more than the quota (used + Σ slices ≤ hard), and no more pods are allowed than it;
// the pods not allowed are then deleted (interLink fails a pod whose create was refused
// or got no answer), and once c's slice has expired and the reconciler has taken it
// back the ledger counts exactly the pods that remain, with no slice left.
func TestLedgerSlicesKill(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hard, creates int
	}{
		{"the burst fits", 1000, 300},
		{"the burst overflows", 200, 300},
	} {
		t.Run(tc.name, func(t *testing.T) { slicesKill(t, fmt.Sprintf("lgr-slices-%d", tc.hard), tc.hard, tc.creates) })
	}
}

func slicesKill(t *testing.T, tenant string, hard, creates int) {
	const (
		killAfter       = 90
		workers         = 24
		convergeTimeout = 90 * time.Second
	)
	ctx := context.Background()
	lgTenant(t, tenant, nil, map[string]string{"pods": fmt.Sprint(hard)})
	stored := make([]*corev1.Pod, creates)
	if err := cluster.CreatePods(ctx, suite.cluster.Client, 8, 0, creates, func(i int) *corev1.Pod {
		p := lgPod(tenant, fmt.Sprintf("job-%03d", i))
		p.Spec.NodeName = lgVK
		return p
	}, func(i int, p *corev1.Pod) { stored[i] = p }); err != nil {
		t.Fatal(err)
	}
	// Charges whose answer was lost (bridge c killed after reporting them) are for pods
	// the test then deletes: released once the pending timeout has passed (the pods were
	// stored before the burst, so a short timeout releases nothing that will appear).
	args := lgArgs("--quota.pending-timeout=20s")
	a, b, c := newBridge(t, args...), newBridge(t, args...), newBridge(t, args...)
	bridges := []*cluster.Bridge{a, b, c}

	// The ledger at every poll, until the end of the test.
	var polls, over atomic.Int64
	var firstOver atomic.Value
	stop := make(chan struct{})
	var polling sync.WaitGroup
	polling.Add(1)
	go func() {
		defer polling.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			o := tenantObject(t, tenant)
			total := o.Status.Used.Pods().Value()
			for _, s := range o.Status.Slices {
				total += s.Amounts.Pods().Value()
			}
			polls.Add(1)
			if total > int64(hard) || o.Status.Used.Pods().Value() > int64(hard) {
				over.Add(1)
				firstOver.CompareAndSwap(nil, fmt.Sprintf("used %v, slices %+v", o.Status.Used, o.Status.Slices))
			}
		}
	}()
	defer func() { close(stop); polling.Wait() }()

	outs := make([]outcome, creates)
	var answered atomic.Int64
	var kill sync.Once
	_ = cluster.Parallel(workers, 0, creates, func(i int) error {
		br := bridges[i%3]
		outs[i] = decideOutcome(br, fmt.Sprint("abc"[i%3:i%3+1]), stored[i].Name, input("create", stored[i], onNode(lgVK)))
		if answered.Add(1) == killAfter {
			kill.Do(func() { _ = c.SendSignal(syscall.SIGKILL) })
		}
		return nil
	})
	if _, err := c.WaitExit(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	allowed, refused, other := 0, 0, 0
	keep := map[string]bool{}
	for _, o := range outs {
		switch {
		case o.allowed:
			allowed++
			keep[o.name] = true
		case o.err == nil && o.status == http.StatusOK:
			refused++
		default:
			other++
		}
	}
	t.Logf("%d creates: %d allowed, %d refused, %d unanswered or 503 (bridge c killed after %d answers)", creates, allowed, refused, other, killAfter)
	if allowed > hard {
		t.Fatalf("%d allowed, over the quota of %d", allowed, hard)
	}
	if allowed < min(hard, creates-killAfter)-60 {
		// Bridge c's slice is held until it expires: the others may refuse what it
		// held, never more.
		t.Errorf("%d allowed: want nearly %d", allowed, min(hard, creates-killAfter))
	}
	zero := int64(0)
	for _, p := range stored {
		if !keep[p.Name] {
			// At once: no kubelet would finish a graceful deletion.
			if err := suite.cluster.Client.CoreV1().Pods(tenant).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
		}
	}
	began := time.Now()
	took, ok := poll(convergeTimeout, 250*time.Millisecond, func() bool {
		o := tenantObject(t, tenant)
		return len(o.Status.Slices) == 0 && o.Status.Used.Pods().Value() == int64(allowed)
	})
	o := tenantObject(t, tenant)
	if !ok {
		t.Fatalf("after %v: used %v, %d pending, slices %+v; want pods=%d (the pods that remain) and no slice", time.Since(began).Round(time.Second), o.Status.Used, len(o.Status.Pending), o.Status.Slices, allowed)
	}
	t.Logf("the ledger equals the %d remaining pods %v after the burst, with no slice left (%d polls)", allowed, took.Round(time.Millisecond), polls.Load())
	if n := over.Load(); n > 0 {
		t.Errorf("%d of %d polls over the quota; first: %v", n, polls.Load(), firstOver.Load())
	}
}
