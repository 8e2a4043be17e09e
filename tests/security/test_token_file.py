"""The Hugging Face token reaches vLLM as a file, never as an environment variable: where each
rendering mounts the secret is where HF_TOKEN_PATH points, and the real huggingface_hub (2.4.0,
in the scanner's venv: tests/security/scanner.py) reads the token from that file, and finds none,
without failing, when the optional Secret is absent."""

from __future__ import annotations

import os
import subprocess

import pytest

from entrypoint.render import k8s_pod
from tests.deploy.shapes import COMPOSE, K8S, documents
from tests.security import scanner

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # the scanner's venv (installed once)

TOKEN = "hf_rendered_token_file_test"


def _mounted_path(fmt: str) -> str:
    """HF_TOKEN_PATH of the rendering, checked against where it mounts the secret."""
    if fmt == "compose":
        (doc,) = documents("compose", COMPOSE["single-h200"])
        (path,) = {svc["environment"]["HF_TOKEN_PATH"] for svc in doc["services"].values()}  # download, server
        assert all(svc["secrets"] == [{"source": "hf_token", "target": path}] for svc in doc["services"].values())
        return path
    (dep,) = [d for d in documents("k8s", K8S["single-h200"]) if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    path = next(e["value"] for e in container["env"] if e["name"] == "HF_TOKEN_PATH")
    mount = next(m for m in container["volumeMounts"] if m["name"] == k8s_pod.TOKEN_VOLUME)
    secret = next(v for v in pod["volumes"] if v["name"] == k8s_pod.TOKEN_VOLUME)["secret"]
    (item,) = secret["items"]
    assert path == f"{mount['mountPath']}/{item['path']}" and item["key"] == "HF_TOKEN" and mount["readOnly"]
    return path


def _token_seen(token_path, home) -> str:
    env = {"PATH": os.environ["PATH"], "HF_HOME": str(home), "HF_TOKEN_PATH": str(token_path),
           "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"}
    proc = subprocess.run([str(scanner.python()), "-c", "import huggingface_hub as h; print(h.get_token())"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("fmt", ["k8s", "compose"])
def test_huggingface_hub_reads_the_token_where_the_rendering_mounts_it(fmt, tmp_path):
    root = tmp_path / "container"  # the container's filesystem
    path = _mounted_path(fmt)
    secret = root / path.lstrip("/")
    assert _token_seen(secret, tmp_path / "hf") == "None"  # no Secret: no token, no failure
    secret.parent.mkdir(parents=True)
    secret.write_text(TOKEN + "\n")  # `kubectl create secret --from-file` keeps a trailing newline
    assert _token_seen(secret, tmp_path / "hf") == TOKEN


def test_a_refused_download_counts_the_token_file_as_a_given_token(tmp_path):
    """`kimi-serve download` under a rendering (token as a file, no HF_TOKEN) says a token was
    given when the hub refuses it, rather than that none was set."""
    errors = pytest.importorskip("huggingface_hub.errors")
    httpx = pytest.importorskip("httpx")
    from entrypoint.core.compose.weights import Source
    from entrypoint.node.weights import user_error

    source = Source(repo_id="moonshotai/Kimi-K2.5", revision="main", purpose="model")
    refused = httpx.Response(403, request=httpx.Request("GET", "https://huggingface.co/api/models/x"))
    token = tmp_path / "hf_token"
    token.write_text(TOKEN + "\n")
    with_file = user_error(errors.GatedRepoError("gated", response=refused), source, {"HF_TOKEN_PATH": str(token)})
    assert "a token is given" in with_file.message and TOKEN not in with_file.message
    without = user_error(errors.GatedRepoError("gated", response=refused), source, {"HF_TOKEN_PATH": str(tmp_path / "missing")})
    assert "HF_TOKEN is not set" in without.message
