// Package version holds what a build knows about itself. The Makefile stamps version
// and revision with -ldflags -X; a plain `go build` leaves version "dev" and takes the
// revision from the VCS information Go embeds, when there is any.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped by the Makefile: -X github.com/sar-bridge/sar-bridge/version.version=...
var (
	version  = "dev"
	revision = ""
)

// Info is the build's identity.
type Info struct {
	Version   string
	Revision  string
	GoVersion string
}

// Get returns the build's identity; Revision is "unknown" when neither the Makefile nor
// the Go toolchain recorded one.
func Get() Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if info.Revision == "" {
		info.Revision = vcsRevision()
	}
	return info
}

// String is the line `sar-bridge --version` prints.
func (i Info) String() string {
	return fmt.Sprintf("sar-bridge %s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

func vcsRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}
