package app

// Files are what the commands take from the repository's root, embedded by main.go (the
// one package go:embed reaches them from).
type Files struct {
	// Release is the VERSION file: the tag `make image` gives the image, so the sidecar
	// helm-postrender adds runs the image of this binary's release.
	Release string
	// LedgerMarks is manifests/ledger-marks/ledger-marks.yaml, so that a site running the
	// bridge only as interLink's sidecar gets the very file manifests/base and the chart
	// install, from the binary it already runs as its Helm post-renderer.
	LedgerMarks []byte
}

var files Files

// SetFiles hands the commands main.go's embedded files; call it before any command.
func SetFiles(f Files) { files = f }
