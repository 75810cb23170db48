package authorizer

import (
	"context"
	"encoding/json"
	"testing"
)

// BenchmarkDecide measures one pod decision end to end in process, with the review
// answered by the cache (the steady state), and with a cold cache for comparison.
func BenchmarkDecide(b *testing.B) {
	input := json.RawMessage(podInput("create", "team-a", "runner", `, "node": {"name": "vk-a"}`))
	for _, bc := range []struct {
		name string
		size int
	}{{"cache-hit", 100}, {"review-each-time", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
			t := &testing.T{}
			a := newTestAuthorizer(t, Config{}, rev, newView())
			if bc.size == 1 {
				a.reviewer.allowedTTL = 0 // every decision asks the (fake) API
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := a.Decide(context.Background(), decisionPath, input)
				if err != nil || d.Result.(map[string]any)["allowed"] != true {
					b.Fatalf("decision %v %v", d.Result, err)
				}
			}
		})
	}
}
