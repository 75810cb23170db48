package authorizer

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkDecide measures one pod decision end to end in process: with the review
// answered by the cache and every pod spec distinct (so the decision memo never hits),
// with the pods of an array job (memo hits), and with every review asked of the (fake)
// API for comparison.
func BenchmarkDecide(b *testing.B) {
	// More distinct specs than the memo holds, cycled: every evaluation is a miss.
	distinct := make([]json.RawMessage, 8192)
	for i := range distinct {
		distinct[i] = json.RawMessage(fmt.Sprintf(`{"pod": {"metadata": {"name": "p%d", "namespace": "team-a"},
			"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "containers": [{"name": "main", "resources": {"limits": {"cpu": "%dm"}}}]}}}`, i, 1+i))
	}
	arrayJob := make([]json.RawMessage, 1000)
	for i := range arrayJob {
		arrayJob[i] = json.RawMessage(arrayJobPod(i, "1"))
	}
	for _, bc := range []struct {
		name           string
		inputs         []json.RawMessage
		reviewEachTime bool
	}{
		{"cache-hit", distinct, false},
		{"array-job", arrayJob, false},
		{"review-each-time", distinct, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
			t := &testing.T{}
			a := newTestAuthorizer(t, Config{}, rev, newView())
			if bc.reviewEachTime {
				a.reviewer.allowedTTL = 0 // every decision asks the (fake) API
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				d, err := a.Decide(context.Background(), decisionPath, bc.inputs[i%len(bc.inputs)])
				if outcome, _ := summarize(d.Result, d.Defined); err != nil || outcome != "allowed" {
					b.Fatalf("decision %v %v", jsonOf(d.Result), err)
				}
				i++
			}
		})
	}
}
