#!/usr/bin/env python3
"""Checks a synth qwen35moe GGUF (ftchat dev gen-model --preset qwen35moe-tiny) against
llama.cpp's loader, reading the file with llama.cpp's own gguf-py (NVFP4 <name>.scale tensors are matched against the generic
scale pass of src/llama-model.cpp): every LLM_KV_* key that
src/models/qwen35moe.cpp reads (plus the generic hparams) is printed with its llama-arch.cpp
name and the type found; every trunk create_tensor(tn(...)) of load_arch_tensors is looked up
for each block (tensors of the other block kind are listed as absent, which is expected).

Usage: python3 scripts/synth_check_llamacpp.py FILE.gguf  (LCP_LLAMA_CPP = the vendored
llama.cpp of the llama-cpp-python 0.3.36 sdist, default /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp)
"""
import collections
import os
import re
import sys

L = os.environ.get("LCP_LLAMA_CPP", "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp")
sys.path.insert(0, L + "/gguf-py")
import gguf  # noqa: E402

r = gguf.GGUFReader(sys.argv[1])
arch = r.fields["general.architecture"].contents()
src = open(L + "/src/llama-arch.cpp").read()
kvnames = dict(re.findall(r'\{\s*(LLM_KV_[A-Z0-9_]+)\s*,\s*"([^"]+)"\s*\}', src))
tnames = dict(re.findall(r'\{\s*(LLM_TENSOR_[A-Z0-9_]+)\s*,\s*"([^"]+)"\s*\}', src))
model = open(L + "/src/models/%s.cpp" % arch).read()
keys_used = sorted(set(re.findall(r'(LLM_KV_[A-Z0-9_]+)', model)))
generic = ["LLM_KV_CONTEXT_LENGTH", "LLM_KV_EMBEDDING_LENGTH", "LLM_KV_BLOCK_COUNT", "LLM_KV_EXPERT_COUNT",
           "LLM_KV_EXPERT_USED_COUNT", "LLM_KV_ATTENTION_HEAD_COUNT", "LLM_KV_ATTENTION_HEAD_COUNT_KV",
           "LLM_KV_ATTENTION_KEY_LENGTH", "LLM_KV_ATTENTION_VALUE_LENGTH", "LLM_KV_ROPE_FREQ_BASE",
           "LLM_KV_ROPE_DIMENSION_COUNT"]
if "moe" not in arch:  # dense: no expert keys
    generic = [k for k in generic if "EXPERT" not in k]
fields = {f.name: f for f in r.fields.values()}
print("arch", arch, "keys", len(fields), "tensors", len(r.tensors))
bad = 0
for k in generic + keys_used:
    name = kvnames[k].replace("%s", arch)
    f = fields.get(name)
    if f is None:
        bad += 1
        print("%-42s %-48s MISSING" % (k, name))
        continue
    typ = f.types[0].name + ("[" + f.types[-1].name + "]" if len(f.types) > 1 else "")
    print("%-42s %-48s %s = %s" % (k, name, typ, str(f.contents())[:60]))
tens = {t.name for t in r.tensors}
n_layer = fields[arch + ".block_count"].contents()
end = model.index("load_block_mtp") if "load_block_mtp" in model else len(model)
trunk = model[model.index("load_arch_tensors"):end]
need = set()
for t, suffix, il in re.findall(r'create_tensor\(tn\((LLM_TENSOR_[A-Z0-9_]+),\s*(?:"([a-z]+)"\s*,?\s*)?(il)?\)', trunk):
    need.add((tnames[t], suffix, bool(il)))
missing, extra = [], set(tens)
for base, suffix, per in sorted(need):
    for n in ([base.replace("%d", str(i)) for i in range(n_layer)] if per else [base]):
        full = n + ("." + suffix if suffix else "")
        if full in tens:
            extra.discard(full)
        else:
            missing.append(full)
# attn_q/k/v come from create_tensor_qkv, gate/up exps from create_tensor_gate_up_exps
extra = {n for n in extra if not re.match(r"blk\.\d+\.(attn_[qkv]|ffn_(gate|up)_exps)\.weight$", n)}
# NVFP4 second-level scales: llama-model.cpp's generic pass creates
# tn(LLM_TENSOR_X, "scale", i) (and "scale" of LLM_TENSOR_OUTPUT) for any
# arch, when the file has them.
generic_src = open(L + "/src/llama-model.cpp").read()
scale_bases = {tnames[t] for t in re.findall(r'tn\((LLM_TENSOR_[A-Z0-9_]+),\s*"scale"', generic_src)}
scale_re = re.compile("^(" + "|".join(re.escape(b).replace("%d", r"\d+") for b in scale_bases) + r")\.scale$")
extra = {n for n in extra if not scale_re.match(n)}
print("absent per block kind:", dict(collections.Counter(re.sub(r"blk\.\d+\.", "blk.N.", m) for m in missing)))
print("in the file but never requested:", sorted(extra))
sys.exit(1 if bad or extra else 0)
