//go:build (mips || mipsle) && gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in register R30, which the
// assembler names g.
TEXT ·getg(SB), NOSPLIT, $0-4
	MOVW g, R1
	MOVW R1, ret+0(FP)
	RET
