"""vLLM's own verdict on every `vllm serve` argv of the sweep for one release, recorded.

A release whose wheel does not install on CI's machine (vllm 0.34.0 pins flashinfer-python==0.7.3,
which the registry lacks; a 5 GB install by hand: scripts/vllm-parser-env.sh) is judged once by its
real parser here and the verdicts kept in tests/data/vllm-<release>/sweep-verdicts.json: each argv
by its SHA-256 (of its JSON), with the command that recorded them. tests/vllm_contract/
test_recorded_verdicts.py then holds every later plan to them: an argv the release never judged
fails until it is recorded again with

    python -m tests.vllm_contract.verdicts --python <venv with vllm==RELEASE>/bin/python
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Tuple

from buildsys import vllm_spec
from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError

from tests.vllm_contract.sweep import configurations

DATA = Path(__file__).resolve().parents[1] / "data"


@lru_cache(maxsize=4)
def _sweep(version: str) -> Tuple[Dict[Tuple[str, ...], str], Dict[str, str]]:
    """One pass over the sweep's plans for `version`: (argv -> first config id, VLLM_* name -> first
    config id); configurations plan refuses are left out."""
    argvs: Dict[Tuple[str, ...], str] = {}
    names: Dict[str, str] = {}
    for cid, settings in configurations():
        try:
            plan = build({**settings, "KIMI_VLLM_VERSION": version}).plan
        except KimiError:
            continue
        for proc in plan.processes:
            if proc.argv[:2] == ("vllm", "serve"):
                argvs.setdefault(tuple(proc.argv[1:]), cid)
            for name in proc.env:
                if name.startswith("VLLM_"):
                    names.setdefault(name, cid)
    return argvs, names


def sweep_argvs(version: str) -> Dict[Tuple[str, ...], str]:
    """Every distinct `vllm serve` argv (less `vllm`) of the sweep's plans for `version` -> the first
    configuration id that makes it."""
    return dict(_sweep(version)[0])


def sweep_env_names(version: str) -> Dict[str, str]:
    """Every VLLM_* variable the sweep's plans for `version` set -> the first configuration id."""
    return dict(_sweep(version)[1])


def digest(argv) -> str:
    return hashlib.sha256(json.dumps(list(argv)).encode()).hexdigest()[:16]  # 64 bits: no collision in thousands


def real_check(python: str, argvs: List[List[str]]) -> List[dict]:
    """vLLM's parser, its post-parse validation and AsyncEngineArgs.from_cli_args on each argv."""
    out = subprocess.run([python, str(vllm_spec.EXTRACTOR), "check"], input=json.dumps(argvs), capture_output=True,
                         text=True, timeout=1800, env=vllm_spec.extract_env(python))
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def path_for(version: str) -> Path:
    return DATA / f"vllm-{version}" / "sweep-verdicts.json"


def record(python: str) -> Path:
    version = vllm_spec.extract(python)["vllm_version"]
    argvs = sweep_argvs(version)
    results = real_check(python, [list(a) for a in argvs])
    refused = [{"config": cid, "error": r["error"]} for (argv, cid), r in zip(argvs.items(), results) if not r["ok"]]
    if refused:
        raise SystemExit(f"vLLM {version} refuses {len(refused)} argv(s) of the sweep, e.g. {refused[:3]}")
    out = {"provenance": {"vllm_version": version, "recorded": _dt.date.today().isoformat(),
                          "how": f"python -m tests.vllm_contract.verdicts --python <venv with vllm=={version}>/bin/python: "
                                 "every `vllm serve` argv of tests/vllm_contract/sweep.py's plans for this release, "
                                 "through buildsys/vllm_spec_extract.py check (vLLM's serve parser, its post-parse "
                                 "validation, AsyncEngineArgs.from_cli_args)",
                          "argv_digest": "the first 16 hex digits of sha256(json.dumps(argv)), argv = [\"serve\", model, ...]"},
           "vllm_version": version, "accepted": sorted(digest(a) for a in argvs), "refused": []}
    path = path_for(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the Python of a venv with the release's vLLM installed")
    print(f"wrote {record(parser.parse_args().python)}")
