//go:build !purego

#include "textflag.h"

// func scaleAxpyAVX2(row *float32, s, a float32, acc *float32, n int)
// row[i] *= s; acc[i] += a*row[i] for i < n (n a multiple of 8).
TEXT ·scaleAxpyAVX2(SB), NOSPLIT, $0-32
	MOVQ row+0(FP), SI
	VBROADCASTSS s+8(FP), Y0
	VBROADCASTSS a+12(FP), Y1
	MOVQ acc+16(FP), DI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JEQ sadone
saloop:
	VMULPS (SI), Y0, Y2
	VMOVUPS Y2, (SI)
	VMOVUPS (DI), Y3
	VFMADD231PS Y2, Y1, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ saloop
sadone:
	VZEROUPPER
	RET

// func axpyAxpyAVX2(row, u *float32, a, c float32, acc *float32, n int)
// row[i] += a*u[i]; acc[i] += c*row[i] for i < n (n a multiple of 8).
TEXT ·axpyAxpyAVX2(SB), NOSPLIT, $0-40
	MOVQ row+0(FP), SI
	MOVQ u+8(FP), DX
	VBROADCASTSS a+16(FP), Y0
	VBROADCASTSS c+20(FP), Y1
	MOVQ acc+24(FP), DI
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	JEQ aadone
aaloop:
	VMOVUPS (SI), Y2
	VFMADD231PS (DX), Y0, Y2
	VMOVUPS Y2, (SI)
	VMOVUPS (DI), Y3
	VFMADD231PS Y2, Y1, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ aaloop
aadone:
	VZEROUPPER
	RET
