"""Stand-in vLLM base images for tests: debootstrap + python3 + images/standin/vllm.

Cached by content: the tag carries a hash of every input (the stand-in scripts, their
Dockerfile, the Debian release, the architecture and the package list), so a second call with
the same inputs finds the image in the engine and does nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from buildsys import ROOT, log

STANDIN_DIR = ROOT / "images" / "standin"
REPOSITORY = "kimi-standin/vllm-openai"
RELEASE = "bookworm"
PACKAGES = ("python3",)
HASH_LABEL = "org.kimi-serve.standin.hash"
# Docker 20.10's own client has BuildKit built in (needed for --platform FROM scratch builds).
BUILDKIT_DOCKER = os.environ.get("KIMI_BUILDKIT_DOCKER", "/usr/bin/docker")


def content_hash(release: str = RELEASE) -> str:
    """Hash of the inputs shared by all architectures (the tag adds the architecture)."""
    h = hashlib.sha256()
    for name in sorted(p.name for p in STANDIN_DIR.iterdir()):
        path = STANDIN_DIR / name
        h.update(name.encode() + b"\0")
        h.update((os.readlink(path) if path.is_symlink() else path.read_bytes().decode("latin-1")).encode("latin-1"))
    h.update(f"{release}|{','.join(PACKAGES)}".encode())
    return h.hexdigest()


def image_name(arch: str, release: str = RELEASE) -> str:
    return f"{REPOSITORY}:{content_hash(release)[:16]}-{arch}"


def image_exists(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def ensure(arch: str, release: str = RELEASE, workdir: Path | None = None) -> str:
    """Return the stand-in image for `arch` (amd64 | arm64), building it if not cached."""
    name = image_name(arch, release)
    if image_exists(name):
        log(f"stand-in {arch}: cached {name}")
        return name
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"kimi-standin-{arch}-", dir=workdir))
    try:
        rootfs = tmp / "rootfs"
        argv = ["debootstrap", f"--arch={arch}", "--variant=minbase", f"--include={','.join(PACKAGES)}", release, str(rootfs)]
        log(f"stand-in {arch}: {' '.join(argv)} (amd64 ~1 min, arm64 ~3 min emulated)")
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"debootstrap failed for {arch}:\n{proc.stdout[-3000:]}")
        ctx = tmp / "ctx"
        ctx.mkdir()
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(ctx / "rootfs.tar"), "."], check=True)
        shutil.rmtree(rootfs, ignore_errors=True)
        for path in STANDIN_DIR.iterdir():
            if path.is_symlink():
                os.symlink(os.readlink(path), ctx / path.name)
            else:
                shutil.copy2(path, ctx / path.name)
        env = dict(os.environ, DOCKER_BUILDKIT="1")
        build = [BUILDKIT_DOCKER, "build", "--platform", f"linux/{arch}", "--progress", "plain",
                 "--label", f"{HASH_LABEL}={content_hash(release)}-{arch}", "-t", name, str(ctx)]
        log(f"stand-in {arch}: {' '.join(build)}")
        subprocess.run(build, check=True, env=env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"stand-in {arch}: built {name} in {time.monotonic() - started:.0f}s")
    return name
