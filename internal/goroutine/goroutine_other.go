//go:build !((386 || amd64 || arm || arm64 || loong64 || mips || mipsle || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x) && gc)

package goroutine

func id() uintptr { return stackID() }
