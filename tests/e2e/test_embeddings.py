"""POST /v1/embeddings through the official `openai` client, against the transformers
reference (tests/fixtures/reference/smollm2-embeddings.json, scripts/make_embedding_reference.py):
mean pooling on the shared server, last-token pooling on a server started with
--embedding-pooling last; float and base64 encodings alike, token input equal to text input,
batch order, usage, and every 400."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from llamaserve_e2e import MODEL_NAME

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "smollm2-embeddings.json"
REFERENCE = json.loads(FIXTURE.read_text(encoding="utf-8"))
TEXTS = [entry["text"] for entry in REFERENCE["texts"]]
N_EMBD = REFERENCE["n_embd"]
MIN_COSINE = 0.999


def oai_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture
def oai(server):
    return oai_client(server)


def vectors(response) -> np.ndarray:
    return np.array([item.embedding for item in response.data], dtype=np.float64)


def cosines(got: np.ndarray, pooling: str) -> list[float]:
    want = np.array([entry[pooling] for entry in REFERENCE["texts"]], dtype=np.float64)
    return [float(np.dot(g, w) / (np.linalg.norm(g) * np.linalg.norm(w))) for g, w in zip(got, want)]


def test_mean_pooling_matches_transformers(oai):
    response = oai.embeddings.create(model=MODEL_NAME, input=TEXTS, encoding_format="float")
    assert response.object == "list"
    assert response.model == MODEL_NAME
    assert [item.index for item in response.data] == list(range(len(TEXTS)))
    got = vectors(response)
    assert got.shape == (len(TEXTS), N_EMBD)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    found = cosines(got, "mean")
    print("mean pooling cosines:", [round(c, 6) for c in found])
    assert min(found) >= MIN_COSINE, found
    n_tokens = sum(len(entry["tokens"]) for entry in REFERENCE["texts"])
    assert response.usage.prompt_tokens == n_tokens
    assert response.usage.total_tokens == n_tokens


def test_last_pooling_matches_transformers(make_server):
    server = make_server("--embedding-pooling", "last", "--max-batch-tokens", "64")
    # Several passes: the long text runs in chunks of 64 tokens, pooled across them.
    got = vectors(oai_client(server).embeddings.create(model=MODEL_NAME, input=TEXTS, encoding_format="float"))
    found = cosines(got, "last")
    print("last pooling cosines:", [round(c, 6) for c in found])
    assert min(found) >= MIN_COSINE, found


def test_one_at_a_time_equals_batch(oai):
    batch = vectors(oai.embeddings.create(model=MODEL_NAME, input=TEXTS, encoding_format="float"))
    for i, text in enumerate(TEXTS):
        alone = vectors(oai.embeddings.create(model=MODEL_NAME, input=text, encoding_format="float"))[0]
        assert float(np.dot(alone, batch[i])) >= 0.9999


def test_base64_equals_float(client):
    floats = client.post("/v1/embeddings", json={"input": TEXTS[:3], "encoding_format": "float"}).json()
    encoded = client.post("/v1/embeddings", json={"input": TEXTS[:3], "encoding_format": "base64"}).json()
    for f, b in zip(floats["data"], encoded["data"]):
        assert isinstance(b["embedding"], str)
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        assert np.array_equal(decoded, np.array(f["embedding"], dtype=np.float32))
    # The openai client asks for base64 by default and decodes it.
    assert floats["usage"] == encoded["usage"]


def test_default_client_encoding_is_decoded(oai):
    default = vectors(oai.embeddings.create(model=MODEL_NAME, input=TEXTS[0]))
    explicit = vectors(oai.embeddings.create(model=MODEL_NAME, input=TEXTS[0], encoding_format="float"))
    assert np.array_equal(default.astype(np.float32), explicit.astype(np.float32))


def test_token_input_equals_text_input(oai, client):
    tokens = [entry["tokens"] for entry in REFERENCE["texts"]]
    # The server tokenizes a text as a completion prompt: the ids the reference used.
    for text, ids in zip(TEXTS, tokens):
        served = client.post("/tokenize", json={"content": text, "add_special": True}).json()["tokens"]
        assert served == ids
    from_text = vectors(oai.embeddings.create(model=MODEL_NAME, input=TEXTS[:2], encoding_format="float"))
    from_ids = vectors(oai.embeddings.create(model=MODEL_NAME, input=tokens[:2], encoding_format="float"))
    np.testing.assert_allclose(from_ids, from_text, atol=1e-6)
    one = vectors(oai.embeddings.create(model=MODEL_NAME, input=tokens[0], encoding_format="float"))
    np.testing.assert_allclose(one[0], from_text[0], atol=1e-6)


def test_batch_order_is_kept(oai):
    forward = vectors(oai.embeddings.create(model=MODEL_NAME, input=TEXTS, encoding_format="float"))
    backward = vectors(oai.embeddings.create(model=MODEL_NAME, input=TEXTS[::-1], encoding_format="float"))
    np.testing.assert_allclose(backward[::-1], forward, atol=1e-5)


def test_dimensions_equal_to_width_accepted(oai):
    response = oai.embeddings.create(model=MODEL_NAME, input="hi", dimensions=N_EMBD, encoding_format="float")
    assert len(response.data[0].embedding) == N_EMBD


@pytest.mark.parametrize("body, param, code", [
    ({}, "input", "invalid_value"),
    ({"input": None}, "input", "invalid_value"),
    ({"input": ""}, "input", "invalid_value"),
    ({"input": []}, "input", "invalid_value"),
    ({"input": ["a", ""]}, "input", "invalid_value"),
    ({"input": [[]]}, "input", "invalid_value"),
    ({"input": 5}, "input", "invalid_value"),
    ({"input": {"text": "a"}}, "input", "invalid_value"),
    ({"input": ["a", 1]}, "input", "invalid_value"),
    ({"input": [1, "a"]}, "input", "invalid_value"),
    ({"input": [[1], "a"]}, "input", "invalid_value"),
    ({"input": [1.5]}, "input", "invalid_value"),
    ({"input": [-1]}, "input", "invalid_value"),
    ({"input": [[1, 2], [2147483648]]}, "input", "invalid_value"),
    ({"input": [49152]}, "input", "invalid_value"),
    ({"input": [[1], [10 ** 6]]}, "input", "invalid_value"),
    ({"input": ["x"] * 2049}, "input", "invalid_value"),
    ({"input": [1] * 600}, "input", "context_length_exceeded"),
    ({"input": ["hello " * 600]}, "input", "context_length_exceeded"),
    ({"input": "a", "dimensions": 3}, "dimensions", "invalid_value"),
    ({"input": "a", "dimensions": 0}, "dimensions", "invalid_value"),
    ({"input": "a", "dimensions": "576"}, "dimensions", "invalid_value"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "invalid_value"),
    ({"input": "a", "encoding_format": 1}, "encoding_format", "invalid_value"),
    ({"input": "a", "user": 7}, "user", "invalid_value"),
    ({"input": "a", "model": 7}, "model", "invalid_value"),
])
def test_bad_requests_are_400(client, body, param, code):
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] == code
    assert param in error["message"]


def test_unknown_model_is_404(client):
    response = client.post("/v1/embeddings", json={"input": "a", "model": "nope"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_bad_json_is_400(client):
    response = client.post("/v1/embeddings", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400


def test_openai_client_raises_bad_request(oai):
    with pytest.raises(openai.BadRequestError):
        oai.embeddings.create(model=MODEL_NAME, input="a", dimensions=8)


def test_metrics_count_the_route(server, client):
    client.post("/v1/embeddings", json={"input": "count me"})
    metrics = server.metrics()
    counted = sum(value for (name, labels), value in metrics.samples.items()
                  if name == "llamaserve_requests_total" and dict(labels)["endpoint"] == "/v1/embeddings"
                  and dict(labels)["status"] == "200")
    assert counted >= 1
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
