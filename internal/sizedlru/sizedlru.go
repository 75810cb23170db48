// Package sizedlru is a least-recently-used cache bounded by the bytes its entries
// hold, not by their count: the bridge's caches keep values derived from what callers
// send (pod specs, decisions), and one caller's pod may be a thousand times another's.
// An entry larger than the per-entry bound is not kept at all, so no single value can
// take the cache over.
//
// Hand-written rather than taken from a library: k8s.io/utils/lru and
// hashicorp/golang-lru bound the number of entries only, and cost-based caches such as
// ristretto admit entries asynchronously and by probability and run goroutines per
// cache, while the bridge builds a cache per policy load and its tests need to know
// what is kept.
package sizedlru

import (
	"container/list"
	"sync"
)

// Cache is safe for concurrent use. The zero Cache keeps nothing.
type Cache[K comparable, V any] struct {
	mu            sync.Mutex
	order         list.List // of *entry[K, V], most recently used first
	items         map[K]*list.Element
	bytes         int64
	maxBytes      int64
	maxEntryBytes int64
}

type entry[K comparable, V any] struct {
	key   K
	value V
	size  int64
}

// New returns a cache holding at most maxBytes in all, and no entry over maxEntryBytes
// (maxBytes when larger or not positive).
func New[K comparable, V any](maxBytes, maxEntryBytes int64) *Cache[K, V] {
	if maxEntryBytes <= 0 || maxEntryBytes > maxBytes {
		maxEntryBytes = maxBytes
	}
	return &Cache[K, V]{items: map[K]*list.Element{}, maxBytes: maxBytes, maxEntryBytes: maxEntryBytes}
}

// Get returns the value kept for key and marks it used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry[K, V]).value, true
}

// Add keeps value under key, accounted as size bytes, evicting the least recently used
// entries to make room. It reports false, and keeps nothing (dropping an older value
// of key), when size is over the per-entry bound.
func (c *Cache[K, V]) Add(key K, value V, size int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
	if size > c.maxEntryBytes || size < 0 {
		return false
	}
	for c.bytes+size > c.maxBytes {
		c.remove(c.order.Back())
	}
	c.items[key] = c.order.PushFront(&entry[K, V]{key: key, value: value, size: size})
	c.bytes += size
	return true
}

// Remove drops key's entry, if any.
func (c *Cache[K, V]) Remove(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
}

func (c *Cache[K, V]) remove(el *list.Element) {
	e := c.order.Remove(el).(*entry[K, V])
	delete(c.items, e.key)
	c.bytes -= e.size
}

// Len is the number of entries kept.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// Bytes is the sum of the sizes of the entries kept.
func (c *Cache[K, V]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
