package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	tests := []struct {
		name              string
		stampedVersion    string
		stampedRevision   string
		wantVersion       string
		wantRevisionExact string
	}{
		{name: "unstamped", wantVersion: "dev"},
		{name: "stamped", stampedVersion: "v0.1.0-3-gabc1234", stampedRevision: "abc1234def", wantVersion: "v0.1.0-3-gabc1234", wantRevisionExact: "abc1234def"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oldV, oldR := version, revision
			t.Cleanup(func() { version, revision = oldV, oldR })
			if tt.stampedVersion != "" {
				version, revision = tt.stampedVersion, tt.stampedRevision
			} else {
				version, revision = "dev", ""
			}
			got := Get()
			if got.Version != tt.wantVersion {
				t.Errorf("Version = %q, want %q", got.Version, tt.wantVersion)
			}
			if tt.wantRevisionExact != "" && got.Revision != tt.wantRevisionExact {
				t.Errorf("Revision = %q, want %q", got.Revision, tt.wantRevisionExact)
			}
			if got.Revision == "" {
				t.Error("Revision is empty; want a commit or \"unknown\"")
			}
			if got.GoVersion != runtime.Version() {
				t.Errorf("GoVersion = %q", got.GoVersion)
			}
			line := got.String()
			for _, part := range []string{"sar-bridge " + tt.wantVersion, got.Revision, runtime.Version()} {
				if !strings.Contains(line, part) {
					t.Errorf("String() = %q lacks %q", line, part)
				}
			}
		})
	}
}
