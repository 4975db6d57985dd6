//go:build !purego

#include "textflag.h"

// ggml's doubled E2M1 values as int8, the VPSHUFB table of the FP4 kernels.
DATA kvFP4<>+0(SB)/8, $0x0C08060403020100
DATA kvFP4<>+8(SB)/8, $0xF4F8FAFCFDFEFF00
GLOBL kvFP4<>(SB), RODATA|NOPTR, $16

// Decode the 16 code bytes at off(SI) through the table in X14 into the
// int8 values lo = X3 (low nibbles), hi = X4 (high nibbles); X15 holds
// 0x0F in every byte.
#define FP4_CODES(off) \
	VMOVDQU off(SI), X3; \
	VPSRLW $4, X3, X4; \
	VPAND X15, X3, X3; \
	VPAND X15, X4, X4; \
	VPSHUFB X3, X14, X3; \
	VPSHUFB X4, X14, X4

// Widen lo/hi (X3, X4) to floats: Y5 = lo[0:8], Y6 = hi[0:8], Y7 = lo[8:16],
// Y8 = hi[8:16].
#define FP4_WIDEN \
	VPMOVSXBD X3, Y5; \
	VPMOVSXBD X4, Y6; \
	VPSHUFD $0xEE, X3, X3; \
	VPSHUFD $0xEE, X4, X4; \
	VPMOVSXBD X3, Y7; \
	VPMOVSXBD X4, Y8; \
	VCVTDQ2PS Y5, Y5; \
	VCVTDQ2PS Y6, Y6; \
	VCVTDQ2PS Y7, Y7; \
	VCVTDQ2PS Y8, Y8

// Two NVFP4 sub-blocks (16 code bytes at qoff(SI), x at xoff(DI), scale
// bytes soff and soff+1): accA += d0 * (lo0·x + hi0·x'), accB likewise.
#define NVFP4_PAIR(qoff, soff, soff2, xoff, xoff2, xoff3, xoff4, accA, accB) \
	FP4_CODES(qoff); \
	FP4_WIDEN; \
	VMULPS xoff(DI), Y5, Y5; \
	VFMADD231PS xoff2(DI), Y6, Y5; \
	VMULPS xoff3(DI), Y7, Y7; \
	VFMADD231PS xoff4(DI), Y8, Y7; \
	MOVBLZX soff(SI), AX; \
	VBROADCASTSS (R9)(AX*4), Y9; \
	VFMADD231PS Y5, Y9, accA; \
	MOVBLZX soff2(SI), AX; \
	VBROADCASTSS (R9)(AX*4), Y10; \
	VFMADD231PS Y7, Y10, accB

// func dotNVFP4AVX2(w *byte, x *float32, nb int, tab *float32) float32
// w: nb NVFP4 blocks (36 bytes: 4 UE4M3 scales, 32 code bytes); x: 64*nb
// floats; tab: gguf's 256-entry UE4M3 table.
TEXT ·dotNVFP4AVX2(SB), NOSPLIT, $0-36
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVQ tab+24(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y11, Y11, Y11
	VMOVDQU kvFP4<>(SB), X14
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, X15
	TESTQ CX, CX
	JEQ nvfp4done
nvfp4loop:
	NVFP4_PAIR(4, 0, 1, 0, 32, 64, 96, Y0, Y1)
	NVFP4_PAIR(20, 2, 3, 128, 160, 192, 224, Y2, Y11)
	ADDQ $36, SI
	ADDQ $256, DI
	DECQ CX
	JNZ nvfp4loop
nvfp4done:
	VADDPS Y1, Y0, Y0
	VADDPS Y11, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	VMOVSS X0, ret+32(FP)
	RET

// func dotMXFP4AVX2(w *byte, x *float32, nb int, tab *float32) float32
// w: nb MXFP4 blocks (17 bytes: E8M0 scale, 16 code bytes, element j low
// nibble of byte j, j+16 its high nibble); tab: gguf's E8M0 table.
TEXT ·dotMXFP4AVX2(SB), NOSPLIT, $0-36
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVQ tab+24(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VMOVDQU kvFP4<>(SB), X14
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, X15
	TESTQ CX, CX
	JEQ mxfp4done
mxfp4loop:
	FP4_CODES(1)
	FP4_WIDEN
	// Y5 = elements 0-7, Y7 = 8-15, Y6 = 16-23, Y8 = 24-31
	VMULPS 0(DI), Y5, Y5
	VFMADD231PS 32(DI), Y7, Y5
	VMULPS 64(DI), Y6, Y6
	VFMADD231PS 96(DI), Y8, Y6
	VADDPS Y6, Y5, Y5
	MOVBLZX (SI), AX
	VBROADCASTSS (R9)(AX*4), Y9
	VFMADD231PS Y5, Y9, Y0
	ADDQ $17, SI
	ADDQ $128, DI
	DECQ CX
	JZ mxfp4done
	FP4_CODES(1)
	FP4_WIDEN
	VMULPS 0(DI), Y5, Y5
	VFMADD231PS 32(DI), Y7, Y5
	VMULPS 64(DI), Y6, Y6
	VFMADD231PS 96(DI), Y8, Y6
	VADDPS Y6, Y5, Y5
	MOVBLZX (SI), AX
	VBROADCASTSS (R9)(AX*4), Y9
	VFMADD231PS Y5, Y9, Y1
	ADDQ $17, SI
	ADDQ $128, DI
	DECQ CX
	JNZ mxfp4loop
mxfp4done:
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	VMOVSS X0, ret+32(FP)
	RET

// acc += Y5·x[o0:], Y6·x[o1:], Y7·x[o2:], Y8·x[o3:] (byte offsets) for row p.
#define NVFP4_ROW4(p, acc, o0, o1, o2, o3) \
	VFMADD231PS o0(p), Y5, acc; \
	VFMADD231PS o1(p), Y6, acc; \
	VFMADD231PS o2(p), Y7, acc; \
	VFMADD231PS o3(p), Y8, acc

// Two NVFP4 sub-blocks, decoded and scaled once, dotted with four rows.
#define NVFP4_PAIR4(qoff, soff, soff2, o0, o1, o2, o3) \
	FP4_CODES(qoff); \
	FP4_WIDEN; \
	MOVBLZX soff(SI), AX; \
	VBROADCASTSS (R9)(AX*4), Y9; \
	MOVBLZX soff2(SI), AX; \
	VBROADCASTSS (R9)(AX*4), Y10; \
	VMULPS Y9, Y5, Y5; \
	VMULPS Y9, Y6, Y6; \
	VMULPS Y10, Y7, Y7; \
	VMULPS Y10, Y8, Y8; \
	NVFP4_ROW4(DI, Y0, o0, o1, o2, o3); \
	NVFP4_ROW4(R8, Y1, o0, o1, o2, o3); \
	NVFP4_ROW4(R10, Y2, o0, o1, o2, o3); \
	NVFP4_ROW4(R12, Y11, o0, o1, o2, o3)

// func dotNVFP4x4AVX2(w *byte, x *float32, xstride int, nb int, tab *float32, out *[4]float32)
// Four activation rows (xstride floats apart) against one NVFP4 weight row:
// each block is decoded once.
TEXT ·dotNVFP4x4AVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xstride+16(FP), AX
	SHLQ $2, AX
	LEAQ (DI)(AX*1), R8
	LEAQ (R8)(AX*1), R10
	LEAQ (R10)(AX*1), R12
	MOVQ nb+24(FP), CX
	MOVQ tab+32(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y11, Y11, Y11
	VMOVDQU kvFP4<>(SB), X14
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, X15
	TESTQ CX, CX
	JEQ nvfp4x4done
nvfp4x4loop:
	NVFP4_PAIR4(4, 0, 1, 0, 32, 64, 96)
	NVFP4_PAIR4(20, 2, 3, 128, 160, 192, 224)
	ADDQ $36, SI
	ADDQ $256, DI
	ADDQ $256, R8
	ADDQ $256, R10
	ADDQ $256, R12
	DECQ CX
	JNZ nvfp4x4loop
nvfp4x4done:
	MOVQ out+40(FP), BX
	VEXTRACTF128 $1, Y0, X3
	VADDPS X3, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, 0(BX)
	VEXTRACTF128 $1, Y1, X3
	VADDPS X3, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VMOVSS X1, 4(BX)
	VEXTRACTF128 $1, Y2, X3
	VADDPS X3, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VMOVSS X2, 8(BX)
	VEXTRACTF128 $1, Y11, X3
	VADDPS X3, X11, X11
	VHADDPS X11, X11, X11
	VHADDPS X11, X11, X11
	VMOVSS X11, 12(BX)
	VZEROUPPER
	RET

// func dotMXFP4x4AVX2(w *byte, x *float32, xstride int, nb int, tab *float32, out *[4]float32)
// Four activation rows against one MXFP4 weight row: each block decoded
// and scaled once (Y5 = elements 0-7, Y7 = 8-15, Y6 = 16-23, Y8 = 24-31).
TEXT ·dotMXFP4x4AVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xstride+16(FP), AX
	SHLQ $2, AX
	LEAQ (DI)(AX*1), R8
	LEAQ (R8)(AX*1), R10
	LEAQ (R10)(AX*1), R12
	MOVQ nb+24(FP), CX
	MOVQ tab+32(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y11, Y11, Y11
	VMOVDQU kvFP4<>(SB), X14
	MOVL $0x0F0F0F0F, AX
	VMOVD AX, X15
	VPBROADCASTD X15, X15
	TESTQ CX, CX
	JEQ mxfp4x4done
mxfp4x4loop:
	FP4_CODES(1)
	FP4_WIDEN
	MOVBLZX (SI), AX
	VBROADCASTSS (R9)(AX*4), Y9
	VMULPS Y9, Y5, Y5
	VMULPS Y9, Y6, Y6
	VMULPS Y9, Y7, Y7
	VMULPS Y9, Y8, Y8
	// NVFP4_ROW4 takes Y5..Y8 in x order: pass the offsets of Y5, Y6, Y7, Y8.
	NVFP4_ROW4(DI, Y0, 0, 64, 32, 96)
	NVFP4_ROW4(R8, Y1, 0, 64, 32, 96)
	NVFP4_ROW4(R10, Y2, 0, 64, 32, 96)
	NVFP4_ROW4(R12, Y11, 0, 64, 32, 96)
	ADDQ $17, SI
	ADDQ $128, DI
	ADDQ $128, R8
	ADDQ $128, R10
	ADDQ $128, R12
	DECQ CX
	JNZ mxfp4x4loop
mxfp4x4done:
	MOVQ out+40(FP), BX
	VEXTRACTF128 $1, Y0, X3
	VADDPS X3, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, 0(BX)
	VEXTRACTF128 $1, Y1, X3
	VADDPS X3, X1, X1
	VHADDPS X1, X1, X1
	VHADDPS X1, X1, X1
	VMOVSS X1, 4(BX)
	VEXTRACTF128 $1, Y2, X3
	VADDPS X3, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VMOVSS X2, 8(BX)
	VEXTRACTF128 $1, Y11, X3
	VADDPS X3, X11, X11
	VHADDPS X11, X11, X11
	VHADDPS X11, X11, X11
	VMOVSS X11, 12(BX)
	VZEROUPPER
	RET
