"""What preflight needs to know about this node, gathered once. Tests build a NodeFacts by hand."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from entrypoint.core.base import limits
from entrypoint.core.base.files import read_text_capped
from entrypoint.node import cache
from entrypoint.node.detect import FIRMWARE_READERS, Detection, detect_node

if TYPE_CHECKING:  # core.compose.loading reads the recipe data: not imported by the node's facts at start-up
    from entrypoint.core.compose.loading import StorageFacts


@dataclass(frozen=True)
class CacheFacts:
    path: str
    writable: bool
    mount_point: str  # the mount that holds it ("/" = the container's own layer)
    fs_type: str
    free_bytes: Optional[int]
    weights_dir: Optional[str]  # where the model's weights already are, if they are
    problem: str = ""  # the cache path is a file, or cannot be reached by this user
    model_problem: str = ""  # KIMI_MODEL is a local path this user cannot read
    weights_problem: str = ""  # a weights file is a FIFO, a device or a link loop (vLLM would hang on it)


@dataclass(frozen=True)
class NodeFacts:
    detection: Detection
    all_gpus: tuple  # every GPU the winning probe saw, before visibility variables
    arch: str  # the image platform's name (recipes/hardware.yaml `architectures`) or what the kernel says
    shm_bytes: Optional[int]
    devices: frozenset  # the GPU device nodes present (of those the brands in the data name)
    firmware: tuple = ()  # versions of the firmware the hardware's rule names, one per GPU
    firmware_source: str = ""
    cache: Optional[CacheFacts] = None
    storage: Optional[StorageFacts] = None  # the weights' volume, when probed


def _statvfs(path: str):
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def mount_of(path: str, proc_root: str) -> tuple:
    """(mount point, fs type) of the longest mount prefix of `path` in /proc/mounts."""
    best = ("/", "")
    try:
        lines = read_text_capped(Path(proc_root, "mounts"), limits.MAX_NODE_FILE_BYTES).splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
            best = (point, parts[2])
    return best


def existing_parent(path: str) -> str:
    """The deepest existing directory on the way to `path` that this user can reach."""
    p = Path(path)
    while p != p.parent:
        try:
            p.stat()
            return str(p)
        except OSError:  # missing, or behind a directory this user cannot search
            p = p.parent
    return str(p)


def cache_facts(cache_dir: str, model: str, environ: Mapping[str, str], proc_root: str = "/proc") -> CacheFacts:
    base = existing_parent(cache_dir)
    point, fs_type = mount_of(os.path.realpath(base), proc_root)
    weights, weights_problem = cache.weights_search(model, cache_dir, environ)
    local_model = model.startswith(("/", "."))
    model_problem = cache.path_problem(model) if local_model else ""
    if local_model and not model_problem and not os.path.exists(model):
        model_problem = f"{model} does not exist on this node"
    return CacheFacts(cache_dir, os.access(base, os.W_OK), point, fs_type, _statvfs(base)[1],
                      str(weights) if weights else None, cache.path_problem(cache_dir), model_problem,
                      weights_problem)


def gather(environ: Mapping[str, str], cache_dir: str, model: str, architectures: Mapping[str, str],
           device_nodes: Sequence[str], firmware: Optional[str] = None, root: str = "/",
           proc_root: str = "/proc") -> NodeFacts:
    detection = detect_node(environ, root)
    winner = [p for p in detection.probes if p.source == detection.source]
    versions, source = FIRMWARE_READERS[firmware](environ, root) if firmware else ([], "")
    machine = platform.machine()
    return NodeFacts(
        detection=detection,
        all_gpus=winner[0].gpus if winner else (),
        arch=architectures.get(machine.lower(), machine),
        shm_bytes=_statvfs(os.path.join(root, "dev/shm"))[0],
        devices=frozenset(d for d in device_nodes if os.path.exists(os.path.join(root, d.lstrip("/")))),
        firmware=tuple(versions), firmware_source=source,
        cache=cache_facts(cache_dir, model, environ, proc_root),
    )
