//go:build (mips64 || mips64le) && gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in register R30, which the
// assembler names g.
TEXT ·getg(SB), NOSPLIT, $0-8
	MOVV g, R1
	MOVV R1, ret+0(FP)
	RET
