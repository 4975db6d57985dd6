#!/usr/bin/env python3
"""Independent reference fixtures for the hybrid Qwen architectures (issue 11).

Run on a dev machine (CI never runs this); it rebuilds, deterministically from fixed
seeds, into engine/model/testdata/:

  tiny_qwen35moe.gguf       transformers Qwen3_5MoeForCausalLM (GDN + gated attention + MoE
                            with shared expert), converted by llama.cpp's own converter
  tiny_qwen35moe_mtp.gguf   the same checkpoint plus a random `mtp.*` block: block_count + 1,
                            nextn_predict_layers = 1 (the MTP block is not run in the main pass)
  tiny_qwen35moe_old.gguf   tiny_qwen35moe.gguf rewritten without the
                            `qwen35moe.attention.recurrent_layers` key (what older converters
                            wrote); the loader must fall back to full_attention_interval
  tiny_qwen35.gguf          transformers Qwen3_5ForCausalLM (dense MLP)
  tiny_qwen3next.gguf       transformers Qwen3NextForCausalLM (fused in_proj_qkvz / in_proj_ba;
                            the GGUF keeps HF's grouped v-head order and `ssm_ba`)
  tiny_<arch>.json, tiny_<arch>_logits.bin.gz   references (format below); the _mtp and _old
                            files share tiny_qwen35moe.json: same weights, same logits.

Pipeline, per arch:
  1. A byte-level BPE (tokenizers library) trained on the fixed text below, 320 ids: 256 byte
     symbols, BPE merges, then the Qwen special tokens. Pre-tokenizer: the Qwen3.5 split
     regex (the texts are ASCII, where it equals the Qwen2 one) + ByteLevel. The chat template
     is llama.cpp's models/templates/Qwen3.5-4B.jinja from the llama-cpp-python 0.3.36 sdist,
     used verbatim (it is data). eos = <|im_end|>.
  2. A tiny model with every parameter random (norm weights around 0 for the 1+w norms and
     around 1 for the GDN output norm, A_log, dt_bias, conv, router, shared_expert_gate), then a
     short Adam run on the reference sequence itself until its perplexity falls under
     PPL_TARGET, so the next-token distribution is peaked but not trivial. Every parameter is
     then rounded to a float16-representable value.
  3. save_pretrained (float32 safetensors) + tokenizer files, then llama.cpp's
     convert_hf_to_gguf.py (vendored in the llama-cpp-python 0.3.36 sdist, with its gguf-py on
     PYTHONPATH) with --outtype f16. Matrices become F16 (exact: the values are f16), while
     the converter forces norms, 1-D tensors, conv, router and shexp gate to F32 (exact too).
     The converter refuses an unknown BPE pre-tokenizer hash, so it runs from a small wrapper
     (this script, sub-command `_convert`) that monkeypatches get_vocab_base_pre of the
     model class to return "qwen35" (qwen35, qwen35moe) or "qwen2" (qwen3next).
     Main files are converted with --no-mtp (the converter asserts MTP tensors otherwise).
  4. References in float32 on the CPU with eager attention over one fixed token sequence
     (plain English + code + a chat-formatted part rendered with the template):
       prefill: one forward over the whole sequence (GDN layers take
                torch_chunk_gated_delta_rule + causal_conv1d_fn);
       decode:  token by token with past_key_values: the first token has no state yet and
                takes the chunked path too; every later step takes causal_conv1d_update +
                torch_recurrent_gated_delta_rule. The calls are counted and stored ("gdn_calls").
  5. Independent check (printed, and stored under "checks"): layer 0's GDN mixer recomputed in
     numpy from the GGUF tensors read back with gguf-py (conv, l2norm, decay from ssm_a and
     ssm_dt.bias, the delta rule token by token, gated RMSNorm, ssm_out), with the v-head
     mapping the background doc gives (tiled j % H_k for qwen35/qwen35moe, interleaved
     j // (H_v/H_k) and the grouped ssm_ba split for qwen3next), against the HF module's
     output; plus the norm "+1" and ssm_a = -exp(A_log) transforms.

JSON format (tiny_<arch>.json):
  arch, gguf (file names sharing this reference), versions {transformers, torch, gguf_py,
  converter}, config (HF config dict), text, tokens (the sequence, T ids), vocab,
  prefill / decode: {logprob_next: T-1 floats, log p(tokens[i+1] | tokens[:i+1]);
                     argmax: T ids; top2_gap: T floats (top1 - top2 logit, skip near-ties);
                     ppl: exp(-mean(logprob_next))},
  logit_rows: {positions: [...], file: tiny_<arch>_logits.bin.gz, order: "prefill then
  decode"}: the .bin.gz holds little-endian float32 rows of `vocab` logits: first the
  prefill rows for `positions`, then the decode rows for the same positions,
  gdn_calls, checks, train {steps, ppl_before_round}.

Usage: python3 scripts/qwen35_fixtures.py [qwen35moe qwen35 qwen3next]
Needs: torch, transformers>=5.2, tokenizers, jinja2, numpy, and the llama-cpp-python 0.3.36
sdist extracted (LCP_LLAMA_CPP=/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp by default).
Do not install flash-linear-attention or causal-conv1d: the pure-torch path is the reference.
"""
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

LCP = os.environ.get("LCP_LLAMA_CPP", "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp")
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "engine", "model", "testdata"))
TEMPLATE = os.path.join(LCP, "models", "templates", "Qwen3.5-4B.jinja")
VOCAB = 320
PPL_TARGET = 12.0
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
            "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Fixed text: the BPE is trained on it and the reference sequence is cut from it.
PROSE = (
    "The cache keeps the keys and values of every token that the model has seen. "
    "A recurrent layer keeps a small state instead: it forgets a little at every step "
    "and writes the new value where the key points. "
)
CODE = (
    "def mean(xs):\n"
    "    total = 0\n"
    "    for x in xs:\n"
    "        total += x\n"
    "    return total / len(xs)\n"
)
MESSAGES = [
    {"role": "system", "content": "You are a helpful coding assistant."},
    {"role": "user", "content": "What does the mean function return for an empty list?"},
    {"role": "assistant", "content": "It divides by zero and raises an error."},
    {"role": "user", "content": "Fix it, please."},
]


# ----------------------------------------------------------------- converter wrapper

def convert_main(argv):
    """Sub-command: run llama.cpp's converter with the pre-tokenizer check patched."""
    pre, rest = argv[0], argv[1:]
    sys.path.insert(0, os.path.join(LCP, "gguf-py"))
    sys.path.insert(0, LCP)
    import conversion.qwen as q  # the vendored model classes
    for cls in (q.Qwen3_5MoeTextModel, q.Qwen3_5TextModel, q.Qwen3NextModel):
        cls.get_vocab_base_pre = lambda self, tokenizer, _p=pre: _p
    import convert_hf_to_gguf as c
    sys.argv = ["convert_hf_to_gguf.py"] + rest
    c.main()


def run_converter(model_dir, out, pre, extra=()):
    env = dict(os.environ, PYTHONPATH=os.path.join(LCP, "gguf-py") + os.pathsep + LCP)
    cmd = [sys.executable, os.path.abspath(__file__), "_convert", pre, model_dir,
           "--outtype", "f16", "--outfile", out] + list(extra)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-8000:])
        raise SystemExit("converter failed for " + out)


def gguf_py():
    sys.path.insert(0, os.path.join(LCP, "gguf-py"))
    import gguf
    return gguf


# ----------------------------------------------------------------- tokenizer

def build_tokenizer(dirname):
    from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders, Regex, AddedToken
    regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
             r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    corpus = [PROSE * 3, CODE * 3] + [m["content"] for m in MESSAGES] * 3
    tok.train_from_iterator(corpus, trainer=trainer)
    assert tok.get_vocab_size() == VOCAB - len(SPECIALS), tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    assert tok.get_vocab_size() == VOCAB
    tok.save(os.path.join(dirname, "tokenizer.json"))
    with open(TEMPLATE) as f:
        template = f.read()
    cfg = {"tokenizer_class": "Qwen2TokenizerFast", "model_max_length": 4096,
           "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
           "unk_token": None, "add_bos_token": False, "clean_up_tokenization_spaces": False,
           "split_special_tokens": False, "errors": "replace", "chat_template": template}
    with open(os.path.join(dirname, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(dirname)


def reference_text(hf_tok):
    chat = hf_tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    return PROSE + "\n" + CODE + "\n" + chat


# ----------------------------------------------------------------- models

def make_config(arch, tok):
    import transformers as T
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    common = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=4,
                  layer_types=["linear_attention"] * 3 + ["full_attention"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                  max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                  attn_implementation="eager")
    rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}
    if arch == "qwen35moe":
        rope.update(mrope_section=[2, 1, 1], mrope_interleaved=True)
        cfg = T.Qwen3_5MoeTextConfig(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                                     shared_expert_intermediate_size=16, rope_parameters=rope, **common)
        return cfg, T.Qwen3_5MoeForCausalLM, "Qwen3_5MoeForCausalLM", "qwen35"
    if arch == "qwen35":
        rope.update(mrope_section=[2, 1, 1], mrope_interleaved=True)
        cfg = T.Qwen3_5TextConfig(intermediate_size=32, rope_parameters=rope, **common)
        return cfg, T.Qwen3_5ForCausalLM, "Qwen3_5ForCausalLM", "qwen35"
    cfg = T.Qwen3NextConfig(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                            shared_expert_intermediate_size=16, norm_topk_prob=True,
                            decoder_sparse_step=1, mlp_only_layers=[], full_attention_interval=4,
                            rope_parameters=rope, **common)
    return cfg, T.Qwen3NextForCausalLM, "Qwen3NextForCausalLM", "qwen2"


def randomise(model, g):
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("linear_attn.norm.weight"):          # plain w (init ones)
                v = 1.0 + 0.2 * torch.randn(shape, generator=g)
            elif "norm" in name:                                    # (1 + w) norms, init zeros
                v = 0.2 * torch.randn(shape, generator=g)
            elif name.endswith("A_log"):
                v = torch.empty(shape).uniform_(-1.0, 1.5, generator=g)
            elif name.endswith("dt_bias"):
                v = -1.0 + 0.5 * torch.randn(shape, generator=g)
            elif "conv1d" in name:
                v = 0.5 * torch.randn(shape, generator=g)
            elif "embed_tokens" in name:
                v = torch.randn(shape, generator=g)
            elif name.endswith("mlp.gate.weight"):                   # router
                v = torch.randn(shape, generator=g)
            elif name.endswith("shared_expert_gate.weight"):
                v = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
            else:
                v = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
            p.copy_(v)


def train(model, ids, steps_max=600):
    import torch
    x = torch.tensor([ids])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    ppl = float("inf")
    step = 0
    for step in range(steps_max):
        out = model(input_ids=x, labels=x, use_cache=False)
        ppl = math.exp(float(out.loss.detach()))
        if ppl < PPL_TARGET:
            break
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.eval()
    return step, ppl


def round_f16(model):
    import torch
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


# ----------------------------------------------------------------- references

def count_gdn_calls(arch):
    import importlib
    name = {"qwen35moe": "qwen3_5_moe", "qwen35": "qwen3_5", "qwen3next": "qwen3_next"}[arch]
    mod = importlib.import_module("transformers.models.%s.modeling_%s" % (name, name))
    counts = {}
    for fn in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
               "causal_conv1d_update", "causal_conv1d_fn"):
        orig = getattr(mod, fn, None)
        if orig is None:
            continue

        def wrap(*a, _o=orig, _n=fn, **k):
            counts[_n] = counts.get(_n, 0) + 1
            return _o(*a, **k)
        setattr(mod, fn, wrap)
    return counts


def stats(logits, ids):
    import torch
    lp = torch.log_softmax(logits.double(), -1)
    nxt = torch.tensor(ids[1:])
    lpn = lp[:-1].gather(1, nxt[:, None])[:, 0]
    top = torch.topk(logits.double(), 2, dim=-1).values
    return {"logprob_next": [round(float(v), 6) for v in lpn],
            "argmax": [int(v) for v in logits.argmax(-1)],
            "top2_gap": [round(float(v), 5) for v in (top[:, 0] - top[:, 1])],
            "ppl": float(torch.exp(-lpn.mean()))}


def references(model, ids, counts):
    import torch
    x = torch.tensor([ids])
    with torch.no_grad():
        counts.clear()
        pre = model(input_ids=x, use_cache=False).logits[0].float()
        pre_calls = dict(counts)
        counts.clear()
        out = model(input_ids=x[:, :1], use_cache=True)
        first_calls = dict(counts)
        rows, pkv = [out.logits[0, -1].float()], out.past_key_values
        for i in range(1, len(ids)):
            out = model(input_ids=x[:, i:i + 1], past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            rows.append(out.logits[0, -1].float())
        dec = torch.stack(rows)
        rest_calls = {k: counts.get(k, 0) - first_calls.get(k, 0) for k in counts}
    calls = {"prefill": pre_calls, "decode_first_token": first_calls,
             "decode_later_tokens_total": rest_calls, "note":
             "counts over all GDN layers; decode_later covers T-1 single-token steps"}
    return pre, dec, calls


# ----------------------------------------------------------------- independent numpy check

def numpy_gdn_check(arch, gguf_path, cfg, model, ids):
    """Layer 0 GDN recomputed from the GGUF tensors (gguf-py reader) vs the HF module."""
    import numpy as np
    import torch
    gg = gguf_py()
    r = gg.GGUFReader(gguf_path)
    T = {t.name: np.array(t.data).astype(np.float64) for t in r.tensors}
    cap = {}
    mixer = model.model.layers[0].linear_attn

    def hook(mod, args, kwargs, out):
        cap["x"] = (args[0] if args else kwargs["hidden_states"]).detach().double()[0].numpy()
        cap["y"] = (out[0] if isinstance(out, tuple) else out).detach().double()[0].numpy()
    h = mixer.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), use_cache=False)
    h.remove()
    x, want = cap["x"], cap["y"]
    Hk, Hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, K = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim
    eps, Tn, rep = cfg.rms_norm_eps, x.shape[0], Hv // Hk
    b = "blk.0."
    qkv = x @ T[b + "attn_qkv.weight"].T
    z = (x @ T[b + "attn_gate.weight"].T).reshape(Tn, Hv, dv)
    if arch == "qwen3next":
        ba = (x @ T[b + "ssm_ba.weight"].T).reshape(Tn, Hk, 2 * rep)   # per k head [b(rep) | a(rep)]
        beta_l, alpha = ba[:, :, :rep].reshape(Tn, Hv), ba[:, :, rep:].reshape(Tn, Hv)
        kh = lambda j: j // rep
    else:
        beta_l, alpha = x @ T[b + "ssm_beta.weight"].T, x @ T[b + "ssm_alpha.weight"].T
        kh = lambda j: j % Hk

    def run(kh):
        wc = T[b + "ssm_conv1d.weight"]                      # numpy [channels, K]
        pad = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv], 0)
        conv = sum(pad[j:j + Tn] * wc[:, j] for j in range(K))
        conv = conv / (1 + np.exp(-conv))
        q = conv[:, :Hk * dk].reshape(Tn, Hk, dk)
        k = conv[:, Hk * dk:2 * Hk * dk].reshape(Tn, Hk, dk)
        v = conv[:, 2 * Hk * dk:].reshape(Tn, Hv, dv)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(dk)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        decay = np.exp(T[b + "ssm_a"] * np.log1p(np.exp(alpha + T[b + "ssm_dt.bias"])))
        beta = 1 / (1 + np.exp(-beta_l))
        S = np.zeros((Hv, dk, dv))
        o = np.zeros((Tn, Hv, dv))
        for t in range(Tn):
            for j in range(Hv):
                kk, qq = k[t, kh(j)], q[t, kh(j)]
                S[j] *= decay[t, j]
                u = beta[t, j] * (v[t, j] - S[j].T @ kk)
                S[j] += np.outer(kk, u)
                o[t, j] = S[j].T @ qq
        o = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps) * T[b + "ssm_norm.weight"]
        o = o * (z / (1 + np.exp(-z)))
        return o.reshape(Tn, Hv * dv) @ T[b + "ssm_out.weight"].T

    got = run(kh)
    wrong = run((lambda j: j % Hk) if arch == "qwen3next" else (lambda j: j // rep))
    e_wrong = float(np.abs(wrong - want).max() / (np.abs(want).max() + 1e-30))
    err = float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30))
    # transforms: norms +1, ssm_a = -exp(A_log)
    sd = {k2: v2.detach().double().numpy() for k2, v2 in model.state_dict().items()}
    e_norm = float(np.abs(T["output_norm.weight"] - (1 + sd["model.norm.weight"])).max())
    alog = sd["model.layers.0.linear_attn.A_log"]
    if arch != "qwen3next":   # tiled reorder: new j' = r*Hk + g holds old g*rep + r
        alog = alog.reshape(Hk, rep).T.reshape(-1)
    e_a = float(np.abs(T[b + "ssm_a"] - (-np.exp(alog))).max())
    res = {"gdn_layer0_numpy_vs_hf_max_rel_err": err,
           "gdn_layer0_with_the_other_v_head_mapping_rel_err": e_wrong, "output_norm_plus1_max_abs_err": e_norm,
           "ssm_a_minus_exp_alog_max_abs_err": e_a,
           "v_head_mapping": "qk head = j // %d (interleaved)" % rep if arch == "qwen3next"
           else "qk head = j %% %d (tiled)" % Hk}
    print(arch, "independent check", res, file=sys.stderr)
    assert err < 1e-4 and e_wrong > 1e-2 and e_norm < 1e-6 and e_a < 1e-6, res
    return res


# ----------------------------------------------------------------- MTP, old variant

def add_mtp(model_dir, cfg, g):
    import torch
    from safetensors.torch import load_file, save_file
    path = os.path.join(model_dir, "model.safetensors")
    sd = load_file(path)
    full = max(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")
    src = "model.layers.%d." % full
    hid = cfg.hidden_size
    for k in sorted(sd):
        if k.startswith(src):
            v = sd[k]
            if "norm" in k:
                nv = 0.2 * torch.randn(v.shape, generator=g)
            else:
                nv = torch.randn(v.shape, generator=g) / math.sqrt(v.shape[-1])
            sd["mtp.layers.0." + k[len(src):]] = nv.half().float().contiguous()
    sd["mtp.fc.weight"] = (torch.randn(hid, 2 * hid, generator=g) / math.sqrt(2 * hid)).half().float()
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        sd["mtp.%s.weight" % n] = (0.2 * torch.randn(hid, generator=g)).half().float()
    save_file(sd, path, metadata={"format": "pt"})
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    c["mtp_num_hidden_layers"] = 1
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=1)


def write_old(src, dst, arch):
    env = dict(os.environ, PYTHONPATH=os.path.join(LCP, "gguf-py"))
    script = os.path.join(LCP, "gguf-py", "gguf", "scripts", "gguf_new_metadata.py")
    r = subprocess.run([sys.executable, script, "--force", "--remove-metadata",
                        arch + ".attention.recurrent_layers", src, dst],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("gguf_new_metadata failed")


def variant_checks(main, variants, arch):
    """The _mtp/_old files hold the main file's tensors byte for byte; check their keys."""
    gg = gguf_py()
    rm = gg.GGUFReader(main)
    ref = {t.name: bytes(t.data.tobytes()) for t in rm.tensors}
    n = int(rm.fields[arch + ".block_count"].contents())
    out = {}
    for v in variants:
        r = gg.GGUFReader(v)
        tens = {t.name: bytes(t.data.tobytes()) for t in r.tensors}
        same = all(tens.get(k) == b for k, b in ref.items())
        extra = sorted(set(tens) - set(ref))
        f = r.fields
        rec = f.get(arch + ".attention.recurrent_layers")
        res = {"trunk_tensors_identical": same, "extra_tensors": extra,
               "block_count": int(f[arch + ".block_count"].contents()),
               "nextn_predict_layers": int(f[arch + ".nextn_predict_layers"].contents())
               if arch + ".nextn_predict_layers" in f else None,
               "recurrent_layers": rec.contents() if rec is not None else None}
        assert same, v
        out[os.path.basename(v)] = res
    out["main_block_count"] = n
    print("variants", out, file=sys.stderr)
    return out


def describe(path):
    gg = gguf_py()
    r = gg.GGUFReader(path)
    keys = sorted(f.name for f in r.fields.values())
    return {"bytes": os.path.getsize(path), "keys": keys,
            "tensors": {t.name: [t.tensor_type.name] + [int(d) for d in t.shape] for t in r.tensors}}


# ----------------------------------------------------------------- main

def build(arch):
    import numpy as np
    import torch
    import transformers
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="qwen35fix-")
    try:
        tok = build_tokenizer(work)
        text = reference_text(tok)
        ids = tok.encode(text, add_special_tokens=False)
        cfg, cls, hf_arch, pre = make_config(arch, tok)
        g = torch.Generator().manual_seed({"qwen35moe": 351, "qwen35": 352, "qwen3next": 353}[arch])
        torch.manual_seed(7)
        model = cls(cfg).float()
        randomise(model, g)
        with torch.no_grad():
            ppl0 = math.exp(float(model(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss))
        steps, ppl_tr = train(model, ids)
        round_f16(model)
        print(arch, "tokens", len(ids), "ppl random", ppl0, "after", steps, "steps", ppl_tr,
              file=sys.stderr)
        mdir = os.path.join(work, "model")
        model.config.architectures = [hf_arch]
        model.save_pretrained(mdir, safe_serialization=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(work, f), mdir)
        # reload exactly what the converter reads
        ref = cls.from_pretrained(mdir, dtype=torch.float32, attn_implementation="eager").eval()
        for (n1, p1), (n2, p2) in zip(model.state_dict().items(), ref.state_dict().items()):
            assert n1 == n2 and torch.equal(p1, p2), n1
        main = os.path.join(OUT, "tiny_%s.gguf" % arch)
        files = [os.path.basename(main)]
        if arch == "qwen35moe":
            add_mtp(mdir, cfg, g)
            run_converter(mdir, main, pre, ["--no-mtp"])
            mtp = os.path.join(OUT, "tiny_qwen35moe_mtp.gguf")
            run_converter(mdir, mtp, pre)
            old = os.path.join(OUT, "tiny_qwen35moe_old.gguf")
            write_old(main, old, arch)
            files += [os.path.basename(mtp), os.path.basename(old)]
        else:
            run_converter(mdir, main, pre, ["--no-mtp"])
        counts = count_gdn_calls(arch)
        pre_l, dec_l, calls = references(ref, ids, counts)
        checks = numpy_gdn_check(arch, main, cfg, ref, ids)
        if len(files) > 1:
            checks["variants"] = variant_checks(main, [os.path.join(OUT, f) for f in files[1:]], arch)
        checks["decode_vs_prefill_max_abs_logit_diff"] = float((pre_l - dec_l).abs().max())
        layout = {f: describe(os.path.join(OUT, f)) for f in files}
        for f, d in layout.items():
            print(f, d["bytes"], "bytes,", len(d["tensors"]), "tensors", file=sys.stderr)
        T_ = len(ids)
        positions = [0, 1, 2, 3, T_ // 2, T_ - 4, T_ - 3, T_ - 2, T_ - 1]
        ps, ds = stats(pre_l, ids), stats(dec_l, ids)
        print(arch, "ppl prefill", ps["ppl"], "decode", ds["ppl"], "max|prefill-decode|",
              checks["decode_vs_prefill_max_abs_logit_diff"], file=sys.stderr)
        assert 3 < ps["ppl"] < 100, ps["ppl"]
        import importlib.metadata as md
        meta = {
            "arch": arch, "gguf": files,
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                         "tokenizers": md.version("tokenizers"),
                         "converter": "llama-cpp-python 0.3.36 sdist vendor/llama.cpp/convert_hf_to_gguf.py "
                                      "+ conversion/qwen.py, its gguf-py; --outtype f16; get_vocab_base_pre "
                                      "patched to %r" % pre,
                         "chat_template": "llama-cpp-python 0.3.36 vendor/llama.cpp/models/templates/Qwen3.5-4B.jinja"},
            "config": json.loads(ref.config.to_json_string()),
            "vocab": VOCAB, "text": text, "tokens": ids,
            "prefill": ps, "decode": ds,
            "logit_rows": {"positions": positions, "file": "tiny_%s_logits.bin.gz" % arch,
                           "order": "prefill rows for positions, then decode rows for positions; "
                                    "float32 LE, vocab floats per row"},
            "gdn_calls": calls, "checks": checks,
            "train": {"steps": steps, "ppl_random_init": ppl0, "ppl_before_f16_round": ppl_tr},
            "layout": {f: {"bytes": d["bytes"], "keys": d["keys"]} for f, d in layout.items()},
        }
        print(arch, "versions", json.dumps(meta["versions"]), file=sys.stderr)
        with open(os.path.join(OUT, "tiny_%s.json" % arch), "w") as f:
            json.dump(meta, f, indent=None, separators=(",", ":"))
            f.write("\n")
        rows = torch.cat([pre_l[positions], dec_l[positions]]).numpy().astype("<f4")
        with gzip.GzipFile(os.path.join(OUT, "tiny_%s_logits.bin.gz" % arch), "wb", mtime=0) as f:
            f.write(rows.tobytes())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_convert":
        convert_main(sys.argv[2:])
        sys.exit(0)
    os.makedirs(OUT, exist_ok=True)
    for a in sys.argv[1:] or ["qwen35moe", "qwen35", "qwen3next"]:
        build(a)
