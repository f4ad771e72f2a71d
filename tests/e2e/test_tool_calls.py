"""Tool calling on the SmolLM2 CPU server through the official `openai` client: forced calls
("required", a named function) whose arguments validate against the function's parameters at
temperature 1, streamed `delta.tool_calls` put back together by the client, a round trip with
the tool's result, "none", and 400 for malformed tools and unimplemented fields.

SmolLM2's template knows no tools, so the server describes them in a system message
(toolcall/tool_prompt.h); the call syntaxes of the families whose templates do are covered by
tests/unit/toolcall with hand-written model outputs."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from llamaserve_e2e import MODEL_NAME

jsonschema = pytest.importorskip("jsonschema")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CONVERT = {
    "type": "function",
    "function": {
        "name": "convert_currency",
        "description": "Converts an amount between currencies.",
        "parameters": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"amount": {"type": "integer", "minimum": 0, "maximum": 100000},
                           "from": {"type": "string", "enum": ["EUR", "USD", "CNY"]},
                           "to": {"type": "string", "enum": ["EUR", "USD", "CNY"]}},
            "required": ["amount", "from", "to"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, CONVERT]
PARAMETERS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture
def oai(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def check_calls(message, names=None):
    assert message.tool_calls, message
    for call in message.tool_calls:
        assert call.type == "function"
        assert call.id.startswith("call_") and len(call.id) == 29
        assert call.function.name in (names or PARAMETERS)
        jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])


def test_required_calls_validate_at_temperature_one(oai):
    def ask(seed):
        return oai.chat.completions.create(
            model=MODEL_NAME, messages=QUESTION, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=120)

    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(ask, range(24)))
    names = set()
    for response in responses:
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.content is None
        assert len(choice.message.tool_calls) == 1
        check_calls(choice.message)
        names.add(choice.message.tool_calls[0].function.name)
    assert names <= set(PARAMETERS)


def test_parallel_calls_are_a_list(oai):
    response = oai.chat.completions.create(
        model=MODEL_NAME, messages=QUESTION, tools=TOOLS, tool_choice="required", temperature=0,
        max_tokens=180)
    choice = response.choices[0]
    if choice.finish_reason == "length":
        # The model went on listing calls until max_tokens: the cut output is content.
        assert choice.message.tool_calls is None and choice.message.content
    else:
        assert choice.finish_reason == "tool_calls"
        check_calls(choice.message)


def test_named_function_streamed_deltas(oai):
    stream = oai.chat.completions.create(
        model=MODEL_NAME, messages=QUESTION, tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "convert_currency"}},
        temperature=1.0, seed=7, max_tokens=120, stream=True)
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        choice = chunk.choices[0]
        assert not choice.delta.content
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            if delta.id:
                call["id"] = delta.id
            if delta.function and delta.function.name:
                call["name"] += delta.function.name
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
        finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["name"] == "convert_currency" and calls[0]["id"].startswith("call_")
    jsonschema.validate(json.loads(calls[0]["arguments"]), PARAMETERS["convert_currency"])


def test_round_trip_with_the_tools_result(oai):
    first = oai.chat.completions.create(
        model=MODEL_NAME, messages=QUESTION, tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0,
        max_tokens=120)
    call = first.choices[0].message.tool_calls[0]
    messages = [*QUESTION,
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": call.id, "type": "function",
                                 "function": {"name": call.function.name,
                                              "arguments": call.function.arguments}}]},
                {"role": "tool", "tool_call_id": call.id,
                 "content": json.dumps({"temperature": 21, "sky": "sunny"})}]
    final = oai.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS,
                                        tool_choice="none", temperature=0, max_tokens=40)
    choice = final.choices[0]
    assert choice.message.tool_calls is None
    assert choice.message.content and choice.finish_reason in ("stop", "length")
    # The call and its result are part of the prompt (the tools are not: "none").
    plain = oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, tools=TOOLS,
                                        tool_choice="none", max_tokens=1)
    assert final.usage.prompt_tokens > plain.usage.prompt_tokens + 20


def test_tools_are_described_only_when_they_may_be_called(oai):
    def prompt_tokens(**extra):
        return oai.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=1,
                                           temperature=0, **extra).usage.prompt_tokens

    plain = prompt_tokens()
    assert prompt_tokens(tools=TOOLS, tool_choice="none") == plain
    assert prompt_tokens(tools=TOOLS) > plain + 50


def test_auto_answers_with_content_or_calls(oai):
    for stream in (False, True):
        response = oai.chat.completions.create(
            model=MODEL_NAME, messages=QUESTION, tools=TOOLS, temperature=0, max_tokens=80,
            stream=stream)
        if stream:
            text, calls, finish = "", 0, None
            for chunk in response:
                text += chunk.choices[0].delta.content or ""
                calls += len(chunk.choices[0].delta.tool_calls or [])
                finish = chunk.choices[0].finish_reason or finish
        else:
            message = response.choices[0].message
            text, calls = message.content or "", len(message.tool_calls or [])
            finish = response.choices[0].finish_reason
        assert (finish == "tool_calls") == (calls > 0)
        assert text or calls


@pytest.mark.parametrize("body, message", [
    ({"tool_choice": "required"}, "needs 'tools'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "not among 'tools'"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "'tool_choice' must be"),
    ({"tools": [{"type": "retrieval"}]}, "'tools[0].type' must be \"function\""),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
     "'tools[0].function.name'"),
    ({"tools": [WEATHER, WEATHER]}, "defined twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "'tools[0].function.parameters' must be an object"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
     "cannot be combined"),
    ({"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "not": {"type": "string"}}}}],
      "tool_choice": "required"}, "a function's 'parameters'"),
    ({"functions": [{"name": "f"}]}, "use 'tools'"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "'audio' is not supported"),
    ({"modalities": ["text", "audio"]}, "'modalities'"),
    ({"n": 2}, "'n' must be 1"),
])
def test_bad_tool_requests_are_400(client, body, message):
    response = client.post("/v1/chat/completions",
                           json={"model": MODEL_NAME, "messages": QUESTION, "max_tokens": 4, **body})
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"], response.text
