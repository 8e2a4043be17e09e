"""The cloud platforms' data (recipes/platforms.yaml, validated and cached with the recipe data) and
the questions asked of it: which platform ids exist, what a platform offers for a hardware, what
kind of source a model is. Reads only the (cached) recipe data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError, unknown_value
from entrypoint.core.data.recipe import load_catalog

def load_platforms():
    """The validated platform data (part of the cached catalog: no pydantic or yaml at start)."""
    return load_catalog().platforms


def label(offer) -> str:
    """What an offering asks the platform for, in its own words."""
    return offer.instance_type or offer.machine_type or offer.accelerators or ""


def variables(found) -> list:
    """Every platform variable the entrypoint reads for platform `found`."""
    names = list(found.detect.env) + [e for b in found.contract.values() for e in b.env]
    names += [r.env for r in found.routes.values() if r.env]
    names += [found.model_dir_env] if found.model_dir_env else []
    if found.cluster:
        names += [found.cluster.nodes_env, found.cluster.rank_env, found.cluster.head_list_env]
    return list(dict.fromkeys(names))


def platform(pid: str, setting: str = "KIMI_PLATFORM"):
    data = load_platforms()
    if pid not in data.platforms:
        raise unknown_value(setting, pid, data.platforms)
    return data.platforms[pid]


def offering(pid: str, hardware: str):
    """What platform `pid` offers for `hardware`, or a clear error listing what it offers."""
    found = platform(pid)
    if hardware in found.offerings:
        return found.offerings[hardware]
    offered = ", ".join(f"{hw} ({label(o)})" for hw, o in found.offerings.items())
    raise KimiError(E.UNSUPPORTED_COMBINATION, f"{found.display_name} has no offering for {hardware} in the "
                    f"project's platform data. It offers: {offered}. Set KIMI_HARDWARE to one of those, or deploy "
                    f"{hardware} another way (kimi-serve plan --format k8s).")


@dataclass(frozen=True)
class ModelSource:
    kind: str  # "object" | "path" | "hub"
    scheme: Optional[str] = None  # the object store's scheme (s3, gs) for kind "object"

    @property
    def is_object_store(self) -> bool:
        return self.kind == "object"


def model_source(model: str) -> ModelSource:
    scheme, sep, _ = model.partition("://")
    if sep:
        schemes = load_platforms().object_storage.schemes
        if scheme not in schemes:
            raise KimiError(E.INVALID_VALUE, f"KIMI_MODEL={model!r}: {scheme}:// is not a model source vLLM can "
                            f"stream from. Use one of {', '.join(s + '://' for s in schemes)}, a local path or a "
                            "Hugging Face repo id.")
        return ModelSource("object", scheme)
    if model.startswith(("/", "./", "../")):
        return ModelSource("path")
    return ModelSource("hub")
