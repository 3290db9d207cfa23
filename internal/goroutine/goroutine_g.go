//go:build (386 || amd64 || arm || arm64 || loong64 || mips || mipsle || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x) && gc

package goroutine

// getg returns the address of the calling goroutine's g (goroutine_amd64.s,
// goroutine_arm64.s).
//
//go:noescape
func getg() uintptr

func id() uintptr { return getg() }
