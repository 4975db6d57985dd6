//go:build !purego

#include "textflag.h"

// Eight codes at off(SI): widen to dword indices, gather their float32
// values from the table at R9 (the gather clears its mask, so it is set
// again each time), acc += values * x[off:].
#define FP8_8(off, acc) \
	VPMOVZXBD off(SI), Y2; \
	VPCMPEQD Y3, Y3, Y3; \
	VGATHERDPS Y3, (R9)(Y2*4), Y4; \
	VFMADD231PS (off*4)(DI), Y4, acc

// func dotFP8E4M3AVX2(w *byte, x *float32, nb int, tab *float32) float32
// w: nb blocks of 32 E4M3 codes; x: 32*nb floats; tab: gguf.E4M3Table.
TEXT ·dotFP8E4M3AVX2(SB), NOSPLIT, $0-36
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVQ tab+24(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	TESTQ CX, CX
	JEQ fp8done
fp8loop:
	FP8_8(0, Y0)
	FP8_8(8, Y1)
	FP8_8(16, Y5)
	FP8_8(24, Y6)
	ADDQ $32, SI
	ADDQ $128, DI
	DECQ CX
	JNZ fp8loop
fp8done:
	VADDPS Y1, Y0, Y0
	VADDPS Y6, Y5, Y5
	VADDPS Y5, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	VMOVSS X0, ret+32(FP)
	RET

// Eight codes at off(SI) times x at xoff(DI) into acc; VMULPS starts a
// block's accumulator, VFMADD231PS adds to it.
#define FP8B_8(off, xoff, acc, op) \
	VPMOVZXBD off(SI), Y2; \
	VPCMPEQD Y3, Y3, Y3; \
	VGATHERDPS Y3, (R9)(Y2*4), Y4; \
	op xoff(DI), Y4, acc

// func dotFP8E4M3B32AVX2(w *byte, x *float32, nb int, tab *float32) float32
// w: nb blocks of a float32 scale and 32 E4M3 codes (36 bytes); x: 32*nb
// floats; tab: gguf.E4M3Table. Per block: Y5+Y6 = Σ value·x in two
// chains, then Y0 += (Y5+Y6) · scale.
TEXT ·dotFP8E4M3B32AVX2(SB), NOSPLIT, $0-36
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVQ tab+24(FP), R9
	VXORPS Y0, Y0, Y0
	TESTQ CX, CX
	JEQ fp8bdone
fp8bloop:
	VBROADCASTSS (SI), Y7
	FP8B_8(4, 0, Y5, VMULPS)
	FP8B_8(12, 32, Y6, VMULPS)
	FP8B_8(20, 64, Y5, VFMADD231PS)
	FP8B_8(28, 96, Y6, VFMADD231PS)
	VADDPS Y6, Y5, Y5
	VFMADD231PS Y7, Y5, Y0
	ADDQ $36, SI
	ADDQ $128, DI
	DECQ CX
	JNZ fp8bloop
fp8bdone:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	VMOVSS X0, ret+32(FP)
	RET
