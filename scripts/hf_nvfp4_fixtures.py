#!/usr/bin/env python3
"""Tiny NVFP4 Hugging Face checkpoints for the HF model source (issue 16).

Run on a dev machine (CI never runs this); deterministic from fixed seeds. Each fixture is a
tiny random model whose linear layers (attention q/k/v/o, MLP and expert gate/up/down; not the
embeddings, lm_head, norms or the MoE router, which stay BF16 as real exports keep them) are
quantized to NVFP4 and written with safetensors' save_file in one of the two published layouts:

  ModelOpt (quant_method modelopt, quant_algo NVFP4, group_size 16):
    X.weight          uint8 [out, in/2]   two E2M1 codes per byte, even column in the low nibble
    X.weight_scale    float8_e4m3fn [out, in/16]   one block scale per 16 inputs
    X.weight_scale_2  float32 []          per-tensor second-level scale (amax / (6 * 448))
    X.input_scale     float32 []          activation scale (W4A4 only; a loader for W4A16 ignores it)
    w = e2m1(code) * weight_scale * weight_scale_2
  compressed-tensors (quant_method compressed-tensors, format nvfp4-pack-quantized):
    X.weight_packed        uint8 [out, in/2]          the same packing
    X.weight_scale         float8_e4m3fn [out, in/16]
    X.weight_global_scale  float32 [1]  a divisor: (6 * 448) / amax
    X.input_global_scale   float32 [1]  likewise
    w = e2m1(code) * weight_scale / weight_global_scale

Fixtures (NAMES): engine/hfmodel/testdata/<name>/ plus <name>.gguf.gz and <name>.json, as
scripts/hf_fixtures.py writes them (its tokenizer, text, converter and JSON schema):
  llama_nvfp4          LlamaForCausalLM, ModelOpt, quantization only in hf_quant_config.json
                       (older exports); Q/K rows permuted for llama's RoPE with their scales;
                       lm_head NVFP4 as well
  qwen3moe_nvfp4       Qwen3MoeForCausalLM, ModelOpt, quantization_config in config.json and
                       hf_quant_config.json; per-expert tensors, each with its own weight_scale_2
  qwen3moe_nvfp4_ct    Qwen3MoeForCausalLM, compressed-tensors
  qwen35moe_nvfp4      Qwen3_5MoeForCausalLM, ModelOpt, every projection NVFP4 (GDN in_proj_* rows and
                       out_proj 16-column groups get the converter's value-head reorder)
  qwen35moe_nvfp4_mixed  Qwen3_5MoeForCausalLM, ModelOpt MIXED_PRECISION with quantized_layers:
                       attention and GDN projections FP8 per tensor (weight_scale scalar), routed and
                       shared experts NVFP4, as nvidia/Qwen3.6-35B-A3B-NVFP4 splits them
Dimensions are multiples of 64 so each row is whole ggml NVFP4 blocks (64 elements).

<name>.gguf.gz is llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36 sdist; it repacks
both layouts to GGML type NVFP4 with a <name>.scale tensor, the compressed-tensors global scale
inverted) at --outtype f32 for the unquantized tensors. <name>.json holds transformers float32
(eager attention) with the dequantized weights loaded: per-position log p of the next token and
perplexity.

Usage: python3 scripts/hf_nvfp4_fixtures.py [name ...]
"""
import json
import math
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_fixtures as hf  # noqa: E402  (converter, gzip, output directory)
import qwen35_fixtures as q  # noqa: E402  (tokenizer, reference text)

# name: (arch, layout, seed of the random weights)
NAMES = {"llama_nvfp4": ("llama", "modelopt", 1900), "qwen3moe_nvfp4": ("qwen3moe", "modelopt", 1901),
         "qwen3moe_nvfp4_ct": ("qwen3moe", "compressed-tensors", 1902),
         "qwen35moe_nvfp4": ("qwen35moe", "modelopt", 1901), "qwen35moe_nvfp4_mixed": ("qwen35moe", "mixed", 1902)}
LM_HEAD_FP4 = {"llama_nvfp4"}  # lm_head NVFP4 too (ModelOpt lists it in some exports)
LINEAR = ("_proj.weight", ".in_proj_qkv.weight", ".in_proj_z.weight", ".in_proj_a.weight", ".in_proj_b.weight")
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
MAX_TOKENS = 96


def make_config(arch, tok):
    import transformers as T
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    common = dict(vocab_size=q.VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  eos_token_id=eos, pad_token_id=pad, bos_token_id=None, attn_implementation="eager")
    if arch == "qwen35moe":
        rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                "mrope_section": [1, 1, 0], "mrope_interleaved": True}
        cfg = T.Qwen3_5MoeTextConfig(
            vocab_size=q.VOCAB, hidden_size=64, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
            num_attention_heads=4, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
            rope_parameters=rope, max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
            eos_token_id=eos, pad_token_id=pad, bos_token_id=None, attn_implementation="eager")
        return cfg, T.Qwen3_5MoeForCausalLM, "Qwen3_5MoeForCausalLM"
    if arch == "llama":
        cfg = T.LlamaConfig(intermediate_size=128, tie_word_embeddings=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **common)
        return cfg, T.LlamaForCausalLM, "LlamaForCausalLM"
    cfg = T.Qwen3MoeConfig(intermediate_size=128, moe_intermediate_size=64, num_experts=4,
                           num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                           mlp_only_layers=[], tie_word_embeddings=True,
                           rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **common)
    return cfg, T.Qwen3MoeForCausalLM, "Qwen3MoeForCausalLM"


def nvfp4(w):
    """Quantizes w [out, in] as ModelOpt does: returns the packed codes, the E4M3 block
    scales, the per-tensor scale (amax / (6 * 448)) and the dequantized float32 weight."""
    import torch
    rows, cols = w.shape
    assert cols % 64 == 0
    s2 = (w.abs().max() / (6 * 448)).clamp(min=1e-12).float()
    blocks = w.reshape(rows, cols // 16, 16)
    bs = (blocks.abs().amax(-1) / 6 / s2).clamp(max=448).to(torch.float8_e4m3fn)
    eff = bs.float() * s2
    x = blocks / torch.where(eff > 0, eff, torch.ones_like(eff))[..., None]
    vals = torch.tensor(E2M1)
    mag = (x.abs()[..., None] - vals).abs().argmin(-1)
    codes = (mag | torch.where(x < 0, 8, 0)).to(torch.uint8).reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
    deq = (torch.where(codes >= 8, -1.0, 1.0) * vals[(codes & 7).long()]).reshape(rows, cols // 16, 16)
    deq = ((deq * bs.float()[..., None]) * s2).reshape(rows, cols)
    return packed, bs.contiguous(), s2, deq


def quantize_state(sd, arch, layout, lm_head):
    """Returns the checkpoint tensors and the dequantized state dict for transformers."""
    import torch
    out, deq, quantized = {}, {}, {}

    def put(name, w):
        base = name.removesuffix(".weight")
        if layout == "mixed" and (".self_attn." in name or ".linear_attn." in name):
            # nvidia/Qwen3.6-35B-A3B-NVFP4 style: attention and GDN projections FP8 per tensor
            qw, scale, d = hf.quantize(w, "tensor")
            out[name], out[base + ".weight_scale"] = qw.contiguous(), scale.float().contiguous()
            out[base + ".input_scale"] = torch.tensor(0.05)
            quantized[base] = {"quant_algo": "FP8"}
            return d
        packed, bs, s2, d = nvfp4(w)
        quantized[base] = {"quant_algo": "NVFP4", "group_size": 16}
        if layout in ("modelopt", "mixed"):
            out[name] = packed
            out[base + ".weight_scale"] = bs
            out[base + ".weight_scale_2"] = s2.reshape(())
            out[base + ".input_scale"] = torch.tensor(0.05)
        else:
            gs = (1.0 / s2).reshape(1)
            out[base + ".weight_packed"] = packed
            out[base + ".weight_scale"] = bs
            out[base + ".weight_global_scale"] = gs
            out[base + ".input_global_scale"] = torch.tensor([20.0])
            # compressed-tensors dequantizes with the divisor
            codes = torch.stack([packed & 15, packed >> 4], -1).reshape(w.shape)
            vals = torch.tensor(E2M1)
            e = torch.where(codes >= 8, -1.0, 1.0) * vals[(codes & 7).long()]
            d = (e.reshape(w.shape[0], -1, 16) * (bs.float() / gs)[..., None]).reshape(w.shape)
        return d

    for k, v in sd.items():
        if k.endswith("experts.gate_up_proj"):  # transformers fuses the experts; checkpoints do not
            E, ff2, _ = v.shape
            ff = ff2 // 2
            p = k.removesuffix("gate_up_proj")
            rows = []
            for j in range(E):
                g = put(f"{p}{j}.gate_proj.weight", v[j, :ff])
                u = put(f"{p}{j}.up_proj.weight", v[j, ff:])
                rows.append(torch.cat([g, u]))
            deq[k] = torch.stack(rows)
        elif k.endswith("experts.down_proj"):
            p = k.removesuffix("down_proj")
            deq[k] = torch.stack([put(f"{p}{j}.down_proj.weight", v[j]) for j in range(v.shape[0])])
        elif (k.endswith(LINEAR) and v.ndim == 2 and not k.endswith("shared_expert_gate.weight")) or (lm_head and k == "lm_head.weight"):
            deq[k] = put(k, v)
        else:
            out[k] = v.to(torch.bfloat16).contiguous()
            deq[k] = out[k].float()
    return out, deq, quantized


def quant_configs(layout, arch, n_layers, quantized, lm_head):
    ignore = ([] if lm_head else ["lm_head"]) + ([f"model.layers.{i}.mlp.gate" for i in range(n_layers)] if "moe" in arch else [])
    if layout == "mixed":
        hq = {"producer": {"name": "modelopt", "version": "0.44.0"},
              "quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
                               "exclude_modules": ignore, "quantized_layers": quantized}}
        cfg = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ignore,
               "quantized_layers": quantized, "producer": hq["producer"]}
        return cfg, hq
    if layout == "modelopt":
        hq = {"producer": {"name": "modelopt", "version": "0.29.0"},
              "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                               "exclude_modules": ignore}}
        cfg = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ignore,
               "producer": hq["producer"]}
        return cfg, hq
    fp4 = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
           "symmetric": True, "dynamic": False, "observer": "minmax"}
    cfg = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
           "quantization_status": "compressed", "ignore": ignore,
           "config_groups": {"group_0": {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
                                         "weights": fp4, "input_activations": dict(fp4, dynamic="local")}}}
    return cfg, None


def build(name):
    import torch
    import transformers
    from safetensors.torch import save_file
    arch, layout, seed = NAMES[name]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="hfnvfp4-")
    try:
        tok = q.build_tokenizer(work)
        text = q.reference_text(tok)
        ids = tok.encode(text, add_special_tokens=False)[:MAX_TOKENS]
        text = tok.decode(ids)
        cfg, cls, hf_arch = make_config(arch, tok)
        g = torch.Generator().manual_seed(seed)
        model = cls(cfg).float()
        hf.randomise(arch, model, g, "float32")
        if cfg.tie_word_embeddings:  # unit-variance embeddings as the output head give a perplexity of ~1e21
            with torch.no_grad():
                model.model.embed_tokens.weight.mul_(0.2)
        sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        if cfg.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        out, deq, quantized = quantize_state(sd, arch, layout, name in LM_HEAD_FP4)
        with torch.no_grad():
            model.load_state_dict(deq, strict=False)
            if cfg.tie_word_embeddings:
                model.tie_weights()
        mdir = os.path.join(hf.OUT, name)
        shutil.rmtree(mdir, ignore_errors=True)
        os.makedirs(mdir)
        model.config.architectures = [hf_arch]
        model.config.save_pretrained(mdir)
        model.generation_config.save_pretrained(mdir)
        qc, hq = quant_configs(layout, arch, cfg.num_hidden_layers, quantized, name in LM_HEAD_FP4)
        with open(os.path.join(mdir, "config.json")) as f:
            c = json.load(f)
        if name != "llama_nvfp4":  # llama_nvfp4: hf_quant_config.json only, like older ModelOpt exports
            c["quantization_config"] = qc
        with open(os.path.join(mdir, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
        if hq is not None:
            with open(os.path.join(mdir, "hf_quant_config.json"), "w") as f:
                json.dump(hq, f, indent=2)
        save_file(out, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(work, f), mdir)
        gguf_path = os.path.join(hf.OUT, name + ".gguf")
        hf.run_converter(mdir, gguf_path, ["--no-mtp"] if arch == "qwen35moe" else [])
        for f in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(mdir, f))
        hf.gzip_file(gguf_path)
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        nxt = [float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)]
        res = {"arch": arch, "hf_architecture": hf_arch, "dtype": "nvfp4/" + layout,
               "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                            "converter": "llama-cpp-python 0.3.36 sdist convert_hf_to_gguf.py --outtype f32"},
               "text": text, "tokens": ids, "logprob_next": nxt,
               "ppl": math.exp(-sum(nxt) / len(nxt)), "argmax": [int(x) for x in logits.argmax(-1)]}
        with open(os.path.join(hf.OUT, name + ".json"), "w") as f:
            json.dump(res, f)
        print(name, "ppl", res["ppl"], "safetensors", os.path.getsize(os.path.join(mdir, "model.safetensors")),
              "gguf.gz", os.path.getsize(gguf_path + ".gz"), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    for n in sys.argv[1:] or list(NAMES):
        build(n)
