package policies

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestFixedDataGet: documents below data are read from the whole document, whatever
// their depth or type; missing ones and data as a whole are left to the store.
func TestFixedDataGet(t *testing.T) {
	d := fixedData{root: ast.MustParseTerm(`{"a": {"b": [10, {"c": "x"}], "n": null}, "system": {"s": 1}}`).Value.(ast.Object)}
	for _, tc := range []struct {
		ref  string
		want string // "" when Get leaves the read to the store
	}{
		{"data.a", `{"b": [10, {"c": "x"}], "n": null}`},
		{"data.a.b[1].c", `"x"`},
		{"data.a.b[0]", `10`},
		{"data.a.n", `null`},
		{"data.a.missing", ""},
		{"data.a.b[2]", ""},
		{`data.a.b["0"]`, ""},
		{"data.a.n.deeper", ""},
		{"data", ""},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			got := d.Get(ast.MustParseRef(tc.ref))
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("Get = %v, want nil", got)
			case tc.want != "" && (got == nil || ast.Compare(got, ast.MustParseTerm(tc.want).Value) != 0):
				t.Errorf("Get = %v, want %s", got, tc.want)
			}
		})
	}
}

// TestEvalReadsDataAsStored: evaluations answered from fixedData read what the store
// holds: documents at any depth, the precomputed documents, undefined paths, and
// `with` overlays on top.
func TestEvalReadsDataAsStored(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "reads.rego", `package reads

deep := data.interlink.limits.g.cpu

missing := "absent" if not data.interlink.nope

packages := [k | some k, _ in data.sar_bridge.precomputed.interlink]

overlaid := x if {
	x := data.interlink.limits.g.cpu with data.interlink.limits.g as {"cpu": "9"}
}

precomputed := data.sar_bridge.precomputed.interlink.authz.caps.cpu[0].raw
`)
	e := newEvaluator(t, Options{Dir: dir, DataFile: writeFile(t, t.TempDir(), "data.json",
		`{"interlink": {"limits": {"g": {"cpu": "3"}}, "default_limits": {"cpu": "1"}}}`)})
	for doc, want := range map[string]string{
		"deep":        `"3"`,
		"missing":     `"absent"`,
		"packages":    `["authz", "hpc_settings"]`,
		"overlaid":    `"9"`,
		"precomputed": `"3"`,
	} {
		got, defined, err := e.Eval(context.Background(), []string{"reads", doc}, nil)
		if err != nil || !defined {
			t.Fatalf("%s: %v (defined %v)", doc, err, defined)
		}
		b, _ := json.Marshal(got)
		var w any
		_ = json.Unmarshal([]byte(want), &w)
		wb, _ := json.Marshal(w)
		if string(b) != string(wb) {
			t.Errorf("%s = %s, want %s", doc, b, wb)
		}
	}
}
