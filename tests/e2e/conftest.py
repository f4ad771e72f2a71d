"""Fixtures for the end-to-end tests (helpers in llamaserve_e2e.py). Tests skip only when
the llamaserve binary or the model is missing."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from llamaserve_e2e import BASE_ARGS, BIN, MODEL, ServerProcess


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long mixed-load test (~2 minutes); select with -m soak")


def pytest_collection_modifyitems(config, items):
    skip_reason = None
    if not BIN.exists():
        skip_reason = f"llamaserve binary not built: {BIN}"
    elif not MODEL.exists():
        skip_reason = f"model missing: {MODEL}"
    if skip_reason:
        marker = pytest.mark.skip(reason=skip_reason)
        for item in items:
            if Path(str(item.fspath)).parent == Path(__file__).parent:
                item.add_marker(marker)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The shared server: default limits, no auth."""
    process = ServerProcess(tmp_path_factory.mktemp("server"),
                            [*BASE_ARGS, "--max-running", "4", "--max-queue", "8"], name="shared")
    process.start()
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture
def make_server(tmp_path):
    """Starts a dedicated server with extra arguments; stopped at teardown."""
    started = []

    def start(*args: str, env: dict | None = None, wait_ready: bool = True, base=BASE_ARGS,
              models: list[str] | None = None):
        process = ServerProcess(tmp_path, [*base, *args], env=env, name=f"server{len(started)}",
                                models=models)
        started.append(process)
        return process.start(wait_ready=wait_ready)

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c
