"""The weights' volume on this node, for KIMI_LOAD_FORMAT=auto and the expected load time: its
file system type, whether GPUDirect Storage is usable, and a short sequential-read sample of one
weights file (bounded in bytes and time by core/base/limits.py; O_DIRECT where the file system allows
it, so the page cache does not flatter the figure).
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Mapping, Optional

from entrypoint.core.base import limits
from entrypoint.core.base.files import open_regular, walk_files
from entrypoint.core.compose.loading import StorageFacts
from entrypoint.node import cache
from entrypoint.node.facts import existing_parent, mount_of


def _sample_file(weights: Path) -> Optional[Path]:
    """The largest regular *.safetensors among the first LOAD_SAMPLE_FILES found under `weights`
    (a bounded search: core/base/files.walk_files; a FIFO or a device is never opened)."""
    walk = walk_files(weights, ".safetensors", limits.MAX_WEIGHTS_ENTRIES, limits.MAX_WEIGHTS_DEPTH,
                      limits.WEIGHTS_SEARCH_DEADLINE_S, first=limits.LOAD_SAMPLE_FILES)
    if not walk.files:
        return None
    return Path(max(walk.files, key=lambda found: found[1])[0])


def _open(path: Path):
    """(fd, direct): O_DIRECT when the file system takes it, else a plain read; a regular file
    only, opened without blocking (a FIFO put in place of a weights file is refused)."""
    flag = getattr(os, "O_DIRECT", 0)
    if flag:
        try:
            return open_regular(path, flag), True
        except OSError:  # O_DIRECT refused (tmpfs, some FUSE): a plain read (a FIFO is refused again)
            pass
    return open_regular(path), False


def sample_read(path: Path, max_bytes: int = limits.LOAD_SAMPLE_BYTES,
                deadline_s: float = limits.LOAD_SAMPLE_DEADLINE_S) -> tuple:
    """(bytes, seconds, direct, note): a sequential read from the file's start, stopped at
    `max_bytes` or `deadline_s`, whichever comes first."""
    block = limits.LOAD_SAMPLE_BLOCK
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT wants
    view = memoryview(buf)
    done, note = 0, ""
    try:
        fd, direct = _open(path)
    except OSError as exc:
        view.release()
        buf.close()
        return 0, 0.0, False, f"cannot read {path}: {exc.strerror or exc}"
    start = time.monotonic()
    try:
        while done < max_bytes:
            try:
                got = os.preadv(fd, [view[:block]], done)
            except OSError as exc:
                if direct and done == 0:  # O_DIRECT refused at read time (some FUSE/overlay): read plainly
                    os.close(fd)
                    fd, direct = open_regular(path), False
                    continue
                note = f"read stopped: {exc.strerror or exc}"
                break
            if got <= 0:
                note = "the file ended first"
                break
            done += got
            if time.monotonic() - start > deadline_s:
                note = f"stopped at the {deadline_s:.0f} s bound"
                break
        return done, time.monotonic() - start, direct, note
    finally:
        os.close(fd)
        view.release()
        buf.close()


def installed(loaders: Mapping) -> tuple:
    """The loader ids (recipes/loaders.yaml `loaders`) whose packages this Python has: the base
    image's Python is vLLM's, so what it finds is what vLLM can import."""
    def has(name: str) -> bool:
        try:
            metadata.distribution(name)
            return True
        except metadata.PackageNotFoundError:
            return False

    return tuple(lid for lid, loader in loaders.items() if all(has(p) for p in loader.packages))


def probe(model: str, cache_dir: str, environ: Mapping[str, str], data, sample: bool = True,
          proc_root: str = "/proc") -> StorageFacts:
    """Where the weights are (or will be), what holds them, how fast one file reads, and which
    loaders this node's Python can run (`data`: recipes/loaders.yaml, validated)."""
    return replace(_probe(model, cache_dir, environ, data.storage.gds_driver, sample, proc_root),
                   installed=installed(data.loaders))


def _probe(model: str, cache_dir: str, environ: Mapping[str, str], gds_driver: str, sample: bool,
           proc_root: str) -> StorageFacts:
    if "://" in model:
        return StorageFacts(object_store=True, note="the model is in object storage: nothing on the node to sample")
    weights = cache.weights_present(model, cache_dir, environ)
    local = model.startswith(("/", "."))
    target = str(weights) if weights else (model if local else cache_dir)
    base = os.path.realpath(existing_parent(target))
    _, fstype = mount_of(base, proc_root)
    gds = os.path.exists(gds_driver)
    if not sample:
        return StorageFacts(path=base, fstype=fstype, gds_driver=gds, note="no sample asked for")
    found = _sample_file(weights) if weights else None
    if found is None:
        return StorageFacts(path=base, fstype=fstype, gds_driver=gds,
                            note="no weights on the node yet: nothing to sample")
    n, seconds, direct, note = sample_read(found)
    return StorageFacts(path=str(found.parent), fstype=fstype, gds_driver=gds, sample_bytes=n, sample_s=seconds,
                        sample_direct=direct, note=note if n else (note or "the sample read nothing"))
