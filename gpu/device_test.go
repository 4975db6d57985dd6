package gpu

import (
	"errors"
	"os"
	"sync"
	"testing"
	"time"
)

var (
	testDevOnce sync.Once
	testDev     *Device
	testDevErr  error
)

// openTestDevice opens cuda:0 once for the package's tests, or skips the
// test with the reason no GPU can be used (CI has none).
func openTestDevice(t testing.TB) *Device {
	t.Helper()
	testDevOnce.Do(func() {
		testDev, testDevErr = Open(0, Options{})
	})
	if testDevErr != nil {
		if os.Getenv("FTCHAT_REQUIRE_GPU") != "" {
			t.Fatalf("FTCHAT_REQUIRE_GPU is set but no GPU is usable: %v", testDevErr)
		}
		t.Skipf("no usable GPU: %v", testDevErr)
	}
	return testDev
}

func TestProbeMessage(t *testing.T) {
	info, err := Probe(0)
	if err != nil {
		if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoDevice) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrOutOfMemory) {
			t.Fatalf("Probe error does not wrap a sentinel: %v", err)
		}
		t.Logf("probe: %v", err)
		return
	}
	t.Logf("probe: %v", info)
	if _, err := Probe(1 << 20); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Probe of a missing ordinal: want ErrNoDevice, got %v", err)
	}
}

func TestDeviceRoundTripAndKernel(t *testing.T) {
	d := openTestDevice(t)
	const n = 1 << 20
	src := make([]uint32, n)
	for i := range src {
		src[i] = uint32(i*2654435761) ^ 0x5bd1e995
	}
	got := make([]uint32, n)
	err := d.Do(func(c *Ctx) error {
		b, err := c.Alloc(4*n, "test buffer")
		if err != nil {
			return err
		}
		defer c.Free(b)
		if err := Upload(c, b.Ptr, src); err != nil {
			return err
		}
		if err := Download(c, got, b.Ptr); err != nil {
			return err
		}
		for i := range got {
			if got[i] != src[i] {
				t.Fatalf("round trip: element %d = %#x, want %#x", i, got[i], src[i])
			}
		}
		start := time.Now()
		f, err := c.Function("ops", "fill_u32")
		if err != nil {
			return err
		}
		t.Logf("ops module load (PTX JIT, %d KiB): %v", len(mustPTX(t, "ops", d.Info().Arch()))>>10, time.Since(start))
		e0, _ := c.NewEvent()
		e1, _ := c.NewEvent()
		defer c.DestroyEvent(e0)
		defer c.DestroyEvent(e1)
		c.Record(e0, c.Stream())
		if err := c.Launch(f, Dim3{X: 256}, Dim3{X: 256}, 0, c.Stream(), b, uint32(0xdeadbeef), int64(n-1)); err != nil {
			return err
		}
		c.Record(e1, c.Stream())
		ms, err := c.Elapsed(e0, e1)
		if err != nil {
			return err
		}
		t.Logf("fill of %d words: %.3f ms", n, ms)
		if err := Download(c, got, b.Ptr); err != nil {
			return err
		}
		for i := 0; i < n-1; i++ {
			if got[i] != 0xdeadbeef {
				t.Fatalf("fill: element %d = %#x", i, got[i])
			}
		}
		if got[n-1] != src[n-1] {
			t.Fatalf("fill wrote past its end")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDeviceBudgetRefusal(t *testing.T) {
	openTestDevice(t)
	d, err := Open(0, Options{MemoryBudget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	err = d.Do(func(c *Ctx) error {
		if _, err := c.Alloc(48<<20, "first"); err != nil {
			return err
		}
		_, err := c.Alloc(32<<20, "second")
		if !errors.Is(err, ErrBudget) {
			t.Errorf("want ErrBudget beyond the 64 MiB budget, got %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := d.MemStats(); st.Used != 48<<20 || st.Budget != 64<<20 {
		t.Errorf("MemStats = %+v", st)
	}
}

func TestDevicePanicIsError(t *testing.T) {
	d := openTestDevice(t)
	if err := d.Do(func(c *Ctx) error { panic("boom") }); err == nil {
		t.Fatal("panic on device thread did not become an error")
	}
	if err := d.Do(func(c *Ctx) error { return c.Sync() }); err != nil {
		t.Fatalf("device unusable after a panic: %v", err)
	}
}

func mustPTX(t *testing.T, name string, arch int) []byte {
	p, err := KernelPTX(name, arch)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
