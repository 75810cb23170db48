package astjson

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestAppendJSON: the bytes json.Marshal(ast.JSON(v)) gives, for the shapes a decision
// has and for the ones that take encoding/json's path (escapes, numbers, sets,
// non-string keys).
func TestAppendJSON(t *testing.T) {
	for _, src := range []string{
		`null`, `true`, `false`, `0`, `-1.5e3`, `12345678901234567890`, `""`, `"plain text: a/b=c"`,
		`"quote \" backslash \\ tab \t newline \n nul \u0000 del \u007f"`, `"<b> & </b>"`,
		`"only \"quotes\" and \\backslashes\\"`, `"é ü 漢 \u2028 \u2029"`,
		`[]`, `{}`, `set()`, `[1, "a", null, [true]]`,
		`{"allowed": true, "reason": "RBAC: allowed by RoleBinding \"team-a/runner\"", "modifications": {"pod_annotations": {}, "resource_limits": {"main": {"cpu": "1", "memory": "1Gi"}}}}`,
		`{"b": 1, "a": 2, "A": 3, "ä": 4, "": 5}`,
		`{"s": {"x", "a", 3, null}}`,
		`{1: "number key", "1": "string key"}`,
		`{"outer": {[1, 2]: "array key"}}`,
		`{["a"]: 1}`,
	} {
		v := ast.MustParseTerm(src).Value
		assertSameJSON(t, v)
	}
}

// TestAppendJSONRandom compares random values built from the same parts.
func TestAppendJSONRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 19))
	strs := []string{"", "a", "main", "x<y", "tab\t", "ünï", "\u2028", "\"q\"", "a\\b", string([]byte{0xff, 'a'})}
	var gen func(depth int) *ast.Term
	gen = func(depth int) *ast.Term {
		k := r.IntN(8)
		if depth > 3 {
			k = r.IntN(4)
		}
		switch k {
		case 0:
			return ast.NullTerm()
		case 1:
			return ast.BooleanTerm(r.IntN(2) == 0)
		case 2:
			return ast.NumberTerm(json.Number([]string{"0", "1", "-2.5", "1e3", "3.0"}[r.IntN(5)]))
		case 3:
			return ast.StringTerm(strs[r.IntN(len(strs))])
		case 4:
			var ts []*ast.Term
			for range r.IntN(4) {
				ts = append(ts, gen(depth+1))
			}
			return ast.ArrayTerm(ts...)
		case 5:
			var ts []*ast.Term
			for range r.IntN(4) {
				ts = append(ts, gen(depth+1))
			}
			return ast.SetTerm(ts...)
		default:
			obj := ast.NewObject()
			for range r.IntN(5) {
				key := ast.StringTerm(strs[r.IntN(len(strs))])
				if r.IntN(10) == 0 {
					key = ast.IntNumberTerm(r.IntN(3))
				}
				obj.Insert(key, gen(depth+1))
			}
			return ast.NewTerm(obj)
		}
	}
	for range 2000 {
		assertSameJSON(t, gen(0).Value)
	}
}

func assertSameJSON(t *testing.T, v ast.Value) {
	t.Helper()
	x, err := ast.JSON(v)
	if err != nil {
		t.Fatalf("ast.JSON(%v): %v", v, err)
	}
	want, err := json.Marshal(x)
	if err != nil {
		t.Fatalf("json.Marshal(%v): %v", v, err)
	}
	got, err := AppendJSON([]byte("prefix:"), v)
	if err != nil {
		t.Fatalf("AppendJSON(%v): %v", v, err)
	}
	if string(got) != "prefix:"+string(want) {
		t.Errorf("AppendJSON(%v) =\n %s\nwant\n %s", v, got[len("prefix:"):], want)
	}
}
