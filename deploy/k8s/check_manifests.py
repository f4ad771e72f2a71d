#!/usr/bin/env python3
"""Checks of the rendered Kubernetes manifests that a schema cannot make.

Usage: check_manifests.py OVERLAY_NAME RENDERED.yaml [OVERLAY_NAME RENDERED.yaml ...]

For each rendered overlay (kubectl kustomize output):
  * ServiceMonitor objects against a small JSON schema of their own
    (schemas/servicemonitor-v1.json: the fields used here, typos refused), since
    kubernetes-validate has no schema for the Prometheus Operator's CRDs;
  * references resolve: ConfigMaps and PVCs named by volumes, the HPA's target, Services
    selecting the workload's pods, the ServiceMonitor selecting a Service and naming its port,
    probe ports naming container ports;
  * the server's settings: every key of the mounted config.json is a `serve` flag, every
    per-model key a model key, every LLAMASERVE_* variable one of `serve` or `tp-worker`
    (taken from the binary's --help when LLAMASERVE_BIN is set, else docs/configuration.md);
  * shutdown: terminationGracePeriodSeconds > preStop sleep + drain-timeout-ms + 2 s;
  * probes: startup /health, readiness /ready, liveness /health (HTTP workloads);
  * GPUs: the nvidia.com/gpu limit matches the layout (device list, tp, GPUS_PER_POD);
  * the HPA's metric is one the server exports (src/server/metrics.cc) and the one the
    Prometheus adapter rule (prometheus-adapter/rules.yaml) serves.
Prints one line per check; exits 1 if any failed.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

HERE = Path(__file__).resolve().parent
# The repository (for metrics.cc and the docs): LLAMASERVE_ROOT, else the one holding this file.
ROOT = Path(os.environ.get("LLAMASERVE_ROOT") or HERE.parents[1])
failures: list[str] = []
checks = 0


def check(ok: bool, what: str) -> bool:
    global checks
    checks += 1
    if ok:
        print(f"  ok    {what}")
    else:
        print(f"  FAIL  {what}")
        failures.append(what)
    return ok


def help_text(args: list[str]) -> str | None:
    binary = os.environ.get("LLAMASERVE_BIN")
    if not binary or not os.access(binary, os.X_OK):
        return None
    return subprocess.run([binary, *args, "--help"], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def known_settings() -> tuple[set[str], set[str], set[str], str]:
    """(serve flag names, per-model keys, LLAMASERVE_* variables, where they came from)."""
    serve, worker = help_text(["serve"]), help_text(["tp-worker"])
    if serve is not None and worker is not None:
        flags = set(re.findall(r"--([a-z][a-z0-9-]+)", serve)) - {"help"}
        env = set(re.findall(r"Env:(LLAMASERVE_[A-Z0-9_]+)", serve + worker))
        m = re.search(r"\(keys: ([a-z0-9 -]+)\)", serve)
        model_keys = set(m.group(1).split()) if m else set()
        source = f"{os.environ['LLAMASERVE_BIN']} --help"
    else:
        doc = (ROOT / "docs/configuration.md").read_text()
        flags = set(re.findall(r"^\| (?:`-\w`, )?`--([a-z][a-z0-9-]+)`", doc, re.M))
        flags |= set(re.findall(r"`--([a-z][a-z0-9-]+)`, `--[a-z0-9-]+` \|", doc))
        env = set(re.findall(r"`(LLAMASERVE_[A-Z0-9_]+)`", doc))
        model_keys = set()
        for row in re.findall(r"^\| (`[a-z-]+`(?:, `[a-z-]+`)*) \| ", doc, re.M):
            model_keys |= set(re.findall(r"`([a-z-]+)`", row))
        source = "docs/configuration.md"
    model_keys |= {"name", "path"}
    return flags, model_keys, env, source


def exported_metrics() -> set[str]:
    text = (ROOT / "src/server/metrics.cc").read_text()
    return set(re.findall(r'"(llamaserve_[a-z0-9_]+)"', text))


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def named(docs: list[dict], kind: str, name: str) -> dict | None:
    return next((d for d in by_kind(docs, kind) if d["metadata"]["name"] == name), None)


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def check_overlay(overlay: str, docs: list[dict]) -> None:
    flags, model_keys, env_names, source = known_settings()
    metrics = exported_metrics()

    # ServiceMonitor: our own schema.
    schema = json.loads((HERE / "schemas/servicemonitor-v1.json").read_text())
    for sm in by_kind(docs, "ServiceMonitor"):
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(sm), key=str)
        check(not errors, f"{overlay}: ServiceMonitor/{sm['metadata']['name']} matches "
              f"schemas/servicemonitor-v1.json" + "".join(f"\n        {e.message} at "
              f"{'/'.join(map(str, e.absolute_path))}" for e in errors))

    workloads = by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet")
    if not check(len(workloads) == 1, f"{overlay}: exactly one Deployment or StatefulSet "
                 f"(found {len(workloads)})"):
        return
    work = workloads[0]
    kind, name = work["kind"], work["metadata"]["name"]
    pod = work["spec"]["template"]
    spec = pod["spec"]
    labels = pod["metadata"].get("labels", {})
    check(selects(work["spec"]["selector"]["matchLabels"], labels),
          f"{overlay}: {kind}/{name} selector matches its pod labels")
    containers = spec["containers"]
    container = next((c for c in containers if c["name"] == "llamaserve"), None)
    if not check(container is not None, f"{overlay}: {kind}/{name} has a llamaserve container"):
        return
    env = env_of(container)
    port_names = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    check(port_names.get("http") == 8080, f"{overlay}: container port http is 8080")

    # Security: non-root, as the image's USER.
    sc = spec.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0,
          f"{overlay}: pod runs as non-root (runAsNonRoot, runAsUser {sc.get('runAsUser')})")

    # Volumes resolve.
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        check(mount["name"] in volumes, f"{overlay}: volumeMount {mount['name']} has a volume")
    for vname, volume in volumes.items():
        if "configMap" in volume:
            check(named(docs, "ConfigMap", volume["configMap"]["name"]) is not None,
                  f"{overlay}: volume {vname} -> ConfigMap {volume['configMap']['name']} exists")
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            check(named(docs, "PersistentVolumeClaim", claim) is not None,
                  f"{overlay}: volume {vname} -> PVC {claim} exists")
    models_mount = next((m for m in container.get("volumeMounts", [])
                         if m["mountPath"] == "/models"), None)
    check(models_mount is not None and models_mount.get("readOnly") is True,
          f"{overlay}: models mounted read-only on /models")

    # The server's config file and variables.
    config: dict = {}
    config_volume = next((volumes[m["name"]] for m in container.get("volumeMounts", [])
                          if m["mountPath"] == "/etc/llamaserve" and m["name"] in volumes), None)
    if config_volume and "configMap" in config_volume:
        cm = named(docs, "ConfigMap", config_volume["configMap"]["name"])
        if cm and check("config.json" in cm.get("data", {}),
                        f"{overlay}: the config ConfigMap holds config.json"):
            try:
                config = json.loads(cm["data"]["config.json"])
                check(isinstance(config, dict), f"{overlay}: config.json is a JSON object")
            except json.JSONDecodeError as e:
                check(False, f"{overlay}: config.json parses ({e})")
    args = container.get("args", []) + container.get("command", [])
    if kind == "Deployment":
        check("--config" in args and "/etc/llamaserve/config.json" in args,
              f"{overlay}: serve gets --config /etc/llamaserve/config.json")
    unknown = sorted(k for k in config if k != "models" and k not in flags)
    check(not unknown, f"{overlay}: config.json keys are serve flags ({source})"
          + (f": unknown {unknown}" if unknown else ""))
    for entry in config.get("models", []):
        bad = sorted(set(entry) - model_keys)
        check(not bad and str(entry.get("path", "")).startswith("/models/"),
              f"{overlay}: model {entry.get('name')}: known keys, file under /models/"
              + (f": unknown {bad}" if bad else ""))
    bad_env = sorted(k for k in env if k.startswith("LLAMASERVE_") and k not in env_names)
    check(not bad_env, f"{overlay}: LLAMASERVE_* variables exist ({source})"
          + (f": unknown {bad_env}" if bad_env else ""))

    # Shutdown: preStop + drain + 2 s (the final flush) must fit in the grace period.
    drain_ms = int(env.get("LLAMASERVE_DRAIN_TIMEOUT_MS") or config.get("drain-timeout-ms", 30000))
    check("drain-timeout-ms" in config or "LLAMASERVE_DRAIN_TIMEOUT_MS" in env,
          f"{overlay}: drain-timeout-ms set explicitly ({drain_ms} ms)")
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    sleep_s = pre_stop.get("sleep", {}).get("seconds", 0)
    check(sleep_s > 0, f"{overlay}: preStop sleeps ({sleep_s} s) before SIGTERM")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    need = sleep_s + drain_ms / 1000 + 2
    check(grace > need, f"{overlay}: terminationGracePeriodSeconds {grace} > preStop {sleep_s} s "
          f"+ drain {drain_ms / 1000:g} s + 2 s")

    # Probes.
    def probe(kind_: str) -> dict:
        return container.get(kind_, {})

    if kind == "Deployment":
        for probe_kind, path in (("startupProbe", "/health"), ("livenessProbe", "/health"),
                                 ("readinessProbe", "/ready")):
            get = probe(probe_kind).get("httpGet", {})
            check(get.get("path") == path and get.get("port") in port_names,
                  f"{overlay}: {probe_kind} GET {path} on a named container port")
    else:
        for probe_kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            check(bool(probe(probe_kind)), f"{overlay}: {probe_kind} set")

    # GPUs.
    gpus = int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
    device = str(config.get("device", env.get("LLAMASERVE_DEVICES", "cpu")))
    if kind == "StatefulSet":
        per_pod = int(env.get("GPUS_PER_POD", "0"))
        tp = int(env.get("LLAMASERVE_TP", "0"))
        replicas = work["spec"].get("replicas", 1)
        check(gpus == per_pod and gpus > 0, f"{overlay}: nvidia.com/gpu {gpus} = GPUS_PER_POD")
        check(tp == replicas * per_pod, f"{overlay}: LLAMASERVE_TP {tp} = replicas {replicas} "
              f"x GPUS_PER_POD {per_pod}")
        check(work["spec"].get("podManagementPolicy") == "Parallel",
              f"{overlay}: pods start in parallel (rank 0 waits for all)")
        svc = named(docs, "Service", work["spec"].get("serviceName", ""))
        check(svc is not None and svc["spec"].get("clusterIP") == "None"
              and svc["spec"].get("publishNotReadyAddresses") is True,
              f"{overlay}: headless Service {work['spec'].get('serviceName')} publishes "
              f"not-ready pods")
        coord = env.get("TP_COORDINATOR", "")
        check(coord == f"{name}-0.{work['spec'].get('serviceName')}:{config.get('tp-listen', 29500)}",
              f"{overlay}: TP_COORDINATOR {coord} is pod 0 under the headless Service")
    elif device == "cpu":
        check(gpus == 0 and not spec.get("tolerations"),
              f"{overlay}: CPU: no nvidia.com/gpu limit, no GPU toleration")
    else:
        devices = [d for d in device.split(",") if d]
        layout = int(config.get("tp", 1)) * int(config.get("pp", 1)) * int(config.get("replicas", 1))
        check(gpus == len(devices) == layout,
              f"{overlay}: nvidia.com/gpu {gpus} = devices {device} = tp x pp x replicas {layout}")

    # Services select the pods; the ServiceMonitor selects the Service.
    for svc in by_kind(docs, "Service"):
        sel = svc["spec"].get("selector", {})
        check(all(labels.get(k) == v for k, v in sel.items() if k != "statefulset.kubernetes.io/pod-name")
              and bool(sel), f"{overlay}: Service/{svc['metadata']['name']} selects the pods")
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            check(target in port_names or target in port_names.values(),
                  f"{overlay}: Service/{svc['metadata']['name']} port {port['name']} -> "
                  f"container port {target}")
    for sm in by_kind(docs, "ServiceMonitor"):
        sel = sm["spec"]["selector"].get("matchLabels", {})
        targets = [s for s in by_kind(docs, "Service")
                   if selects(sel, s["metadata"].get("labels", {}))]
        check(len(targets) >= 1, f"{overlay}: ServiceMonitor selects a Service")
        for ep in sm["spec"]["endpoints"]:
            check(any(ep.get("port") == p["name"] for s in targets for p in s["spec"]["ports"])
                  and ep.get("path") == "/metrics",
                  f"{overlay}: ServiceMonitor scrapes /metrics on Service port {ep.get('port')}")
    for pdb in by_kind(docs, "PodDisruptionBudget"):
        check(selects(pdb["spec"]["selector"]["matchLabels"], labels),
              f"{overlay}: PodDisruptionBudget selects the pods")

    # HPA: target, metric exported by the server and served by the adapter rule.
    rules_text = (HERE / "prometheus-adapter/rules.yaml").read_text()
    for hpa in by_kind(docs, "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        check(ref["kind"] == kind and ref["name"] == name,
              f"{overlay}: HPA scales {ref['kind']}/{ref['name']}")
        for metric in hpa["spec"].get("metrics", []):
            if metric["type"] != "Pods":
                continue
            mname = metric["pods"]["metric"]["name"]
            check(mname in metrics, f"{overlay}: HPA metric {mname} is exported "
                  f"(src/server/metrics.cc)")
            check(re.search(rf"\b{re.escape(mname)}\b", rules_text) is not None,
                  f"{overlay}: HPA metric {mname} has a Prometheus adapter rule")
    if kind == "StatefulSet":
        check(not by_kind(docs, "HorizontalPodAutoscaler"),
              f"{overlay}: no HPA on a fixed-size tensor-parallel group")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    for overlay, path in zip(argv[0::2], argv[1::2]):
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
        print(f"{overlay}: {len(docs)} objects")
        check_overlay(overlay, docs)
    print(f"check_manifests: {checks} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
