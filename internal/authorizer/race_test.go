//go:build race

package authorizer

// raceEnabled: the race detector multiplies run time and memory; heavy tests scale down.
const raceEnabled = true
