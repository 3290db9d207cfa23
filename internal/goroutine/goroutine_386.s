//go:build gc

#include "textflag.h"

// func getg() uintptr
// The runtime keeps the running goroutine's g in the thread-local slot
// (runtime/go_tls.h: get_tls(r) is MOVL TLS, r; g(r) is 0(r)(TLS*1)).
TEXT ·getg(SB), NOSPLIT, $0-4
	MOVL TLS, CX
	MOVL 0(CX)(TLS*1), AX
	MOVL AX, ret+0(FP)
	RET
