//go:build gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in register R10, which the
// assembler names g.
TEXT ·getg(SB), NOSPLIT, $0-4
	MOVW g, R0
	MOVW R0, ret+0(FP)
	RET
