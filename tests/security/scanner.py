"""checkov, the security scanner the tests run, in a venv of its own (with huggingface_hub, which
reads the token file the renderings mount).

checkov pins dozens of packages (packaging<24, boto3, networkx, ...) that conflict with the test
environment, so pyproject's `scan` extra (pinned versions) is installed into its own venv:
KIMI_CHECKOV_VENV, default `.cache/checkov-<version>` in the repository (git-ignored). The venv is
made once and reused (idempotent); it needs PyPI the first time only (75 to 165 s, ~320 MB,
measured with checkov 3.3.30 on a 2-core machine). checkov runs offline: `--skip-download` and no
API key, so nothing is fetched or uploaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Dict, List

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def requirements() -> list:
    """pyproject's `scan` extra: the pinned checkov (first) and what else runs beside it."""
    reqs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["scan"]
    assert reqs[0].startswith("checkov==") and all("==" in r for r in reqs), reqs
    return list(reqs)


def venv_dir() -> Path:
    version = requirements()[0].split("==", 1)[1]
    return Path(os.environ.get("KIMI_CHECKOV_VENV") or ROOT / ".cache" / f"checkov-{version}")


def ensure() -> Path:
    """The checkov executable, installing it into its venv first if it is not there."""
    where = venv_dir()
    exe = where / "bin" / "checkov"
    done = where / ".installed"
    if exe.exists() and done.exists() and done.read_text() == " ".join(requirements()):
        return exe
    venv.EnvBuilder(with_pip=False, clear=True).create(where)
    # scripts/pip-install.sh: uv where it can be had (no pip needed in the venv), else ensurepip and pip;
    # nothing byte-compiled at install (CPU the test run needs, issue 40)
    subprocess.run(["bash", str(ROOT / "scripts" / "pip-install.sh"), str(where / "bin" / "python"), *requirements()],
                   check=True, timeout=1800)
    done.write_text(" ".join(requirements()))
    return exe


def python() -> Path:
    """The venv's python (huggingface_hub importable), installing the venv first if need be."""
    return ensure().parent / "python"


def scan(exe: Path, framework: str, *targets: Path) -> List[dict]:
    """checkov's JSON reports (one per framework run) over files or directories."""
    args = [str(exe), "--framework", framework, "--skip-download", "--output", "json", "--soft-fail"]
    for target in targets:
        args += ["--directory" if target.is_dir() else "--file", str(target)]
    env = {**os.environ, "BC_API_KEY": "", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false", "LOG_LEVEL": "ERROR"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=str(ROOT))
    assert proc.returncode == 0, f"checkov failed to run ({proc.returncode}):\n{proc.stderr[-4000:]}"
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert all(r.get("check_type") == framework for r in reports), proc.stdout[:2000]
    return reports


def results(reports: List[dict], kind: str) -> List[dict]:
    """Every result of `kind` (passed_checks, failed_checks, skipped_checks) of the reports."""
    return [r for report in reports for r in report["results"].get(kind, [])]


def by_file(reports: List[dict], kind: str) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {}
    for r in results(reports, kind):
        out.setdefault(Path(r["file_path"]).name, []).append(r)
    return out


if __name__ == "__main__":  # `python -m tests.security.scanner`: install it ahead of a test run
    sys.stdout.write(f"{ensure()}\n")
