package mapping

import (
	"slices"
	"testing"
)

func TestGroups(t *testing.T) {
	for _, tc := range []struct {
		pairs []string
		want  []string
	}{
		{nil, []string{}},
		{[]string{"team-a=interlink.io"}, []string{"interlink.io"}},
		{[]string{"b=b.interlink.io", "a=interlink.io", "c=interlink.io", "*=b.interlink.io"}, []string{"b.interlink.io", "interlink.io"}},
	} {
		m, err := Parse(tc.pairs)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Groups(); !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q).Groups() = %q, want %q", tc.pairs, got, tc.want)
		}
	}
}
