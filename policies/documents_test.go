package policies

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDocuments(t *testing.T) {
	dir := t.TempDir()
	extra := `package lokistack.v1

allow if input.x
a.b.c := 1
p[x] := 1 if some x in ["k"]
`
	if err := os.WriteFile(filepath.Join(dir, "extra.rego"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	ev, err := New(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	docs := ev.Documents()
	for _, want := range [][]string{
		{"interlink", "authz"},
		{"interlink", "authz", "decision"},
		{"interlink", "authz", "allow"},
		{"lokistack", "v1"},
		{"lokistack", "v1", "allow"},
		{"lokistack", "v1", "a", "b", "c"},
		{"lokistack", "v1", "p"},
	} {
		if !slices.ContainsFunc(docs, func(d []string) bool { return slices.Equal(d, want) }) {
			t.Errorf("Documents() lacks %q; got %q", want, docs)
		}
	}
	if !slices.IsSortedFunc(docs, func(a, b []string) int { return slices.Compare(a, b) }) {
		t.Errorf("Documents() not sorted: %q", docs)
	}
}
