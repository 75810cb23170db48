package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// elsewhereLeaseNS is the lease namespace of TestLedgerTwoElections' bridge of a
// second election: neither the shared bridge's nor lgArgs'.
const elsewhereLeaseNS = "lgr-lease-elsewhere"

// TestLedgerTwoElections: bridges elected through another Lease than this tenant's
// election (the misconfiguration docs/tenants.md warns about) leave the tenant to the
// election recorded in its status: the bridge of lgArgs reconciles the tenant its
// election claimed (it confirms the pod and writes the record), while a bridge of
// another election, whose reconciler leads its own election and follows the tenant's
// pods, leaves it alone — it marks nothing and writes nothing — and says so, once in
// its log however many rounds it defers, and in its metric.
//
// The bridge that defers is started here rather than the suite's shared bridge (also of
// another election): the shared bridge's view of the OffloadTenants may still be
// blind right after TestLedgerChaos restarted the API server. client-go's reflectors
// back off exponentially across the restarts (0.8s doubling to 30s, jittered up to
// twice that, reset only after two quiet minutes), so that view can relist a minute
// after the API server is back; until then the shared bridge's rounds of a new tenant
// find no quota and do nothing (a run of the ledger stage failed so, its deferral
// missing for 45s). That recovery is slow but certain; what this test proves is the
// deferral itself.
func TestLedgerTwoElections(t *testing.T) {
	const ns = "lgr-elections"
	lgTenant(t, ns, nil, map[string]string{"pods": "3"})
	if _, err := suite.cluster.ApplyYAML(context.Background(), leaseNamespaceYAML(elsewhereLeaseNS)); err != nil {
		t.Fatalf("lease namespace %s: %v", elsewhereLeaseNS, err)
	}
	b := newBridge(t, lgArgs()...)
	elsewhere := newBridge(t, "--quota.lease-namespace="+elsewhereLeaseNS, "--quota.reconcile-interval=2s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the bridge of the election %s: %s", elsewhereLeaseNS, ledgerGauges(elsewhere))
			t.Logf("the bridge of the election %s: %s", lgElection, ledgerGauges(b))
		}
	})

	if o := decideOutcome(b, "b", "job-1", lgCreate(ns, "job-1")); !o.allowed {
		t.Fatalf("create: %v", o)
	}
	runningOnVK(t, lgPod(ns, "job-1"))
	if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool { return len(chargedPods(t, ns, ns)) == 1 }); !ok {
		t.Fatalf("job-1 not confirmed within 30s (status %+v)", tenantObject(t, ns).Status)
	}
	waitLedger(t, ns, 10*time.Second, ledgerState{used: "pods=1", pending: 0}, "pods")

	// The lg election's reconciler wrote the confirmation (holder: not the test's claim).
	recs := tenantObject(t, ns).Status.Reconcilers
	if len(recs) != 1 || recs[0].Election != lgElection || recs[0].Holder == "e2e" || recs[0].Cluster != "" {
		t.Errorf("status.reconcilers %+v, want one record: the election %s, written by its reconciler", recs, lgElection)
	}

	// The other election's reconciler leads it and follows the pods, and it deferred:
	// several rounds (one every 2s), one warning.
	want := "another election's reconciler reconciles this tenant"
	deferrals := func() []string {
		var lines []string
		for _, line := range strings.Split(elsewhere.Log(), "\n") {
			if strings.Contains(line, want) && strings.Contains(line, "tenant="+ns+" ") {
				lines = append(lines, line)
			}
		}
		return lines
	}
	deferred := func() float64 {
		return metric(t, elsewhere, "sar_bridge_ledger_reconciles_total", map[string]string{"result": "deferred"})
	}
	if _, ok := poll(30*time.Second, 250*time.Millisecond, func() bool { return len(deferrals()) > 0 && deferred() >= 3 }); !ok {
		t.Fatalf("the bridge of the election %s: %d lines %q for tenant %s in its log and %v rounds deferred, want a line and 3 rounds or more",
			elsewhereLeaseNS, len(deferrals()), want, ns, deferred())
	}
	if lines := deferrals(); len(lines) != 1 || !strings.Contains(lines[0], "election="+elsewhereLeaseNS+"/sar-bridge-ledger ") || !strings.Contains(lines[0], "other_election="+lgElection+" ") {
		t.Errorf("the deferring bridge's warnings for tenant %s:\n%s\nwant one, naming its election %s/sar-bridge-ledger and the other %s", ns, strings.Join(lines, "\n"), elsewhereLeaseNS, lgElection)
	}
	for name, want := range map[string]float64{"sar_bridge_ledger_leader": 1, "sar_bridge_ledger_following_pods": 1} {
		if got := metric(t, elsewhere, name, nil); got != want {
			t.Errorf("the deferring bridge's %s: %v, want %v", name, got, want)
		}
	}
	if got := metric(t, elsewhere, "sar_bridge_ledger_reconciles_total", map[string]string{"result": "written"}); got != 0 {
		t.Errorf("the deferring bridge wrote %v ledgers, want none", got)
	}
	if recs := tenantObject(t, ns).Status.Reconcilers; len(recs) != 1 || recs[0].Election != lgElection {
		t.Errorf("status.reconcilers %+v, want the lg election's record alone", recs)
	}
}

// ledgerGauges is what a bridge's metrics say of its reconciler: whether it leads and
// follows pods, and its rounds by result.
func ledgerGauges(b *cluster.Bridge) string {
	s, err := b.Metrics()
	if err != nil {
		return fmt.Sprintf("(no metrics: %v)", err)
	}
	out := []string{fmt.Sprintf("sar_bridge_ledger_leader %v, sar_bridge_ledger_following_pods %v", s.Sum("sar_bridge_ledger_leader", nil), s.Sum("sar_bridge_ledger_following_pods", nil))}
	for _, result := range []string{"written", "unchanged", "error", "deferred"} {
		out = append(out, fmt.Sprintf("reconciles{result=%q} %v", result, s.Sum("sar_bridge_ledger_reconciles_total", map[string]string{"result": result})))
	}
	return strings.Join(out, ", ")
}
