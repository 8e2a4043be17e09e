"""Docker engine operations: build, tag, push, inspect, run (docker SDK for Python)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

try:  # the docker SDK is the `build` extra: list, matrix and bake work without it
    import docker
    import docker.errors
except ImportError:  # pragma: no cover - exercised by tests/images/test_build_py_messages.py
    docker = None

from buildsys import ROOT, context, log
from buildsys.targets import Targets

SDK_MISSING = ("the Docker SDK for Python is not installed; install the build extra: "
               "pip install -e '.[build]' (in a virtual environment)")
# Failures of a pull that mean "the registry cannot be reached", as the engine words them.
UNREACHABLE = ("no such host", "dial tcp", "connection refused", "i/o timeout", "network is unreachable",
               "TLS handshake timeout", "Client.Timeout", "server misbehaving", "temporary failure in name resolution")


class BuildError(Exception):
    pass


def client():
    if docker is None:
        raise BuildError(SDK_MISSING)
    try:
        c = docker.from_env(timeout=600)
        c.ping()
        return c
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine"
        raise BuildError(f"no Docker engine reachable ({exc}); start one (scripts/docker-engine.sh start)") from exc


def parse_overrides(items) -> Dict[str, str]:
    out = {}
    for item in items or ():
        kind, sep, image = item.partition("=")
        if not sep or not kind or not image:
            raise BuildError(f"--base-override {item!r}: expected KIND=IMAGE (IMAGE may contain {{arch}})")
        out[kind] = image
    return out


def base_ref(data: Targets, target: str, overrides: Dict[str, str]) -> str:
    t = data.targets[target]
    if t.base in overrides:
        return overrides[t.base].replace("{arch}", t.arch)
    return data.bases[t.base].ref


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return ""


def source_info() -> dict:
    """Revision, short sha and created time (the commit's time: reproducible)."""
    return {
        "revision": git("rev-parse", "HEAD") or "unknown",
        "short": git("rev-parse", "--short", "HEAD"),
        "created": git("log", "-1", "--format=%cI") or "1970-01-01T00:00:00+00:00",
    }


def python_of(cli: docker.DockerClient, data: Targets, target: str, image: str, overridden: bool) -> str:
    """The base's python3 version: from data, or (for an override) asked once and cached."""
    t = data.targets[target]
    if not overridden:
        return data.bases[t.base].python
    img = cli.images.get(image)
    cache = context.CACHE / "python-versions.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    if img.id not in known:
        out = cli.containers.run(image, ["-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 entrypoint="python3", network_mode="none", remove=True, platform=t.platform)
        known[img.id] = out.decode().strip()
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, indent=1))
    return known[img.id]


def labels(data: Targets, target: str, base: str, base_digest: str, src: dict) -> Dict[str, str]:
    from buildsys.targets import RECIPES_DIR
    from entrypoint.core.data.recipe import load_catalog_from

    t = data.targets[target]
    p = data.label_prefix
    catalog = load_catalog_from(RECIPES_DIR)
    recipes = data.recipes_served(target, catalog)
    titles = ", ".join(catalog.recipes[r].title for r in recipes)
    out = {
        "org.opencontainers.image.title": data.image,
        "org.opencontainers.image.description": f"{titles} on vLLM {data.vllm_version} for {', '.join(t.serves)}",
        "org.opencontainers.image.source": data.source,
        "org.opencontainers.image.revision": src["revision"],
        "org.opencontainers.image.version": f"{data.vllm_version}-{target}",
        "org.opencontainers.image.created": src["created"],
        "org.opencontainers.image.base.name": base,
        "org.opencontainers.image.base.digest": base_digest,
        "org.opencontainers.image.licenses": "Apache-2.0",
        f"{p}.target": target,
        f"{p}.hardware": t.hardware,
        f"{p}.serves": ",".join(t.serves),
        f"{p}.vllm-version": data.vllm_version,
        f"{p}.recipes": ",".join(recipes),
        f"{p}.platform": t.platform,
    }
    if not base_digest:  # an unpinned base (no `build.py lock` yet) in a bake file: unknown until built
        del out["org.opencontainers.image.base.digest"]
    return out


def build_args(data: Targets, target: str, base: str) -> Dict[str, str]:
    t = data.targets[target]
    stack = data.bases[t.base]
    return {"BASE_IMAGE": base, "KIMI_IMAGE_TARGET": target, "KIMI_IMAGE_HARDWARE": t.hardware,
            "KIMI_IMAGE_SERVES": ",".join(t.serves), "KIMI_VLLM_VERSION": data.vllm_version,
            "KIMI_IMAGE_CUDA": stack.cuda or "", "KIMI_IMAGE_ROCM": stack.rocm or "",
            "KIMI_DOWNLOAD_KERNELS": "1" if has_download_kernels(data) else "0"}


def has_download_kernels(data: Targets) -> bool:
    """Whether the release the images are built on has `vllm download-kernels` (images/targets.yaml)."""
    from entrypoint.core.data.versions import version_key

    return version_key(data.vllm_version) >= version_key(data.download_kernels_from)


@dataclass
class Result:
    target: str
    image_id: str = ""
    tags: List[str] = field(default_factory=list)
    seconds: float = 0.0
    size: int = 0
    added: int = 0
    steps_cached: int = 0
    steps_run: int = 0
    digest: str = ""
    ok: bool = False
    error: str = ""


def base_digest(cli, image: str) -> str:
    """The base's digest: pinned in the reference, else the digest its own repository served it
    under, else (a local-only image, e.g. a stand-in) its image id. A digest the image got from
    being pushed elsewhere is not its identity, so it is never taken."""
    if "@" in image:
        return image.split("@", 1)[1]
    try:
        img = cli.images.get(image)
    except docker.errors.ImageNotFound:
        return ""
    repo = split_ref(image)[0]
    for rd in img.attrs.get("RepoDigests") or []:
        if rd.split("@", 1)[0] == repo:
            return rd.split("@", 1)[1]
    return img.id


def build(cli, data: Targets, target: str, registry: Optional[str], overrides: Dict[str, str],
          nocache: bool = False) -> Result:
    t = data.targets[target]
    res = Result(target)
    started = time.monotonic()
    base = base_ref(data, target, overrides)
    overridden = t.base in overrides
    try:
        cli.images.get(base)
    except docker.errors.ImageNotFound:
        log(f"[{target}] pulling base {base} ({t.platform})")
        pull(cli, base, t.platform)
    python = python_of(cli, data, target, base, overridden)
    ctx = context.prepare(t.platform, python, data.loader_packages)
    src = source_info()
    res.tags = data.tags(target, registry, src["short"] or None)
    log(f"[{target}] building FROM {base} ({t.platform}, python {python}) -> {res.tags[0]}")
    stream = cli.api.build(path=str(ctx), dockerfile="Dockerfile", tag=res.tags[0], rm=True, forcerm=True,
                           pull=False, nocache=nocache, decode=True, platform=t.platform, buildargs=build_args(data, target, base),
                           labels=labels(data, target, base, base_digest(cli, base), src))
    image_id = ""
    for chunk in stream:
        if "error" in chunk:
            raise BuildError(f"[{target}] build failed: {chunk['error'].strip()}")
        text = chunk.get("stream", "")
        for line in text.splitlines():
            line = line.rstrip()
            if line.startswith("Step ") and " : LABEL " not in line:
                log(f"[{target}] {line}")
            elif "Using cache" in line:
                res.steps_cached += 1
            elif line.startswith(" ---> Running in"):
                res.steps_run += 1
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    if not image_id:
        raise BuildError(f"[{target}] build produced no image")
    img = cli.images.get(image_id)
    for tag in res.tags[1:]:
        repo, _, tg = tag.rpartition(":")
        img.tag(repo, tg)
    res.image_id = image_id
    res.size = img.attrs["Size"]
    res.added = res.size - cli.images.get(base).attrs["Size"]
    res.seconds = time.monotonic() - started
    res.ok = True
    log(f"[{target}] built {image_id[7:19]} in {res.seconds:.1f}s: {mb(res.size)} ({mb(res.added)} over the base), "
        f"{res.steps_cached} steps from cache, {res.steps_run} run")
    return res


def pull(cli, ref: str, platform: str) -> None:
    repo, tag = split_ref(ref)
    try:
        for chunk in cli.api.pull(repo, tag=tag, platform=platform, stream=True, decode=True):
            _progress("pull", chunk)
    except (docker.errors.APIError, BuildError) as exc:
        text = str(getattr(exc, "explanation", None) or exc)
        if any(word.lower() in text.lower() for word in UNREACHABLE):
            raise BuildError(
                f"cannot pull the base {ref}: its registry cannot be reached ({text.strip()[-200:]}). "
                "Build from the stand-in bases instead: python build.py build TARGET $(python build.py standins) "
                "(or --base-override KIND=IMAGE with a base you have; docs/images.md)") from None
        raise BuildError(f"cannot pull the base {ref}: {text.strip()}") from None


def split_ref(ref: str):
    if "@" in ref:
        name, digest = ref.split("@", 1)
        return name.rsplit(":", 1)[0] if ":" in name.split("/")[-1] else name, digest
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:
        return ref, "latest"
    return name, tag


_last: Dict[str, str] = {}


def _progress(what: str, chunk: dict) -> None:
    """Per-layer progress: one line per layer state change (and every ~25% of bytes)."""
    if "error" in chunk:
        raise BuildError(f"{what} failed: {chunk['error']}")
    layer, status = chunk.get("id", ""), chunk.get("status", "")
    detail = chunk.get("progressDetail") or {}
    cur, tot = detail.get("current"), detail.get("total")
    if cur and tot:
        quarter = f"{status}{int(4 * cur / tot)}"
        if _last.get(layer) == quarter:
            return
        _last[layer] = quarter
        log(f"  {what} {layer}: {status} {mb(cur)} / {mb(tot)}")
    elif status and _last.get(layer) != status:
        _last[layer] = status
        log(f"  {what} {layer + ': ' if layer else ''}{status}")


def push(cli, tags: List[str]) -> str:
    """Push every tag; returns the manifest digest (the same for all tags)."""
    digest = ""
    for tag in tags:
        repo, _, tg = tag.rpartition(":")
        log(f"pushing {tag}")
        for chunk in cli.api.push(repo, tag=tg, stream=True, decode=True):
            _progress("push", chunk)
            aux = chunk.get("aux") or {}
            if aux.get("Digest"):
                digest = aux["Digest"]
                log(f"  pushed {tag}: {digest} ({mb(aux.get('Size', 0))} manifest)")
    return digest


def registry_digest(cli, ref: str) -> str:
    """The digest a registry serves for name:tag (the manifest list's, for a multi-arch tag)."""
    return cli.images.get_registry_data(ref).id


def run(cli, image: str, command: List[str], platform: str, **kwargs):
    """Run a container to completion: (exit code, stdout, stderr)."""
    c = cli.containers.create(image, command, network_mode="none", platform=platform, **kwargs)
    try:
        c.start()
        code = c.wait(timeout=300)["StatusCode"]
        return code, c.logs(stdout=True, stderr=False).decode(), c.logs(stdout=False, stderr=True).decode()
    finally:
        c.remove(force=True)


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
