"""`kimi-serve download --verify`: the files in the cache against the hashes the hub publishes.

Each file vLLM reads must be in the snapshot at its listed size, with the LFS sha256 (large
files) or the git blob sha1 (small files) of the hub's listing. The listing comes from the hub,
or with HF_HUB_OFFLINE (or the hub out of reach) from the copy the hub library cached at
download time, so verification needs no network. `--repair` removes what failed, so that the
download that follows fetches it again.
"""

from __future__ import annotations

import os
import hashlib
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional

from entrypoint.core.base.errors import MISSING_SETTING, KimiError
from entrypoint.core.base.files import open_regular
from entrypoint.core.compose.weights import Source
from entrypoint.node.hub_cache import Entry, LocalState, local_state, repo_dir, snapshot_file
from entrypoint.node.progress import Progress
from entrypoint.node.weights import listing, offline

CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    repo_id: str
    path: str
    reason: str

    def as_dict(self) -> dict:
        return {"repo": self.repo_id, "path": self.path, "problem": self.reason}


def _digest(path: Path, entry: Entry, progress: Progress) -> str:
    """sha256 of the content (LFS), or git's blob sha1 ("blob <size>\\0" + content)."""
    h = hashlib.sha256() if entry.lfs_sha256 else hashlib.sha1(f"blob {entry.size}\0".encode())
    with os.fdopen(open_regular(path), "rb") as fh:  # a FIFO swapped in after the stat is refused, not waited on
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            progress.add(len(chunk))
    progress.file_done()
    return h.hexdigest()


def _check_file(repo: Path, state: LocalState, path: str, progress: Progress) -> Optional[str]:
    entry = state.expected[path]
    target = snapshot_file(repo, state.commit, path)
    try:
        found = target.stat()
    except OSError:
        return "missing"
    if not stat.S_ISREG(found.st_mode):  # a FIFO or a device would block or never end the hash
        return "not a regular file"
    size = found.st_size
    if size != entry.size:
        return f"size {size}, the hub lists {entry.size}"
    want = entry.lfs_sha256 or entry.blob_id
    got = _digest(target, entry, progress)
    return None if got == want else f"{'sha256' if entry.lfs_sha256 else 'git sha1'} {got[:12]}..., the hub lists {want[:12]}..."


def _state(source: Source, rules, hub: Path, environ: Mapping[str, str], log) -> LocalState:
    if not offline(environ):
        try:
            commit, expected = listing(source, rules, environ, log, retries=1)  # else the cached copy
            return local_state(hub, source, rules, expected, commit)
        except KimiError as err:
            log.warning("verify.offline", f"the hub's listing of {source.label} is out of reach ({err.message}); "
                        "using the listing cached at download time")
    state = local_state(hub, source, rules)
    if state.expected is None:
        raise KimiError(MISSING_SETTING, f"no listing of {source.label} is cached in {hub} and the hub is not asked "
                        "(HF_HUB_OFFLINE) or not reachable: run `kimi-serve download` once with network.")
    return state


def verify(sources: List[Source], rules, hub: Path, environ: Mapping[str, str], log, repair: bool = False,
           workers: int = 4) -> List[Problem]:
    states = [_state(s, rules, hub, environ, log) for s in sources]
    total = sum(e.size for st in states for e in st.expected.values())
    progress = Progress("verify", total, sum(len(st.expected) for st in states), log)
    problems: List[Problem] = []
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for state in states:
                repo = repo_dir(hub, state.source.repo_id)
                results = pool.map(lambda p, r=repo, st=state: (p, _check_file(r, st, p, progress)), sorted(state.expected))
                problems += [Problem(state.source.repo_id, p, why) for p, why in results if why]
    finally:
        progress.close()
    progress.report(final=True)
    if repair:
        for problem in problems:
            _remove(repo_dir(hub, problem.repo_id), next(s for s in states if s.source.repo_id == problem.repo_id),
                    problem.path)
    return problems


def _remove(repo: Path, state: LocalState, path: str) -> None:
    """Drop a bad file: its snapshot link and the blob it points at."""
    link = snapshot_file(repo, state.commit, path)
    try:
        blob = link.resolve()
        if link.is_symlink() and blob.is_relative_to(repo / "blobs"):
            blob.unlink(missing_ok=True)
        link.unlink(missing_ok=True)
    except OSError:
        pass
