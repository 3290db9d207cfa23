//go:build gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in register X27, which the
// assembler names g.
TEXT ·getg(SB), NOSPLIT, $0-8
	MOV g, X10
	MOV X10, ret+0(FP)
	RET
