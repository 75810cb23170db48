//go:build race

package policies

// raceEnabled: built with -race (see corpus_test.go).
const raceEnabled = true
