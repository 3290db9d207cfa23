//go:build (ppc64 || ppc64le) && gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in register R30, which the
// assembler names g.
TEXT ·getg(SB), NOSPLIT, $0-8
	MOVD g, R3
	MOVD R3, ret+0(FP)
	RET
