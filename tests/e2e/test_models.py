"""Several models in one server: routing by the "model" field, load on demand with LRU under
--max-loaded, idle unload (keep_alive), reload with drain under streaming load, a reload to a
broken file, the admin API's keys, a model that fails at start, and SIGHUP with an edited
config. The second model is a Q8_0 copy of the default one made with `llamaserve quantize`."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import httpx
import pytest

from llamaserve_e2e import BIN, MODEL, parse_sse, wait_for

ADMIN = {"Authorization": "Bearer admin-secret"}
SMALL = {"prompt": "Hi", "max_tokens": 3, "temperature": 0}


@pytest.fixture(scope="module")
def second_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "smol-q8_0.gguf"
    subprocess.run([str(BIN), "quantize", str(MODEL), str(path), "q8_0", "--progress", "none"],
                   check=True, capture_output=True, timeout=120)
    return path


def two_models(second_model, *extra_first: str, extra_second: tuple = ()) -> list[str]:
    first = ",".join([f"small={MODEL}", *extra_first])
    second = ",".join([f"other={second_model}", *extra_second])
    return ["--model", first, "--model", second]


def models_by_id(server, headers: dict | None = None) -> dict:
    listing = httpx.get(f"{server.url}/v1/models", headers=headers, timeout=10).json()
    return {entry["id"]: entry for entry in listing["data"]}


def wait_loaded(server, *names: str, headers: dict | None = None) -> dict:
    """/ready answers once the required models are loaded; these tests wait for all of them."""
    assert wait_for(lambda: all(models_by_id(server, headers)[n]["state"] == "loaded"
                                for n in names), timeout_s=60), models_by_id(server, headers)
    return models_by_id(server, headers)


def complete(server, model: str, **extra) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/completions", json={**SMALL, "model": model, **extra},
                      timeout=60)


def test_requests_route_by_model_name(make_server, second_model):
    server = make_server(models=two_models(second_model))
    models = wait_loaded(server, "small", "other")
    assert set(models) == {"small", "other"}
    assert all(m["state"] == "loaded" and m["context_length"] == 512 for m in models.values())
    for name in ("small", "other", "small"):
        response = complete(server, name)
        assert response.status_code == 200, response.text
        assert response.json()["model"] == name
    unknown = complete(server, "gpt-4")
    assert unknown.status_code == 404
    message = unknown.json()["error"]["message"]
    assert "'small'" in message and "'other'" in message
    # No model named: the first one.
    default = httpx.post(f"{server.url}/v1/completions", json=SMALL, timeout=60)
    assert default.json()["model"] == "small"
    # Request and latency series carry the model.
    metrics = server.metrics()
    assert metrics.get("llamaserve_requests_total", endpoint="/v1/completions", status="200",
                       model="small") == 3
    assert metrics.get("llamaserve_requests_total", endpoint="/v1/completions", status="200",
                       model="other") == 1
    assert metrics.get("llamaserve_time_to_first_token_seconds_count", model="other") == 1
    assert metrics.get("llamaserve_generations_finished_total", model="small") == 3


def test_max_loaded_unloads_the_least_recently_used(make_server, second_model):
    server = make_server("--max-loaded", "1", models=two_models(second_model))
    wait_loaded(server, "small")
    states = {name: m["state"] for name, m in models_by_id(server).items()}
    assert states == {"small": "loaded", "other": "unloaded"}
    generated = 0
    for name in ("other", "small", "other", "small"):
        response = complete(server, name)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"]
        generated += response.json()["usage"]["completion_tokens"]
        states = {n: m["state"] for n, m in models_by_id(server).items()}
        assert states[name] == "loaded" and list(states.values()).count("loaded") == 1, states
    metrics = server.metrics()
    assert metrics.get("llamaserve_model_loads_total", model="other") == 2
    assert metrics.get("llamaserve_model_loads_total", model="small") == 3
    # Engine totals keep what unloaded versions generated (plus the warm-ups).
    assert metrics.get("llamaserve_generated_tokens_total") >= generated


def test_idle_models_unload_after_keep_alive(make_server, second_model):
    server = make_server(models=two_models(second_model, extra_second=("keep-alive=1",)))
    wait_loaded(server, "small", "other")
    assert complete(server, "other").status_code == 200
    assert wait_for(lambda: models_by_id(server)["other"]["state"] == "unloaded", timeout_s=10)
    assert models_by_id(server)["small"]["state"] == "loaded"
    # The next request loads it again; its keep_alive (Ollama's field) keeps it from then on.
    assert complete(server, "other", keep_alive=-1).status_code == 200
    time.sleep(2.5)
    assert models_by_id(server)["other"]["state"] == "loaded"


def stream_until_done(url: str, model: str, results: list, index: int) -> None:
    body = {"prompt": "1, 2, 3,", "max_tokens": 16, "ignore_eos": True, "stream": True,
            "model": model}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as response:
            text = response.read().decode()
            results[index] = (response.status_code, text)
    except httpx.HTTPError as error:
        results[index] = (None, repr(error))


def test_reload_under_streaming_load_drops_nothing(make_server, second_model):
    server = make_server("--max-running", "8", "--max-queue", "64", "--admin-api-key",
                         "admin-secret", models=two_models(second_model))
    wait_loaded(server, "small", "other")
    results = [None] * 40
    threads = [threading.Thread(target=stream_until_done, args=(server.url, "small", results, i))
               for i in range(40)]
    for thread in threads:
        thread.start()
    for path in (second_model, MODEL, second_model):
        time.sleep(0.5)
        reloaded = httpx.post(f"{server.url}/admin/models/small/reload", headers=ADMIN,
                              json={"path": str(path)}, timeout=120)
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["path"] == str(path)
    for thread in threads:
        thread.join(timeout=120)
    for status, text in results:
        assert status == 200, text
        events = parse_sse(text)
        assert events[-1][1] == "[DONE]", text[-300:]
        finish = json.loads(events[-2][1])["choices"][0]["finish_reason"]
        assert finish == "length", text[-300:]
    metrics = server.metrics()
    assert metrics.get("llamaserve_model_loads_total", model="small") == 4
    assert complete(server, "small").status_code == 200


def test_reload_to_a_broken_file_keeps_the_old_version(make_server, second_model, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(1000))
    server = make_server("--admin-api-key", "admin-secret", models=two_models(second_model))
    wait_loaded(server, "small", "other")
    reloaded = httpx.post(f"{server.url}/admin/models/other/reload", headers=ADMIN,
                          json={"path": str(broken)}, timeout=60)
    assert reloaded.status_code == 503, reloaded.text
    assert "keeps serving" in reloaded.json()["error"]["message"]
    entry = models_by_id(server)["other"]
    assert entry["state"] == "loaded" and entry["error"]
    assert complete(server, "other").status_code == 200
    listing = httpx.get(f"{server.url}/admin/models", headers=ADMIN, timeout=10).json()
    other = next(m for m in listing["data"] if m["id"] == "other")
    assert other["path"] == str(second_model) and other["load_failures"] == 1


def test_admin_api_needs_its_own_key(make_server, second_model):
    user = {"Authorization": "Bearer user-key"}
    plain = make_server("--api-key", "user-key", models=two_models(second_model), wait_ready=False)
    plain.wait_ready(headers=user)
    assert httpx.get(f"{plain.url}/admin/models",
                     headers={"Authorization": "Bearer user-key"}).status_code == 404
    server = make_server("--api-key", "user-key", "--admin-api-key", "admin-secret",
                         models=two_models(second_model), wait_ready=False)
    server.wait_ready(headers=user)
    assert httpx.get(f"{server.url}/admin/models").status_code == 401
    assert httpx.get(f"{server.url}/admin/models",
                     headers={"Authorization": "Bearer user-key"}).status_code == 403
    wait_loaded(server, "small", "other", headers=user)
    ok = httpx.get(f"{server.url}/admin/models", headers=ADMIN)
    assert ok.status_code == 200 and {m["id"] for m in ok.json()["data"]} == {"small", "other"}
    unloaded = httpx.post(f"{server.url}/admin/models/other/unload", headers=ADMIN, timeout=60)
    assert unloaded.status_code == 200 and unloaded.json()["state"] == "unloaded"
    loaded = httpx.post(f"{server.url}/admin/models/other/load", headers=ADMIN, timeout=60)
    assert loaded.status_code == 200 and loaded.json()["state"] == "loaded"
    missing = httpx.post(f"{server.url}/admin/models/nope/load", headers=ADMIN, timeout=60)
    assert missing.status_code == 404


def test_a_model_that_fails_at_start_does_not_stop_the_others(make_server, tmp_path):
    server = make_server(models=["--model", f"good={MODEL}", "--model",
                                 f"bad={tmp_path / 'missing.gguf'}"])
    assert wait_for(lambda: models_by_id(server)["bad"]["state"] == "failed", timeout_s=30)
    models = wait_loaded(server, "good")
    assert models["good"]["state"] == "loaded"
    assert models["bad"]["state"] == "failed" and "missing.gguf" in models["bad"]["error"]
    assert complete(server, "good").status_code == 200
    failed = complete(server, "bad")
    assert failed.status_code == 503 and "failed to load" in failed.json()["error"]["message"]
    # A required model that fails stops the start.
    required = subprocess.run([str(BIN), "serve", "--model", f"good={MODEL}", "--model",
                               f"bad={tmp_path / 'missing.gguf'},required=true", "--port", "0"],
                              capture_output=True, timeout=60)
    assert required.returncode == 1, required.stderr.decode()


def test_sighup_applies_the_edited_config(make_server, second_model, tmp_path):
    config = tmp_path / "models.json"
    config.write_text(json.dumps({"models": [{"name": "small", "path": str(MODEL)}]}))
    server = make_server("--config", str(config), models=[])
    assert set(models_by_id(server)) == {"small"}
    config.write_text(json.dumps({"models": [{"name": "other", "path": str(second_model)}]}))
    server.signal(signal.SIGHUP)
    assert wait_for(lambda: set(models_by_id(server)) == {"other"}, timeout_s=30)
    assert wait_for(lambda: models_by_id(server)["other"]["state"] == "loaded", timeout_s=30)
    assert complete(server, "other").status_code == 200
    assert complete(server, "small").status_code == 404
    assert server.proc.poll() is None


def test_aliases_serve_a_clients_default_model_name(make_server, second_model, tmp_path):
    """--model-alias (flag, environment) and alias= in --model: an OpenAI client that always
    sends its own default model name is served; answers carry the model's own id."""
    import openai

    server = make_server("--model-alias", "gpt-4o-mini,text-embedding-3-small",
                         env={"LLAMASERVE_MODEL_NAME": "smol"})
    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    answer = oai.chat.completions.create(model="gpt-4o-mini", max_tokens=3, temperature=0,
                                         messages=[{"role": "user", "content": "Hi"}])
    assert answer.model == "smol"
    listed = models_by_id(server)
    assert set(listed) == {"smol", "gpt-4o-mini", "text-embedding-3-small"}
    assert listed["gpt-4o-mini"]["alias_of"] == "smol" and "alias_of" not in listed["smol"]
    assert oai.models.retrieve("text-embedding-3-small").id == "text-embedding-3-small"
    assert complete(server, "gpt-4").status_code == 404

    env_server = make_server(env={"LLAMASERVE_MODEL_ALIAS": "gpt-4o"})
    assert complete(env_server, "gpt-4o").status_code == 200

    named = make_server(models=two_models(second_model, "alias=gpt-4o",
                                          extra_second=("alias=gpt-3.5-turbo",)))
    wait_loaded(named, "small", "other")
    assert complete(named, "gpt-4o").json()["model"] == "small"
    assert complete(named, "gpt-3.5-turbo").json()["model"] == "other"

    # An alias that names another model is refused at start.
    with pytest.raises(RuntimeError, match="model 'other' is also an alias of 'small'"):
        make_server(models=two_models(second_model, "alias=other"))
