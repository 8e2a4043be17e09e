"""The cloud platforms' data (recipes/platforms.yaml), validated, and the questions asked of it:
which platform ids exist, what a platform offers for a hardware, what kind of source a model is.

Pure apart from reading the data file once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from entrypoint.core import errors as E
from entrypoint.core.errors import KimiError, unknown_value
from entrypoint.core.recipe import RecipeDataError, default_recipes_dir

FILE = "platforms.yaml"


@lru_cache(maxsize=2)
def _load(path: str):
    import yaml
    from pydantic import ValidationError

    from entrypoint.core.platform_schema import PlatformsFile

    try:
        with open(path, "rb") as fh:
            return PlatformsFile(**yaml.safe_load(fh))
    except (OSError, yaml.YAMLError, ValidationError, TypeError) as exc:
        raise RecipeDataError(f"platform data {path} is invalid: {exc}") from exc


def load_platforms(directory: Optional[Path] = None):
    return _load(str((directory or default_recipes_dir()) / FILE))


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
    offered = ", ".join(f"{hw} ({o.label()})" for hw, o in found.offerings.items())
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
