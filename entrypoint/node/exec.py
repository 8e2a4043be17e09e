"""The edge: turn this container's Process into an exec of vLLM (or vllm-router). No shell, ever.

After `os.execvpe` the launched program *is* this process (PID 1 in a container when kimi-serve
was), so it receives SIGTERM/SIGINT directly and its exit code is the container's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping, NoReturn, Tuple

from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.base.files import write_file
from entrypoint.core.compose.plan import Process
from entrypoint.node import stopping

EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126  # found but not runnable (as a shell says)


def split_env(project_env: Mapping[str, str], environ: Mapping[str, str]) -> Tuple[dict, dict]:
    """(what the project applies, what the user already set and is kept as the user set it)."""
    applied = {k: v for k, v in project_env.items() if k not in environ}
    kept = {k: environ[k] for k in project_env if k in environ}
    return applied, kept


def as_applied(proc: Process, environ: Mapping[str, str]) -> Process:
    """The process with only the env the project applies here (what print and the start log show)."""
    return dataclasses.replace(proc, env=split_env(proc.env, environ)[0])


def exec_env(project_env: Mapping[str, str], environ: Mapping[str, str]) -> dict:
    """The environment the process runs with: the user's, plus what the project applies."""
    env = dict(environ)
    env.update(split_env(project_env, environ)[0])
    return env


def write_files(files: Mapping[str, str]) -> None:
    """The configuration files a process names (a KV store's Mooncake configs), written whole
    before exec: a temporary file beside each, then renamed over it, readable by this user only."""
    for path, text in files.items():
        folder = os.path.dirname(path)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            write_file(path, text, mode=0o600)
        except OSError as exc:
            raise KimiError(INVALID_VALUE, f"cannot write {path}, which the launch needs ({exc.strerror or exc}): "
                            f"give the container a writable {folder} (the renderings mount a scratch /tmp).") from None


def exec_process(proc: Process, environ: Mapping[str, str], cache_dir: str, compiled=None) -> NoReturn:
    """Exec `proc` with the user's environment, the cache variables and (`compiled`, an engine's
    entrypoint.core.compose.caches.CompileCaches) its compile caches on the cache volume."""
    from entrypoint.node import cache  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    write_files(proc.files)
    stopping.clear(environ)  # a restarted container is ready again (node/stopping.py)
    problem = cache.path_problem(cache_dir)
    if problem and not os.path.isdir(cache_dir):  # HF_HOME=<file>/huggingface would fail after the start
        raise KimiError(INVALID_VALUE, f"KIMI_CACHE_DIR: {problem}: point it at a directory (a mounted volume).")
    env = exec_env(proc.env, environ)
    env.update(cache.cache_env(cache_dir, environ, compiled))  # HF/vLLM/compile caches, a writable HOME
    cache.prepare(cache_dir, env, compiled)
    program = proc.program[0]
    try:
        os.execvpe(program, list(proc.argv), env)
    except FileNotFoundError:
        raise KimiError("not_found", f"{program} is not on PATH in this image (PATH={env.get('PATH', '')}): run "
                        "the kimi-serve image of your hardware target", EXIT_NOT_FOUND) from None
    except OSError as exc:  # a directory, not executable, not a binary for this machine
        raise KimiError("cannot_execute", f"{program} cannot be executed ({exc.strerror or exc}): the image is "
                        "broken or PATH names another program first", EXIT_CANNOT_EXECUTE) from None
    except ValueError as exc:  # a NUL byte in an argument or variable
        raise KimiError(INVALID_VALUE, f"the launch of {program} cannot be executed: {exc}") from None
