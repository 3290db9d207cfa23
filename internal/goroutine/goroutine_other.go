//go:build !((amd64 || arm64) && gc)

package goroutine

func id() uintptr { return stackID() }
