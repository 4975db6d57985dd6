package engine

import (
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// TestGPUMatchesCPUMixedKV runs a pool with K in bf16 and V in fp8_e4m3
// (--cache-type-k bf16 --cache-type-v fp8_e4m3) on the GPU against the
// same pool on the CPU backend, teacher-forcing both with the CPU's greedy
// tokens, and judges it as TestGPUMatchesCPUWholeModel judges fp8: per
// step the logits differ by at most 2x the CPU's own mixed-vs-bf16
// difference + tol (the triangle bound), greedy picks differ only at
// near-ties, and on average the GPU's mixed-vs-bf16 difference is no
// larger than 1.5x the CPU's.
func TestGPUMatchesCPUMixedKV(t *testing.T) {
	needGPU(t)
	const steps = 32
	const tol = 3e-2 // as TestGPUMatchesCPUWholeModel: bf16 operands on the GPU
	for _, m := range []struct {
		name, preset string
		typ          gguf.Type
	}{{"qwen3-tiny F32", "qwen3-tiny", gguf.F32}, {"qwen2-tiny Q4_K", "qwen2-tiny", gguf.Q4_K}} {
		t.Run(m.name, func(t *testing.T) {
			path := synthModel(t, m.preset, m.typ)
			mix := Options{KVTokens: 4096, KVDTypeK: "bf16", KVDTypeV: "fp8_e4m3"}
			gmix := mix
			gmix.GPUMemory = 2 << 30
			cpu16 := loadOn(t, path, "cpu", "bf16", Options{KVTokens: 4096})
			cpuMix := loadOn(t, path, "cpu", "", mix)
			gpu16 := loadOn(t, path, "cuda", "bf16", Options{GPUMemory: 2 << 30, KVTokens: 4096})
			gpuMix := loadOn(t, path, "cuda", "", gmix)
			for name, e := range map[string]*Engine{"cpu": cpuMix, "gpu": gpuMix} {
				if k, v := e.layout.KType(), e.layout.VType(); k != kvcache.BF16 || v != kvcache.FP8E4M3 {
					t.Fatalf("%s pool stores k=%v v=%v, want k=bf16 v=fp8_e4m3", name, k, v)
				}
			}
			vocab := int32(cpu16.mdl.Config.Vocab)
			var prompt []int32
			for i := range 200 {
				prompt = append(prompt, int32(300+(i*7919)%2000)%vocab)
			}
			cm, tm := greedyRun(t, cpuMix, prompt, steps, nil)
			gm, _ := greedyRun(t, gpuMix, prompt, steps, tm)
			c16, _ := greedyRun(t, cpu16, prompt, steps, tm)
			g16, _ := greedyRun(t, gpu16, prompt, steps, tm)
			var noiseCPU, noiseGPU []float64
			for i := range cm {
				noiseCPU = append(noiseCPU, relErr(c16[i], cm[i]))
				noiseGPU = append(noiseGPU, relErr(g16[i], gm[i]))
			}
			same, maxErr, over, problems := greedyAgreement(cm, gm, func(i int) float64 { return 2*noiseCPU[i] + tol })
			t.Logf("k=bf16 v=fp8_e4m3: %d/%d greedy tokens identical; max logits rel. error %.3g; mixed-vs-bf16 noise: cpu %.3g, gpu %.3g (mean)",
				same, steps, maxErr, mean(noiseCPU), mean(noiseGPU))
			for _, p := range problems {
				t.Error(p)
			}
			checkOver(t, "k=bf16 v=fp8_e4m3", over, func(i int) float64 { return relErr(gm[i], cm[i]) }, false, len(cm))
			if mean(noiseGPU) > 1.5*mean(noiseCPU)+0.01 {
				t.Errorf("the GPU's mixed cache moves its logits by %.3g on average against its bf16 cache, the CPU's by %.3g",
					mean(noiseGPU), mean(noiseCPU))
			}
		})
	}
}
