"""publish.yml's `chart` job, run here for real: its own `run:` lines (read from the file) in a
clean copy of the checkout with a fresh venv first on PATH, against an open registry on
127.0.0.1 (docker-registry; no Docker engine needed). The chart must land in the same registry
namespace as the images, as an OCI Helm chart the real helm pulls and renders, and be signed by
its digest (cosign is a stand-in that records its arguments, as in test_publish.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import httpx
import pytest
import yaml

from tests.chart.helm import IN_CI, install
from tests.conftest import ROOT
from tests.images import workflow
from tests.images.test_publish import COSIGN, PUBLISH, clean_checkout

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # a fresh venv with the build extra (~40 s), helm, a registry
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    if not shutil.which("docker-registry"):
        why = "docker-registry is not installed (scripts/setup-host.sh installs it)"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    port = _free_port()
    env = dict(os.environ, KIMI_REGISTRY_DIR=str(tmp_path_factory.mktemp("chart-registry")))
    subprocess.run([str(ROOT / "scripts" / "registry.sh"), "start", str(port)], check=True, env=env)
    yield f"127.0.0.1:{port}"
    subprocess.run([str(ROOT / "scripts" / "registry.sh"), "stop", str(port)], env=env)


@pytest.fixture(scope="module")
def pushed(registry, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("publish-chart")
    clone = clean_checkout(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (tmp / "bin").mkdir()
    (tmp / "bin" / "cosign").write_text(COSIGN)
    (tmp / "bin" / "cosign").chmod(0o755)
    env = {"PATH": f"{venv / 'bin'}:{tmp / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp / "home"), "CI": "true",
           "COSIGN_RECORD": str(tmp / "cosign"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "KIMI_HELM_DIR": str(ROOT / ".cache" / "helm")}  # the helm the tests installed (a runner fetches it)
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    (tmp / "home").mkdir()
    namespace = "kimi-publish"
    contexts = {"inputs": {"registry": f"{registry}/{namespace}", "targets": ""},
                "github": {"actor": "publish-test"}, "secrets": {"GITHUB_TOKEN": "unused"}}
    seen = []

    def actions(job, step):
        action = step["uses"].split("@")[0]
        if action not in ("actions/checkout", "actions/setup-python", "docker/login-action", "sigstore/cosign-installer"):
            pytest.fail(f"publish.yml's chart job uses {action}: teach tests/images/test_publish_chart.py what it does")
        seen.append((action, step["with"]))

    install()  # into .cache/helm, which the job's scripts/helm.sh then reuses
    job = workflow.Job(workflow.load(PUBLISH), "chart", clone, env, contexts, tmp, actions)
    job.run()
    return {"job": job, "registry": registry, "repo": f"{namespace}/kimi-serve", "tmp": tmp, "seen": seen,
            "signed": [p.read_text().split() for p in sorted(tmp.glob("cosign.*"))]}


def test_chart_is_an_oci_helm_chart_in_the_images_registry(pushed):
    version = yaml.safe_load((ROOT / "charts" / "kimi-serve" / "Chart.yaml").read_text())["version"]
    with httpx.Client(base_url=f"http://{pushed['registry']}", timeout=30) as http:
        r = http.get(f"/v2/{pushed['repo']}/manifests/{version}",
                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        assert r.status_code == 200, r.text[:300]
        assert r.json()["config"]["mediaType"] == HELM_CONFIG
        digest = r.headers["Docker-Content-Digest"]
    assert pushed["job"].contexts["steps"]["push"]["outputs"]["digest"] == digest
    assert pushed["signed"] == [["sign", "--yes", f"{pushed['registry']}/{pushed['repo']}@{digest}"]]
    logins = [w for a, w in pushed["seen"] if a == "docker/login-action"]
    assert [w["registry"] for w in logins] == [pushed["registry"]]


def test_the_pushed_chart_renders_with_the_real_helm(pushed):
    helm = install()
    done = subprocess.run([str(helm), "template", "kimi", f"oci://{pushed['registry']}/{pushed['repo']}", "--plain-http",
                           "--set", "settings.hardware=h200"], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(pushed["tmp"] / "home")})
    assert done.returncode == 0, done.stderr[-3000:]
    kinds = {d["kind"] for d in yaml.safe_load_all(done.stdout) if d}
    # (no Namespace: the release's own, which exists before the chart's pre-install check runs in it)
    assert {"Deployment", "Service", "NetworkPolicy", "PersistentVolumeClaim"} <= kinds and "Namespace" not in kinds
