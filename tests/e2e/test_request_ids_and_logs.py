"""Request ids and trace context are echoed and logged; logs as JSON lines; the log level from
the environment and the config file; the build info metric matches --version."""

from __future__ import annotations

import json
import subprocess

import httpx

from llamaserve_e2e import BIN, MODEL_NAME, free_port, wait_for

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def request_lines(server) -> list[dict]:
    lines = []
    for line in server.log().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)  # every JSON-format line must parse
            if entry.get("msg") == "request":
                lines.append(entry)
    return lines


def test_ids_are_echoed_and_logged_as_json(make_server):
    server = make_server("--log-format", "json")
    headers = {"X-Request-Id": "order-42/line-7", "traceparent": TRACEPARENT}
    response = httpx.post(f"{server.url}/v1/completions", headers=headers, timeout=60,
                          json={"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 3})
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "order-42/line-7"
    assert response.headers["traceparent"] == TRACEPARENT
    assert response.json()["id"].startswith("cmpl-")  # the body keeps the server's own id

    # A streamed answer and a refusal carry them too.
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", headers=headers, timeout=60,
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                            "stream": True}) as stream:
        assert stream.headers["x-request-id"] == "order-42/line-7"
        assert stream.headers["traceparent"] == TRACEPARENT
        stream.read()
    refused = httpx.post(f"{server.url}/v1/nothing", headers=headers, timeout=10)
    assert refused.status_code == 404
    assert refused.headers["x-request-id"] == "order-42/line-7"

    # Unusable values are not echoed: the server's own id takes the place of the client's.
    bad = httpx.get(f"{server.url}/v1/models", timeout=10,
                    headers={"X-Request-Id": "has space", "traceparent": "00-zz-00-01"})
    assert bad.headers["x-request-id"].startswith("req-")
    assert "traceparent" not in bad.headers

    lines = wait_for(lambda: len(request_lines(server)) >= 4 and request_lines(server))
    completion = next(line for line in lines if line["endpoint"] == "/v1/completions")
    assert completion["request_id"] == "order-42/line-7"
    assert completion["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert completion["parent_id"] == "00f067aa0ba902b7"
    assert completion["status"] == 200 and completion["completion_tokens"] == 3
    assert completion["id"] == response.json()["id"]
    assert isinstance(completion["total_ms"], (int, float))
    assert completion["time"].endswith("Z") and completion["level"] == "info"
    models = next(line for line in lines if line["endpoint"] == "/v1/models")
    assert "request_id" not in models and "trace_id" not in models
    # Every line of the log is JSON, the start-up lines too.
    for line in server.log().splitlines():
        json.loads(line)


def test_log_level_from_environment_and_config_file(make_server, tmp_path):
    quiet = make_server("--port", str(free_port()), env={"LLAMASERVE_LOG_LEVEL": "warn"})
    httpx.get(f"{quiet.url}/v1/models", timeout=10)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"log-level": "warn", "log-format": "json"}))
    from_file = make_server("--config", str(config), "--port", str(free_port()))
    httpx.get(f"{from_file.url}/v1/models", timeout=10)
    loud = make_server("--log-level", "info")  # after the command's name: the program's flag
    httpx.get(f"{loud.url}/v1/models", timeout=10)
    wait_for(lambda: "request id=" in loud.log())
    assert "request id=" not in quiet.log() and "listening on" not in quiet.log()
    assert '"msg":"request"' not in from_file.log()
    # The flag beats the config file.
    flag = make_server("--config", str(config), "--log-level", "info")
    httpx.get(f"{flag.url}/v1/models", timeout=10)
    wait_for(lambda: '"msg":"request"' in flag.log())


def test_build_info_matches_version(server):
    version = subprocess.run([str(BIN), "--version"], capture_output=True, text=True,
                             check=True).stdout.split()
    series = [line for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines()
              if line.startswith("llamaserve_build_info{")]
    assert len(series) == 1, series
    assert f'version="{version[1]}"' in series[0]
    assert f'commit="{version[2].strip("()")}"' in series[0]
    assert 'cuda="false"' in series[0] and series[0].endswith(" 1")
