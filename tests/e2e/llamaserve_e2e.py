"""Helpers for the end-to-end tests: a real `llamaserve serve` process with the default
model on a free loopback port, Prometheus and SSE parsing.

The binary comes from LLAMASERVE_BIN (default build/cpu/src/cli/llamaserve); the tests skip
only when it or the model is missing. Servers run with 2 threads, a small context and small
max_tokens so that the whole suite stays within minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("LLAMASERVE_BIN", REPO_ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))
MODEL = REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = MODEL.stem

# Small enough to be quick, large enough for every test's prompts.
BASE_ARGS = ["--threads", "2", "--ctx-size", "512", "--max-tokens-limit", "256"]


class ServerProcess:
    """One `llamaserve serve` child. stderr goes to a file (a pipe could fill and block)."""

    def __init__(self, log_dir: Path, args: list[str], env: dict[str, str] | None = None,
                 name: str = "server", models: list[str] | None = None):
        """`models`: the model arguments (default: -m with the default model)."""
        self.log_path = log_dir / f"{name}.log"
        model_args = ["-m", str(MODEL)] if models is None else models
        # A free port of the kernel's choosing, read from the log; or the one `args` names
        # (for servers whose log level hides the line that says it).
        port_args = [] if "--port" in args else ["--port", "0"]
        self.args = [str(BIN), "serve", *model_args, *port_args, *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.port = int(args[args.index("--port") + 1]) if port_args == [] else 0
        self.url = f"http://127.0.0.1:{self.port}" if self.port else ""

    def start(self, wait_ready: bool = True, timeout_s: float = 120) -> "ServerProcess":
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout_s
        while not self.port:
            self._check_alive()
            match = re.search(r"listening on http://[^:]+:(\d+)", self.log())
            if match:
                self.port = int(match.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
            elif time.monotonic() > deadline:
                raise TimeoutError(f"server did not start:\n{self.log()}")
            else:
                time.sleep(0.05)
        if wait_ready:
            self.wait_ready(deadline - time.monotonic())
        return self

    def wait_ready(self, timeout_s: float = 120, headers: dict | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            try:
                if httpx.get(f"{self.url}/ready", headers=headers, timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready:\n{self.log()}")
            time.sleep(0.1)

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout_s: float = 60) -> int:
        return self.proc.wait(timeout=timeout_s)

    def stop(self, timeout_s: float = 60) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def metrics(self, headers: dict | None = None) -> "Metrics":
        response = httpx.get(f"{self.url}/metrics", headers=headers, timeout=10)
        response.raise_for_status()
        return Metrics.parse(response.text)

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


@dataclass
class Metrics:
    """Samples of a Prometheus text exposition: {(name, frozenset(labels)): value}."""

    samples: dict

    LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
    LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

    @classmethod
    def parse(cls, text: str) -> "Metrics":
        samples = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            match = cls.LINE.match(line)
            assert match, f"unparsable metrics line: {line!r}"
            name, labels, value = match.groups()
            label_set = frozenset(cls.LABEL.findall(labels or ""))
            samples[(name, label_set)] = float(value)
        return cls(samples)

    def get(self, name: str, **labels) -> float:
        """The sum over the samples of `name` whose labels include these: the one series with
        exactly these labels, or a series split further (by model, for instance)."""
        return self.total(name, **labels)

    def total(self, name: str, **labels) -> float:
        """Sum over every sample of `name` whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= set(ls))


def parse_sse(text: str) -> list[tuple[str, str]]:
    """(event type, data) pairs per the WHATWG event-stream algorithm."""
    events = []
    event_type, data, has_data = "", [], False
    for line in re.split(r"\r\n|\r|\n", text):
        if line == "":
            if has_data:
                events.append((event_type or "message", "\n".join(data)))
            event_type, data, has_data = "", [], False
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event_type = value
        elif field == "data":
            data.append(value)
            has_data = True
    return events


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate, timeout_s: float = 20, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    return predicate()


def json_lines(events):
    return [json.loads(data) for _, data in events if data != "[DONE]"]
