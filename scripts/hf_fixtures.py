#!/usr/bin/env python3
"""Tiny Hugging Face checkpoint directories for the HF model source (issue 16).

Run on a dev machine (CI never runs this); deterministic from fixed seeds. For each arch
(llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe, qwen3next) it writes engine/hfmodel/testdata/<arch>/:

  config.json, generation_config.json, model.safetensors   transformers save_pretrained of a
        tiny random model (every parameter randomised, norms included). Stored dtype per arch
        (DTYPES below) so that F32, F16 and BF16 checkpoints are all covered: the weights are
        rounded to that dtype first, so the float32 reference uses the stored values exactly.
        qwen3 is also written sharded (SHARDED: max_shard_size small) to exercise
        model.safetensors.index.json.
  ../tokenizer/tokenizer.json, tokenizer_config.json   the byte-level BPE of
        scripts/qwen35_fixtures.py (320 ids, Qwen specials, the Qwen3.5 chat template): one
        tokenizer for every arch, kept once (tests link it into a copy of a directory).
  ../<arch>.gguf.gz    the same directory converted by llama.cpp's convert_hf_to_gguf.py
        (llama-cpp-python 0.3.36 sdist, --outtype f32; get_vocab_base_pre patched to "qwen2"
        since the converter refuses an unknown pre-tokenizer hash), gzipped (mtime 0).
  ../<arch>.json       {arch, dtype, versions, text, tokens, logprob_next (T-1 floats,
        transformers float32, eager attention), ppl, argmax}.

FP8 variants (FP8 = {name: (base arch, flavour)}): the base arch's random model with every
*_proj.weight (attention, MLP, experts; not embeddings, lm_head or the router) quantized to
float8_e4m3fn (the other tensors BF16) and saved with save_file beside a config.json carrying the quantization_config:
  llama_fp8_tensor    ModelOpt FP8 style: weight_scale per tensor (amax / 448), quant_algo FP8
  qwen3moe_fp8_block  quant_method fp8 with weight_block_size [8, 8] (the DeepSeek/Qwen FP8
                      layout, blocks small enough that these tiny matrices hold several):
                      weight_scale_inv [ceil(out/8), ceil(in/8)], multiplied like a scale
The references are transformers float32 with the dequantized weights; the GGUF is llama.cpp's
converter, which dequantizes the same way (--outtype f32).

Usage: python3 scripts/hf_fixtures.py [arch ...]
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import qwen35_fixtures as q  # noqa: E402  (tokenizer, template, converter location)

OUT = os.path.normpath(os.path.join(HERE, "..", "engine", "hfmodel", "testdata"))
ARCHS = ["llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"]
DTYPES = {"llama": "bfloat16", "qwen2": "float16", "qwen3": "float32", "qwen3moe": "bfloat16",
          "qwen35": "bfloat16", "qwen35moe": "float32", "qwen3next": "bfloat16"}
HYBRID = ("qwen35", "qwen35moe", "qwen3next")
SHARDED = {"qwen3"}
FP8 = {"llama_fp8_tensor": ("llama", "tensor"), "qwen3moe_fp8_block": ("qwen3moe", "block")}
FP8_BLOCK = 8
MAX_TOKENS = 96


def convert_main(argv):
    sys.path.insert(0, os.path.join(q.LCP, "gguf-py"))
    sys.path.insert(0, q.LCP)
    import conversion.base as b
    b.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    import conversion.qwen as qw
    for cls in (qw.Qwen3_5MoeTextModel, qw.Qwen3_5TextModel):
        cls.get_vocab_base_pre = lambda self, tokenizer: "qwen35"
    import convert_hf_to_gguf as c
    sys.argv = ["convert_hf_to_gguf.py"] + argv
    c.main()


def run_converter(model_dir, out, extra=()):
    env = dict(os.environ, PYTHONPATH=os.path.join(q.LCP, "gguf-py") + os.pathsep + q.LCP)
    cmd = [sys.executable, os.path.abspath(__file__), "_convert", model_dir,
           "--outtype", "f32", "--outfile", out] + list(extra)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-8000:])
        raise SystemExit("converter failed for " + out)


def gzip_file(path):
    import gzip
    with open(path, "rb") as f, open(path + ".gz", "wb") as out:
        with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0, filename="") as z:
            z.write(f.read())
    os.remove(path)


def make_config(arch, tok):
    import transformers as T
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    if arch == "qwen3next":
        cfg = T.Qwen3NextConfig(
            vocab_size=q.VOCAB, hidden_size=16, num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"],
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=8, shared_expert_intermediate_size=8, norm_topk_prob=True, decoder_sparse_step=1,
            mlp_only_layers=[], full_attention_interval=4, max_position_embeddings=4096, rms_norm_eps=1e-6,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
            eos_token_id=eos, pad_token_id=pad, bos_token_id=None, attn_implementation="eager")
        return cfg, T.Qwen3NextForCausalLM, "Qwen3NextForCausalLM"
    if arch in ("qwen35", "qwen35moe"):
        hy = dict(vocab_size=q.VOCAB, hidden_size=16, num_hidden_layers=4,
                  layer_types=["linear_attention"] * 3 + ["full_attention"],
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                  linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                  max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  eos_token_id=eos, pad_token_id=pad, bos_token_id=None, attn_implementation="eager")
        rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                "mrope_section": [1, 1, 0], "mrope_interleaved": True}
        if arch == "qwen35moe":
            cfg = T.Qwen3_5MoeTextConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8,
                                         shared_expert_intermediate_size=8, rope_parameters=rope, **hy)
            return cfg, T.Qwen3_5MoeForCausalLM, "Qwen3_5MoeForCausalLM"
        cfg = T.Qwen3_5TextConfig(intermediate_size=16, rope_parameters=rope, **hy)
        return cfg, T.Qwen3_5ForCausalLM, "Qwen3_5ForCausalLM"
    common = dict(vocab_size=q.VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  eos_token_id=eos, pad_token_id=pad, bos_token_id=None, attn_implementation="eager")
    if arch == "llama":
        cfg = T.LlamaConfig(intermediate_size=32, tie_word_embeddings=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **common)
        return cfg, T.LlamaForCausalLM, "LlamaForCausalLM"
    if arch == "qwen2":
        cfg = T.Qwen2Config(intermediate_size=32, tie_word_embeddings=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **common)
        return cfg, T.Qwen2ForCausalLM, "Qwen2ForCausalLM"
    if arch == "qwen3":
        cfg = T.Qwen3Config(intermediate_size=32, tie_word_embeddings=True,
                            rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **common)
        return cfg, T.Qwen3ForCausalLM, "Qwen3ForCausalLM"
    cfg = T.Qwen3MoeConfig(intermediate_size=32, moe_intermediate_size=16, num_experts=4,
                           num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                           mlp_only_layers=[], tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **common)
    return cfg, T.Qwen3MoeForCausalLM, "Qwen3MoeForCausalLM"


def randomise(arch, model, g, dtype):
    import torch
    zero_centred = arch in HYBRID  # (1 + w) norms
    with torch.no_grad():
        for name, p in model.named_parameters():
            s = p.shape
            if name.endswith("linear_attn.norm.weight"):
                v = 1.0 + 0.2 * torch.randn(s, generator=g)
            elif "norm" in name:
                v = (0.0 if zero_centred else 1.0) + 0.2 * torch.randn(s, generator=g)
            elif name.endswith("A_log"):
                v = torch.empty(s).uniform_(-1.0, 1.5, generator=g)
            elif name.endswith("dt_bias"):
                v = -1.0 + 0.5 * torch.randn(s, generator=g)
            elif "conv1d" in name:
                v = 0.5 * torch.randn(s, generator=g)
            elif "embed_tokens" in name or name.endswith("mlp.gate.weight") or name.endswith(".bias"):
                v = torch.randn(s, generator=g)
            else:
                v = torch.randn(s, generator=g) / math.sqrt(s[-1])
            p.copy_(v.to(getattr(torch, dtype)).float())


def build(arch):
    import torch
    import transformers
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="hffix-")
    try:
        tok = q.build_tokenizer(work)
        text = q.reference_text(tok)
        ids = tok.encode(text, add_special_tokens=False)[:MAX_TOKENS]
        text = tok.decode(ids)
        assert tok.encode(text, add_special_tokens=False) == ids
        cfg, cls, hf_arch = make_config(arch, tok)
        g = torch.Generator().manual_seed(1600 + ARCHS.index(arch))
        model = cls(cfg).float()
        randomise(arch, model, g, DTYPES[arch])
        mdir = os.path.join(OUT, arch)
        shutil.rmtree(mdir, ignore_errors=True)
        model.config.architectures = [hf_arch]
        dt = getattr(torch, DTYPES[arch])
        kw = {"max_shard_size": "20KB"} if arch in SHARDED else {}
        model.to(dt).save_pretrained(mdir, safe_serialization=True, **kw)
        tdir = os.path.join(OUT, "tokenizer")
        os.makedirs(tdir, exist_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(work, f), mdir)  # the converter reads them
            shutil.copy(os.path.join(work, f), tdir)
        ref = cls.from_pretrained(mdir, dtype=torch.float32, attn_implementation="eager").eval()
        gguf_path = os.path.join(OUT, arch + ".gguf")
        run_converter(mdir, gguf_path, ["--no-mtp"] if arch in HYBRID else [])
        with torch.no_grad():
            logits = ref(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        nxt = [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)]
        res = {"arch": arch, "hf_architecture": hf_arch, "dtype": DTYPES[arch],
               "sharded": arch in SHARDED,
               "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                            "converter": "llama-cpp-python 0.3.36 sdist convert_hf_to_gguf.py --outtype f32"},
               "text": text, "tokens": ids, "logprob_next": nxt,
               "ppl": math.exp(-sum(nxt) / len(nxt)), "argmax": [int(x) for x in logits.argmax(-1)]}
        with open(os.path.join(OUT, arch + ".json"), "w") as f:
            json.dump(res, f)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(mdir, f))  # one copy in testdata/tokenizer/
        gzip_file(gguf_path)
        gguf_path += ".gz"
        sizes = {f: os.path.getsize(os.path.join(mdir, f)) for f in sorted(os.listdir(mdir))}
        print(arch, "tokens", len(ids), "ppl", res["ppl"], sizes, "gguf", os.path.getsize(gguf_path),
              file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def quantize(w, flavour):
    import torch
    fmax = 448.0
    if flavour == "tensor":
        scale = (w.abs().max() / fmax).clamp(min=1e-12).reshape(())
        q = (w / scale).to(torch.float8_e4m3fn)
        return q, scale, q.float() * scale
    b = FP8_BLOCK
    rows, cols = w.shape
    sr, sc = -(-rows // b), -(-cols // b)
    scale = torch.zeros(sr, sc)
    for i in range(sr):
        for j in range(sc):
            scale[i, j] = (w[i * b:(i + 1) * b, j * b:(j + 1) * b].abs().max() / fmax).clamp(min=1e-12)
    full = scale.repeat_interleave(b, 0).repeat_interleave(b, 1)[:rows, :cols]
    q = (w / full).to(torch.float8_e4m3fn)
    return q, scale, q.float() * full


def build_fp8(name):
    import torch
    import transformers
    from safetensors.torch import save_file
    base, flavour = FP8[name]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="hffix-")
    try:
        tok = q.build_tokenizer(work)
        text = q.reference_text(tok)
        ids = tok.encode(text, add_special_tokens=False)[:MAX_TOKENS]
        text = tok.decode(ids)
        cfg, cls, hf_arch = make_config(base, tok)
        g = torch.Generator().manual_seed(1700 + len(name))
        model = cls(cfg).float()
        randomise(base, model, g, "float32")
        sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        out, deq = {}, {}
        for k, v in sd.items():
            if k.endswith("_proj.weight") and v.ndim == 2:
                qw, scale, d = quantize(v, flavour)
                out[k] = qw.contiguous()
                out[k + ("_scale" if flavour == "tensor" else "_scale_inv")] = scale.contiguous()
                deq[k] = d
            else:  # embeddings, lm_head, norms, router in BF16, as real FP8 checkpoints keep them
                out[k] = v.to(torch.bfloat16).contiguous()
                deq[k] = out[k].float()
        with torch.no_grad():
            model.load_state_dict({**sd, **deq})
        mdir = os.path.join(OUT, name)
        shutil.rmtree(mdir, ignore_errors=True)
        os.makedirs(mdir)
        model.config.architectures = [hf_arch]
        model.config.save_pretrained(mdir)
        model.generation_config.save_pretrained(mdir)
        with open(os.path.join(mdir, "config.json")) as f:
            c = json.load(f)
        if flavour == "tensor":
            c["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8"}
        else:
            c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                        "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
        with open(os.path.join(mdir, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
        save_file(out, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(work, f), mdir)
        gguf_path = os.path.join(OUT, name + ".gguf")
        run_converter(mdir, gguf_path)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(mdir, f))
        gzip_file(gguf_path)
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        nxt = [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)]
        res = {"arch": base, "hf_architecture": hf_arch, "dtype": "float8_e4m3fn/" + flavour,
               "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                            "converter": "llama-cpp-python 0.3.36 sdist convert_hf_to_gguf.py --outtype f32"},
               "text": text, "tokens": ids, "logprob_next": nxt,
               "ppl": math.exp(-sum(nxt) / len(nxt)), "argmax": [int(x) for x in logits.argmax(-1)]}
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(res, f)
        print(name, "ppl", res["ppl"], "safetensors", os.path.getsize(os.path.join(mdir, "model.safetensors")),
              "gguf.gz", os.path.getsize(gguf_path + ".gz"), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_convert":
        convert_main(sys.argv[2:])
        sys.exit(0)
    for a in sys.argv[1:] or ARCHS + list(FP8):
        if a in FP8:
            build_fp8(a)
        else:
            build(a)
