//go:build gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in register R22, which the
// assembler names g.
TEXT ·getg(SB), NOSPLIT, $0-8
	MOVV g, R4
	MOVV R4, ret+0(FP)
	RET
