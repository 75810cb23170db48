package slurmjob

import "testing"

func TestUnderPrefix(t *testing.T) {
	for _, tc := range []struct {
		path, prefix string
		want         bool
	}{
		{"/scratch/team-a", "/scratch/team-a", true},
		{"/scratch/team-a/", "/scratch/team-a", true},
		{"/scratch/team-a/run/1", "/scratch/team-a", true},
		{"/scratch/team-a/run/1", "/scratch/team-a/", true},
		{"/scratch//team-a/./run", "/scratch/team-a", true},
		{"/anything", "/", true},
		{"/scratch/team-ab", "/scratch/team-a", false},
		{"/scratch/team-a/../b", "/scratch/team-a", false},
		{"/scratch/team-a/x/../y", "/scratch/team-a", false}, // ".." is refused, not cleaned
		{"/scratch/team-a/..", "/scratch/team-a", false},
		{"/scratch", "/scratch/team-a", false},
		{"scratch/team-a/x", "/scratch/team-a", false},
		{"./x", "/", false},
		{"", "/", false},
		{"/scratch/team-a/x", "", false},
		{"/scratch/team-a/x", "scratch/team-a", false},
		{"/scratch/team-a/x", "/scratch/../scratch/team-a", false},
		{"/scratch/team-a/x\x00", "/scratch/team-a", false},
		{"/scratch/team-a/..x", "/scratch/team-a", true}, // a name, not ".."
	} {
		if got := UnderPrefix(tc.path, tc.prefix); got != tc.want {
			t.Errorf("UnderPrefix(%q, %q) = %v, want %v", tc.path, tc.prefix, got, tc.want)
		}
	}
}
