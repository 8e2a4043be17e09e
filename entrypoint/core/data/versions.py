"""The one reading of a release number and of an image digest (a leaf: imports nothing of the
project), for the recipe schema, the version choice, vLLM's grammar files and the build system."""

from __future__ import annotations

import re

RELEASE = r"\d+\.\d+\.\d+"  # a vLLM release as the data writes it: 0.19.1
DIGEST = r"sha256:[0-9a-f]{64}"  # an image's content digest


def version_key(version: str) -> tuple:
    """(major, minor, patch) of `0.19.1`, `v0.19.1`, `0.19.1rc1+cpu`; ValueError when it has none."""
    match = re.match(r"\s*v?(\d+)\.(\d+)\.(\d+)", str(version))
    if not match:
        raise ValueError(f"{version!r} is not a release number like 0.19.1")
    return tuple(int(part) for part in match.groups())


def stack_key(version: str) -> tuple:
    """(major, minor, patch) of a GPU stack's version: CUDA `13.0` or `13.0.2`, ROCm `6.4.1` (a
    missing patch is 0); ValueError when it has none."""
    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not match:
        raise ValueError(f"{version!r} is not a version like 13.0.2")
    return tuple(int(part or 0) for part in match.groups())


def stack_shortfall(need, have) -> "tuple | None":
    """The first stack (`cuda`, `rocm`) that `need` (a recipe's min_stack) asks for and `have`
    ({stack: version or None}) names below it, as (stack, wanted, had); None when every named one
    is enough. A version that cannot be read counts as below."""
    for stack in ("cuda", "rocm"):
        want, got = getattr(need, stack), have.get(stack)
        if not want or not got:
            continue
        try:
            if stack_key(got) >= stack_key(want):
                continue
        except ValueError:
            pass
        return stack, want, got
    return None


def release_refusal(model, version: str) -> "str | None":
    """Why a recipe's model (a ModelInfo record: `min_vllm_version`, `refused_vllm_versions`) does
    not run on vLLM `version`, as a clause after "the recipe" ("needs vLLM >= 0.25.0", "refuses vLLM
    0.12.0: <the recipe's reason>"); None when it runs there. The one rule for the start's version
    check and the image labels' list of recipes."""
    if version_key(version) < version_key(model.min_vllm_version):
        return f"needs vLLM >= {model.min_vllm_version}"
    for refused, why in model.refused_vllm_versions.items():
        if version_key(refused) == version_key(version):
            return f"refuses vLLM {refused}: {why}"
    return None


def release_window(model) -> str:
    """The releases a recipe's model runs on, in words: `>= 0.11.2` or `>= 0.11.2, not 0.12.0`."""
    refused = sorted(model.refused_vllm_versions, key=version_key)
    return f">= {model.min_vllm_version}" + (f", not {', '.join(refused)}" if refused else "")


def is_digest(text: str) -> bool:
    return re.fullmatch(DIGEST, text or "") is not None
