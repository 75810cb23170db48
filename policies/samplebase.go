package policies

import _ "embed"

// The base of the built-in rules' samples (rules/samples): an input and the data its
// samples patch. `sar-bridge test` patches them for a directory without its own, so a
// site's sample names only what differs from an ordinary offloaded pod.
var (
	//go:embed rules/samples/base_input.json
	sampleBaseInput []byte
	//go:embed rules/samples/base_data.json
	sampleBaseData []byte
)

// SampleBase returns the built-in samples' base input and data, as JSON.
func SampleBase() (input, data []byte) {
	return append([]byte(nil), sampleBaseInput...), append([]byte(nil), sampleBaseData...)
}
