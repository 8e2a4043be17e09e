"""The Hugging Face cache on disk, read without the hub library (preflight stays light and offline).

Layout (huggingface_hub 2.4.0): `<hub>/models--<org>--<name>/` holds `refs/<revision>` (the
commit a branch or tag pointed at), `snapshots/<commit>/<path>` (links into `blobs/`),
`blobs/<etag>` (the sha256 of an LFS file, the git blob sha1 of a small one; a download in
progress is `<etag>.<random>.incomplete`) and `trees/<commit>.json`: the hub's listing of that
commit as the library keeps it after listing it (format_version 1: path -> size, blob_id,
lfs_sha256, lfs_size). That cached listing is what makes `download --verify` and preflight's
completeness check work with no network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from entrypoint.core.base import limits
from entrypoint.core.base.files import read_capped, walk_files
from entrypoint.core.compose.weights import Source, select_files
from entrypoint.node.cache import effective

TREE_FORMAT_VERSION = 1
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MAX_REF_BYTES = 256
_MAX_TREE_BYTES = 64 * 1024 * 1024  # a listing of ~100k files; a larger file is not one of ours


@dataclass(frozen=True)
class Entry:
    size: int
    blob_id: str  # git blob sha1 (of the LFS pointer for an LFS file)
    lfs_sha256: Optional[str] = None

    @property
    def etag(self) -> str:
        """The blob's file name in the cache: what the hub sends as the file's ETag."""
        return self.lfs_sha256 or self.blob_id


@dataclass(frozen=True)
class LocalState:
    """What the cache holds of one source: `expected` None when no listing is cached."""

    source: Source
    commit: Optional[str]
    expected: Optional[Dict[str, Entry]]
    present: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    partial_bytes: int = 0  # bytes in *.incomplete files of the repo

    @property
    def complete(self) -> bool:
        return self.expected is not None and not self.missing

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in (self.expected or {}).values())

    @property
    def missing_bytes(self) -> int:
        return sum(self.expected[p].size for p in self.missing) if self.expected else 0


def hub_dir(cache_dir: str, environ: Mapping[str, str]) -> Path:
    """The hub cache the launch uses (HF_HUB_CACHE, else HF_HOME/hub, under KIMI_CACHE_DIR)."""
    env = effective(cache_dir, environ)
    return Path(env.get("HF_HUB_CACHE") or Path(env["HF_HOME"]) / "hub")


def repo_dir(hub: Path, repo_id: str) -> Path:
    return hub / ("models--" + repo_id.replace("/", "--"))


def _read_bounded(path: Path, limit: int) -> Optional[bytes]:
    try:
        data = read_capped(path, limit)
    except OSError:
        return None
    return None if len(data) > limit else data


def commit_for(repo: Path, revision: str) -> Optional[str]:
    if _COMMIT.match(revision):
        return revision
    data = _read_bounded(repo / "refs" / revision, _MAX_REF_BYTES)
    text = data.decode("ascii", "replace").strip() if data else ""
    return text if _COMMIT.match(text) else None


def read_tree(repo: Path, commit: str) -> Optional[Dict[str, Entry]]:
    data = _read_bounded(repo / "trees" / f"{commit}.json", _MAX_TREE_BYTES)
    if data is None:
        return None
    try:
        doc = json.loads(data)
        if doc.get("format_version") != TREE_FORMAT_VERSION:
            return None
        return {path: Entry(int(info["size"]), str(info["blob_id"]), info.get("lfs_sha256"))
                for path, info in doc["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def snapshot_file(repo: Path, commit: str, path: str) -> Path:
    return repo / "snapshots" / commit / path


def has_file(repo: Path, commit: str, path: str, entry: Entry) -> bool:
    """The snapshot has the file at its listed size (its content is `--verify`'s business)."""
    try:
        return snapshot_file(repo, commit, path).stat().st_size == entry.size
    except OSError:
        return False


def partial_bytes(repo: Path) -> int:
    total = 0
    for part in (repo / "blobs").glob("*.incomplete"):
        try:
            total += part.stat().st_size
        except OSError:
            pass
    return total


def local_state(hub: Path, source: Source, rules, expected: Optional[Dict[str, Entry]] = None,
                commit: Optional[str] = None) -> LocalState:
    """The cache's state for `source`; `expected`/`commit` when the caller has the hub's listing."""
    repo = repo_dir(hub, source.repo_id)
    commit = commit or commit_for(repo, source.revision)
    if expected is None and commit is not None:
        tree = read_tree(repo, commit)
        if tree is not None:
            expected = {p: tree[p] for p in select_files(tree, rules, source.weights)}
    if expected is None or commit is None:
        return LocalState(source, commit, None, partial_bytes=partial_bytes(repo))
    present = [p for p, e in expected.items() if has_file(repo, commit, p, e)]
    missing = [p for p in expected if p not in set(present)]
    return LocalState(source, commit, expected, present, missing, partial_bytes(repo))


def any_weights(hub: Path, source: Source) -> bool:
    """Some safetensors of the repo are in the cache (any snapshot): for a cache filled by
    another tool, whose listing this cannot check."""
    base = repo_dir(hub, source.repo_id) / "snapshots"
    return base.is_dir() and bool(walk_files(base, ".safetensors", limits.MAX_WEIGHTS_ENTRIES, limits.MAX_WEIGHTS_DEPTH,
                                             limits.WEIGHTS_SEARCH_DEADLINE_S, first=1).files)
