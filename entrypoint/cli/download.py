"""`kimi-serve download`: fetch the weights this configuration loads into the cache the launch
uses, before vLLM starts (an init container, a one-shot Compose service, a Slurm step).
`--verify` checks what is on disk against the hub's hashes instead (exit 1 on a bad file)."""

from __future__ import annotations

import sys

import click

from entrypoint.cli._context import guarded


@click.command()
@click.option("--verify", is_flag=True, help="Check the cached files against the hub's sizes and hashes (no "
              "network needed with HF_HUB_OFFLINE=1 once downloaded).")
@click.option("--repair", is_flag=True, help="With --verify: remove the files that fail and download them again.")
@click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Files fetched (or hashed) at the same time.")
@guarded
def command(verify: bool, repair: bool, workers: int) -> None:
    """Download (or verify) the checkpoint, draft model, tokenizer and config this launch loads."""
    from entrypoint.app.download import download_weights

    sys.exit(download_weights(verify=verify, repair=repair, workers=workers))
