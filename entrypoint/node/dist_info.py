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
import sys
from typing import Optional

from entrypoint.core import limits

MAX_METADATA_BYTES = limits.MAX_NODE_FILE_BYTES  # vLLM's METADATA is ~20 KB
_ASK_IMPORTLIB = object()  # the plain reading does not apply: importlib.metadata answers


def _normalized(name: str) -> str:
    """PEP 503 normalization with dashes as underscores (importlib.metadata's Prepared.normalize)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _only_path_finder() -> bool:
    """No finder but the standard one (importlib.machinery.PathFinder) finds distributions."""
    from importlib.machinery import PathFinder

    return all(finder is PathFinder or not hasattr(finder, "find_distributions") for finder in sys.meta_path)


def _header_version(path: str):
    """The one-line `Version:` header of the metadata file at `path`, or _ASK_IMPORTLIB."""
    from entrypoint.core.files import read_capped

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


class NotInstalled(LookupError):
    """No distribution of that name (importlib.metadata's PackageNotFoundError)."""


def _plain_version(name: str):
    """The version the plain reading finds, NotInstalled when no sys.path directory holds the
    distribution, or _ASK_IMPORTLIB."""
    if not _only_path_finder():
        return _ASK_IMPORTLIB
    wanted = _normalized(name)
    for root in sys.path:
        if not isinstance(root, str) or os.path.basename(root).lower().endswith(".egg"):
            return _ASK_IMPORTLIB
        try:
            children = os.listdir(root or ".")
        except OSError:
            if os.path.lexists(root or "."):
                return _ASK_IMPORTLIB  # a zip file, or a directory it cannot list
            continue
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")) and \
                    _normalized(low.rpartition(".")[0].partition("-")[0]) == wanted:
                metadata = os.path.join(root, child, "METADATA")
                return _header_version(metadata) if os.path.isfile(metadata) else _ASK_IMPORTLIB
    return NotInstalled


def version(name: str) -> Optional[str]:
    """importlib.metadata.version(name); NotInstalled where it raises PackageNotFoundError."""
    found = _plain_version(name)
    if found is NotInstalled:
        raise NotInstalled(name)
    if found is not _ASK_IMPORTLIB:
        return found
    import importlib.metadata as metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise NotInstalled(name) from None
