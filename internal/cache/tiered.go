package cache

import (
	"context"
	"time"
)

// Tiered puts an in-process cache in front of memcached: hot keys cost no round trip,
// and replicas share what any of them learned. frontTTL bounds how long a replica may
// keep answering from its own copy after another replica stored a newer value.
type Tiered struct {
	front    *Memory
	frontTTL time.Duration
	back     *Memcached
	metrics  *Metrics
}

// NewTiered returns a Cache reading front then back. A non-positive frontTTL keeps
// nothing in front. metrics may be nil; back records its own tier.
func NewTiered(front *Memory, frontTTL time.Duration, back *Memcached, metrics *Metrics) *Tiered {
	return &Tiered{front: front, frontTTL: frontTTL, back: back, metrics: metrics}
}

// Get answers from front when it can, otherwise from back, copying a back hit to front
// for no longer than the back entry has left. A back error is returned as is.
func (t *Tiered) Get(ctx context.Context, key string) ([]byte, bool, error) {
	start := time.Now()
	if v, ok, _ := t.front.Get(ctx, key); ok {
		t.metrics.observeGet(tierMemory, resultHit, start)
		return v, true, nil
	}
	t.metrics.observeGet(tierMemory, resultMiss, start)

	v, remaining, ok, err := t.back.GetWithTTL(ctx, key)
	if err != nil || !ok {
		return nil, false, err
	}
	t.setFront(ctx, key, v, remaining)
	return v, true, nil
}

// Set writes back, then front even if back failed: this replica can still reuse the
// value. The back error is returned.
func (t *Tiered) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	err := t.back.Set(ctx, key, value, ttl)
	t.setFront(ctx, key, value, ttl)
	return err
}

// setFront stores for min(frontTTL, ttl), so a front copy never outlives the back entry.
func (t *Tiered) setFront(ctx context.Context, key string, value []byte, ttl time.Duration) {
	ttl = min(ttl, t.frontTTL)
	if ttl <= 0 {
		return
	}
	_ = t.front.Set(ctx, key, value, ttl) // Memory.Set cannot fail
	t.metrics.observeSet(tierMemory, nil)
}
