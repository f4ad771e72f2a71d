"""Deployment files (deploy/): scripts/check_deploy.sh passes on the repository and fails on
broken copies, and the multi-host launcher (deploy/k8s/overlays/multihost/tp-launch.sh)
starts, probes and stops its ranks as intended, with a stand-in `llamaserve`.

Skipped when kubectl, yamllint or kubernetes-validate is missing (CI runs
scripts/check_deploy.sh itself as a stage, where a missing tool fails)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts/check_deploy.sh"
LAUNCH = ROOT / "deploy/k8s/overlays/multihost/tp-launch.sh"

needs_tools = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("kubectl", "yamllint", "kubernetes-validate")),
    reason="kubectl, yamllint or kubernetes-validate not installed")


def run_check(k8s_dir: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if k8s_dir is not None:  # a copy of the manifests: the Dockerfiles are checked once
        env["K8S_DIR"] = str(k8s_dir)
        env["CHECK_DEPLOY_SKIP_CONFIGURE"] = "1"
    return subprocess.run(["bash", str(CHECK)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


@needs_tools
def test_check_deploy_passes():
    result = run_check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_deploy: all passed" in result.stdout


# name: (file under deploy/k8s, text, replacement, what the failure output must say)
BREAKAGES = {
    "schema": ("base/deployment.yaml", "terminationGracePeriodSeconds: 45",
               "terminationGracePeriodSecond: 45", "'terminationGracePeriodSecond' was unexpected"),
    "grace": ("base/deployment.yaml", "terminationGracePeriodSeconds: 45",
              "terminationGracePeriodSeconds: 20", "FAIL  gpu: terminationGracePeriodSeconds 20"),
    "config key": ("base/config.json", '"max-queue": 64', '"max-queu": 64',
                   "unknown ['max-queu']"),
    "servicemonitor": ("base/servicemonitor.yaml", "scrapeTimeout: 10s", "scrapeTimout: 10s",
                       "'scrapeTimout' was unexpected"),
    "hpa metric": ("base/hpa.yaml", "name: llamaserve_queue_length",
                   "name: llamaserve_queue_len", "HPA metric llamaserve_queue_len is exported"),
    "gpus": ("overlays/tp2/two-gpus.yaml", "nvidia.com/gpu: 2", "nvidia.com/gpu: 1",
             "FAIL  tp2: nvidia.com/gpu 1 = devices 0,1"),
    "lint": ("base/pvc.yaml", "storage: 100Gi", "storage: 100Gi   ", "trailing spaces"),
    "render": ("base/kustomization.yaml", "- pdb.yaml", "- pdbs.yaml",
               "FAILED: kubectl kustomize"),
    "multihost tp": ("overlays/multihost/statefulset.yaml", 'value: "16"', 'value: "12"',
                     "FAIL  multihost: LLAMASERVE_TP 12 = replicas 2 x GPUS_PER_POD 8"),
}


@needs_tools
def test_check_deploy_passes_on_a_copy(tmp_path):
    """The control for the broken copies: an unchanged copy elsewhere passes."""
    shutil.copytree(ROOT / "deploy/k8s", tmp_path / "k8s")
    result = run_check(tmp_path / "k8s")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_tools
@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_check_deploy_fails_on_broken_copy(tmp_path, name):
    path, old, new, message = BREAKAGES[name]
    copy = tmp_path / "k8s"
    shutil.copytree(ROOT / "deploy/k8s", copy)
    target = copy / path
    text = target.read_text()
    assert old in text, f"{path} no longer holds {old!r}: update the test"
    target.write_text(text.replace(old, new, 1))
    result = run_check(copy)
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{name}: not detected\n{output}"
    assert "FAILED" in result.stderr
    assert message in output, f"{name}: failed for another reason\n{output}"


# --- the launcher, with a stand-in llamaserve -------------------------------------------

FAKE = r"""#!/usr/bin/env python3
# Stand-in for llamaserve: `serve` answers /health and /ready and on SIGTERM marks the group
# ended and exits 0; `tp-worker` waits (ignoring nothing itself) until the group is ended.
import http.server, os, signal, sys, threading, time
log = open(os.environ["FAKE_LOG"], "a", buffering=1)
log.write(" ".join(sys.argv[1:]) + "\n")
ended = os.environ["FAKE_GROUP_ENDED"]
if sys.argv[1] == "serve":
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path in ("/health", "/ready") else 404)
            self.end_headers()
        def log_message(self, *a): pass
    srv = http.server.HTTPServer(("127.0.0.1", int(os.environ["LLAMASERVE_PORT"])), H)
    def term(*_):
        log.write("serve: SIGTERM received; draining\n")
        open(ended, "w").close()
        os._exit(0)
    signal.signal(signal.SIGTERM, term)
    srv.serve_forever()
else:
    for _ in range(600):
        if os.path.exists(ended):
            log.write("worker: group ended\n")
            sys.exit(0)
        time.sleep(0.1)
    sys.exit(3)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launcher_env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "llamaserve"
    fake.write_text(FAKE.replace("/usr/bin/env python3", sys.executable, 1))
    fake.chmod(0o755)
    env = dict(os.environ)
    env.update(PATH=f"{bindir}:{env['PATH']}", GPUS_PER_POD="2", LLAMASERVE_TP="4",
               TP_COORDINATOR="llamaserve-0.llamaserve-tp:29500",
               LLAMASERVE_PORT=str(free_port()), FAKE_LOG=str(tmp_path / "log"),
               FAKE_GROUP_ENDED=str(tmp_path / "ended"), TMPDIR=str(tmp_path))
    return env, tmp_path


def start(env: dict, pod: int, tmp: Path) -> subprocess.Popen:
    env = dict(env, POD_INDEX=str(pod))
    # The launcher keeps its pid list in /tmp; give each test its own copy of the script
    # pointing elsewhere.
    script = tmp / "tp-launch.sh"
    script.write_text(LAUNCH.read_text().replace("/tmp/llamaserve-ranks.pids",
                                                 str(tmp / "ranks.pids")))
    return subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def probe(env: dict, pod: int, tmp: Path, what: str) -> int:
    env = dict(env, POD_INDEX=str(pod))
    return subprocess.run(["bash", str(tmp / "tp-launch.sh"), "probe", what], env=env,
                          timeout=20).returncode


def wait_for(predicate, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_launcher_pod0_drains_on_sigterm(launcher_env):
    env, tmp = launcher_env
    proc = start(env, 0, tmp)
    try:
        assert wait_for(lambda: probe(env, 0, tmp, "ready") == 0), "never ready"
        assert probe(env, 0, tmp, "live") == 0
        assert wait_for(lambda: (tmp / "log").read_text().count("\n") >= 2)
        log = (tmp / "log").read_text()
        assert "serve --config /etc/llamaserve/config.json --tp 4 --tp-rank 0 --device cuda:0" in log
        assert ("tp-worker --tp 4 --tp-rank 1 --tp-coordinator llamaserve-0.llamaserve-tp:29500 "
                "--device cuda:1") in log
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    log = (tmp / "log").read_text()
    assert "draining" in log and "worker: group ended" in log


def test_launcher_worker_pod_ignores_sigterm_until_group_ends(launcher_env):
    env, tmp = launcher_env
    proc = start(env, 1, tmp)
    try:
        assert wait_for(lambda: probe(env, 1, tmp, "live") == 0), "workers not running"
        assert wait_for(lambda: (tmp / "log").exists()
                        and (tmp / "log").read_text().count("tp-worker") == 2)
        log = (tmp / "log").read_text()
        assert "--tp-rank 2 " in log and "--tp-rank 3 " in log and "serve --" not in log
        proc.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert proc.poll() is None, "a worker pod must wait for rank 0 to end the group"
        (tmp / "ended").touch()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out


def test_launcher_ends_pod_when_a_rank_dies(launcher_env):
    env, tmp = launcher_env
    proc = start(env, 1, tmp)
    try:
        assert wait_for(lambda: probe(env, 1, tmp, "live") == 0), "workers not running"
        first = int((tmp / "ranks.pids").read_text().split()[0])
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: probe(env, 1, tmp, "live") != 0), "probe still live"
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 137, out  # the status of the rank that died
    assert "ended with status 137" in out


def test_launcher_refuses_pod_without_rank(launcher_env):
    env, tmp = launcher_env
    proc = start(env, 2, tmp)  # 2 pods x 2 GPUs = tp 4: pod 2 has none
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 2, out
