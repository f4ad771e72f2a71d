"""response_format on the SmolLM2 CPU server: json_object and strict JSON Schemas decoded under
constraint at temperature 1, hundreds of generations sent concurrently (the server batches
them), each one parsed and validated with the independent `jsonschema` package; constrained and
free requests in one batch; a streamed schema; 400 for what the compiler does not support.

Every schema here bounds its documents (string lengths, item counts, integer ranges), so each
generation ends within max_tokens and must be a complete, valid document."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from llamaserve_e2e import BASE_ARGS, parse_sse

jsonschema = pytest.importorskip("jsonschema")

# Enough for the longest document these schemas allow (escapes and whitespace included).
MAX_TOKENS = 200
PER_SCHEMA = 30


def strict(properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


SCHEMAS = {
    "nested_object": strict({
        "person": strict({"name": {"type": "string", "maxLength": 10},
                          "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
        "active": {"type": "boolean"}}),
    "enum": strict({"color": {"enum": ["red", "green", "blue"]},
                    "size": {"type": "string", "enum": ["S", "M", "L"]}}),
    "array_items": strict({"tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                                    "minItems": 2, "maxItems": 4}}),
    "any_of": strict({"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 999},
                                          {"type": "string", "maxLength": 8},
                                          {"type": "null"}]}}),
    "integer_range": strict({"year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                             "score": {"type": "integer", "minimum": -50, "maximum": 50}}),
    "pattern": strict({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                       "zip": {"type": "string", "pattern": "^\\d{5}$"}}),
    "refs": {"$defs": {"point": strict({"x": {"type": "integer", "minimum": -9, "maximum": 9},
                                        "y": {"type": "integer", "minimum": -9, "maximum": 9}})},
             **strict({"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}})},
}


def schema_format(name: str) -> dict:
    return {"type": "json_schema",
            "json_schema": {"name": name, "strict": True, "schema": SCHEMAS[name]}}


@pytest.fixture(scope="module")
def json_server(tmp_path_factory):
    from llamaserve_e2e import ServerProcess
    process = ServerProcess(tmp_path_factory.mktemp("structured"),
                            [*BASE_ARGS, "--max-running", "64", "--max-queue", "512"],
                            name="structured")
    process.start()
    yield process
    assert process.stop() == 0, process.log()


def complete(client: httpx.Client, body: dict) -> dict:
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def test_strict_schemas_validate_at_temperature_one(json_server):
    jobs = []
    for name in SCHEMAS:
        for i in range(PER_SCHEMA):
            jobs.append((name, {"prompt": f"Write a JSON value ({name}, {i}):", "seed": i,
                                "temperature": 1.0, "max_tokens": MAX_TOKENS,
                                "response_format": schema_format(name)}))
    with httpx.Client(base_url=json_server.url, timeout=300) as client, \
            ThreadPoolExecutor(64) as pool:
        choices = list(pool.map(lambda job: complete(client, job[1]), jobs))
    distinct = {name: set() for name in SCHEMAS}
    for (name, _), choice in zip(jobs, choices):
        assert choice["finish_reason"] == "stop", (name, choice)
        document = json.loads(choice["text"])
        jsonschema.validate(document, SCHEMAS[name])
        distinct[name].add(json.dumps(document, sort_keys=True))
    # Really sampled: temperature 1 gives many different documents per schema.
    for name, documents in distinct.items():
        assert len(documents) >= 3, (name, documents)


def test_json_object_and_chat(json_server):
    with httpx.Client(base_url=json_server.url, timeout=300) as client, \
            ThreadPoolExecutor(16) as pool:
        def chat(seed: int) -> dict:
            response = client.post("/v1/chat/completions", json={
                "messages": [{"role": "user",
                              "content": "Give a JSON object with a name and a city. Be short."}],
                "seed": seed, "temperature": 1.0, "max_tokens": MAX_TOKENS,
                "response_format": {"type": "json_object"}})
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]
        choices = list(pool.map(chat, range(16)))
    stopped = [c for c in choices if c["finish_reason"] == "stop"]
    # A free object has no length bound; most end well within max_tokens.
    assert len(stopped) >= len(choices) // 2, choices
    for choice in stopped:
        assert isinstance(json.loads(choice["message"]["content"]), dict), choice


def test_constrained_and_free_requests_in_one_batch(json_server):
    free_body = {"prompt": "Once upon a time", "temperature": 1.0, "max_tokens": 24}
    jobs = []
    for i in range(24):
        if i % 2:
            jobs.append(("free", {**free_body, "seed": i}))
        else:
            jobs.append(("enum", {"prompt": "Colour:", "seed": i, "temperature": 1.0,
                                  "max_tokens": MAX_TOKENS,
                                  "response_format": schema_format("enum")}))
    with httpx.Client(base_url=json_server.url, timeout=300) as client, \
            ThreadPoolExecutor(24) as pool:
        choices = list(pool.map(lambda job: complete(client, job[1]), jobs))
    free_texts = []
    for (kind, _), choice in zip(jobs, choices):
        if kind == "free":
            free_texts.append(choice["text"])
        else:
            jsonschema.validate(json.loads(choice["text"]), SCHEMAS["enum"])
    # The free requests were not constrained: story text, not JSON documents.
    assert sum(not text.lstrip().startswith("{") for text in free_texts) >= len(free_texts) // 2


def test_streamed_schema_deltas_concatenate_to_a_valid_document(json_server):
    with httpx.Client(base_url=json_server.url, timeout=300) as client:
        for seed in range(3):
            response = client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Describe a person as JSON."}],
                "seed": seed, "temperature": 1.0, "max_tokens": MAX_TOKENS, "stream": True,
                "response_format": schema_format("nested_object")})
            assert response.status_code == 200, response.text
            text, finish = "", None
            for _, data in parse_sse(response.text):
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk["choices"]:
                    text += choice["delta"].get("content") or ""
                    finish = choice["finish_reason"] or finish
            assert finish == "stop"
            jsonschema.validate(json.loads(text), SCHEMAS["nested_object"])


@pytest.mark.parametrize("schema, mentions", [
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "string", "pattern": "(?=a)b"}, "lookaround"),
    ({"$ref": "https://example.com/s.json"}, "$ref"),
    ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, "/properties/a"),
])
def test_unsupported_schema_features_are_400(json_server, schema, mentions):
    for route, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
                        ("/v1/completions", {"prompt": "x"})]:
        response = httpx.post(json_server.url + route, timeout=60, json={
            **body, "max_tokens": 4,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "t", "schema": schema}}})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "unsupported_schema"
        assert error["param"] == "response_format"
        assert mentions in error["message"], error["message"]


def test_malformed_response_format_is_400(json_server):
    response = httpx.post(json_server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema"}})
    assert response.status_code == 400
    assert "json_schema" in response.json()["error"]["message"]
