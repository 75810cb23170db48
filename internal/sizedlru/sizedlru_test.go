package sizedlru

import (
	"fmt"
	"sync"
	"testing"
)

func TestBounds(t *testing.T) {
	tests := []struct {
		name      string
		max, each int64
		adds      []int64 // sizes of keys 0, 1, 2, ... in order
		get       []int   // keys read after the adds, in order (marking them used)
		then      []int64 // sizes added after the reads, keys continuing
		kept      []int   // keys present at the end
		bytes     int64
	}{
		{"fits", 100, 0, []int64{10, 20, 30}, nil, nil, []int{0, 1, 2}, 60},
		{"oldest evicted", 100, 0, []int64{40, 40, 40}, nil, nil, []int{1, 2}, 80},
		{"recently read kept", 100, 0, []int64{40, 40}, []int{0}, []int64{40}, []int{0, 2}, 80},
		{"several evicted for one", 100, 0, []int64{30, 30, 30}, nil, []int64{90}, []int{3}, 90},
		{"over the entry bound not kept", 100, 50, []int64{10, 60, 50}, nil, nil, []int{0, 2}, 60},
		{"over the whole bound not kept", 100, 0, []int64{10, 101}, nil, nil, []int{0}, 10},
		{"negative size not kept", 100, 0, []int64{-1}, nil, nil, nil, 0},
		{"zero entries", 100, 0, []int64{0, 0}, nil, nil, []int{0, 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New[int, string](tc.max, tc.each)
			key := 0
			for _, size := range tc.adds {
				c.Add(key, fmt.Sprint(key), size)
				key++
			}
			for _, k := range tc.get {
				if v, ok := c.Get(k); !ok || v != fmt.Sprint(k) {
					t.Fatalf("Get(%d) = %q, %v", k, v, ok)
				}
			}
			for _, size := range tc.then {
				c.Add(key, fmt.Sprint(key), size)
				key++
			}
			var kept []int
			for k := range key {
				if _, ok := c.Get(k); ok {
					kept = append(kept, k)
				}
			}
			if fmt.Sprint(kept) != fmt.Sprint(tc.kept) || c.Bytes() != tc.bytes || c.Len() != len(tc.kept) {
				t.Errorf("kept %v (%d bytes, len %d), want %v (%d bytes)", kept, c.Bytes(), c.Len(), tc.kept, tc.bytes)
			}
		})
	}
}

func TestReplaceAndRemove(t *testing.T) {
	c := New[string, int](100, 0)
	c.Add("a", 1, 60)
	c.Add("a", 2, 30) // replaces, accounted once
	if v, _ := c.Get("a"); v != 2 || c.Bytes() != 30 {
		t.Fatalf("after replace: %d, %d bytes", v, c.Bytes())
	}
	if c.Add("a", 3, 200) {
		t.Fatal("an oversized value was kept")
	}
	if _, ok := c.Get("a"); ok || c.Bytes() != 0 {
		t.Fatalf("an oversized replacement left the old value: %d bytes", c.Bytes())
	}
	c.Add("b", 1, 10)
	c.Remove("b")
	c.Remove("missing")
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Fatalf("after remove: len %d, %d bytes", c.Len(), c.Bytes())
	}
}

func TestConcurrent(t *testing.T) {
	c := New[int, int](1000, 100)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := (g*7 + i) % 50
				c.Add(k, i, int64(k))
				c.Get(k / 2)
				if i%10 == 0 {
					c.Remove(k)
				}
			}
		}()
	}
	wg.Wait()
	if b := c.Bytes(); b > 1000 || b < 0 {
		t.Fatalf("%d bytes kept, bound 1000", b)
	}
}
