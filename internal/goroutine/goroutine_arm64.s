//go:build gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in register R28, which the
// assembler names g.
TEXT ·getg(SB), NOSPLIT, $0-8
	MOVD g, R0
	MOVD R0, ret+0(FP)
	RET
