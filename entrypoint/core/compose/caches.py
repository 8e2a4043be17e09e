"""Where one engine's compile caches go (recipes/serving.yaml `compile_caches`, docs/day2.md): a
key of everything that makes a compiled artefact unusable elsewhere, and the variables that point
vLLM, TorchInductor, Triton, FlashInfer, DeepGEMM, the CUDA driver and MIOpen under it.

Pure: the exec edge (node/cache.py) turns it into directories of KIMI_CACHE_DIR.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Optional

from entrypoint.core.compose.plan import Process

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class CompileCaches:
    root: str  # the folder of every key, under KIMI_CACHE_DIR (`compile`)
    key: str  # <vllm>-<stack>-<hardware>/<model>/<layout>: a relative path
    env: tuple  # ((variable, subdirectory of the key), ...) for this launch's GPU brand

    def paths(self, cache_dir: str) -> dict:
        base = f"{cache_dir.rstrip('/')}/{self.root}/{self.key}"
        return {name: f"{base}/{subdir}" for name, subdir in self.env}


def _part(text: str) -> str:
    """A path component that names `text`: readable where it can be, never `..` or a slash."""
    if _REPO_ID.fullmatch(text) and "--" not in text and len(text) <= 80:
        return text.replace("/", "--")  # a hub repo id, as the hub's own cache names it
    safe = _UNSAFE.sub("--", text.strip("/")).strip(".-") or "none"
    if safe != text or len(safe) > 80:  # a local path, odd characters: add a digest so two never meet
        safe = f"{safe[:60]}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    return safe


def layout(proc: Process) -> str:
    """This engine's parallel layout, from its effective vLLM arguments (parsed once, in the plan):
    TP, PP, DP (local), DCP, EP."""
    args = proc.engine
    parts = [f"tp{args.tensor_parallel}", f"pp{args.pipeline_parallel}", f"dp{args.data_parallel}"]
    local = args.number("data_parallel_size_local", 0)
    if local:
        parts.append(f"dpl{local}")
    dcp = args.number("decode_context_parallel_size", 1)
    if dcp > 1:
        parts.append(f"dcp{dcp}")
    if args.get("enable_expert_parallel"):
        parts.append("ep")
    return "-".join(parts)


def compile_caches(catalog, sel, plan, proc: Process, stack: str = "") -> Optional[CompileCaches]:
    """The compile caches of `proc` (a vLLM engine) of `plan`, or None for a process that compiles
    nothing (the router, the KV helpers). `stack`: the image's CUDA or ROCm (`cu13.0`, `rocm7.0`)."""
    if not proc.is_engine or not proc.local_gpus:
        return None
    data = catalog.serving.compile_caches
    brand = catalog.hardware[plan.hardware].brand
    head = "-".join(p for p in (f"vllm{sel.vllm_version}", stack, plan.hardware) if p)
    model = _part(plan.model) + (f"@{_part(sel.revision)}" if sel.revision else "")
    env = tuple((v.name, v.subdir) for v in data.env if v.brands is None or brand in v.brands)
    return CompileCaches(root=data.dir, key=f"{_part(head)}/{model}/{layout(proc)}", env=env)
