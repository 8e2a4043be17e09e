"""The benchmarks are records: every script answers `--help`, every script and every results file is
named in benchmarks/README.md, and no script defaults to one machine's folders."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))
# A script runs as `python benchmarks/X.py`; a helper (no __main__ block) is imported by them.
MAINS = [p for p in SCRIPTS if re.search(r"^if __name__ == .__main__.:", p.read_text(), re.M)]
# Folders that exist on one machine only: a default (or a usage line) naming one is not a record.
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|home|Users|root|mnt|data)/[\w.-]+")


def _index() -> str:
    return (BENCH / "README.md").read_text()


def _mentioned(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def test_there_are_scripts():
    assert len(MAINS) >= 10 and (BENCH / "parallel.py") not in MAINS


@pytest.fixture(scope="module")
def helps() -> dict:
    def run(path: Path):
        return subprocess.run([sys.executable, str(path), "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(MAINS, pool.map(run, MAINS)))


@pytest.mark.slow
@pytest.mark.parametrize("script", MAINS, ids=lambda p: p.name)
def test_each_script_answers_help(helps, script):
    done = helps[script]
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: "), done.stdout[:500]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_is_indexed(script):
    assert _mentioned(script.name, _index()), f"benchmarks/README.md does not name {script.name}"


def test_each_result_is_indexed():
    results = sorted(p.name for p in (BENCH / "results").iterdir() if p.is_file())
    assert results
    missing = [name for name in results if not _mentioned(name, _index())]
    assert not missing, f"benchmarks/README.md does not name these results: {missing}"


def test_the_index_names_only_what_is_there():
    """A file the README names in backquotes as a script or a result exists."""
    named = set(re.findall(r"`([\w.-]+\.(?:py|json|png|svg))`", _index()))
    there = {p.name for p in SCRIPTS} | {p.name for p in (BENCH / "results").iterdir()}
    assert named - there == set()


def test_no_machine_specific_paths():
    found = [f"{p.name}: {m}" for p in SCRIPTS for m in MACHINE_PATH.findall(p.read_text())]
    assert not found, "use a path in the repository or an argument:\n" + "\n".join(found)


def test_the_checks_can_fail():
    assert MACHINE_PATH.findall('parser.add_argument("--venv", default="/work/cache/venv-vllm")')
    assert MACHINE_PATH.findall("KIMI_VLLM_VENV=/home/me/venv python benchmarks/drain.py")
    assert not MACHINE_PATH.findall('default=str(ROOT / ".venv-vllm")')
    index = "| `fleet.py` | ... | `fleet-20261204.json` |"
    assert _mentioned("fleet.py", index) and _mentioned("fleet-20261204.json", index)
    assert not _mentioned("load.py", "| `download.py` |")
    assert not _mentioned("streams.py", "`fleet.py`")
