"""KIMI_PRELOAD=1's two argvs read by vLLM 0.32.0 itself (the environment of test_real_parser.py:
KIMI_VLLM_VENV=/work/cache/venv-vllm): the daemon's by `vllm preload`'s own parser
(PreloadSubcommand.add_cli_args) and EngineArgs, the engine's by `vllm serve`'s; `ipc_cache` is a
loader vLLM registers, and the engine looks for the sockets where the daemon puts them."""

from __future__ import annotations

import json
import subprocess

import pytest

from entrypoint.app.launch import build
from tests.vllm_contract.test_real_parser import real_version, vllm_python

pytestmark = [pytest.mark.slow, pytest.mark.serial]

READ = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.cli.preload import PreloadSubcommand
from vllm.entrypoints.launchers.cli_args import make_arg_parser
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
    if real_version() != "0.32.0":
        pytest.skip(f"the preload facts are recorded for 0.32.0, the environment has {real_version()}")
    engine, daemon = build({"KIMI_HARDWARE": "h200", "KIMI_PRELOAD": "1", "KIMI_VLLM_VERSION": "0.32.0"}).plan.processes
    given = {"daemon": list(daemon.argv[2:]), "engine": list(engine.argv[2:])}  # after `vllm preload` / `vllm serve`
    out = subprocess.run([vllm_python(), "-c", READ], input=json.dumps(given), capture_output=True, text=True,
                         timeout=600)
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
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.model_executor.model_loader.weight_cache.ipc_loader import IpcModelLoader
import inspect

def strings(parser):
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}

daemon_parser = FlexibleArgumentParser(); PreloadSubcommand.add_cli_args(daemon_parser)
serve, daemon = strings(make_arg_parser(FlexibleArgumentParser())), strings(daemon_parser)
print(json.dumps({"serve_only": sorted(serve - daemon), "preload_only": sorted(daemon - serve),
                  "loader_keys_in_source": "socket_dir" in inspect.getsource(IpcModelLoader.__init__)}))
"""


def test_the_recorded_preload_grammar_is_what_vllm_gives():
    """recipes/vllm/preload.yaml's 0.32.0 entry against vLLM 0.32.0's own parsers."""
    from entrypoint.core.preload import load_preload

    if real_version() != "0.32.0":
        pytest.skip(f"recorded for 0.32.0, the environment has {real_version()}")
    out = subprocess.run([vllm_python(), "-c", OPTIONS], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    recorded = load_preload().releases["0.32.0"]
    assert sorted(recorded.serve_only_options) == got["serve_only"]
    assert {recorded.socket_dir_option, recorded.health_port_option} <= set(got["preload_only"])
    assert recorded.model_option not in got["serve_only"] and got["loader_keys_in_source"]
