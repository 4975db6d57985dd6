#!/usr/bin/env python3
"""Reference renders of the Qwen3.5 chat template for engine/chat's tests.

The template is the model's own data: engine/chat/testdata/templates/qwen35.jinja
is a byte-for-byte copy of vendor/llama.cpp/models/templates/Qwen3.5-4B.jinja
from the llama-cpp-python 0.3.36 sdist (llama.cpp's copy of the chat_template
of Qwen/Qwen3.5-4B, fetched there by scripts/get_chat_template.py; the
Qwen3.5/Qwen3.6 GGUFs carry this template in tokenizer.chat_template).
sha256 a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715.

Each case is a conversation in the Go shape (engine.Message / engine.Tool,
with reasoning_content), converted to the HF shape exactly as engine/chat
converts it, and rendered by transformers' render_jinja_template (the
sandboxed jinja2 environment apply_chat_template uses, with tojson,
raise_exception and strftime_now). Cases where transformers raises keep the
exception; the Go side must fail too.

Output: engine/chat/testdata/qwen35_cases.json (outputs inline), and
qwen3coder_cases.json for Qwen3-Coder's template (same sdist,
models/templates/Qwen3-Coder.jinja), the other template of the XML family.

Run: python3 scripts/chat_qwen35_fixtures.py [path/to/Qwen3.5-4B.jinja]
(needs jinja2 and transformers; CI only reads the committed output)
"""
import hashlib
import json
import os
import random
import sys

from transformers.utils.chat_template_utils import render_jinja_template

from chat_fixtures import hf_messages, hf_tools, random_text, random_value

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join(ROOT, "engine", "chat", "testdata")
TEMPLATE = os.path.join(OUT, "templates", "qwen35.jinja")
SHA256 = "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"
# name: (file, sha256, random conversations, seed). qwen3coder is
# vendor/llama.cpp/models/templates/Qwen3-Coder.jinja of the same sdist, the
# other template of the XML tool-call family (no thinking).
TEMPLATES = {
    "qwen35": (TEMPLATE, SHA256, 40, 3535),
    "qwen3coder": (os.path.join(OUT, "templates", "qwen3coder.jinja"),
                   "d287fb2edf144207f868ae1b282755dc19db2a3f1c5b3a3d57e9e5abffa98392", 20, 3030),
}

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
        },
        "required": ["city"],
    },
}
EDIT = {
    "name": "edit_file",
    "description": "Replace text in a file.",
    "parameters": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "edits": {"type": "array", "items": {"type": "object"}},
            "options": {"type": "object"},
        },
        "required": ["path", "edits"],
    },
}

U = lambda c: {"role": "user", "content": c}
A = lambda c, **kw: {"role": "assistant", "content": c, **kw}
S = lambda c: {"role": "system", "content": c}
T = lambda c, **kw: {"role": "tool", "content": c, **kw}

CONVERSATIONS = {
    "system_user": {"messages": [S("You are a concise assistant."), U("What is the capital of France?")]},
    "user_only": {"messages": [U("Hello!")]},
    "system_blank": {"messages": [S("   \n"), U("hi")]},
    "multi_turn": {"messages": [
        S("You are helpful."), U("Hi, who are you?"), A("I am an assistant."),
        U("  Tell me a joke.  "), A("Why did the chicken cross the road?\nTo get to the other side."),
        U("Another one, please.")]},
    "think_in_content": {"messages": [
        U("What is 2+2?"), A("<think>\nSimple arithmetic: 2+2=4.\n</think>\n\nIt is 4."), U("And 3+3?")]},
    "think_in_content_last": {"messages": [U("What is 2+2?"), A("<think>\nAdd them.\n</think>\n\n4")]},
    "reasoning_history": {"messages": [
        U("What is 2+2?"), A("It is 4.", reasoning_content="Simple arithmetic: 2+2=4."), U("And 3+3?")]},
    "reasoning_last": {"messages": [U("What is 2+2?"), A("4", reasoning_content="\nAdd them.\n")]},
    # rendered both ways: as transformers renders it (the template splits the
    # answer at </think>) and with content_is_answer (ftchat's history, where
    # reasoning_content is passed even empty, so the answer stays whole)
    "answer_mentions_think": {"messages": [
        U("Which tag ends reasoning?"), A("It is </think>, written after the reasoning."), U("Thanks.")]},
    "answer_mentions_think_last": {"messages": [
        U("Which tag ends reasoning?"), A("<think>\nnot reasoning\n</think>\n\nIt is </think>.")]},
    "tools": {
        "tools": [WEATHER, EDIT],
        "messages": [
            S("You can use tools."),
            U("Weather in Paris for 3 days? Then fix README.md."),
            A("", reasoning_content="I need the weather first.", tool_calls=[
                {"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris", "days": 3, "metric": True}},
                {"id": "call_2", "name": "edit_file", "arguments": {
                    "path": "README.md", "edits": [{"old": "a", "new": "b"}], "options": {"dry": False, "n": 1.5}}},
            ]),
            T("{\"temp\": 18.5, \"sky\": \"cloudy\"}", tool_call_id="call_1", name="get_weather"),
            T("edited README.md\n<tool_response>not a tag</tool_response>", tool_call_id="call_2", name="edit_file"),
        ],
    },
    "tools_multi_step": {
        "tools": [WEATHER],
        "messages": [
            U("Compare Oslo and Rome."),
            A("Let me check Oslo.", reasoning_content="Two cities, one call each.", tool_calls=[
                {"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}]),
            T("{\"temp\": -3}", tool_call_id="call_1"),
            A("", reasoning_content="Now Rome.", tool_calls=[
                {"id": "call_2", "name": "get_weather", "arguments": {"city": "Rome", "days": None}}]),
            T("{\"temp\": 21}", tool_call_id="call_2"),
            A("Oslo is -3°C, Rome 21°C.", reasoning_content="Both known."),
            U("And Paris?"),
        ],
    },
    "tools_pending": {
        "tools": [WEATHER],
        "messages": [
            S("Be brief."),
            U("Weather in Oslo?"),
            A("Checking.", reasoning_content="Call the tool.", tool_calls=[
                {"name": "get_weather", "arguments": {"city": "Oslo\nNorway", "metric": False}}]),
            T("{\"temp\": -3.25}"),
        ],
    },
    "tool_response_user": {"messages": [
        U("<tool_response>\nonly a tool response\n</tool_response>"), U("real question")]},
    "unicode": {"messages": [
        S("Réponds en français — «poliment»."), U("こんにちは 🌍! \"quotes\" \\ back\\slash\ttab ñ"),
        A("Bonjour 👋 ça va? 中文 ✓", reasoning_content="日本語で考える"), U("Émoji test: 🧪🚀")]},
    # errors the template raises itself
    "err_no_user": {"messages": [S("only a system prompt")]},
    "err_system_late": {"messages": [U("hi"), S("late system")]},
    "err_only_tool_responses": {"messages": [U("<tool_response>\nx\n</tool_response>")]},
}

# (conversation, add_generation_prompt, enable_thinking[, content_is_answer])
RUNS = [
    ("answer_mentions_think", True, None, True), ("answer_mentions_think_last", False, None, True),
    ("answer_mentions_think_last", False, None), ("think_in_content_last", False, None, True),
    ("tools", True, None, True),
    ("system_user", True, None), ("system_user", False, None), ("system_user", True, False),
    ("system_user", True, True), ("user_only", True, None), ("system_blank", True, None),
    ("multi_turn", True, None), ("multi_turn", True, False), ("think_in_content", True, None),
    ("think_in_content_last", False, None), ("reasoning_history", True, None), ("reasoning_history", True, False),
    ("reasoning_last", False, None), ("answer_mentions_think", True, None), ("tools", True, None),
    ("tools", False, None), ("tools", True, False), ("tools_multi_step", True, None),
    ("tools_pending", True, None), ("tools_pending", True, False), ("tool_response_user", True, None),
    ("unicode", True, None), ("err_no_user", True, None), ("err_system_late", True, None),
    ("err_only_tool_responses", True, None),
]


def random_conversations(n, seed):
    """Seeded random agent-like conversations: reasoning in the field and in
    the content, tool calls with typed arguments, tag-like text."""
    rng = random.Random(seed)
    words = ["hello", "  spaced  ", "\n", "\n\n", "tab\there", "é", "日本", "🚀", "\"q\"", "'s'", "\\", "<b>",
             "</tool_call>", "<think>", "</think>", "<parameter=x>", "{\"j\": 1}", "<|im_end|>", "x" * 20, "", " "]

    def text(k=6):
        return random_text(rng, words, k)

    def value():
        return random_value(rng, text)

    convs = []
    for _ in range(n):
        msgs = []
        if rng.random() < 0.6:
            msgs.append(S(text()))
        for _ in range(rng.randint(1, 3)):
            msgs.append(U(text() or "q"))
            for _ in range(rng.randint(0, 2)):
                calls = [{"name": rng.choice(["get_weather", "edit_file"]),
                          "arguments": {f"a{i}": value() for i in range(rng.randint(0, 3))}}
                         for _ in range(rng.randint(1, 2))]
                a = A(rng.choice(["", text(3)]), tool_calls=calls)
                if rng.random() < 0.6:
                    a["reasoning_content"] = text(4)
                msgs.append(a)
                for c in calls:
                    msgs.append(T(text(4), name=c["name"]))
            r = rng.random()
            if r < 0.3:
                msgs.append(A(text(), reasoning_content=text(4)))
            elif r < 0.45:
                msgs.append(A("<think>" + text(3) + "</think>" + text(3)))
            else:
                msgs.append(A(text()))
        if rng.random() < 0.5 and msgs[-1]["role"] == "assistant":
            msgs.pop()
        conv = {"messages": msgs}
        if rng.random() < 0.6:
            conv["tools"] = [WEATHER, EDIT][: rng.randint(1, 2)]
        convs.append((conv, rng.random() < 0.7, rng.choice([None, True, False]), rng.random() < 0.5))
    return convs


def render(src, conv, gen, think, answer):
    kwargs = {} if think is None else {"enable_thinking": think}
    try:
        out = render_jinja_template([hf_messages(conv["messages"], answer)], tools=hf_tools(conv.get("tools")),
                                    chat_template=src, add_generation_prompt=gen, **kwargs)[0][0]
        return out, None
    except Exception as e:  # the template's raise_exception, or a jinja2 error
        return None, type(e).__name__ + ": " + str(e)


def build(name, src, n_random, seed):
    cases = []
    for run in RUNS:
        conv, gen, think = run[:3]
        answer = len(run) > 3 and run[3]
        out, err = render(src, CONVERSATIONS[conv], gen, think, answer)
        cases.append({"name": f"{conv}__gen{int(gen)}" + ("" if think is None else f"__think{int(think)}")
                      + ("__answer" if answer else ""),
                      "conversation": CONVERSATIONS[conv], "add_generation_prompt": gen,
                      "enable_thinking": think, "content_is_answer": answer, "out": out, "error": err})
    for i, (conv, gen, think, answer) in enumerate(random_conversations(n_random, seed=seed)):
        out, err = render(src, conv, gen, think, answer)
        cases.append({"name": f"random_{i}", "conversation": conv, "add_generation_prompt": gen,
                      "enable_thinking": think, "content_is_answer": answer, "out": out, "error": err})
    path = os.path.join(OUT, f"{name}_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path} ({sum(c['error'] is not None for c in cases)} errors)")


def main():
    if len(sys.argv) > 1:
        with open(sys.argv[1], "rb") as f:
            data = f.read()
        with open(TEMPLATE, "wb") as f:
            f.write(data)
    for name, (path, sha, n_random, seed) in TEMPLATES.items():
        with open(path, "rb") as f:
            data = f.read()
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            sys.exit(f"{path}: sha256 {got}, want {sha} (the {name} template of llama-cpp-python 0.3.36)")
        build(name, data.decode("utf-8"), n_random, seed)


if __name__ == "__main__":
    main()
