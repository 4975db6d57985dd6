//go:build !purego

#include "textflag.h"

// func bf16ToF32AVX2(dst *float32, src *byte, n int)  (n a multiple of 8)
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JEQ bfdone
bfloop:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ bfloop
bfdone:
	VZEROUPPER
	RET

// func dotF32x8(a, b *float32, n int) float32  (n a multiple of 8)
TEXT ·dotF32x8(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	SHRQ $3, CX
	JEQ dotdone
	TESTQ $1, CX
	JEQ dotpairs
	VMOVUPS (SI), Y2
	VFMADD231PS (DI), Y2, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JEQ dotdone
dotpairs:
	SHRQ $1, CX
dotloop:
	VMOVUPS (SI), Y2
	VMOVUPS 32(SI), Y3
	VFMADD231PS (DI), Y2, Y0
	VFMADD231PS 32(DI), Y3, Y1
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ dotloop
dotdone:
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	VMOVSS X0, ret+24(FP)
	RET

// func axpyF32x8(y, x *float32, n int, w float32)  (n a multiple of 8)
TEXT ·axpyF32x8(SB), NOSPLIT, $0-28
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS w+24(FP), Y3
	SHRQ $3, CX
	JEQ axdone
axloop:
	VMOVUPS (DI), Y0
	VFMADD231PS (SI), Y3, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ axloop
axdone:
	VZEROUPPER
	RET

// func fp8DecodeAVX2(dst *float32, src *byte, n int, shift uint64, ebias int32, submul float32, sublim, thrm1, infc int32)
// (n a multiple of 8). A code's sign goes to bit 31 and its other 7 bits
// (mag), shifted left by shift, into float32's exponent and mantissa; adding
// ebias = (127-bias)<<23 to that rebiases the exponent of a normal code.
// Subnormal codes (mag < sublim) are float(mag)*submul instead. Both are
// integer or normal-float work: the older way, one multiply of the shifted
// bits, fed float32 subnormals to VMULPS for subnormal codes, which Intel
// CPUs run through a microcode assist (~16x slower). Codes whose mag
// exceeds thrm1 are the format's specials: infinity up to infc, NaN above
// (the same values as the decode tables, see fp8Params).
//
// Every instruction here is VEX-encoded (VMOVQ, VMOVD, not MOVQ, MOVD): a
// legacy-SSE instruction next to 256-bit AVX code costs a state transition
// or a merge on Intel CPUs, which made this loop several times slower.
TEXT ·fp8DecodeAVX2(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVQ shift+24(FP), X9
	// (VBROADCASTSS: vet sizes VPBROADCASTD by its destination; the bits are the same)
	VBROADCASTSS ebias+32(FP), Y13
	VBROADCASTSS submul+36(FP), Y10
	VBROADCASTSS sublim+40(FP), Y14
	VBROADCASTSS thrm1+44(FP), Y11
	VBROADCASTSS infc+48(FP), Y12
	MOVL $0x7f800000, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x00400000, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8
	SHRQ $3, CX
	JEQ f8done
f8loop:
	VPMOVZXBD (SI), Y0
	VPSLLD $25, Y0, Y1
	VPSRLD $25, Y1, Y1 // mag
	VPSRLD $7, Y0, Y2
	VPSLLD $31, Y2, Y2 // sign
	VPSLLD X9, Y1, Y3
	VPADDD Y13, Y3, Y3 // normal codes
	VCVTDQ2PS Y1, Y0
	VMULPS Y10, Y0, Y0 // subnormal codes (exact)
	VPCMPGTD Y1, Y14, Y7
	VBLENDVPS Y7, Y0, Y3, Y3
	VPOR Y2, Y3, Y3
	VPCMPGTD Y11, Y1, Y4
	VPCMPGTD Y12, Y1, Y5
	VPAND Y8, Y5, Y5
	VPOR Y15, Y2, Y6
	VPOR Y5, Y6, Y6
	VBLENDVPS Y4, Y6, Y3, Y7
	VMOVUPS Y7, (DI)
	ADDQ $8, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f8loop
f8done:
	VZEROUPPER
	RET
