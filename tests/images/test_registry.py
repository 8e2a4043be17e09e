"""Push to a local registry (127.0.0.1) and check tags, labels and digests over its HTTP API;
`lock` resolves base tags to digests through the registry."""

import json
import re
import shutil

import httpx
import pytest

from buildsys import targets
from tests.conftest import base_hosts, run_build_py

pytestmark = [pytest.mark.slow, pytest.mark.docker]
DATA = targets.load()
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
# one amd64 and one arm64 target, chosen from the data
PUSHED = sorted({t.platform: n for n, t in reversed(list(DATA.targets.items()))}.values())


def _untag(client, tag):
    try:
        client.images.remove(tag, noprune=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def test_push_tags_labels_digests(built_images, docker_client, standin_overrides, local_registry, tmp_path):
    registry = f"{local_registry}/kimi"
    out = tmp_path / "push.json"
    proc = run_build_py("build", *PUSHED, "--push", "--registry", registry, *standin_overrides, "--json-out", str(out))
    assert "push" in proc.stderr and "pushed" in proc.stderr  # per-layer progress and a digest line
    results = {r["target"]: r for r in json.loads(out.read_text())}
    http = httpx.Client(base_url=f"http://{local_registry}", timeout=30)
    assert f"kimi/{DATA.image}" in http.get("/v2/_catalog").json()["repositories"]
    tags = set(http.get(f"/v2/kimi/{DATA.image}/tags/list").json()["tags"])
    for name in PUSHED:
        t = DATA.targets[name]
        assert {name, f"{DATA.vllm_version}-{name}"} <= tags
        digests = set()
        for tag in (name, f"{DATA.vllm_version}-{name}"):
            r = http.get(f"/v2/kimi/{DATA.image}/manifests/{tag}", headers={"Accept": MANIFEST})
            assert r.status_code == 200
            digests.add(r.headers["Docker-Content-Digest"])
        assert digests == {results[name]["digest"]}, "every tag names the digest build.py reported"
        manifest = http.get(f"/v2/kimi/{DATA.image}/manifests/{results[name]['digest']}", headers={"Accept": MANIFEST}).json()
        config = http.get(f"/v2/kimi/{DATA.image}/blobs/{manifest['config']['digest']}").json()
        for tag in results[name]["tags"]:  # leave no registry tags behind in the engine
            _untag(docker_client, tag)
        assert config["architecture"] == t.arch
        labels = config["config"]["Labels"]
        assert labels[f"{DATA.label_prefix}.target"] == name
        assert labels[f"{DATA.label_prefix}.serves"] == ",".join(t.serves)
        assert re.fullmatch(r"[0-9a-f]{40}|unknown", labels["org.opencontainers.image.revision"])
        for key in ("source", "version", "created", "base.name", "base.digest"):
            assert labels[f"org.opencontainers.image.{key}"]
        assert config["config"]["Entrypoint"] == ["kimi-serve"]


def test_lock_resolves_tags_through_the_registry(docker_client, standin_images, local_registry, tmp_path):
    # Publish the stand-ins as "the bases" in the local registry, then lock a copy of the data.
    raw = targets.TARGETS_FILE.read_text()
    path = tmp_path / "targets.yaml"
    expected = {}
    # Every base tag lock resolves: the default release's bases and each other release's.
    wanted = [(kind, base) for kind, base in DATA.bases.items()]
    wanted += [(f"{v} {kind}", base) for v in DATA.other_releases for kind, base in DATA.for_release(v).bases.items()]
    for key, base in wanted:
        repo = f"{local_registry}/{base.name.split('/', 1)[1]}"
        img = docker_client.images.get(standin_images["amd64"])
        img.tag(repo, base.tag)
        for line in docker_client.api.push(repo, tag=base.tag, stream=True, decode=True):
            assert "error" not in line, line
        r = httpx.head(f"http://{local_registry}/v2/{repo.split('/', 1)[1]}/manifests/{base.tag}",
                       headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
        expected[key] = r.headers["Docker-Content-Digest"]
        _untag(docker_client, f"{repo}:{base.tag}")
    for host in base_hosts(DATA):  # docker.io (vLLM's GPU images), public.ecr.aws (its CPU image)
        raw = raw.replace(f"{host}/", f"{local_registry}/")
    path.write_text(raw)
    proc = run_build_py("--targets-file", str(path), "lock")
    assert json.loads(proc.stdout) == expected
    locked = targets.load(path)
    assert {k: b.digest for k, b in locked.bases.items()} == {k: d for k, d in expected.items() if " " not in k}
    for version in locked.other_releases:
        assert {f"{version} {k}": b.digest for k, b in locked.for_release(version).bases.items()} == \
            {k: d for k, d in expected.items() if k.startswith(f"{version} ")}
    assert all(b.ref.endswith("@" + b.digest) for b in locked.bases.values())
    shutil.copy(path, tmp_path / "again.yaml")
    run_build_py("--targets-file", str(tmp_path / "again.yaml"), "lock")  # idempotent
    assert (tmp_path / "again.yaml").read_text() == path.read_text()
