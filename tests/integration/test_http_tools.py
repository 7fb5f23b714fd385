#!/usr/bin/python3
"""Tools and structured output over real HTTP, on the project's KJV model (which has never seen
JSON or a tool call; it gets no template, so the built-in ChatML one with its Hermes-style tools):
- tool_choice "required" and a named tool force a call: message.tool_calls (id, type, function.name,
  function.arguments as a JSON string that validates against the tool's schema, checked with
  python3-jsonschema), finish_reason "tool_calls", whole and streamed (deltas assembled);
- the tools reach the template (POST /apply-template shows the prompt the model reads);
- an assistant turn with tool_calls and a tool answer are accepted in the history;
- response_format json_object / json_schema: the content parses and validates; the same on
  /v1/completions, the Responses API's text.format, and a GBNF `grammar` on /v1/generate;
- bad tools, tool choices, schemas and grammars get a 400 naming the problem, and the daemon
  keeps serving."""
import json
import os
import sys

import jsonschema

from attnd_daemon import Checker, Daemon, parse_sse

c = Checker("test_http_tools")
KJV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "kjv.gguf")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}}, "required": ["tz"],
    "additionalProperties": False}}}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}


def chat(d, **body):
    body.setdefault("messages", MSGS)
    body.setdefault("max_tokens", 200)
    return d.post("/v1/chat/completions", body)


def check_call(call, tools, where):
    by_name = {t["function"]["name"]: t for t in tools}
    ok = (call.get("type") == "function" and call.get("id", "").startswith("call_") and
          call["function"]["name"] in by_name and isinstance(call["function"]["arguments"], str))
    c.check(ok, f"{where}: call shape {call}")
    if not ok:
        return
    try:
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, by_name[call["function"]["name"]]["function"]["parameters"])
    except (ValueError, jsonschema.ValidationError) as ex:
        c.check(False, f"{where}: arguments {call['function']['arguments']!r}: {ex}")


def forced_calls(d):
    for seed in range(3):
        r = chat(d, tools=[WEATHER, TIME], tool_choice="required", seed=seed, temperature=1.0)
        c.check(r.status_code == 200, f"required: {r.status_code} {r.text[:200]}")
        if r.status_code != 200:
            continue
        ch = r.json()["choices"][0]
        calls = ch["message"].get("tool_calls") or []
        c.check(ch["finish_reason"] == "tool_calls" and len(calls) == 1, f"required seed {seed}: {ch}")
        for call in calls:
            check_call(call, [WEATHER, TIME], f"required seed {seed}")
    r = chat(d, tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = r.json()["choices"][0]["message"].get("tool_calls") or [] if r.status_code == 200 else []
    c.check(len(calls) == 1 and calls[0]["function"]["name"] == "get_time", f"named tool: {r.text[:300]}")
    for call in calls:
        check_call(call, [TIME], "named tool")


def streamed_call(d):
    body = {"messages": MSGS, "max_tokens": 200, "tools": [WEATHER], "tool_choice": "required", "stream": True}
    with d.post("/v1/chat/completions", body, stream=True) as r:
        events, done = parse_sse(r.iter_lines(chunk_size=None))
    c.check(done, "streamed call: [DONE]")
    calls, finish = {}, None
    for ev in events:
        for ch in ev.get("choices", []):
            for tc in ch.get("delta", {}).get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] += tc.get("id", "")
                slot["function"]["name"] += tc.get("function", {}).get("name", "")
                slot["function"]["arguments"] += tc.get("function", {}).get("arguments", "")
            finish = ch.get("finish_reason") or finish
    c.check(finish == "tool_calls" and len(calls) == 1, f"streamed call: finish {finish}, {len(calls)} calls")
    for call in calls.values():
        check_call(call, [WEATHER], "streamed call")


def history_and_template(d):
    hist = MSGS + [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 1}"}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    r = chat(d, messages=hist, tools=[WEATHER], max_tokens=8)
    c.check(r.status_code == 200, f"tool_calls + tool answer in the history: {r.status_code} {r.text[:200]}")
    r = d.post("/apply-template", {"messages": hist, "tools": [WEATHER]})
    prompt = r.json().get("prompt", "") if r.status_code == 200 else ""
    c.check('"name": "get_weather"' in prompt and "<tools>" in prompt and "18 C, sunny" in prompt and
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"' in prompt,
            f"/apply-template renders the tools, the call and the answer: {prompt[:600]!r}")
    r = d.post("/apply-template", {"messages": hist, "tools": [WEATHER], "tool_choice": "none"})
    c.check(r.status_code == 200 and "<tools>" not in r.json()["prompt"], "tool_choice none: no tools rendered")
    r = chat(d, tools=[WEATHER], tool_choice="none", max_tokens=4)
    ch = r.json()["choices"][0] if r.status_code == 200 else {}
    c.check(ch.get("finish_reason") in ("length", "stop") and not ch["message"].get("tool_calls"), f"none: text {ch}")


def structured(d):
    for seed in range(3):
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
        r = chat(d, response_format=fmt, seed=seed, temperature=1.0, max_tokens=300)
        text = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else ""
        try:
            jsonschema.validate(json.loads(text), PERSON)
        except (ValueError, jsonschema.ValidationError) as ex:
            c.check(False, f"json_schema seed {seed}: {text!r}: {ex}")
    # json_object bounds no string, and this model likes to write scripture into one: an answer that
    # ends ("stop") parses as an object; one cut by max_tokens cannot, so some seeds must end
    ended = 0
    for seed in range(6):
        r = chat(d, response_format={"type": "json_object"}, max_tokens=600, seed=seed, temperature=1.0)
        ch = r.json()["choices"][0] if r.status_code == 200 else {"finish_reason": None, "message": {"content": ""}}
        if ch["finish_reason"] != "stop":
            continue
        ended += 1
        try:
            c.check(isinstance(json.loads(ch["message"]["content"]), dict), f"json_object: {ch['message']['content']!r}")
        except ValueError:
            c.check(False, f"json_object seed {seed} does not parse: {ch['message']['content']!r}")
    c.check(ended > 0, "json_object: no answer of six ended")
    r = d.post("/v1/completions", {"prompt": "A person:", "max_tokens": 300, "response_format":
                                    {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}})
    text = r.json()["choices"][0]["text"] if r.status_code == 200 else ""
    try:
        jsonschema.validate(json.loads(text), PERSON)
    except (ValueError, jsonschema.ValidationError) as ex:
        c.check(False, f"completions json_schema: {text!r}: {ex}")
    r = d.post("/v1/responses", {"input": "A person:", "max_output_tokens": 300,
                                 "text": {"format": {"type": "json_schema", "name": "p", "schema": PERSON}}})
    out = r.json()["output"][0]["content"][0]["text"] if r.status_code == 200 else ""
    try:
        jsonschema.validate(json.loads(out), PERSON)
    except (ValueError, jsonschema.ValidationError) as ex:
        c.check(False, f"responses text.format: {out!r}: {ex}")
    r = d.post("/v1/generate", {"prompt": "And God said", "max_tokens": 20, "grammar": 'root ::= ("yes" | "no") "."'})
    c.check(r.status_code == 200 and r.json()["text"] in ("yes.", "no."), f"grammar: {r.text[:200]}")


BAD = [
    ("tools not an array", {"tools": {"a": 1}}, "tools"),
    ("tool without function", {"tools": [{"type": "function"}]}, "tools[0]"),
    ("bad tool name", {"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools[0].function.name"),
    ("duplicate tool", {"tools": [WEATHER, WEATHER]}, "second tool"),
    ("unknown named tool", {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}}, "'x'"),
    ("bad tool_choice", {"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
    ("required without tools", {"tool_choice": "required"}, "no 'tools'"),
    ("unsupported schema keyword", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
                                    {"type": "object", "patternProperties": {"a": {}}}}}}, "patternProperties"),
    ("recursive $ref without progress", {"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                                        "schema": {"$ref": "#"}}}}, "json_schema"),
    ("huge enum", {"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                   "schema": {"enum": list(range(100000))}}}}, "JSON values"),
    ("large enum", {"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                    "schema": {"enum": list(range(5000)), "type": "string"}}}}, "json_schema"),
    ("unsatisfiable schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
                              {"type": "string", "minLength": 5, "maxLength": 2}}}}, "json_schema"),
    ("grammar admits nothing", {"grammar": "root ::= a\na ::= a \"x\""}, "grammar"),
    ("grammar and response_format", {"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, "combined"),
]


def bad_input(d):
    for name, extra, needle in BAD:
        r = chat(d, **extra)
        try:
            e = r.json()["error"]
        except (ValueError, KeyError, TypeError):
            e = {}
        c.check(r.status_code == 400 and set(e) == {"message", "type", "param", "code"} and needle in e["message"],
                f"{name}: {r.status_code} {r.text[:300]}")
    r = chat(d, max_tokens=4)
    c.check(r.status_code == 200, "still serving after the bad requests")


def reasoning_switch():
    """reasoning_effort reaches a thinking template as its switch (Qwen3: enable_thinking), byte for
    byte as the reference renderer gives it; chat_template_kwargs pass variables as they are."""
    shared = os.environ.get("SHARED", "../shared")
    tmpl = os.path.join(shared, "templates", "Qwen-Qwen3-0.6B.jinja")
    sys.path.insert(0, os.path.join(shared, "tools"))
    import render_chat  # noqa: E402 - the reference renderer, from shared/
    src = open(tmpl, encoding="utf-8").read()
    q = Daemon(os.path.join(shared, "models", "tiny-qwen2-f32.gguf"), "--chat-template-file", tmpl)
    try:
        for body, kw in (({"reasoning_effort": "none"}, {"enable_thinking": False}),
                         ({"reasoning_effort": "high"}, {"enable_thinking": True}),
                         ({"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False}), ({}, {})):
            want = render_chat.render(src, {"messages": MSGS, "bos_token": None, "eos_token": "<|endoftext|>", **kw})
            r = q.post("/apply-template", {"messages": MSGS, **body})
            got = r.json().get("prompt") if r.status_code == 200 else r.text
            c.check(got == want, f"{body}: {got!r} != {want!r}")
        r = q.post("/v1/chat/completions", {"messages": MSGS, "reasoning_effort": "extreme"})
        c.check(r.status_code == 400 and "reasoning_effort" in r.text, f"bad reasoning_effort: {r.text[:200]}")
    finally:
        q.stop()


d = Daemon(KJV, "--ctx", "2048")  # the tools prompt is longer than the 128 tokens it was trained on
try:
    forced_calls(d)
    streamed_call(d)
    history_and_template(d)
    structured(d)
    bad_input(d)
finally:
    c.check(d.stop() == 0, "clean exit")
reasoning_switch()
c.finish()
