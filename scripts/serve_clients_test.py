#!/usr/bin/env python3
"""Drives a running `ftchat serve` with the real openai and anthropic Python
packages and checks their answers (SmolLM2-135M-Instruct, greedy).

    FTCHAT_BASE_URL=http://127.0.0.1:8080 FTCHAT_API_KEY=KEY python3 scripts/serve_clients_test.py

The Go test TestServeWithPythonClients (serve_test.go) starts the server and
runs this script. Exit status 0 when every check passes; the failures are
printed otherwise.
"""
import json
import os
import sys
import traceback

import anthropic
import openai

BASE = os.environ.get("FTCHAT_BASE_URL", "http://127.0.0.1:8080")
KEY = os.environ.get("FTCHAT_API_KEY", "none")
MODEL = os.environ.get("FTCHAT_MODEL_ID", "smollm2")

oa = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=120)
an = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=120)

# anthropic 2.x has no temperature argument (the API keeps the field):
# greedy decoding is asked for through the body.
GREEDY = {"extra_body": {"temperature": 0}}

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

OA_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
AN_TOOLS = [{"name": "get_weather", "description": "Get the current weather in a city",
             "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def oa_call(city, i):
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{i}", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]}


# Few-shot turns: SmolLM2-135M calls the tool after seeing earlier calls.
OA_SHOTS = [{"role": "user", "content": "What is the weather in London?"}, oa_call("London", 1),
            {"role": "user", "content": "What is the weather in Tokyo?"}, oa_call("Tokyo", 2),
            {"role": "user", "content": "What is the weather in Paris?"}]
AN_SHOTS = [{"role": "user", "content": "What is the weather in London?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "London"}}]},
            {"role": "user", "content": "What is the weather in Tokyo?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Tokyo"}}]},
            {"role": "user", "content": "What is the weather in Paris?"}]

checks = []


def check(fn):
    checks.append(fn)
    return fn


@check
def openai_models():
    ids = [m.id for m in oa.models.list().data]
    assert len(ids) == 1, ids


@check
def openai_chat():
    r = oa.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=20)
    text = r.choices[0].message.content
    assert "Paris" in text, text
    assert r.choices[0].finish_reason == "stop", r.choices[0].finish_reason
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, r.usage
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-"), r
    return text


@check
def openai_chat_stream():
    stream = oa.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=20,
                                        stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == openai_chat(), (text, "differs from the non-streamed answer")
    assert finish == "stop" and usage and usage.completion_tokens > 0, (finish, usage)


@check
def openai_stop_and_max_tokens():
    r = oa.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3, r
    r = oa.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=20, stop=["Paris"])
    assert "Paris" not in r.choices[0].message.content and r.choices[0].finish_reason == "stop", r


@check
def openai_logprobs():
    r = oa.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=5, logprobs=True, top_logprobs=2)
    lps = r.choices[0].logprobs.content
    assert len(lps) == 5 and all(lp.logprob <= 0 and len(lp.top_logprobs) == 2 for lp in lps), lps
    assert all(lp.token == lp.top_logprobs[0].token for lp in lps), "greedy picks the top token"


@check
def openai_tools():
    r = oa.chat.completions.create(model=MODEL, messages=OA_SHOTS, tools=OA_TOOLS, temperature=0, max_tokens=60)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}, call
    # The tool's result goes back; the model answers with it.
    msgs = OA_SHOTS + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                       {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 degrees"}]
    r = oa.chat.completions.create(model=MODEL, messages=msgs, tools=OA_TOOLS, temperature=0, max_tokens=40)
    assert "24" in r.choices[0].message.content, r.choices[0].message.content


@check
def openai_tools_stream():
    stream = oa.chat.completions.create(model=MODEL, messages=OA_SHOTS, tools=OA_TOOLS, temperature=0, max_tokens=60, stream=True)
    deltas, finish = [], None
    for chunk in stream:
        for c in chunk.choices:
            deltas += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    # The arguments arrive as the model writes them: several deltas of one call.
    arg_deltas = [d for d in deltas if d.function and d.function.arguments]
    assert finish == "tool_calls" and len(arg_deltas) > 1 and {d.index for d in deltas} == {0}, (finish, deltas)
    assert deltas[0].id and deltas[0].function.name == "get_weather", deltas[0]
    # The client's own accumulation of the deltas gives the whole call.
    with oa.chat.completions.stream(model=MODEL, messages=OA_SHOTS, tools=OA_TOOLS, temperature=0, max_tokens=60) as s:
        final = s.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}, call
    assert final.choices[0].finish_reason == "tool_calls", final


# A prompt that asks for no tool, and a second tool: tool_choice must force
# the call (SmolLM2-135M answers this in text otherwise).
STORY = [{"role": "user", "content": "Tell me a short story about a cat."}]
OA_ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
AN_ADD = {"name": "add", "description": "Add two integers", "input_schema": OA_ADD["function"]["parameters"]}


def check_forced_args(name, args):
    if name == "get_weather":
        assert set(args) == {"city"} and isinstance(args["city"], str), args
    else:
        assert name == "add" and set(args) == {"a", "b"} and all(isinstance(args[k], int) for k in "ab"), (name, args)


@check
def openai_tool_choice():
    tools = OA_TOOLS + [OA_ADD]
    for choice, want in [("required", None), ({"type": "function", "function": {"name": "add"}}, "add"),
                         ({"type": "function", "function": {"name": "get_weather"}}, "get_weather")]:
        r = oa.chat.completions.create(model=MODEL, messages=STORY, tools=tools, tool_choice=choice, temperature=0, max_tokens=80)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, (choice, c)
        call = c.message.tool_calls[0]
        assert want is None or call.function.name == want, (choice, call)
        check_forced_args(call.function.name, json.loads(call.function.arguments))
        with oa.chat.completions.stream(model=MODEL, messages=STORY, tools=tools, tool_choice=choice, temperature=0, max_tokens=80) as s:
            final = s.get_final_completion()
        sc = final.choices[0].message.tool_calls[0]
        assert sc.function.name == call.function.name and json.loads(sc.function.arguments) == json.loads(call.function.arguments), (sc, call)
    try:
        oa.chat.completions.create(model=MODEL, messages=STORY, tools=tools, max_tokens=5,
                                   tool_choice={"type": "function", "function": {"name": "get_time"}})
        raise AssertionError("tool_choice naming an unknown tool accepted")
    except openai.BadRequestError as e:
        assert "get_time" in str(e), e


@check
def anthropic_tool_choice():
    tools = AN_TOOLS + [AN_ADD]
    for choice, want in [({"type": "any"}, None), ({"type": "tool", "name": "add"}, "add"),
                         ({"type": "tool", "name": "get_weather"}, "get_weather")]:
        r = an.messages.create(model=MODEL, max_tokens=80, **GREEDY, tools=tools, tool_choice=choice, messages=STORY)
        uses = [b for b in r.content if b.type == "tool_use"]
        assert r.stop_reason == "tool_use" and len(uses) == 1 and (want is None or uses[0].name == want), (choice, r)
        check_forced_args(uses[0].name, uses[0].input)
        with an.messages.stream(model=MODEL, max_tokens=80, **GREEDY, tools=tools, tool_choice=choice, messages=STORY) as s:
            final = s.get_final_message()
        fu = [b for b in final.content if b.type == "tool_use"][0]
        assert fu.name == uses[0].name and fu.input == uses[0].input, (fu, uses[0])
    try:
        an.messages.create(model=MODEL, max_tokens=5, tools=tools, tool_choice={"type": "tool", "name": "get_time"}, messages=STORY)
        raise AssertionError("tool_choice naming an unknown tool accepted")
    except anthropic.BadRequestError as e:
        assert "get_time" in str(e), e


@check
def openai_json_modes():
    r = oa.chat.completions.create(model=MODEL, temperature=0, max_tokens=120, response_format={"type": "json_object"},
                                   messages=[{"role": "user", "content": "Give me the name and age of a person as JSON."}])
    assert isinstance(json.loads(r.choices[0].message.content), dict), r
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"enum": ["France", "Spain"]}},
              "required": ["city", "country"], "additionalProperties": False}
    r = oa.chat.completions.create(model=MODEL, temperature=0, max_tokens=80,
                                   response_format={"type": "json_schema", "json_schema": {"name": "place", "strict": True, "schema": schema}},
                                   messages=[{"role": "user", "content": "Where is Paris? Answer as JSON with city and country."}])
    got = json.loads(r.choices[0].message.content)
    assert set(got) == {"city", "country"} and isinstance(got["city"], str) and got["country"] in ("France", "Spain"), got


@check
def openai_errors():
    try:
        oa.chat.completions.create(model="gpt-nope", messages=QUESTION, max_tokens=5)
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        assert "gpt-nope" in str(e), e
    try:
        oa.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=5, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "email"}}})
        raise AssertionError("json_schema with format accepted")
    except openai.BadRequestError as e:
        assert "unsupported keyword format" in str(e), e
    bad = openai.OpenAI(base_url=BASE + "/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        raise AssertionError("wrong key accepted")
    except openai.AuthenticationError:
        pass


@check
def anthropic_messages():
    r = an.messages.create(model=MODEL, max_tokens=20, **GREEDY, system="You are terse.", messages=QUESTION)
    assert r.type == "message" and r.role == "assistant" and r.content[0].type == "text", r
    assert "Paris" in r.content[0].text, r.content[0].text
    assert r.stop_reason == "end_turn" and r.usage.output_tokens > 0 and r.usage.input_tokens >= 0, r
    return r.content[0].text


@check
def anthropic_stream():
    with an.messages.stream(model=MODEL, max_tokens=20, **GREEDY, system="You are terse.", messages=QUESTION) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == anthropic_messages() == final.content[0].text, (text, final)
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0, final
    kinds = [ev.type for ev in an.messages.create(model=MODEL, max_tokens=5, messages=QUESTION, stream=True, **GREEDY)]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds and "message_delta" in kinds, kinds


@check
def anthropic_stop_sequence():
    r = an.messages.create(model=MODEL, max_tokens=20, **GREEDY, messages=QUESTION, stop_sequences=["Paris"])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == "Paris", r
    r = an.messages.create(model=MODEL, max_tokens=2, **GREEDY, messages=QUESTION)
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 2, r


@check
def anthropic_tools():
    r = an.messages.create(model=MODEL, max_tokens=60, **GREEDY, tools=AN_TOOLS, messages=AN_SHOTS)
    assert r.stop_reason == "tool_use", r
    use = [b for b in r.content if b.type == "tool_use"][0]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}, use
    with an.messages.stream(model=MODEL, max_tokens=60, **GREEDY, tools=AN_TOOLS, messages=AN_SHOTS) as s:
        events = list(s)
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"city": "Paris"}, final
    parts = [ev.delta.partial_json for ev in events if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta"]
    assert len(parts) > 1 and json.loads("".join(parts)) == {"city": "Paris"}, parts
    # The result goes back as a tool_result block.
    msgs = AN_SHOTS + [{"role": "assistant", "content": [use.model_dump()]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 24 degrees"}]}]
    r = an.messages.create(model=MODEL, max_tokens=40, **GREEDY, tools=AN_TOOLS, messages=msgs)
    assert "24" in r.content[0].text, r


@check
def anthropic_count_tokens():
    n = an.messages.count_tokens(model=MODEL, system="You are terse.", messages=QUESTION).input_tokens
    r = an.messages.create(model=MODEL, max_tokens=1, **GREEDY, system="You are terse.", messages=QUESTION)
    assert n > 0 and n == r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0), (n, r.usage)


@check
def anthropic_errors():
    try:
        an.messages.create(model="claude-nope", max_tokens=5, messages=QUESTION)
        raise AssertionError("unknown model accepted")
    except anthropic.NotFoundError as e:
        assert "claude-nope" in str(e), e
    try:
        an.messages.create(model=MODEL, max_tokens=9000, messages=QUESTION)
        raise AssertionError("max_tokens beyond the context accepted")
    except anthropic.BadRequestError as e:
        assert "context" in str(e), e


def main():
    failed = 0
    for fn in checks:
        try:
            fn()
            print(f"ok   {fn.__name__}")
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
    print(f"{len(checks) - failed}/{len(checks)} checks passed (openai {openai.__version__}, anthropic {anthropic.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
