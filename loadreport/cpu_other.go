//go:build !unix

package loadreport

// processCPU is not available here: CPUUtilization stays 0.
func processCPU() (float64, bool) { return 0, false }
