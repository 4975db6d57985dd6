// Package gpu is ftchat's CUDA backend, built without cgo: the CUDA driver
// API is reached through purego (libcuda.so.1, or nvcuda.dll on Windows).
//
// Threading: a CUDA context is current on one OS thread, so each Device has
// one goroutine locked to its thread that owns the context; Device.Do and
// Device.Post hand it functions that receive a *Ctx, whose methods are the
// driver calls (allocation, copies, launches, events, graphs).
//
// Memory: every device allocation goes through Ctx.Alloc, which enforces
// the budget given in Options.MemoryBudget (--gpu-memory); PlanMemory
// splits a budget into weights, workspace and a KV pool of whole pages.
//
// Kernels: CUDA C in kernels/*.cu, compiled by `go generate ./gpu/...`
// (nvcc 11.8) to PTX for compute_75 (fp16 compute, compute.go),
// compute_80 and compute_89 (and compute_90 for
// sources that ask, see internal/ptxhash.Targets: the attention module,
// whose FP8 path needs the sm_90 cvt), embedded, and loaded with
// cuModuleLoadDataEx; PTX ISA 7.8 needs driver R520 or newer. Modules:
// ops (element-wise, norms, RoPE, MoE routing, argmax), mm_<type> (one per
// GGUF weight type: embedding, GEMV, GEMM, expert GEMV), kvwrite and
// attention (the paged KV cache, attention.go).
//
// Backend implements model.Backend on top of this. Its ops are queued to
// the device thread and return at once; the first failure is kept for
// Backend.Err, which the engine checks after each step. Decode steps are
// recorded and replayed as CUDA graphs (graph.go).
package gpu
