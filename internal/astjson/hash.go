package astjson

import (
	"encoding/binary"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Value tags of the canonical encoding. Absent is a path with no value, so that a
// missing field and a null one never hash alike.
const (
	tagAbsent byte = iota
	tagNull
	tagFalse
	tagTrue
	tagNumber
	tagString
	tagArray
	tagObject
	tagSet
	tagOther
)

// AppendCanonical appends an unambiguous encoding of v to dst, for hashing: a type
// tag, then lengths before contents, object members and set elements in OPA's sorted
// order. Two values encoded alike are equal; equal numbers spelt differently ("1",
// "1.0") are encoded differently, which only costs a memo a miss. A nil v is encoded
// as absent.
func AppendCanonical(dst []byte, v ast.Value) []byte {
	// No closures here: one capturing dst would move it to the heap on every call.
	switch x := v.(type) {
	case nil:
		return appendTag(dst, tagAbsent, 0)
	case ast.Null:
		return appendTag(dst, tagNull, 0)
	case ast.Boolean:
		if x {
			return appendTag(dst, tagTrue, 0)
		}
		return appendTag(dst, tagFalse, 0)
	case ast.Number:
		return append(appendTag(dst, tagNumber, len(x)), x...)
	case ast.String:
		return append(appendTag(dst, tagString, len(x)), x...)
	case *ast.Array:
		dst = appendTag(dst, tagArray, x.Len())
		for i := range x.Len() {
			dst = AppendCanonical(dst, x.Elem(i).Value)
		}
		return dst
	case ast.Object:
		dst = appendTag(dst, tagObject, x.Len())
		for _, k := range x.Keys() { // sorted
			dst = AppendCanonical(dst, k.Value)
			dst = AppendCanonical(dst, x.Get(k).Value)
		}
		return dst
	case ast.Set:
		dst = appendTag(dst, tagSet, x.Len())
		for _, t := range x.Slice() { // sorted
			dst = AppendCanonical(dst, t.Value)
		}
		return dst
	default:
		// Not a JSON value (a ref, a var): input never holds one, but be unambiguous.
		s := x.String()
		return append(appendTag(dst, tagOther, len(s)), s...)
	}
}

func appendTag(dst []byte, tag byte, n int) []byte {
	return binary.AppendUvarint(append(dst, tag), uint64(n))
}

// Member is obj[key], or nil when obj has no such member.
func Member(obj ast.Object, key *ast.Term) ast.Value {
	if t := obj.Get(key); t != nil {
		return t.Value
	}
	return nil
}

// Find returns the value at path below v, or nil when there is none. Path elements
// are object keys or array indices, as in a ref.
func Find(v ast.Value, path []*ast.Term) ast.Value {
	for _, p := range path {
		switch x := v.(type) {
		case ast.Object:
			if v = Member(x, p); v == nil {
				return nil
			}
		case *ast.Array:
			n, ok := p.Value.(ast.Number)
			if !ok {
				return nil
			}
			i, ok := n.Int()
			if !ok || i < 0 || i >= x.Len() {
				return nil
			}
			v = x.Elem(i).Value
		default:
			return nil
		}
	}
	return v
}
