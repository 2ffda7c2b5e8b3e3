//go:build !unix

package committed_test

import "time"

// processCPU is not measured here: cpu_ms reads 0.
func processCPU() time.Duration { return 0 }
