package engine

import (
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	gpu := Hardware{CUDA: true, ComputeCap: 90, DeviceName: "H200", DeviceCount: 1}
	old := Hardware{CUDA: true, ComputeCap: 75, DeviceName: "T4", DeviceCount: 1}
	volta := Hardware{CUDA: true, ComputeCap: 70, DeviceName: "V100", DeviceCount: 1}
	none := Hardware{CUDAReason: "libcuda.so.1 not found"}
	cases := []struct {
		name string
		o    Options
		hw   Hardware
		want string // substring of the error; "" = valid
	}{
		{"defaults", Options{}, none, ""},
		{"fp8 cpu", Options{KVDType: "fp8_e4m3", Device: "cpu"}, none, ""},
		{"fp8 gpu", Options{KVDType: "fp8_e4m3", Device: "cuda"}, gpu, ""},
		{"bad dtype", Options{KVDType: "int4"}, none, "--kv-cache-dtype"},
		{"bad device", Options{Device: "tpu"}, none, "supported values are auto, cpu, cuda"},
		{"cuda missing", Options{Device: "cuda"}, none, "libcuda.so.1 not found"},
		{"cuda ordinal", Options{Device: "cuda:3"}, gpu, "only 1 CUDA device"},
		{"fp8 on sm75", Options{Device: "cuda", KVDType: "fp8_e5m2"}, old, ""},
		{"fp8 on sm70", Options{Device: "cuda", KVDType: "fp8_e5m2"}, volta, "sm_75 or newer"},
		{"compute fp16", Options{Device: "cuda", ComputeDType: "fp16"}, gpu, ""},
		{"compute bf16", Options{Device: "cuda", ComputeDType: "bf16"}, gpu, ""},
		{"compute auto on sm75", Options{Device: "cuda", ComputeDType: "auto"}, old, ""},
		{"compute fp16 on sm75", Options{Device: "cuda", ComputeDType: "fp16"}, old, ""},
		{"compute bf16 on sm75", Options{Device: "cuda", ComputeDType: "bf16"}, old, "--compute-dtype bf16: T4 (sm_75) has no bf16 tensor cores; use --compute-dtype fp16"},
		{"compute bad", Options{ComputeDType: "fp32"}, none, `--compute-dtype "fp32": supported values are auto (bf16 on sm_80 and newer, fp16 on sm_75), bf16 and fp16`},
		{"compute fp16 cpu", Options{Device: "cpu", ComputeDType: "fp16"}, none, ""},
		{"bf16 on sm75", Options{Device: "cuda", KVDType: "bf16"}, old, ""},
		{"page not pow2", Options{PageSize: 24}, none, "--page-size 24"},
		{"negative ctx", Options{ContextLen: -1}, none, "--ctx-size -1"},
		{"scales need fp8", Options{KVScales: "s.json", KVDType: "bf16"}, none, "needs an fp8"},
		{"scales fp8", Options{KVScales: "s.json", KVDType: "fp8_e4m3"}, none, ""},
		{"state slots", Options{StateSlots: 8}, none, ""},
		{"negative state slots", Options{StateSlots: -1}, none, "--state-slots -1: must be 0 (default) or positive"},
		{"too many state slots", Options{StateSlots: 5000}, none, "--state-slots 5000: at most 1024"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate(tc.hw)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestNoCUDAErrorGivesItsAdviceOnce: the driver's reason already says to
// run with --device cpu; the --device error must not repeat it.
func TestNoCUDAErrorGivesItsAdviceOnce(t *testing.T) {
	cases := []struct{ reason, want string }{
		{"no usable CUDA driver: libcuda.so.1 not found (install the NVIDIA driver, or run with --device cpu)",
			"--device cuda: no usable CUDA driver: libcuda.so.1 not found (install the NVIDIA driver, or run with --device cpu)"},
		{"cuInit failed: CUDA_ERROR_NO_DEVICE", "--device cuda: cuInit failed: CUDA_ERROR_NO_DEVICE (use --device cpu or auto)"},
	}
	for _, tc := range cases {
		err := Options{Device: "cuda"}.Validate(Hardware{CUDAReason: tc.reason})
		if err == nil || err.Error() != tc.want {
			t.Errorf("error %v\nwant  %s", err, tc.want)
		}
	}
}
