#!/usr/bin/env python3
"""Generate the codec fixtures for engine/kvcache (independent reference: ml_dtypes, numpy).

Writes into engine/kvcache/testdata/:
  e4m3_decode.bin, e5m2_decode.bin   256 little-endian float32: value of each code
  e4m3_from_f16.bin, e5m2_from_f16.bin
                                     65,536 bytes: expected code for each float16 bit
                                     pattern (as a float32 input), per the ftchat contract
  bf16_cases.bin, f16_cases.bin      N records of (uint32 float32 input bits, uint16 expected code)

ml_dtypes rounds to nearest-even like the contract. Where the contract deliberately
differs from a plain ml_dtypes cast it is applied here explicitly, so the test states it:
  * finite overflow and +-inf saturate to +-max (ml_dtypes gives NaN for e4m3fn, inf for e5m2);
  * every NaN input encodes to 0x7f.
Run: python3 scripts/kv_fp8_fixtures.py
"""
import os
import struct

import ml_dtypes
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "engine", "kvcache", "testdata")


def write(name, data: bytes):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(data)
    print(f"{path}: {len(data)} bytes")


def fp8_fixtures(tag, dt, fmax, maxcode):
    codes = np.arange(256, dtype=np.uint8)
    write(f"{tag}_decode.bin", codes.view(dt).astype(np.float32).astype("<f4").tobytes())

    x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):
        got = x.astype(dt).view(np.uint8).copy()
    over = ~np.isnan(x) & (np.abs(x) > fmax)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    got[over] = sign[over] | maxcode
    got[np.isnan(x)] = 0x7F
    write(f"{tag}_from_f16.bin", got.astype(np.uint8).tobytes())


def float_cases(rng):
    """Random float32 over the whole exponent range plus edge values."""
    bits = rng.integers(0, 2**32, size=6000, dtype=np.uint64).astype(np.uint32)
    # values sitting exactly on or next to 16-bit rounding midpoints
    mids = rng.integers(0, 2**16, size=1000, dtype=np.uint64).astype(np.uint32) << 16
    halfway = np.concatenate([mids | 0x8000, (mids | 0x8000) - 1, (mids | 0x8000) + 1, mids | 0x7FFF])
    f16 = rng.integers(0, 2**16, size=1000, dtype=np.uint64).astype(np.uint16)
    f16f = f16.view(np.float16).astype(np.float32).view(np.uint32)
    f16mid = np.concatenate([f16f | 0x1000, f16f | 0x0FFF, (f16f | 0x1000) + 1])
    edges = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, 65536.0, 3.3895314e38,
                      np.float32(np.finfo(np.float32).max), np.inf, -np.inf, np.nan,
                      5.960464477539063e-08, 2.9802322387695312e-08, 2.980233e-08, 6.1035156e-05,
                      1e-45, -1e-45, 1.1754942e-38, 448.0, 57344.0], dtype=np.float32).view(np.uint32)
    return np.concatenate([bits, halfway, f16mid, edges]).astype(np.uint32)


def cases(name, x_bits, dt):
    x = x_bits.view(np.float32)
    with np.errstate(all="ignore"):
        y = x.astype(dt).view(np.uint16)
    rec = np.zeros(len(x), dtype=[("x", "<u4"), ("y", "<u2")])
    rec["x"], rec["y"] = x_bits, y
    write(name, rec.tobytes())


def main():
    os.makedirs(OUT, exist_ok=True)
    fp8_fixtures("e4m3", ml_dtypes.float8_e4m3fn, 448.0, 0x7E)
    fp8_fixtures("e5m2", ml_dtypes.float8_e5m2, 57344.0, 0x7B)
    rng = np.random.default_rng(20261129)
    xb = float_cases(rng)
    cases("bf16_cases.bin", xb, ml_dtypes.bfloat16)
    cases("f16_cases.bin", xb, np.float16)
    print("ml_dtypes", ml_dtypes.__version__, "numpy", np.__version__, struct.calcsize("<IH"))


if __name__ == "__main__":
    main()
