"""`kimi-serve download`: the launch's hub repositories, into the cache the launch reads, through
huggingface_hub (which uses hf_xet, its fast transfer backend, where the hub stores files on Xet).

Per repository: the hub's listing of the revision (one API call: the commit, each file's size
and hashes), the files vLLM reads of it (core.compose.weights.select_files), a free-space check for
what is missing, then `snapshot_download` of exactly those files. The library skips completed
files, so a run after an interruption fetches only the rest; a transient network error is
retried with backoff. Partial files of a killed run (huggingface_hub never reuses them) are
removed when no download holds their lock. SIGTERM/SIGINT end it at once with exit 143/130
and a line saying how far it got.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, MISSING_SETTING, KimiError
from entrypoint.core.base.files import write_file
from entrypoint.core.compose.settings import env_flag, read_settings
from entrypoint.core.compose.weights import Source, exact_pattern, select_files
from entrypoint.core.vllm.mask import mask_output
from entrypoint.node.hub_cache import Entry, LocalState, local_state, read_tree, repo_dir
from entrypoint.node.progress import Progress, human_bytes

RETRIES = 5
BACKOFF_MAX_S = 60.0


def offline(environ: Mapping[str, str]) -> bool:
    return env_flag(environ, "HF_HUB_OFFLINE")


# ---------------------------------------------------------------- errors


def _status(exc) -> int:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", 0) or 0


def check_token_file(environ: Mapping[str, str]) -> None:
    """HF_TOKEN_PATH, when it names something, is a regular file of at most MAX_KEY_FILE_BYTES:
    the hub library reads it whole, and a FIFO or a device would hold the download for ever."""
    path = environ.get("HF_TOKEN_PATH", "")
    try:
        found = os.stat(path) if path else None
    except OSError:
        return  # a missing file means no token (a rendered deployment's optional secret)
    if found is not None and (not stat.S_ISREG(found.st_mode) or found.st_size > limits.MAX_KEY_FILE_BYTES):
        raise KimiError(INVALID_VALUE, f"HF_TOKEN_PATH={path} is not a token file (a regular file of at most "
                        f"{limits.MAX_KEY_FILE_BYTES} bytes). Mount the token's file there, or unset HF_TOKEN_PATH.")


def user_error(exc: BaseException, source: Source, environ: Mapping[str, str]):
    """A KimiError for what the user must fix (auth, revision, disk), else None."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError  # noqa: PLC0415 - a third party only this path needs

    token_file = environ.get("HF_TOKEN_PATH", "")
    given = environ.get("HF_TOKEN") or (token_file and os.path.isfile(token_file) and os.path.getsize(token_file))
    token = ("a token is given (HF_TOKEN, or the file HF_TOKEN_PATH names) but it has no access to it" if given
             else "HF_TOKEN is not set (nor a token in the file HF_TOKEN_PATH names)")
    page = f"{_endpoint(environ)}/{source.repo_id}"
    if isinstance(exc, GatedRepoError):
        return KimiError(MISSING_SETTING, f"{source.repo_id} ({source.purpose}) is a gated repository and {token}. "
                         f"Accept its conditions at {page} with your account and pass a token of that account "
                         "as HF_TOKEN (from a secret store).")
    if isinstance(exc, RevisionNotFoundError):
        return KimiError(INVALID_VALUE, f"revision {source.revision!r} does not exist in {source.repo_id} "
                         f"({source.purpose}). Set KIMI_MODEL_REVISION to a branch, tag or commit of {page}, or "
                         "unset it for the default branch.")
    if isinstance(exc, RepositoryNotFoundError) or _status(exc) in (401, 403):
        return KimiError(MISSING_SETTING, f"{source.repo_id} ({source.purpose}) was not found or is private, and "
                         f"{token}. Check the repository id ({page}) and pass a token that can read it as HF_TOKEN.")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return KimiError(INVALID_VALUE, f"the disk holding the cache filled up while downloading {source.repo_id}. "
                         "Free space or mount a larger volume at KIMI_CACHE_DIR, then run `kimi-serve download` "
                         "again: completed files are kept.")
    return None


def transient(exc: BaseException) -> bool:
    """Worth another try: the network or the hub failing, not the request."""
    import httpx2  # noqa: PLC0415 - a third party only this path needs
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError  # noqa: PLC0415 - a third party only this path needs

    if isinstance(exc, (httpx2.TransportError, LocalEntryNotFoundError, ConnectionError, TimeoutError)):
        return True
    return isinstance(exc, HfHubHTTPError) and (_status(exc) >= 500 or _status(exc) == 429)


def _endpoint(environ: Mapping[str, str]) -> str:
    return (environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _retrying(what: str, fn, source: Source, environ, log, retries: int = RETRIES, sleep=time.sleep):
    delay = float(read_settings(environ).download_backoff_s)  # KIMI_DOWNLOAD_BACKOFF_S (tests: 0)
    for attempt in range(1, retries + 2):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message, never a traceback
            known = user_error(exc, source, environ)
            if known is not None:
                raise known from None
            if not transient(exc) or attempt > retries:
                raise KimiError(INVALID_VALUE, f"{what} {source.label} failed after {attempt} attempt(s): "
                                f"{type(exc).__name__}: {_one_line(exc, environ)}. Run `kimi-serve download` "
                                "again: completed files are kept.") from None
            log.warning("download.retry", f"{what} {source.label}: {type(exc).__name__}: {_one_line(exc, environ)}; "
                        f"retry {attempt} of {retries} in {delay:.0f}s", attempt=attempt, delay_s=delay)
            sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
    raise AssertionError("unreachable")


def _one_line(exc: BaseException, environ: Mapping[str, str]) -> str:
    """The error in one bounded line, through the one mask (a token read from HF_TOKEN_PATH, a
    URL's password, a credential option's value, a secret-named variable's value)."""
    text = mask_output(" ".join(str(exc).split()), environ)
    return text[:300] + ("..." if len(text) > 300 else "")


# ---------------------------------------------------------------- listing


def listing(source: Source, rules, environ, log, cached_in: Optional[Path] = None,
            retries: int = RETRIES) -> Tuple[str, Dict[str, Entry]]:
    """The commit the revision names (one repo_info call) and the files vLLM reads of it: one
    recursive tree call, or the listing of that commit cached in `cached_in` (a commit's listing
    never changes)."""
    from huggingface_hub import HfApi  # noqa: PLC0415 - a third party only this path needs
    from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415 - a third party only this path needs

    api = HfApi()

    def ask():
        commit = api.repo_info(source.repo_id, revision=source.revision).sha
        files = read_tree(repo_dir(cached_in, source.repo_id), commit) if cached_in else None
        if files is None:
            files = {f.path: Entry(int(f.size), f.blob_id, f.lfs.sha256 if f.lfs else None)
                     for f in api.list_repo_tree(source.repo_id, recursive=True, revision=commit)
                     if isinstance(f, RepoFile)}
        return commit, files

    commit, files = _retrying("listing", ask, source, environ, log, retries)
    return commit, {p: files[p] for p in select_files(files, rules, source.weights)}


# ---------------------------------------------------------------- download


def _clean_stale_partials(hub: Path, source: Source, log) -> None:
    """Remove `*.incomplete` files no download holds the lock of (left by a killed run)."""
    from filelock import FileLock, Timeout  # noqa: PLC0415 - a third party only this path needs

    repo = repo_dir(hub, source.repo_id)
    freed, count = 0, 0
    for part in (repo / "blobs").glob("*.incomplete"):
        etag = part.name.split(".", 1)[0]
        lock = FileLock(str(hub / ".locks" / repo.name / f"{etag}.lock"))
        try:
            lock.acquire(timeout=0)
        except (Timeout, OSError):
            continue
        try:
            size = part.stat().st_size
            part.unlink()
            freed, count = freed + size, count + 1
        except OSError:
            pass
        finally:
            lock.release()
    if count:
        log.info("download.cleanup", f"removed {count} partial file(s) ({human_bytes(freed)}) a stopped download "
                 f"left in {repo}", files=count, bytes=freed)


def check_space(hub: Path, need: int, what: str) -> None:
    try:
        hub.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(hub).free
    except OSError as exc:
        raise KimiError(INVALID_VALUE, f"cannot use the cache {hub}: {exc.strerror}. Mount a writable volume at "
                        "KIMI_CACHE_DIR (on OpenShift give it the pod's group).") from None
    if need > free:
        raise KimiError(INVALID_VALUE, f"{what} needs {human_bytes(need)} more in {hub}, which has "
                        f"{human_bytes(free)} free. Mount a larger volume at KIMI_CACHE_DIR (the checkpoint is "
                        "hundreds of GB), or free space; completed files are kept.")


def _on_signal(progress_ref: list, log):
    def handler(signum, frame):
        progress = progress_ref[0] if progress_ref else None
        done = f" ({progress.files_done} file(s), {human_bytes(progress.done)} fetched)" if progress else ""
        log.warning("download.interrupted", f"download interrupted by signal {signum}{done}; run `kimi-serve "
                    "download` again to resume: completed files are not fetched again", signal=signum)
        os._exit(128 + signum)  # at once: the hub's worker threads would otherwise finish their files

    return handler


def download(sources: List[Source], rules, hub: Path, environ: Mapping[str, str], log,
             max_workers: int = 8) -> List[LocalState]:
    if offline(environ):
        return _offline_state(sources, rules, hub)
    progress_ref: list = []
    handler = _on_signal(progress_ref, log)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    plans = []
    for source in sources:
        commit, expected = listing(source, rules, environ, log, cached_in=hub)
        _clean_stale_partials(hub, source, log)
        state = local_state(hub, source, rules, expected, commit)
        plans.append(state)
        log.info("download.plan", f"{source.purpose} {source.label} (commit {commit[:12]}): {len(expected)} files, "
                 f"{human_bytes(state.total_bytes)}; {len(state.missing)} to fetch ({human_bytes(state.missing_bytes)})",
                 repo=source.repo_id, revision=source.revision, commit=commit, files=len(expected),
                 bytes=state.total_bytes, missing_files=len(state.missing), missing_bytes=state.missing_bytes)
    need = sum(s.missing_bytes for s in plans)
    check_space(hub, need, "the download")
    progress = Progress("download", need, sum(len(s.expected) for s in plans), log)
    progress_ref.append(progress)
    try:
        for state in plans:  # also when complete: the hub library then caches the listing for offline use
            _fetch(state, hub, environ, log, progress, max_workers)
    finally:
        progress.close()
    progress.report(final=True)
    final = [local_state(hub, s.source, rules, s.expected, s.commit) for s in plans]
    for state in final:
        if state.missing:
            raise KimiError(INVALID_VALUE, f"{state.source.label}: {len(state.missing)} file(s) still missing after "
                            f"the download ({', '.join(state.missing[:3])}). Run `kimi-serve download` again.")
    return final


def _fetch(state: LocalState, hub: Path, environ, log, progress: Progress, max_workers: int) -> None:
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - a third party only this path needs

    source = state.source
    patterns = [exact_pattern(p) for p in state.expected]

    def fetch():
        try:
            return snapshot_download(source.repo_id, revision=state.commit, cache_dir=str(hub),
                                     allow_patterns=patterns, max_workers=max_workers,
                                     tqdm_class=progress.hub_bar_class())
        finally:
            _write_ref(hub, source, state.commit)

    _retrying("download of", fetch, source, environ, log)


def _write_ref(hub: Path, source: Source, commit: str) -> None:
    """refs/<revision> -> commit, as the hub library writes it, so an offline launch that names the
    revision (or none: main) finds the snapshot. (The download names the commit, so the files
    are those of the listing even when the branch moves meanwhile.)"""
    if source.revision == commit:
        return
    ref = repo_dir(hub, source.repo_id) / "refs" / source.revision
    try:
        ref.parent.mkdir(parents=True, exist_ok=True)
        write_file(ref, commit)  # the one writer: a link planted there is replaced, never followed
    except OSError:
        pass  # written even after a failed fetch (preflight then sees a partial snapshot); never hide that failure


def _offline_state(sources: List[Source], rules, hub: Path) -> List[LocalState]:
    states = [local_state(hub, s, rules) for s in sources]
    for state in states:
        if state.expected is None:
            raise KimiError(MISSING_SETTING, f"HF_HUB_OFFLINE is set and the cache in {hub} has no listing of "
                            f"{state.source.label}: run `kimi-serve download` where the hub is reachable, then move "
                            "the cache directory here (or unset HF_HUB_OFFLINE).")
        if state.missing:
            raise KimiError(MISSING_SETTING, f"HF_HUB_OFFLINE is set and {len(state.missing)} of "
                            f"{len(state.expected)} files of {state.source.label} are missing from {hub} "
                            f"({', '.join(state.missing[:3])}): finish `kimi-serve download` where the hub is "
                            "reachable, or unset HF_HUB_OFFLINE.")
    return states
