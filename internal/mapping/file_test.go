package mapping

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/hotreload/hotreloadtest"
)

func writeMappings(t *testing.T, dir, content string) string {
	t.Helper()
	// Through a rename, so the watch never reads a half-written file.
	p := filepath.Join(dir, "mappings")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustParse(t *testing.T, pairs ...string) Mappings {
	t.Helper()
	m, err := Parse(pairs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string // Mappings.String()
		wantErr string
	}{
		{name: "empty", content: "", want: ""},
		{name: "comments and blanks", content: "# header\n\n   \n\t# indented comment\n", want: ""},
		{
			name:    "pairs",
			content: "team-a=a.interlink.io\r\n team-b = b.interlink.io   # trailing comment\n*=interlink.io\nteam-a=a.interlink.io\n",
			want:    "*=interlink.io,team-a=a.interlink.io,team-b=b.interlink.io",
		},
		{name: "no final newline", content: "a=a.io", want: "a=a.io"},
		{name: "missing =", content: "# ok\nteam-a\n", wantErr: `:2: mapping "team-a": want tenant=group`},
		{name: "empty group", content: "a=\n", wantErr: ":1: mapping \"a=\": want tenant=group"},
		{name: "group cut by a comment", content: "a=#b.io\n", wantErr: ":1: mapping \"a=\": want tenant=group"},
		{name: "bad group", content: "a=Not_A_Group\n", wantErr: `:1: mapping "a=Not_A_Group": group "Not_A_Group" is not a valid API group`},
		{name: "conflict", content: "a=a.io\n\nb=b.io\na=c.io\n", wantErr: `:4: tenant "a" is already mapped to "a.io" on line 1`},
		{name: "YAML is not the format", content: "a: a.io\n", wantErr: "want tenant=group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeMappings(t, t.TempDir(), tt.content)
			m, err := ParseFile(p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), p) {
					t.Fatalf("ParseFile error = %v, want %q naming %s", err, tt.wantErr, p)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFile: %v", err)
			}
			if got := m.String(); got != tt.want {
				t.Errorf("mappings = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestMerge(t *testing.T) {
	flags := mustParse(t, "a=a.io", "*=fallback.io")
	m, err := Merge(flags, mustParse(t, "b=b.io", "a=a.io"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.String(), "*=fallback.io,a=a.io,b=b.io"; got != want {
		t.Errorf("merged = %q, want %q", got, want)
	}
	if _, err := Merge(flags, mustParse(t, "*=other.io")); err == nil || !strings.Contains(err.Error(), `tenant "*" is mapped to "fallback.io" by --openshift.mappings and to "other.io" by the mappings file`) {
		t.Errorf("conflict: err = %v", err)
	}
	if m, err := Merge(Mappings{}, Mappings{}); err != nil || m.Len() != 0 {
		t.Errorf("empty merge = %v, %v", m, err)
	}
	// Merge must not alias its arguments.
	m.groups["x"] = "x.io"
	if _, ok := flags.groups["x"]; ok {
		t.Error("Merge aliases the flag mappings")
	}
}

func TestSourceReload(t *testing.T) {
	dir := t.TempDir()
	file := writeMappings(t, dir, "team-a=a.interlink.io\n")
	logs := &hotreloadtest.SyncBuffer{}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := NewSource(ctx, mustParse(t, "*=interlink.io"), file, 10*time.Millisecond, log.NewLogfmtLogger(logs), reg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-s.v.Done() })

	group := func(tenant string) string {
		g, _ := s.Group(tenant)
		return g
	}
	metrics := func(success, failure, last float64) {
		t.Helper()
		hotreloadtest.CheckMetrics(t, s.v, success, failure, last)
	}
	failures := func() float64 { return hotreloadtest.Failures(s.v) }
	settle := hotreloadtest.Settle

	if group("team-a") != "a.interlink.io" || group("team-b") != "interlink.io" {
		t.Fatalf("initial mappings = %s", s.Current())
	}
	metrics(0, 0, 1)

	writeMappings(t, dir, "team-a=a.interlink.io\nteam-b=b.interlink.io\n")
	hotreloadtest.WaitFor(t, "generation 1", func() bool { return s.Generation() == 1 }, logs)
	if group("team-b") != "b.interlink.io" {
		t.Fatalf("after reload: %s", s.Current())
	}
	metrics(1, 0, 1)

	// Broken: rejected once, the last good mappings keep serving.
	writeMappings(t, dir, "team-a=a.interlink.io\nteam-b=Bad_Group\n")
	hotreloadtest.WaitFor(t, "a failure", func() bool { return failures() == 1 }, logs)
	settle()
	if s.Generation() != 1 || group("team-b") != "b.interlink.io" {
		t.Fatalf("broken file swapped in: generation %d, %s", s.Generation(), s.Current())
	}
	metrics(1, 1, 0)
	if l := logs.String(); !strings.Contains(l, "level=error") || !strings.Contains(l, file+":2") {
		t.Errorf("no error line naming %s:2 in logs:\n%s", file, l)
	}

	// A conflict with the flags is rejected too.
	writeMappings(t, dir, "*=other.interlink.io\n")
	hotreloadtest.WaitFor(t, "a second failure", func() bool { return failures() == 2 }, logs)
	settle()
	if s.Generation() != 1 || group("team-c") != "interlink.io" {
		t.Fatalf("conflicting file swapped in: %s", s.Current())
	}

	// A missing file is a failure, not an empty mapping.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	hotreloadtest.WaitFor(t, "a third failure", func() bool { return failures() == 3 }, logs)
	settle()
	if group("team-b") != "b.interlink.io" {
		t.Fatalf("missing file dropped the mappings: %s", s.Current())
	}

	// Fixed: reloads.
	writeMappings(t, dir, "team-b=b2.interlink.io\n")
	hotreloadtest.WaitFor(t, "generation 2", func() bool { return s.Generation() == 2 }, logs)
	if group("team-b") != "b2.interlink.io" || group("team-a") != "interlink.io" {
		t.Fatalf("after fix: %s", s.Current())
	}
	metrics(2, 3, 1)
}

func TestNewSource(t *testing.T) {
	flags := mustParse(t, "a=a.io")
	// No file: the flags alone, nothing watched.
	s, err := NewSource(context.Background(), flags, "", 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-s.v.Done()
	if g, ok := s.Group("a"); !ok || g != "a.io" {
		t.Errorf("Group(a) = %q %v", g, ok)
	}

	dir := t.TempDir()
	for name, content := range map[string]string{"broken": "a=Bad_Group\n", "conflict": "a=b.io\n"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewSource(context.Background(), flags, p, time.Second, nil, nil); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, p)
		}
	}
	if _, err := NewSource(context.Background(), flags, filepath.Join(dir, "missing"), time.Second, nil, nil); err == nil {
		t.Error("missing file: no error")
	}

	reg := prometheus.NewRegistry()
	if _, err := NewSource(context.Background(), flags, "", 0, nil, reg); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP sar_bridge_mapping_last_reload_success 1 when the mappings file last seen was loaded, 0 when it was rejected and older mappings are serving.
# TYPE sar_bridge_mapping_last_reload_success gauge
sar_bridge_mapping_last_reload_success 1
# HELP sar_bridge_mapping_reloads_total Tenant mapping reloads after a change of the mappings file, by result (success, failure).
# TYPE sar_bridge_mapping_reloads_total counter
sar_bridge_mapping_reloads_total{result="failure"} 0
sar_bridge_mapping_reloads_total{result="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
