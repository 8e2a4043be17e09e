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


def is_digest(text: str) -> bool:
    return re.fullmatch(DIGEST, text or "") is not None
