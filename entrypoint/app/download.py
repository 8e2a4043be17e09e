"""`kimi-serve download [--verify [--repair]]`, and the start's fetch when KIMI_DOWNLOAD asks:
the hub files the launch reads, fetched into (or checked against) the cache the launch uses."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from entrypoint.app.launch import Launch, load_launch
from entrypoint.core.base.errors import KimiError, UNSUPPORTED_COMBINATION
from entrypoint.core.compose.weights import sources
from entrypoint.node.cache import uses_modelscope
from entrypoint.node.hub_cache import hub_dir
from entrypoint.node.logs import StartLog
from entrypoint.node import weights
from entrypoint.node.weights import check_token_file
from entrypoint.node.weights_verify import verify as check


def _weights(launch: Launch, environ: Mapping[str, str]):
    """(the launch's hub repositories, the recipe's rules of which files vLLM reads, the hub
    cache the launch uses); a token file that cannot be read and ModelScope are refused."""
    check_token_file(environ)
    if uses_modelscope(environ):
        raise KimiError(UNSUPPORTED_COMBINATION, "kimi-serve download fetches from the Hugging Face Hub; with "
                        "VLLM_USE_MODELSCOPE=true use `modelscope download --model <id> --cache_dir "
                        "$KIMI_CACHE_DIR/modelscope` (or let vLLM fetch at start).")
    return sources(launch.plan), launch.catalog.recipe.model.files, hub_dir(launch.settings.cache_dir, environ)


def fetch_weights(launch: Launch, environ: Mapping[str, str], log, workers: int = 8) -> None:
    """Every hub file the launch reads into its cache (nothing for a local path or object storage)."""
    found, rules, hub = _weights(launch, environ)
    if not found:
        log.info("download.skip", f"nothing to download: the model is {launch.plan.model}")
        return
    for state in weights.download(found, rules, hub, environ, log, max_workers=workers):
        log.info("download.complete", f"{state.source.purpose} {state.source.label}: {len(state.expected)} files "
                 f"complete in {hub}", repo=state.source.repo_id, commit=state.commit)


def download_weights(verify: bool = False, repair: bool = False, workers: int = 8,
                     environ: Optional[Mapping[str, str]] = None) -> int:
    """The command: fetch, or with `verify` check the cached files against the hub's hashes (and
    with `repair` fetch the bad ones again). The exit status: 1 when --verify found bad files
    and did not repair them, else 0."""
    environ = dict(os.environ if environ is None else environ)
    launch = load_launch((), environ)
    log = StartLog(launch.settings.log_format, environ)
    if verify:
        found, rules, hub = _weights(launch, environ)
        problems = check(found, rules, hub, environ, log, repair=repair, workers=min(workers, 8)) if found else []
        for p in problems:
            log.warning("verify.problem", f"{p.repo_id}: {p.path}: {p.reason}", **p.as_dict())
        if problems and not repair:
            log.warning("verify.failed", f"{len(problems)} file(s) failed verification: run `kimi-serve download "
                        "--verify --repair` to fetch them again", problems=len(problems))
            return 1
        if not problems:
            log.info("verify.ok", f"every file of {', '.join(s.label for s in found) or 'nothing'} matches the "
                     "hub's hashes")
            return 0
    fetch_weights(launch, environ, log, workers)
    return 0
