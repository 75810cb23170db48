package cache

import (
	"context"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		size    int
		ttl     time.Duration
		sets    []string
		sleep   time.Duration
		wantHit map[string]bool
	}{
		{name: "hit", size: 4, ttl: time.Minute, sets: []string{"a"}, wantHit: map[string]bool{"a": true, "b": false}},
		{name: "expired", size: 4, ttl: 20 * time.Millisecond, sets: []string{"a"}, sleep: 50 * time.Millisecond, wantHit: map[string]bool{"a": false}},
		{name: "zero ttl stores nothing", size: 4, ttl: 0, sets: []string{"a"}, wantHit: map[string]bool{"a": false}},
		{name: "lru evicts oldest", size: 2, ttl: time.Minute, sets: []string{"a", "b", "c"}, wantHit: map[string]bool{"a": false, "b": true, "c": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewMemory(tt.size)
			for _, k := range tt.sets {
				if err := c.Set(ctx, k, []byte("v-"+k), tt.ttl); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(tt.sleep)
			for k, want := range tt.wantHit {
				v, ok, err := c.Get(ctx, k)
				if err != nil || ok != want {
					t.Fatalf("Get(%q) = %q, %v, %v; want hit=%v", k, v, ok, err, want)
				}
				if ok && string(v) != "v-"+k {
					t.Errorf("Get(%q) = %q", k, v)
				}
			}
		})
	}
}
