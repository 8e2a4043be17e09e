"""The one composition (entrypoint/core/compose/launch.py): settings + the node's facts -> the
launch, pure; a rendering for other machines is sized from its settings, never from the machine
that renders it (issue 51). The hosts below are fakes: what a test machine has never decides."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from entrypoint.app.deploy import deployment_files
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.launch import NodeFacts, compose_launch, declared_facts
from entrypoint.core.compose.settings import read_settings
from entrypoint.node import host
from entrypoint.render import docker_compose, k8s

ROOT = Path(__file__).resolve().parents[2]
# A laptop and a large server: the machines a rendering might be made on.
HOSTS = {"laptop": (8.0, 2, "laptop"), "server": (2048.0, 192, "big-server")}


@pytest.fixture
def model(tmp_path):
    """A local model of 5 MB of weights."""
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 5_000_000)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"]}))
    return tmp_path


def _on(monkeypatch, name: str) -> None:
    ram, cores, hostname = HOSTS[name]
    monkeypatch.setattr(host, "host_facts", lambda: (ram, cores))
    monkeypatch.setattr("os.uname", lambda: type("U", (), {"nodename": hostname})())


def _rendered(monkeypatch, name: str, renderer, environ: dict) -> dict:
    _on(monkeypatch, name)
    return deployment_files(renderer, environ)


CPU_RENDERINGS = [
    {"KIMI_HARDWARE": "cpu", "KIMI_SKIP_MEMORY_CHECK": "1"},  # sized by the data's nominal node
    # a local model (below) with 8 GiB of KV cache: 9.8 GB, which the laptop's RAM would refuse
    {"KIMI_HARDWARE": "cpu", "KIMI_MODEL_GB": "1", "KIMI_CPU_KVCACHE_GIB": "8", "KIMI_IFACE": "eth0"},
    {"KIMI_HARDWARE": "cpu", "KIMI_CPU_RANKS": "2", "KIMI_CPU_MEMORY_GB": "64", "KIMI_MODEL_GB": "3"},
    {"KIMI_HARDWARE": "cpu", "KIMI_CPU_MEMORY_GB": "900", "KIMI_CPU_RANKS": "4", "KIMI_SKIP_MEMORY_CHECK": "1"},
]


@pytest.mark.parametrize("renderer", [k8s, docker_compose], ids=["k8s", "compose"])
@pytest.mark.parametrize("case", range(len(CPU_RENDERINGS)))
def test_a_cpu_or_local_model_rendering_is_the_same_on_any_machine(monkeypatch, model, renderer, case):
    environ = dict(CPU_RENDERINGS[case])
    if "KIMI_MODEL_GB" in environ:
        environ["KIMI_MODEL"] = str(model)
    laptop = _rendered(monkeypatch, "laptop", renderer, environ)
    server = _rendered(monkeypatch, "server", renderer, environ)
    assert laptop == server


def test_a_local_models_rendering_does_not_read_its_files(monkeypatch, model, tmp_path_factory):
    """The path is the nodes', not the rendering machine's: where it is missing here the rendering is
    the same as where it holds weights."""
    absent = str(tmp_path_factory.mktemp("elsewhere") / "not-here")
    environ = {"KIMI_HARDWARE": "cpu", "KIMI_MODEL_GB": "3", "KIMI_IFACE": "eth0"}
    here = _rendered(monkeypatch, "server", k8s, {**environ, "KIMI_MODEL": str(model)})
    there = _rendered(monkeypatch, "server", k8s, {**environ, "KIMI_MODEL": absent})
    def same(rendered, path):  # the settings' checksum follows the path written in them, as it should
        return re.sub(r'checksum/settings: [0-9a-f]{64}', "checksum/settings: C", json.dumps(rendered).replace(path, "M"))

    assert same(here, str(model)) == same(there, absent)


def test_the_rendered_pods_resources_follow_the_cpu_settings(monkeypatch):
    environ = {"KIMI_HARDWARE": "cpu", "KIMI_CPU_RANKS": "4", "KIMI_CPU_CORES": "32", "KIMI_CPU_MEMORY_GB": "200",
               "KIMI_SKIP_MEMORY_CHECK": "1"}
    files = _rendered(monkeypatch, "laptop", k8s, environ)
    text = "".join(files.values())
    # the amounts as given: the chart draws them from its values, with no arithmetic
    assert "cpu: '32'" in text and "memory: 200G\n" in text
    assert "16Gi" not in text
    nominal = "".join(_rendered(monkeypatch, "server", k8s, {"KIMI_HARDWARE": "cpu",
                                                              "KIMI_SKIP_MEMORY_CHECK": "1"}).values())
    assert "cpu: '4'" in nominal and "memory: 16Gi" in nominal  # recipes/hardware.yaml's nominal cpu node


def test_a_local_model_rendering_without_its_size_is_refused_with_the_setting_to_give(monkeypatch, model):
    with pytest.raises(KimiError) as info:
        _rendered(monkeypatch, "server", k8s, {"KIMI_HARDWARE": "cpu", "KIMI_MODEL": str(model)})
    assert info.value.code == "missing_setting" and "KIMI_MODEL_GB=" in info.value.message
    assert "\n" not in info.value.message


def test_the_refusal_is_one_line_and_exit_2(model):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "KIMI_HARDWARE": "cpu", "KIMI_MODEL": str(model)}
    out = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "k8s"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "KIMI_MODEL_GB" in out.stderr and "Traceback" not in out.stderr


def test_the_composition_reads_nothing_of_the_machine(monkeypatch, model):
    """compose_launch is pure: the facts it is given decide, whatever this machine holds."""
    def refuse():
        raise AssertionError("the composition read this machine")

    monkeypatch.setattr(host, "host_facts", refuse)
    monkeypatch.setattr("os.uname", refuse)
    settings = read_settings({"KIMI_HARDWARE": "cpu", "KIMI_MODEL": "/nowhere/model", "KIMI_CPU_RANKS": "2"})
    launch = compose_launch(settings, NodeFacts(ram_gb=64.0, cores=24, model_gb=5.0))
    (engine,) = launch.plan.engines
    assert engine.env["OMP_NUM_THREADS"] == "12"  # 24 cores over 2 ranks
    assert launch.catalog.hardware["cpu"].vram_gb == 64.0 and launch.plan.local_model_gb == 5.0
    small = NodeFacts(ram_gb=9.0, cores=24, model_gb=5.0)  # 6 GB of weights + 2 x 4 GiB of KV cache: too much
    with pytest.raises(KimiError) as info:
        compose_launch(settings, small)
    assert info.value.code == "insufficient_memory"


def test_declared_facts_take_the_size_the_user_gives():
    settings = read_settings({"KIMI_HARDWARE": "cpu", "KIMI_MODEL": "/models/tiny", "KIMI_MODEL_GB": "7"})
    assert declared_facts(settings) == NodeFacts(model_gb=7.0)
    assert declared_facts(read_settings({"KIMI_MODEL": "org/repo"})) == NodeFacts()  # a repo id: the recipe sizes it
