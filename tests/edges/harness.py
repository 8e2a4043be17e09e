"""Run kimi-serve as a user does, and record what a user sees: exit code, stdout, stderr, time.

`run_cli` runs `entrypoint.cli.main` in this process (fast: most examples of the fuzz suite)
with a replaced environment and captured streams; an exception that escapes `main` is recorded
as `escaped` (the test fails on it, as a user would see a traceback). `run_proc` runs the real
`python -m entrypoint` in a subprocess with a generous timeout (a bound, not a speed assertion),
optionally as an unprivileged user.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
# Exit codes a command may end with (docs/reliability.md): 0 ok, 1 problems found (doctor,
# healthcheck, verify), 2 usage/config/node error, 3 defect of the image, 126/127 the launched
# program cannot be executed / is not found.
DOCUMENTED_EXITS = {0, 1, 2, 3, 126, 127}
# A bound on a hang, not a timing: ci18 (busy, 2026-12-06) saw `kimi-serve print` (0.4 CPU-seconds) miss
# 60 s twice while the machine stalled under the live modules and image builds
SUBPROCESS_BOUND_S = 180


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float
    escaped: Optional[BaseException] = None

    @property
    def text(self) -> str:
        return self.out + self.err

    def assert_clean(self, codes=DOCUMENTED_EXITS) -> "Result":
        assert self.escaped is None, f"exception escaped main: {self.escaped!r}\n{self.err}"
        assert "Traceback" not in self.text, self.text[-3000:]
        assert self.code in codes, f"exit {self.code} not in {codes}:\n{self.text[-3000:]}"
        return self


def base_env(**env) -> dict:
    """An environment without the host's KIMI_/cluster variables, and no GPU tools on PATH."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("KIMI_", "LWS_", "SLURM_", "CUDA_", "HIP_", "ROCR_", "HF_", "VLLM_"))}
    clean["PATH"] = "/usr/bin:/bin"
    clean.update(env)
    return clean


class _Stream(io.StringIO):
    def __init__(self):
        super().__init__()
        self.buffer = io.BytesIO()  # what click may write bytes to

    def getvalue(self) -> str:
        return super().getvalue() + self.buffer.getvalue().decode("utf-8", "replace")


def run_cli(args: Sequence[str], env: Mapping[str, str], stdin: str = "") -> Result:
    from entrypoint.cli import main
    from entrypoint.node import detect

    detect._MEMO.clear()
    out, err = _Stream(), _Stream()
    code, escaped = 0, None
    start = time.monotonic()
    with mock.patch.dict(os.environ, env, clear=True), mock.patch.object(sys, "stdin", io.StringIO(stdin)), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch("os.execvpe", side_effect=AssertionError("exec in-process")):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:  # noqa: BLE001 - what a user would see as a traceback
            escaped, code = exc, -1
    detect._MEMO.clear()
    return Result(code, out.getvalue(), err.getvalue(), time.monotonic() - start, escaped)


def _as_nobody():
    os.setgid(65534)
    os.setuid(65534)


def run_proc(args: Sequence[str], env: Mapping[str, str], stdin: bytes = b"", nobody: bool = False,
             timeout: float = SUBPROCESS_BOUND_S) -> Result:
    env = dict(env)
    env["PYTHONPATH"] = str(ROOT)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "entrypoint", *args], input=stdin, capture_output=True,
                          env=env, cwd="/", timeout=timeout, preexec_fn=_as_nobody if nobody else None)
    return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                  time.monotonic() - start)


def _nobody_can_run_python() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run([sys.executable, "-c", "import click, pydantic"], preexec_fn=_as_nobody,
                              capture_output=True, timeout=60, env={"PYTHONPATH": str(ROOT)}).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def run_unprivileged(args: Sequence[str], env: Mapping[str, str], locked: str = "/root/") -> Result:
    """kimi-serve as a non-root user for whom `locked` cannot be reached. As a non-root user (CI)
    that is a real run (/root is mode 700); as root, a run as `nobody` when that user can start this
    Python; otherwise in-process with the OS calls on `locked` answering EACCES as they would."""
    if os.geteuid() != 0:
        return run_proc(args, env)
    if _nobody_can_run_python():
        return run_proc(args, env, nobody=True)
    import errno

    def deny(real, result=None):
        def call(path, *a, **kw):
            text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
            if text.startswith(locked):
                if result is not None:
                    return result
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), text)
            return real(path, *a, **kw)
        return call

    patches = [mock.patch("os.stat", deny(os.stat)), mock.patch("os.lstat", deny(os.lstat)),
               mock.patch("os.access", deny(os.access, result=False)), mock.patch("os.mkdir", deny(os.mkdir)),
               mock.patch("os.scandir", deny(os.scandir)), mock.patch("os.statvfs", deny(os.statvfs))]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        return run_cli(args, env)
