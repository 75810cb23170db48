package main

import (
	"os"
	"strings"
	"testing"
)

// The Dockerfile (for Docker and Buildah users) builds the image this command builds:
// the same base, entrypoint, user and fixed labels. There is no daemon here to build it,
// so its instructions are compared.
func TestDockerfileMatchesImage(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{
		"FROM scratch\n",
		"USER " + User + "\n",
		`ENTRYPOINT ["` + Entrypoint + `"]` + "\n",
		"COPY bin/linux-${TARGETARCH}/sar-bridge " + Entrypoint + "\n",
		labelSource + `="https://github.com/sar-bridge/sar-bridge"`,
		labelLicenses + `="Apache-2.0"`,
		labelVersion + `="${VERSION}"`,
		labelRevision + `="${REVISION}"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if n := strings.Count(text, "\nFROM "); n != 1 {
		t.Errorf("Dockerfile has %d FROM lines, want one stage on scratch", n)
	}
}
