package astjson

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// Estimated heap bytes of OPA's value types (v1.22, 64-bit), rounded up: a term and
// its boxed value; an object's header, hash index and per-member element; an array's
// header and per-element pointer and hash. They need not be exact: caches bounded by
// bytes (sizedlru) charge values with Size, and TestSizeTracksTheHeap keeps it within a
// factor of two of what the runtime measures.
const (
	termBytes          = 48 // *ast.Term and the interface's boxed header of its value
	objectBytes        = 240
	objectMemberBytes  = 112
	arrayBytes         = 64
	arrayElementBytes  = 16
	setBytes           = objectBytes
	setMemberBytes     = 56
	scalarPayloadRound = 8
)

// Size estimates the heap bytes v holds, terms shared with other values included (a
// cache keeping v keeps them alive).
func Size(v ast.Value) int64 {
	switch x := v.(type) {
	case ast.String:
		return roundUp(int64(len(x)))
	case ast.Number:
		return roundUp(int64(len(x)))
	case ast.Object:
		n := int64(objectBytes)
		x.Foreach(func(k, v *ast.Term) {
			n += objectMemberBytes + termSize(k) + termSize(v)
		})
		return n
	case *ast.Array:
		n := int64(arrayBytes)
		x.Foreach(func(t *ast.Term) { n += arrayElementBytes + termSize(t) })
		return n
	case ast.Set:
		n := int64(setBytes)
		x.Foreach(func(t *ast.Term) { n += setMemberBytes + termSize(t) })
		return n
	}
	return 0 // null, booleans, and what a decoded input never holds
}

func termSize(t *ast.Term) int64 { return termBytes + Size(t.Value) }

func roundUp(n int64) int64 {
	return (n + scalarPayloadRound - 1) / scalarPayloadRound * scalarPayloadRound
}
