#!/usr/bin/env python3
"""Reference fixtures for engine/gguf, produced with the independent `gguf`
Python package (gguf-py, the llama.cpp project's own reader/writer/quants).

Writes into engine/gguf/testdata/:
  types.gguf          GGUF v3 (general.alignment 64) with one 2x2048... tensor per
                      ggml type plus metadata of every value type
  dequant/<T>.f32     expected dequantized values (raw little-endian float32)
  dequant/<T>.src.f32 the float input that gguf.quants quantized (legacy and
                      float types only; k-quant tensors are random valid blocks)
  written_check.json  what gguf.GGUFReader sees in written.gguf (a file that
                      the Go writer test produces with -update), if present

Run from the repository root:  python3 scripts/gguf_fixtures.py
Then: go test ./engine/gguf -run TestWriterGolden -update && python3 scripts/gguf_fixtures.py
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, GGUFValueType as V
from gguf import quants

OUT = os.path.join(os.path.dirname(__file__), "..", "engine", "gguf", "testdata")
ROWS, COLS = 2, 1024  # 2048 elements: 64 legacy blocks, 8 k-quant blocks

LEGACY = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]

# Byte offsets of the fp16 super-block scales inside each k-quant block, which
# must hold finite values; all other bytes are free bit patterns.
KQ_F16_OFFSETS = {
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}


def source(rng, n):
    """Normal data with per-block scales spanning several decades, plus a few
    exact zeros blocks, so the quantizers see varied dynamic range."""
    x = rng.standard_normal(n).astype(np.float32)
    scales = (10.0 ** rng.uniform(-3, 1, n // 32)).astype(np.float32)
    x *= np.repeat(scales, 32)
    x[32:64] = 0  # an all-zero block exercises the d == 0 path
    x[64:96] = np.abs(x[64:96])  # a one-signed block
    return x


def float_specials(dtype):
    if dtype == T.F16:
        bits = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x3C00]
        return np.array(bits, dtype=np.uint16).view(np.float16).astype(np.float32)
    if dtype == T.BF16:
        bits = [0x0000, 0x8000, 0x0001, 0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0x3F80]
        return (np.array(bits, dtype=np.uint32) << 16).view(np.float32)
    return np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4e38], dtype=np.float32)


def main():
    rng = np.random.default_rng(20261129)
    os.makedirs(os.path.join(OUT, "dequant"), exist_ok=True)
    path = os.path.join(OUT, "types.gguf")
    w = gguf.GGUFWriter(path, arch="fixture")
    w.data_alignment = 64
    w.add_uint32("general.alignment", 64)
    w.add_name("ftchat gguf fixture")
    # one metadata key of every value type, scalar and array
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 18000000000000000000)
    w.add_int64("test.i64", -9000000000000000000)
    w.add_float32("test.f32", 0.1)
    w.add_float64("test.f64", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo ☃")
    w.add_key_value("test.arr.u8", [1, 2, 255], V.ARRAY, V.UINT8)
    w.add_key_value("test.arr.i16", [-1, 2, -32768], V.ARRAY, V.INT16)
    w.add_key_value("test.arr.u32", [7, 8, 9], V.ARRAY, V.UINT32)
    w.add_key_value("test.arr.i32", [-7, 8, -9], V.ARRAY, V.INT32)
    w.add_key_value("test.arr.u64", [1, 2**63 + 5], V.ARRAY, V.UINT64)
    w.add_key_value("test.arr.f32", [0.5, -1.25, 3.0], V.ARRAY, V.FLOAT32)
    w.add_key_value("test.arr.f64", [0.1, 0.2], V.ARRAY, V.FLOAT64)
    w.add_key_value("test.arr.bool", [True, False, True], V.ARRAY, V.BOOL)
    w.add_key_value("test.arr.string", ["a", "", "ĠtheĊ"], V.ARRAY, V.STRING)

    n = ROWS * COLS
    for qt in LEGACY:
        x = source(rng, n)
        if qt in (T.F32, T.F16, T.BF16):
            sp = float_specials(qt)
            x[-len(sp):] = sp
        q = quants.quantize(x.reshape(ROWS, COLS), qt)
        y = quants.dequantize(q, qt).astype(np.float32).reshape(-1)
        if qt == T.F32:
            w.add_tensor(qt.name, q)
        else:
            w.add_tensor(qt.name, np.ascontiguousarray(q).view(np.uint8), raw_dtype=qt)
        x.astype("<f4").tofile(os.path.join(OUT, "dequant", qt.name + ".src.f32"))
        y.astype("<f4").tofile(os.path.join(OUT, "dequant", qt.name + ".f32"))
    for qt in KQUANTS:
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        nb = n // bs
        blocks = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
        for off in KQ_F16_OFFSETS[qt]:
            # positive and negative finite scales across several decades
            d = (rng.choice([-1, 1], nb) * 10.0 ** rng.uniform(-4, 0, nb)).astype(np.float16)
            blocks[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
        raw = blocks.reshape(ROWS, -1)
        y = quants.dequantize(raw, qt).astype(np.float32).reshape(-1)
        w.add_tensor(qt.name, raw, raw_dtype=qt)
        y.astype("<f4").tofile(os.path.join(OUT, "dequant", qt.name + ".f32"))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", path)

    # Independent check of the Go writer's output.
    written = os.path.join(OUT, "written.gguf")
    if os.path.exists(written):
        r = gguf.GGUFReader(written)
        kv = {}
        for f in r.fields.values():
            if f.name.startswith("GGUF."):
                continue
            val = f.contents()
            if isinstance(val, float):
                val = float(np.float32(val)) if f.types[0] == V.FLOAT32 else val
            kv[f.name] = {"types": [t.name for t in f.types], "value": val}
        tensors = []
        for t in r.tensors:
            tensors.append({
                "name": t.name,
                "type": t.tensor_type.name,
                "shape": [int(s) for s in t.shape],
                "offset": int(t.data_offset),
                "values": [float(v) for v in quants.dequantize(t.data, t.tensor_type).reshape(-1)[:8]],
            })
        out = {"alignment": int(r.alignment), "kv": kv, "tensors": tensors}
        with open(os.path.join(OUT, "written_check.json"), "w") as fh:
            json.dump(out, fh, indent=1, sort_keys=True, ensure_ascii=False, default=lambda o: o.item())
            fh.write("\n")
        print("checked", written)
    else:
        print("no written.gguf yet; run the Go writer test with -update, then rerun", file=sys.stderr)


if __name__ == "__main__":
    main()
