//go:build !linux

package cpuwork

// accountChild is the child process of a Linux-only test.
func accountChild() {}
