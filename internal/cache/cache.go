// Package cache holds review outcomes between decisions. Values are opaque bytes so one
// interface serves the in-process tier and shared backends alike.
package cache

import (
	"context"
	"time"

	utilcache "k8s.io/apimachinery/pkg/util/cache"
)

// Cache stores values under keys for a time. Implementations are safe for concurrent use.
// An error means the cache could not answer; callers treat it as a miss, never as a value.
type Cache interface {
	Get(ctx context.Context, key string) (value []byte, ok bool, err error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
}

// Memory is an in-process cache bounded by entry count (least recently used entries are
// evicted first), with a TTL per entry.
type Memory struct {
	entries *utilcache.LRUExpireCache
}

// NewMemory returns an in-process cache holding at most size entries.
func NewMemory(size int) *Memory {
	if size < 1 {
		size = 1
	}
	return &Memory{entries: utilcache.NewLRUExpireCache(size)}
}

// Get returns the value under key if it has not expired.
func (m *Memory) Get(_ context.Context, key string) ([]byte, bool, error) {
	v, ok := m.entries.Get(key)
	if !ok {
		return nil, false, nil
	}
	return v.([]byte), true, nil
}

// Set stores value under key for ttl; a non-positive ttl stores nothing.
func (m *Memory) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	m.entries.Add(key, value, ttl)
	return nil
}
