"""The edge: turn this container's Process into an exec of vLLM (or vllm-router). No shell, ever.

After `os.execvpe` the launched program *is* this process (PID 1 in a container when kimi-serve
was), so it receives SIGTERM/SIGINT directly and its exit code is the container's.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Mapping, Tuple

from entrypoint.cli._context import guarded, load_launch
from entrypoint.plan import Process

EXIT_NOT_FOUND = 127


def split_env(project_env: Mapping[str, str], environ: Mapping[str, str]) -> Tuple[dict, dict]:
    """(what the project applies, what the user already set and is kept as the user set it)."""
    applied = {k: v for k, v in project_env.items() if k not in environ}
    kept = {k: environ[k] for k in project_env if k in environ}
    return applied, kept


def as_applied(proc: Process, environ: Mapping[str, str]) -> Process:
    """The process with only the env the project applies here (what print and the start log show)."""
    return dataclasses.replace(proc, env=split_env(proc.env, environ)[0])


def exec_env(project_env: Mapping[str, str], environ: Mapping[str, str]) -> dict:
    env = dict(environ)
    for key, value in project_env.items():
        env.setdefault(key, value)
    return env


def announce(proc: Process, environ: Mapping[str, str], extra_lines=()) -> None:
    from entrypoint.mask import mask_env
    from entrypoint.render.shell import render_process

    _, kept = split_env(proc.env, environ)
    for line in extra_lines:
        print(f"kimi-serve: {line}", file=sys.stderr)
    for key, value in mask_env(kept).items():
        print(f"kimi-serve: keeping {key}={value} as set in the environment (the recipe would set "
              f"{mask_env({key: proc.env[key]})[key]})", file=sys.stderr)
    print(f"kimi-serve: launching {proc.role} (rank {proc.rank}):\n{render_process(as_applied(proc, environ))}", file=sys.stderr,
          flush=True)


@guarded
def serve(user_args) -> None:
    from entrypoint import cache
    from entrypoint.cluster import wire
    from entrypoint.logs import log_decisions
    from entrypoint.preflight import preflight_launch

    environ = os.environ
    wiring = wire(environ)
    launch = load_launch(tuple(user_args), wiring=wiring)
    proc = launch.this_process()
    log = log_decisions(launch, environ, wiring=wiring)
    proc, preflight_notes = preflight_launch(launch, proc, environ)
    for entry in preflight_notes:
        log.emit(entry)
    announce(proc, environ)
    if launch.settings.dry_run:
        print("kimi-serve: KIMI_DRY_RUN=1, not starting it", file=sys.stderr)
        return
    env = exec_env(proc.env, environ)
    env.update(cache.cache_env(launch.settings.cache_dir, environ))  # HF/vLLM caches, a writable HOME
    cache.prepare(launch.settings.cache_dir, env)
    try:
        os.execvpe(proc.argv[0], list(proc.argv), env)
    except FileNotFoundError:
        print(f"kimi-serve: error: {proc.argv[0]} is not on PATH in this image", file=sys.stderr)
        sys.exit(EXIT_NOT_FOUND)
