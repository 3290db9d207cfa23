//go:build (amd64 || arm64) && gc

package goroutine

// getg returns the address of the calling goroutine's g (goroutine_amd64.s,
// goroutine_arm64.s).
//
//go:noescape
func getg() uintptr

func id() uintptr { return getg() }
