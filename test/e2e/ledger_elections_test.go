package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestLedgerTwoElections: bridges elected through another Lease than the suite's shared
// bridge (lgArgs: their own lease namespace, the misconfiguration docs/tenants.md warns
// about) reconcile the tenant their election wrote first; the shared bridge, whose
// reconciler also follows the tenant's pods, leaves it alone — it marks nothing and
// writes nothing — and says so in its log and its metric. The record shows in the status.
func TestLedgerTwoElections(t *testing.T) {
	const ns = "lgr-elections"
	lgTenant(t, ns, nil, map[string]string{"pods": "3"})
	b := newBridge(t, lgArgs()...)
	before, err := suite.bridge.MetricSum("sar_bridge_ledger_reconciles_total", map[string]string{"result": "deferred"})
	if err != nil {
		t.Fatal(err)
	}

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

	// The shared bridge's reconciler (election sar-bridge/sar-bridge-ledger) saw the
	// pod's events and deferred.
	want := "another election's reconciler reconciles this tenant"
	if _, ok := poll(45*time.Second, 250*time.Millisecond, func() bool {
		for _, line := range strings.Split(suite.bridge.Log(), "\n") {
			if strings.Contains(line, want) && strings.Contains(line, "tenant="+ns+" ") && strings.Contains(line, "other_election="+lgElection) {
				return true
			}
		}
		return false
	}); !ok {
		t.Fatalf("the shared bridge's log has no line %q for tenant %s", want, ns)
	}
	after, err := suite.bridge.MetricSum("sar_bridge_ledger_reconciles_total", map[string]string{"result": "deferred"})
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("the shared bridge's sar_bridge_ledger_reconciles_total{result=\"deferred\"}: %v, then %v; want it to grow", before, after)
	}
	if recs := tenantObject(t, ns).Status.Reconcilers; len(recs) != 1 || recs[0].Election != lgElection {
		t.Errorf("status.reconcilers %+v, want the lg election's record alone", recs)
	}
}
