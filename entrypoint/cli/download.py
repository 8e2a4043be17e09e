"""`kimi-serve download`: fetch the weights this configuration loads into the cache the launch
uses, before vLLM starts (an init container, a one-shot Compose service, a Slurm step).
`--verify` checks what is on disk against the hub's hashes instead (exit 1 on a bad file)."""

from __future__ import annotations

import sys

import click

from entrypoint.cli._context import guarded

EXIT_PROBLEMS = 1


@click.command()
@click.option("--verify", is_flag=True, help="Check the cached files against the hub's sizes and hashes (no "
              "network needed with HF_HUB_OFFLINE=1 once downloaded).")
@click.option("--repair", is_flag=True, help="With --verify: remove the files that fail and download them again.")
@click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Files fetched (or hashed) at the same time.")
@guarded
def command(verify: bool, repair: bool, workers: int) -> None:
    """Download (or verify) the checkpoint, draft model, tokenizer and config this launch loads."""
    from entrypoint.app import weights
    from entrypoint.node.weights import download

    sources, rules, hub, log = weights()
    if not sources:
        log.info("download.skip", "the model is a local path: nothing to download")
        return
    if verify:
        from entrypoint.node.weights_verify import verify as run_verify

        problems = run_verify(sources, rules, hub, dict_env(), log, repair=repair, workers=min(workers, 8))
        for p in problems:
            log.warning("verify.problem", f"{p.repo_id}: {p.path}: {p.reason}",
                        **p.as_dict())
        if problems and not repair:
            log.warning("verify.failed", f"{len(problems)} file(s) failed verification: run `kimi-serve download "
                        "--verify --repair` to fetch them again", problems=len(problems))
            sys.exit(EXIT_PROBLEMS)
        if not problems:
            log.info("verify.ok", f"every file of {', '.join(s.label for s in sources)} matches the hub's hashes")
            return
    states = download(sources, rules, hub, dict_env(), log, max_workers=workers)
    for state in states:
        log.info("download.complete", f"{state.source.purpose} {state.source.label}: {len(state.expected)} files "
                 f"complete in {hub}", repo=state.source.repo_id, commit=state.commit)


def dict_env() -> dict:
    import os

    return dict(os.environ)
