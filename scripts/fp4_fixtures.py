#!/usr/bin/env python3
"""FP4 reference fixtures for engine/gguf, decoded by the independent `gguf`
Python package (gguf-py 0.19.0: gguf.quants.NVFP4 / MXFP4.dequantize_blocks).

Writes into engine/gguf/testdata/:
  fp4.gguf            GGUF v3 with one NVFP4 and one MXFP4 tensor (4 x 2048) of
                      random blocks: every scale byte 0..255 occurs (including
                      the UE4M3 NaN code 0x7F and the bit-7 bytes), every E2M1
                      code occurs in every nibble position, the rest is random
  dequant/NVFP4.f32   expected dequantized values (raw little-endian float32)
  dequant/MXFP4.f32
  dequant/<T>.src.f32, tensors <T>_Q  float input and its quantization: MXFP4 by
                      gguf-py's MXFP4.quantize_blocks, NVFP4 (gguf-py has no
                      quantizer) by ggml's quantize_row_nvfp4_ref written here in
                      numpy over gguf-py's fp32_to_ue4m3 / ue4m3_to_fp32

Run from the repository root:  python3 scripts/fp4_fixtures.py
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(__file__), "..", "engine", "gguf", "testdata")
ROWS, COLS = 4, 2048


def blocks_for(rng, qt):
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    nb = ROWS * COLS // bs
    b = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
    nscale = 4 if qt == T.NVFP4 else 1
    sc = b[:, :nscale].reshape(-1)
    sc[:256] = np.arange(256, dtype=np.uint8)  # every scale byte once
    b[:, :nscale] = sc.reshape(nb, nscale)
    # the first 16 blocks' quant bytes walk every code in both nibbles
    q = b[:16, nscale:]
    idx = np.arange(q.size, dtype=np.uint32)
    q[...] = ((idx % 16) | (((idx // 16) % 16) << 4)).astype(np.uint8).reshape(q.shape)
    b[:16, nscale:] = q
    return b


def source(rng, n):
    """Normal data with per-16 scales over several decades, an all-zero run
    and exact code midpoints, so every quantizer branch is taken."""
    x = rng.standard_normal(n).astype(np.float32)
    x *= np.repeat((10.0 ** rng.uniform(-4, 2, n // 16)).astype(np.float32), 16)
    x[64:128] = 0
    x[128:144] = np.array([6, 5, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25, -6, -5, -3.5, -2.5, -1.75, -1.25, -0.75, -0.25], np.float32)
    return x


def nearest(vals, d):
    """ggml's best_index_mxfp4: first code with the smallest |kvalue*d - x|."""
    kv = np.array(quants.NVFP4.kvalues, dtype=np.float32)
    errs = np.abs(d[..., None] * kv - vals[..., None])
    return np.argmin(errs, axis=-1).astype(np.uint8)


def quantize_nvfp4(x):
    """ggml's quantize_row_nvfp4_ref."""
    sub = x.reshape(-1, 4, 16)
    amax = np.abs(sub).max(axis=-1)
    ue = quants.NVFP4.fp32_to_ue4m3((amax / np.float32(6)).astype(np.float32)).astype(np.uint8)
    d = quants.NVFP4.ue4m3_to_fp32(ue).astype(np.float32)
    q = nearest(sub, np.repeat(d[..., None], 16, axis=-1))
    qs = q[..., :8] | (q[..., 8:] << np.uint8(4))
    return np.concatenate([ue, qs.reshape(-1, 32)], axis=-1)


def main():
    rng = np.random.default_rng(20261202)
    os.makedirs(os.path.join(OUT, "dequant"), exist_ok=True)
    path = os.path.join(OUT, "fp4.gguf")
    w = gguf.GGUFWriter(path, arch="fixture")
    np.seterr(over="ignore")
    for qt in (T.NVFP4, T.MXFP4):
        b = blocks_for(rng, qt)
        raw = b.reshape(ROWS, -1)
        y = quants.dequantize(raw, qt).astype(np.float32).reshape(-1)
        assert y.size == ROWS * COLS and not np.any(np.isnan(y))  # MXFP4 scale 255 x 12 overflows to inf, as in ggml
        w.add_tensor(qt.name, raw, raw_dtype=qt)
        y.astype("<f4").tofile(os.path.join(OUT, "dequant", qt.name + ".f32"))
    for qt in (T.NVFP4, T.MXFP4):
        x = source(rng, ROWS * COLS)
        if qt == T.MXFP4:
            q = quants.MXFP4.quantize_blocks(x.reshape(-1, 32))
        else:
            q = quantize_nvfp4(x)
        w.add_tensor(qt.name + "_Q", q.reshape(ROWS, -1), raw_dtype=qt)
        x.astype("<f4").tofile(os.path.join(OUT, "dequant", qt.name + ".src.f32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", path)


if __name__ == "__main__":
    main()
