//go:build !race

package authorizer

const raceEnabled = false
