"""Run a GitHub Actions workflow's own `run:` steps here (tests/images/test_publish.py).

Only what the project's workflows use is understood: `${{ a.b.c }}` and `${{ a.b || 'text' }}`
expressions in `env:` maps and action inputs (never inside scripts: there they would be
injection-prone, and this runner refuses them), `$GITHUB_OUTPUT` with `key=value` and
`key<<DELIMITER` blocks (GitHub's two forms), and the default shell of `run:` on Linux runners
(`bash -e {0}`). Steps with `uses:` are handed to the caller: actions cannot run here.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, Optional

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
PATH_EXPR = re.compile(r"[A-Za-z_][\w-]*(\.[\w-]+)*")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _lookup(expr: str, contexts: dict):
    node = contexts
    for part in expr.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def evaluate(text: str, contexts: dict) -> str:
    """Substitute every `${{ ... }}` of text; an expression this runner does not know fails."""
    def one(match):
        value = None
        for alt in (a.strip() for a in match.group(1).split("||")):
            if alt.startswith("'") and alt.endswith("'"):
                value = alt[1:-1]
            elif PATH_EXPR.fullmatch(alt):
                value = _lookup(alt, contexts)
            else:
                raise ValueError(f"expression not understood here: {match.group(0)}")
            if value:
                break
        return "" if value is None else str(value)
    return EXPR.sub(one, str(text))


def read_outputs(path: Path) -> Dict[str, str]:
    out, lines, i = {}, path.read_text().splitlines() if path.exists() else [], 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[key] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        key, _, value = line.partition("=")
        out[key] = value
        i += 1
    return out


class Job:
    """One job of a workflow run for one matrix entry; `contexts` holds inputs, matrix, steps, env."""

    def __init__(self, workflow: dict, job: str, cwd: Path, env: Dict[str, str], contexts: dict,
                 tmp: Path, on_action: Callable[["Job", dict], Optional[Dict[str, str]]]):
        self.spec = workflow["jobs"][job]
        self.name, self.cwd, self.tmp, self.on_action = job, cwd, tmp, on_action
        self.contexts = {**contexts, "steps": {}}
        self.env = dict(env)
        for scope in (workflow.get("env") or {}, self.spec.get("env") or {}):
            self.env.update({k: evaluate(v, {**self.contexts, "env": self.env}) for k, v in scope.items()})
        self.contexts["env"] = self.env
        self.log = []

    def run(self) -> Dict[str, str]:
        for i, step in enumerate(self.spec["steps"]):
            with_ = {k: evaluate(v, self.contexts) for k, v in (step.get("with") or {}).items()}
            if "uses" in step:
                outputs = self.on_action(self, {**step, "with": with_}) or {}
            else:
                outputs = self._run(i, step)
            if step.get("id"):
                self.contexts["steps"][step["id"]] = {"outputs": outputs}
        return {k: evaluate(v, self.contexts) for k, v in (self.spec.get("outputs") or {}).items()}

    def _run(self, i: int, step: dict) -> Dict[str, str]:
        script = step["run"]
        assert "${{" not in script, f"{self.name} step {i}: pass expressions through env:, not into the script"
        out = self.tmp / f"{self.name}-{os.getpid()}-{i}.out"
        out.unlink(missing_ok=True)
        env = {**self.env, **{k: evaluate(v, self.contexts) for k, v in (step.get("env") or {}).items()},
               "GITHUB_OUTPUT": str(out)}
        started = time.monotonic()
        proc = subprocess.run(["bash", "-e", "-c", script], cwd=self.cwd, env=env, capture_output=True, text=True,
                              timeout=1800)
        proc.seconds = time.monotonic() - started
        self.log.append((step.get("name") or script.splitlines()[0], proc))
        assert proc.returncode == 0, (f"{self.name} step {step.get('name') or script!r} failed ({proc.returncode}):\n"
                                      f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        return read_outputs(out)
