"""The publish pipeline, run here for real (docs/images.md, "Publishing").

publish.yml's own `run:` lines (read from the file, not copied) run in a clean copy of the
checkout with a fresh venv first on PATH, as on a runner: the matrix job, then the image job for
the first matrix entry of each platform (`representatives` says why). What its
actions do is done here by the same means where this machine can:
`docker/bake-action` -> every bake target built with BuildKit (the engine's own, Docker 20.10;
no buildx here) from the bake file's own context, Dockerfile, platform, network, build args,
labels and tags, arm64 under qemu, and pushed to a registry on 127.0.0.1; its `metadata` output
is given in the shape buildx writes (`containerimage.digest`, `image.name`). `cosign` is a
stand-in that records its arguments (signing needs GitHub's OIDC token). The one declared
difference from a release: the bases are the stand-ins (KIMI_BUILD_BASE_OVERRIDE), since the
vLLM bases cannot be pulled here. Then tags, labels, platforms and digests are checked over the
registry's HTTP API, and against `build.py list`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from buildsys import standin
from tests.conftest import ROOT, base_hosts
from tests.images import workflow

pytestmark = [pytest.mark.slow, pytest.mark.docker]
PUBLISH = ROOT / ".github" / "workflows" / "publish.yml"
LOCK = ROOT / ".github" / "workflows" / "lock-bases.yml"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
# bake target attributes this test carries into the BuildKit build; `attest` cannot run here
BAKE_KEYS = {"inherits", "context", "dockerfile", "platforms", "args", "labels", "tags", "pull", "network", "attest"}
COSIGN = """#!/bin/sh
# stand-in for cosign v3's CLI (`cosign sign --yes IMAGE@DIGEST`): records its arguments
printf '%s\\n' "$@" > "$COSIGN_RECORD.$$"
"""


def _bake_target(bake: dict, name: str) -> dict:
    out = {}
    for parent in bake["target"][name].get("inherits", []):
        out.update(_bake_target(bake, parent))
    out.update(bake["target"][name])
    return out


def _docker(*args, **kw):
    proc = subprocess.run([standin.BUILDKIT_DOCKER, *args], capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, DOCKER_BUILDKIT="1"), **kw)
    assert proc.returncode == 0, f"docker {' '.join(args[:3])} ...:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


class Actions:
    """What each action of publish.yml does, done here (or said why not, in docs/images.md)."""

    def __init__(self, http: httpx.Client, repo_path: str):
        self.http, self.repo_path, self.seen, self.built = http, repo_path, [], {}
        self.seconds = {}

    def __call__(self, job: workflow.Job, step: dict):
        action = step["uses"].split("@")[0]
        self.seen.append((action, step["with"]))
        handler = {"actions/checkout": None,             # the job runs in a clean copy of the checkout
                   "actions/setup-python": None,         # a fresh venv is first on PATH
                   "docker/setup-qemu-action": self.qemu,
                   "docker/setup-buildx-action": None,   # BuildKit is the engine's own here
                   "docker/login-action": None,          # the registry on 127.0.0.1 is open
                   "docker/bake-action": self.bake,
                   "sigstore/cosign-installer": None}    # the stand-in cosign is on PATH
        if action not in handler:
            pytest.fail(f"publish.yml uses {action}: teach tests/images/test_publish.py what it does")
        return handler[action] and handler[action](job, step["with"])

    def qemu(self, job, with_):
        assert Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists(), "arm64 emulation (scripts/setup-host.sh)"

    def bake(self, job, with_):
        assert with_["source"] == "." and str(with_["push"]).lower() == "true"
        bake = json.loads((job.cwd / with_["files"]).read_text())
        metadata = {}
        for name in with_["targets"].split(","):
            t = self.built[name] = _bake_target(bake, name)
            assert set(t) <= BAKE_KEYS, f"bake attributes this test does not build with: {set(t) - BAKE_KEYS}"
            argv = ["build", "--progress", "plain", "--platform", ",".join(t["platforms"]),
                    "--network", t.get("network", "default"), "-f", str(Path(t["context"], t["dockerfile"]))]
            argv += ["--pull"] if t.get("pull") else []
            argv += [x for k, v in t["args"].items() for x in ("--build-arg", f"{k}={v}")]
            argv += [x for k, v in t["labels"].items() for x in ("--label", f"{k}={v}")]
            argv += [x for tag in t["tags"] for x in ("-t", tag)]
            started = time.monotonic()
            _docker(*argv, t["context"])
            for tag in t["tags"]:
                _docker("push", tag)
            self.seconds[name] = time.monotonic() - started
            _docker("rmi", *t["tags"])  # the smoke step must pull what the registry serves
            r = self.http.head(f"/v2/{self.repo_path}/manifests/{t['tags'][0].rsplit(':', 1)[1]}",
                               headers={"Accept": MANIFEST})
            metadata[name] = {"containerimage.digest": r.headers["Docker-Content-Digest"], "image.name": ",".join(t["tags"])}
        return {"metadata": json.dumps(metadata)}


@pytest.fixture(scope="module")
def runner(standin_overrides, tmp_path_factory):
    """A clean copy of the checkout (a git work tree, as actions/checkout lays it), a fresh venv
    first on PATH (actions/setup-python: nothing installed yet) and the stand-in cosign."""
    tmp = tmp_path_factory.mktemp("publish")
    clone = clean_checkout(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "cosign").write_text(COSIGN)
    (bin_dir / "cosign").chmod(0o755)
    overrides = " ".join(a for a in standin_overrides if a != "--base-override")
    env = {"PATH": f"{venv / 'bin'}:{bin_dir}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", "/root"),
           "CI": "true", "KIMI_BUILD_BASE_OVERRIDE": overrides, "KIMI_BUILD_CACHE": str(tmp / "build-cache"),
           "COSIGN_RECORD": str(tmp / "cosign"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("PIP_", "DOCKER_HOST"))})
    return {"tmp": tmp, "clone": clone, "venv": venv, "env": env}


def clean_checkout(tmp: Path) -> Path:
    """A clean copy of the checkout's files (tracked and not ignored) as a fresh git work tree."""
    clone = tmp / "checkout"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, clone / rel)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "publish test"]):
        _git(clone, *cmd)
    return clone


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=publish-test", "-c", "user.email=publish-test@localhost", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def representatives() -> list:
    """The matrix entries whose image job runs here: the first target of each platform (amd64, and arm64
    under qemu). The image job is one job run per target with TARGET set: the same steps for every
    target, whose bake target differs only in its base, build arguments, labels and tags, which `build.py
    list` and the bake file give for every target, and which the image tests build from the stand-ins
    and check for every target (tests/images/test_images.py): a job beyond one per platform runs no step
    the first does not run (issue 51: the full run is CPU-bound on two cores)."""
    from buildsys import targets

    first: dict = {}
    for name, target in targets.load().targets.items():
        first.setdefault(target.platform, name)
    return list(first.values())


@pytest.fixture(scope="module")
def published(runner, local_registry):
    tmp, clone, venv, env = runner["tmp"], runner["clone"], runner["venv"], runner["env"]
    namespace = "kimi-publish"
    spec = workflow.load(PUBLISH)
    contexts = {"inputs": {"registry": f"{local_registry}/{namespace}", "targets": ""},
                "github": {"actor": "publish-test"}, "secrets": {"GITHUB_TOKEN": "unused"}}
    http = httpx.Client(base_url=f"http://{local_registry}", timeout=60)
    actions = Actions(http, f"{namespace}/kimi")

    matrix_job = workflow.Job(spec, "matrix", clone, env, contexts, tmp, actions)
    outputs = matrix_job.run()
    assert spec["jobs"]["image"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    matrix = json.loads(outputs["matrix"])
    jobs = {}
    ran = representatives()
    for entry in matrix["include"]:
        if entry["target"] not in ran:
            continue
        job = workflow.Job(spec, "image", clone, env, {**contexts, "matrix": entry, "needs": {"matrix": {"outputs": outputs}}},
                           tmp, actions)
        job.run()
        jobs[entry["target"]] = job
    totals = {"bake-action (BuildKit build + push)": sum(actions.seconds.values())}
    for job in [matrix_job, *jobs.values()]:
        for step, proc in job.log:
            totals[step] = totals.get(step, 0) + proc.seconds
    sys.stderr.write("publish.yml run here, seconds per step (all jobs): "
                     + ", ".join(f"{k}: {v:.0f}" for k, v in totals.items()) + "\n")
    signed = [p.read_text().split() for p in sorted(tmp.glob("cosign.*"))]
    listed = subprocess.run([str(venv / "bin" / "python"), "build.py", "list", "--format", "json", "--registry",
                             f"{local_registry}/{namespace}"], cwd=clone, capture_output=True, text=True, check=True, env=env)
    head = _git(clone, "rev-parse", "HEAD").strip()
    yield {"matrix": matrix, "jobs": jobs, "signed": signed, "list": json.loads(listed.stdout), "bake": actions.built,
           "http": http, "repo": f"{namespace}/kimi", "registry": local_registry, "actions": actions.seen,
           "head": head}
    http.close()


def _manifest(http, repo, ref):
    r = http.get(f"/v2/{repo}/manifests/{ref}", headers={"Accept": MANIFEST})
    assert r.status_code == 200, (ref, r.status_code, r.text[:300])
    return r.headers["Docker-Content-Digest"], r.json()


def test_the_matrix_job_gives_every_target(published):
    from buildsys import targets

    data = targets.load()
    assert [e["target"] for e in published["matrix"]["include"]] == list(data.targets)
    ran = set(published["jobs"])
    assert ran == set(representatives()) and len(ran) < len(data.targets)
    assert {data.targets[t].platform for t in ran} == {t.platform for t in data.targets.values()}, \
        "every platform is built and pushed"


def test_each_job_pushes_its_target_with_every_tag_list_shows(published):
    http, repo = published["http"], published["repo"]
    served = set(http.get(f"/v2/{repo}/tags/list").json()["tags"])
    listed = {row["target"]: row["tags"] for row in published["list"]}
    for name in published["jobs"]:
        tags = published["bake"][name]["tags"]
        assert tags == listed[name], "build.py list shows the tags the publish job pushes"
        assert {t.rsplit(":", 1)[1] for t in tags} <= served
        assert f"{published['head'][:7]}-{name}" in {t.rsplit(":", 1)[1] for t in tags}


# Build arguments that switch a build step (images/Dockerfile: `vllm download-kernels` where the
# base's release has it) and are not baked into the image's environment.
BUILD_STEP_ARGS = {"KIMI_DOWNLOAD_KERNELS"}


def test_tags_name_one_digest_with_the_bake_files_platform_labels_and_args(published):
    http, repo = published["http"], published["repo"]
    metadata = {}
    for job in published["jobs"].values():
        metadata.update(json.loads(job.contexts["steps"]["bake"]["outputs"]["metadata"]))
    for name in published["jobs"]:
        t = published["bake"][name]
        digests = {_manifest(http, repo, tag.rsplit(":", 1)[1])[0] for tag in t["tags"]}
        assert digests == {metadata[name]["containerimage.digest"]}, "every tag names the one pushed digest"
        _, manifest = _manifest(http, repo, metadata[name]["containerimage.digest"])
        config = http.get(f"/v2/{repo}/blobs/{manifest['config']['digest']}").json()
        assert f"{config['os']}/{config['architecture']}" == t["platforms"][0]
        labels = config["config"]["Labels"]
        assert {k: labels.get(k) for k in t["labels"]} == t["labels"]
        assert labels["org.opencontainers.image.revision"] == published["head"]
        env = dict(e.split("=", 1) for e in config["config"]["Env"])
        baked = {k: v for k, v in t["args"].items() if k.startswith("KIMI_") and k not in BUILD_STEP_ARGS}
        assert {k: env.get(k) for k in baked} == baked
        assert not BUILD_STEP_ARGS & set(env), "a build step's switch is not the image's env"


def test_the_smoke_step_pulled_and_passed_every_image(published):
    for job in published["jobs"].values():
        smoke = next(proc for step, proc in job.log if step.startswith("Smoke"))
        assert f"pulling {published['registry']}" in smoke.stderr and "FAIL" not in smoke.stderr, smoke.stderr[-2000:]


def test_the_sign_step_signs_each_pushed_digest(published):
    expected = []
    for name, job in published["jobs"].items():
        meta = json.loads(job.contexts["steps"]["bake"]["outputs"]["metadata"])[name]
        expected.append(["sign", "--yes", f"{published['registry']}/{published['repo']}@{meta['containerimage.digest']}"])
    assert sorted(published["signed"]) == sorted(expected)


def test_the_login_goes_to_the_registry_host(published):
    logins = [w for action, w in published["actions"] if action == "docker/login-action"]
    assert logins and {w["registry"] for w in logins} == {published["registry"]}


def test_lock_bases_proposes_the_registrys_digests(runner, published, docker_client, standin_images, local_registry):
    """lock-bases.yml's own run: lines resolve the bases (here: in the local registry) and hand
    create-pull-request a change to images/targets.yaml alone, with the digests in its body."""
    from buildsys import targets

    clone, path = runner["clone"], runner["clone"] / "images" / "targets.yaml"
    data = targets.load(path)
    expected = {}  # keyed as `build.py lock` prints: the default release's kinds, then "<release> <kind>"
    for version in data.releases:
        for kind, base in data.for_release(version).bases.items():
            repo = f"{local_registry}/{base.name.split('/', 1)[1]}"
            docker_client.images.get(standin_images["amd64"]).tag(repo, base.tag)
            for line in docker_client.api.push(repo, tag=base.tag, stream=True, decode=True):
                assert "error" not in line, line
            docker_client.images.remove(f"{repo}:{base.tag}", noprune=True)
            r = published["http"].head(f"/v2/{repo.split('/', 1)[1]}/manifests/{base.tag}", headers={"Accept": MANIFEST})
            expected[kind if version == data.vllm_version else f"{version} {kind}"] = r.headers["Docker-Content-Digest"]
    text = path.read_text()
    for host in base_hosts(data):  # docker.io (vLLM's GPU images), public.ecr.aws (its CPU image)
        text = text.replace(f"{host}/", f"{local_registry}/")
    path.write_text(text)
    _git(clone, "commit", "-q", "-am", "bases from the local registry")
    proposals = []

    def actions(job, step):
        action = step["uses"].split("@")[0]
        if action == "peter-evans/create-pull-request":
            proposals.append(step["with"])
        else:
            assert action in ("actions/checkout", "actions/setup-python"), action

    contexts = {"secrets": {}, "github": {"token": "unused"}}
    workflow.Job(workflow.load(LOCK), "lock", clone, runner["env"], contexts, runner["tmp"], actions).run()
    assert _git(clone, "status", "--porcelain", "--untracked-files=no").split() == ["M", "images/targets.yaml"]
    assert {k: b.digest for k, b in targets.load(path).bases.items()} == {k: d for k, d in expected.items() if " " not in k}
    [pr] = proposals
    assert pr["add-paths"] == "images/targets.yaml"
    assert json.loads(pr["body"].split("```json", 1)[1].split("```", 1)[0]) == expected
