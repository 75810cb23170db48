package astjson

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The estimate's arithmetic; authorizer's TestCachedBytesTrackTheHeap checks it against
// the heap the runtime measures for the values the bridge caches.
func TestSize(t *testing.T) {
	tests := []struct {
		doc  string
		want int64
	}{
		{`null`, 0},
		{`true`, 0},
		{`"abc"`, 8},
		{`"abcdefghi"`, 16},
		{`12.5`, 8},
		{`[]`, arrayBytes},
		{`["a", 1]`, arrayBytes + 2*(arrayElementBytes+termBytes+8)},
		{`{}`, objectBytes},
		{`{"k": "v"}`, objectBytes + objectMemberBytes + 2*(termBytes+8)},
		{`{"k": {"k": []}}`, objectBytes + objectMemberBytes + termBytes + 8 + termBytes + objectBytes + objectMemberBytes + termBytes + 8 + termBytes + arrayBytes},
		{`{"a", "b"}`, setBytes + 2*(setMemberBytes+termBytes+8)},
	}
	for _, tc := range tests {
		if got := Size(ast.MustParseTerm(tc.doc).Value); got != tc.want {
			t.Errorf("Size(%s) = %d, want %d", tc.doc, got, tc.want)
		}
	}
}
