package app

import (
	"fmt"
	"os"
	"testing"
)

// TestMain reads the files main.go embeds from the repository, as the binary has them.
func TestMain(m *testing.M) {
	release, err := os.ReadFile("../../VERSION")
	if err == nil {
		var marks []byte
		if marks, err = os.ReadFile("../../manifests/ledger-marks/ledger-marks.yaml"); err == nil {
			SetFiles(Files{Release: string(release), LedgerMarks: marks})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
