"""The monitoring files in deploy/ against the server they monitor: the Prometheus alert rules
are valid and their unit tests pass (promtool), a live /metrics scrape passes
`promtool check metrics`, and the Grafana dashboard and the rules use only metric names the
server exports.

promtool comes from Debian's `prometheus` package. Without it the promtool checks skip,
except with CI=true, where they fail: CI must not pass by leaving them out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from llamaserve_e2e import MODEL_NAME, REPO_ROOT, parse_sse

ALERTS = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = REPO_ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "llamaserve.json"
# Where the GPU series are registered (they exist only on CUDA builds that found NVML, so a
# CPU scrape cannot show them) and where they are read.
GPU_METRIC_SOURCES = [REPO_ROOT / "src" / "server" / "metrics.cc",
                      REPO_ROOT / "src" / "server" / "gpu_metrics.cc"]

# Series Prometheus makes itself for every target.
PROMETHEUS_SERIES = {"up"}

# `promtool check metrics` lint findings accepted on purpose. llamaserve_replica_kv_blocks_total
# is a gauge (the blocks a replica has) whose name ends in _total; it is documented in
# docs/api.md and used by dashboards, so renaming it would break them. Any other finding
# fails, so that a new metric follows the naming conventions.
ACCEPTED_LINT = {
    ("llamaserve_replica_kv_blocks_total", 'non-counter metrics should not have "_total" suffix'),
}

PROMQL_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                   "group_right", "bool", "offset", "inf", "nan"}

# The semantics of CI=true: a missing promtool is a failure, not a skip.
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = ("promtool not found; install Debian's prometheus package "
                   "(apt-get install --no-install-recommends prometheus)")
        if IN_CI:
            pytest.fail(message + " (required when CI=true)")
        pytest.skip(message)
    return path


def run_promtool(promtool: str, *args: str, stdin: str | None = None,
                 cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], input=stdin, capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana variables allowed)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals: label values, regexes
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"\{[^{}]*\}", "", s)  # label matchers
    s = re.sub(r"\[[^\[\]]*\]", "", s)  # range and subquery durations
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", "", s)
    s = re.sub(r"\$\{?\w+\}?", "", s)  # Grafana variables ($__rate_interval, ${model})
    names = set()
    for match in re.finditer(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", s):
        name, call = match.groups()
        if call is None and name.lower() not in PROMQL_KEYWORDS:
            names.add(name)
    return names


def test_metric_names_parser():
    """The name extraction the checks below rely on."""
    expr = ('histogram_quantile(0.99, sum by (model, le) (rate(llamaserve_x_bucket'
            '{instance=~"$instance", le="2.5"}[$__rate_interval]))) / on (job) group_left '
            'max_over_time(up[1h] offset 5m) > 1e9 and llamaserve:rule:ratio unless abs(foo)')
    assert metric_names(expr) == {"llamaserve_x_bucket", "up", "llamaserve:rule:ratio", "foo"}


# --- (a), (b): the alert rules ----------------------------------------------------------------


def test_alert_rules_are_valid(promtool):
    result = run_promtool(promtool, "check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_unit_tests_pass(promtool):
    # alerts_test.yml names alerts.yml relative to itself.
    result = run_promtool(promtool, "test", "rules", ALERTS_TEST.name, cwd=ALERTS_TEST.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_severity_summary_and_description_and_a_unit_test():
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"]
             for rule in group["rules"] if "alert" in rule]
    assert rules
    tested = {case["alertname"] for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
              for case in test.get("alert_rule_test", [])
              if any(alert for alert in case.get("exp_alerts", []))}
    for rule in rules:
        assert rule.get("labels", {}).get("severity") in ("critical", "warning"), rule["alert"]
        assert rule.get("annotations", {}).get("summary"), rule["alert"]
        assert rule.get("annotations", {}).get("description"), rule["alert"]
        assert rule["alert"] in tested, f"{rule['alert']} is never shown to fire in {ALERTS_TEST}"


# --- (c): a live scrape ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scrape(server) -> str:
    """/metrics after a few requests: plain and streamed generations, and failed ones."""
    with httpx.Client(base_url=server.url, timeout=120) as client:
        chat = {"model": MODEL_NAME, "max_tokens": 4,
                "messages": [{"role": "user", "content": "Say hi."}]}
        ok = client.post("/v1/chat/completions", json=chat)
        assert ok.status_code == 200, ok.text
        with client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as stream:
            assert stream.status_code == 200
            events = parse_sse(stream.read().decode())
        assert events and events[-1][1] == "[DONE]"
        unknown = client.post("/v1/chat/completions", json={**chat, "model": "no-such-model"})
        assert unknown.status_code == 404, unknown.text
        invalid = client.post("/v1/completions", json={"model": MODEL_NAME, "prompt": "x",
                                                       "max_tokens": -1})
        assert invalid.status_code == 400, invalid.text
        response = client.get("/metrics")
        assert response.status_code == 200
        return response.text


def families(scrape_text: str) -> dict[str, str]:
    """{family name: type} from the # TYPE lines."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r"^# TYPE (\S+) (\S+)$", scrape_text, re.MULTILINE)}


def series_names(family_types: dict[str, str]) -> set[str]:
    """The names a query can select: a histogram's _bucket, _sum and _count, not its own."""
    names = set()
    for name, kind in family_types.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "summary":
            names |= {name, f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def test_scrape_passes_promtool_check_metrics(promtool, scrape):
    # Exit status 1 is a format error (the exposition cannot be parsed): always a failure.
    # 3 means lint findings only (naming and HELP conventions, printed one per line as
    # "name finding"): those are failures unless accepted above.
    result = run_promtool(promtool, "check", "metrics", stdin=scrape)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode in (0, 3), f"promtool check metrics exited {result.returncode}:\n{output}"
    findings = set()
    for line in output.splitlines():
        name, _, finding = line.strip().partition(" ")
        findings.add((name, finding))
    unexpected = findings - ACCEPTED_LINT
    assert not unexpected, f"promtool lint findings: {sorted(unexpected)}"
    assert result.returncode == 0 or findings, output


def test_scrape_counts_the_requests_sent(scrape):
    text = scrape
    assert re.search(r'^llamaserve_requests_total\{[^}]*status="404"[^}]*\} [1-9]', text, re.M)
    assert re.search(r'^llamaserve_requests_total\{[^}]*status="400"[^}]*\} [1-9]', text, re.M)
    assert re.search(r'^llamaserve_time_to_first_token_seconds_count\{model="%s"\} [1-9]'
                     % re.escape(MODEL_NAME), text, re.M)


STEP_DURATIONS = REPO_ROOT / "bench" / "serve" / "step_durations.py"


def test_step_durations_between_two_scrapes(make_server, tmp_path):
    """bench/serve/step_durations.py on two live scrapes of a server of its own around one
    generation: its first step computes the prompt alone, the next ones decode it alone
    (max_tokens 6: five decodes)."""
    server = make_server("--max-running", "2")
    with httpx.Client(base_url=server.url, timeout=120) as client:
        before = client.get("/metrics").text
        request = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 6,
                   "temperature": 0, "ignore_eos": True}
        response = client.post("/v1/completions", json=request)
        assert response.status_code == 200, response.text
        after = client.get("/metrics").text
    (tmp_path / "before.txt").write_text(before)
    (tmp_path / "after.txt").write_text(after)
    out = tmp_path / "steps.md"
    result = subprocess.run(["python3", str(STEP_DURATIONS), str(tmp_path / "before.txt"),
                             str(tmp_path / "after.txt"), "--markdown", str(out)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1]
            for line in out.read_text().splitlines() if line.startswith("| ") and "---" not in line}
    assert int(rows["prompt"][0]) == 1, out.read_text()
    assert int(rows["decode"][0]) == 5, out.read_text()
    assert int(rows["mixed"][0]) == 0, out.read_text()
    # Nothing scraped yet counts from the server's start; not a llamaserve scrape is an error.
    missing = subprocess.run(["python3", str(STEP_DURATIONS), str(tmp_path / "none.txt"),
                              str(tmp_path / "after.txt")], capture_output=True, text=True,
                             timeout=60, check=False)
    assert missing.returncode == 0, missing.stderr
    (tmp_path / "other.txt").write_text("# TYPE x counter\nx 1\n")
    other = subprocess.run(["python3", str(STEP_DURATIONS), str(tmp_path / "before.txt"),
                            str(tmp_path / "other.txt")], capture_output=True, text=True,
                           timeout=60, check=False)
    assert other.returncode == 1 and "no llamaserve_engine_step_duration_seconds" in other.stderr


def test_step_duration_quantiles_interpolate_within_buckets():
    import importlib.util
    spec = importlib.util.spec_from_file_location("step_durations", STEP_DURATIONS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # 10 steps: 4 up to 2 ms, 6 more up to 4 ms, none past.
    buckets = {0.001: 0, 0.002: 4, 0.004: 10, float("inf"): 10}
    assert module.quantile(0.5, buckets) == pytest.approx(0.002 + 0.002 * (5 - 4) / 6)
    assert module.quantile(0.2, buckets) == pytest.approx(0.001 + 0.001 * (2 - 0) / 4)
    # A rank in the +Inf bucket gives the largest finite bound.
    assert module.quantile(0.99, {0.001: 1, 0.002: 1, float("inf"): 3}) == pytest.approx(0.002)


def test_build_info_when_present(scrape):
    # llamaserve_build_info is optional here: servers built before it was added lack it. Where
    # it is exported it must be a gauge of value 1 naming the version, commit and CUDA.
    types = families(scrape)
    if "llamaserve_build_info" not in types:
        pytest.skip("this server does not export llamaserve_build_info")
    assert types["llamaserve_build_info"] == "gauge"
    samples = re.findall(r"^llamaserve_build_info\{([^}]*)\} (\S+)$", scrape, re.MULTILINE)
    assert len(samples) == 1, samples
    labels, value = samples[0]
    assert float(value) == 1
    for label in ("version", "commit", "cuda"):
        assert re.search(rf'\b{label}="', labels), labels


# --- (d): the dashboard, and the names both files use ----------------------------------------


def gpu_metric_names() -> set[str]:
    """GPU gauges as the server source registers them."""
    names = set()
    for path in GPU_METRIC_SOURCES:
        names |= set(re.findall(r'add_gauge_family\(\s*\*registry_,\s*"(llamaserve_gpu_\w+)"',
                                path.read_text()))
    assert len(names) >= 4, f"no GPU metric registrations found in {GPU_METRIC_SOURCES}"
    return names


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dashboard: dict) -> list[dict]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # those of collapsed rows
    return panels


def dashboard_exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    exprs = [(f"panel {p['title']!r}", t["expr"]) for p in dashboard_panels(dashboard)
             for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
        assert match, f"variable {variable['name']}: expected label_values(selector, label)"
        exprs.append((f"variable {variable['name']}", match.group(1)))
    return exprs


def rule_exprs() -> tuple[list[tuple[str, str]], set[str]]:
    """(where, PromQL) for every rule, and the names the recording rules define."""
    exprs, recorded = [], set()
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            exprs.append((rule.get("alert") or rule["record"], rule["expr"]))
            if "record" in rule:
                recorded.add(rule["record"])
    return exprs, recorded


def test_dashboard_structure():
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["model"]["type"] == "query"
    assert "label_values(" in json.dumps(variables["model"]["query"])
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == "${datasource}", variable["name"]
    panels = dashboard_panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    graphs = [p for p in panels if p["type"] != "row"]  # rows only group panels
    assert len(graphs) >= 10
    for panel in graphs:
        where = f"panel {panel.get('title')!r}"
        assert panel.get("datasource", {}).get("uid") == "${datasource}", where
        assert panel.get("targets"), f"{where} has no targets"
        for target in panel["targets"]:
            assert target.get("expr", "").strip(), f"{where} has an empty query"
            assert target.get("datasource", panel["datasource"]) == panel["datasource"], where
    titles = " ".join(p["title"].lower() for p in graphs)
    for topic in ("time to first token", "inter-token", "end-to-end", "tokens/s", "status",
                  "queue", "running", "kv cache", "429", "5xx", "gpu memory",
                  "gpu utilization", "model state", "model loads"):
        assert topic in titles, f"no panel about {topic}"


def test_dashboard_queries_parse(promtool, tmp_path):
    # Grafana's variables replaced by values, every query goes through promtool's PromQL
    # parser as a recording rule.
    substitutions = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}
    rules = []
    for i, (where, expr) in enumerate(dashboard_exprs(load_dashboard())):
        for variable, value in substitutions.items():
            expr = expr.replace(variable, value)
        expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
        rules.append({"record": f"dashboard_query_{i}", "expr": expr})
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_and_rules_use_only_exported_metrics(scrape):
    exported = series_names(families(scrape))
    gpu = gpu_metric_names()
    rules, recorded = rule_exprs()
    known = exported | gpu | recorded | PROMETHEUS_SERIES
    unknown = []
    used = set()
    for where, expr in dashboard_exprs(load_dashboard()) + rules:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        used |= names
        unknown += [f"{where}: {name}" for name in sorted(names - known)]
    assert not unknown, "metrics the server does not export:\n" + "\n".join(unknown)
    assert {"llamaserve_time_to_first_token_seconds_bucket", "llamaserve_queue_length",
            "llamaserve_kv_blocks_used", "llamaserve_gpu_memory_used_bytes", "up"} <= used
