"""A launch as a shell-quoted command a person can read and paste (display only: never executed)."""

from __future__ import annotations

import shlex
from typing import Iterable, List

from entrypoint.core.compose.plan import SINGLE, Kind, Plan, Process
from entrypoint.core.vllm.args import display_units
from entrypoint.core.vllm.mask import mask_argv, mask_env


def _argv_lines(proc: Process) -> List[str]:
    """Program and positionals on the first line, then one flag (with its values) per line."""
    head: List[str] = [" ".join(shlex.quote(t) for t in proc.program)]
    rest: List[str] = []
    for key, unit in display_units(mask_argv(proc.args), proc.is_engine):
        text = " ".join(shlex.quote(t) for t, _ in unit)
        if key is None and not rest:
            head.append(text)
        else:
            rest.append(text)
    return [" ".join(head)] + rest


def process_lines(proc: Process) -> List[str]:
    env = mask_env(proc.env)
    lines = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    lines += _argv_lines(proc)
    return lines


def render_process(proc: Process) -> str:
    lines = process_lines(proc)
    if len(lines) == 1:
        return lines[0]
    return " \\\n  ".join(lines)


def render_plan(plan: Plan, header: Iterable[str] = ()) -> str:
    out = [f"# {line}" for line in header]
    for proc in plan.processes:
        one = proc.role == SINGLE or proc.kind in (Kind.ROUTER, Kind.PRELOAD)  # one per deployment: no rank
        label = proc.role if one else f"{proc.role} rank {proc.rank}"
        out.append(f"# --- {label}")
        out.append(render_process(proc))
    return "\n".join(out)
