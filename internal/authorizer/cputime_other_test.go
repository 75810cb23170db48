//go:build !unix

package authorizer

import "time"

// processCPU is not measured here: BenchmarkDecide reports no cpu-ns/op.
func processCPU() time.Duration { return 0 }
