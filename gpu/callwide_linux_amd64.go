//go:build linux && amd64

package gpu

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// purego calls C with at most 15 arguments; cublasGemmEx takes 19. The
// trampoline below, machine code in an executable page, takes (fn, args)
// and calls fn(args[0], ..., args[19]) by the System V AMD64 ABI. It is
// the assembly of (GNU as, Intel syntax):
//
//	push rbp; mov rbp, rsp; push rbx
//	sub rsp, 120              ; 14 stack slots + 8: rsp 16-aligned at the call
//	mov r11, rdi; mov rbx, rsi
//	lea rsi, [rbx+48]; mov rdi, rsp; mov ecx, 14; rep movsq  ; args[6..19]
//	mov rdi, [rbx]; mov rsi, [rbx+8]; mov rdx, [rbx+16]
//	mov rcx, [rbx+24]; mov r8, [rbx+32]; mov r9, [rbx+40]
//	xor eax, eax              ; no vector registers (harmless if not variadic)
//	call r11
//	mov rbx, [rbp-8]; leave; ret
var wideCode = []byte{
	0x55, 0x48, 0x89, 0xe5, 0x53, 0x48, 0x83, 0xec, 0x78, 0x49, 0x89, 0xfb,
	0x48, 0x89, 0xf3, 0x48, 0x8d, 0x73, 0x30, 0x48, 0x89, 0xe7, 0xb9, 0x0e,
	0x00, 0x00, 0x00, 0xf3, 0x48, 0xa5, 0x48, 0x8b, 0x3b, 0x48, 0x8b, 0x73,
	0x08, 0x48, 0x8b, 0x53, 0x10, 0x48, 0x8b, 0x4b, 0x18, 0x4c, 0x8b, 0x43,
	0x20, 0x4c, 0x8b, 0x4b, 0x28, 0x31, 0xc0, 0x41, 0xff, 0xd3, 0x48, 0x8b,
	0x5d, 0xf8, 0xc9, 0xc3,
}

// wideMaxArgs is how many arguments the trampoline passes (6 in registers,
// 14 on the stack).
const wideMaxArgs = 20

var wide struct {
	once sync.Once
	mem  []byte // the executable page, kept for the process's life
	err  error
}

func wideTrampoline() (uintptr, error) {
	wide.once.Do(func() {
		mem, err := syscall.Mmap(-1, 0, syscall.Getpagesize(), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			wide.err = fmt.Errorf("gpu: mapping the call trampoline: %v", err)
			return
		}
		copy(mem, wideCode)
		if err := syscall.Mprotect(mem, syscall.PROT_READ|syscall.PROT_EXEC); err != nil {
			syscall.Munmap(mem)
			wide.err = fmt.Errorf("gpu: making the call trampoline executable: %v", err)
			return
		}
		wide.mem = mem
	})
	if wide.err != nil {
		return 0, wide.err
	}
	return uintptr(unsafe.Pointer(&wide.mem[0])), nil
}

// ccallWide calls the C function fn with up to wideMaxArgs integer or
// pointer arguments (no floats, no structs) and returns its integer result.
// Memory that an argument points to must stay alive and unmoved for the
// call: pass heap objects and KeepAlive them after.
func ccallWide(fn uintptr, args ...uintptr) (uintptr, error) {
	if len(args) > wideMaxArgs {
		return 0, fmt.Errorf("gpu: a C call with %d arguments (at most %d)", len(args), wideMaxArgs)
	}
	tr, err := wideTrampoline()
	if err != nil {
		return 0, err
	}
	a := new([wideMaxArgs]uintptr)
	copy(a[:], args)
	r := ccall(tr, fn, uintptr(unsafe.Pointer(a)))
	runtime.KeepAlive(a)
	return r, nil
}
