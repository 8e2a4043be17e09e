"""The composition root (entrypoint/app/) stays a set of small modules: one that composes a launch
(launch.py), one per command for that command's logic, and a package __init__ that holds nothing;
the commands (entrypoint/cli/) import the module of their own logic, never a grab-bag. And every
command makes its selection once: each command path below is run in-process with the one
selection function (core/compose/select.py `select`) counted."""

from __future__ import annotations

import ast
import json
import os
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "entrypoint" / "app"
CLI = ROOT / "entrypoint" / "cli"
MAX_LINES = 250  # one sitting's read


def _app_imports(path: Path) -> list:
    """What `path` takes from the composition root (top level or inside a function), as dotted
    names: `from entrypoint.app.deploy import x` -> entrypoint.app.deploy, `from entrypoint.app
    import launch` -> entrypoint.app.launch, `from entrypoint.app import build` -> entrypoint.app.build."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "entrypoint.app":
            found += [f"entrypoint.app.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("entrypoint.app."):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("entrypoint.app")]
    return found


def _not_a_module(name: str) -> bool:
    parts = name.split(".")
    return len(parts) != 3 or not (APP / f"{parts[2]}.py").is_file()


def test_every_app_module_is_small():
    sizes = {p.name: len(p.read_text().splitlines()) for p in APP.glob("*.py")}
    assert {"launch.py", "serve.py", "deploy.py"} <= set(sizes)
    assert not {name: n for name, n in sizes.items() if n > MAX_LINES}, f"over {MAX_LINES} lines: {sizes}"


def test_the_package_init_holds_nothing():
    """No re-exports: importing one command's module loads no other command's."""
    tree = ast.parse((APP / "__init__.py").read_text())
    assert [type(n).__name__ for n in tree.body] == ["Expr"]  # its docstring alone


@pytest.mark.slow
def test_code_imports_a_per_command_module_not_the_package():
    """`from entrypoint.app import build` would need the package to re-export it: everything
    names the module it takes from (entrypoint.app.launch, .deploy, ...), and that module exists."""
    code = [p for d in ("entrypoint", "buildsys", "benchmarks", "tests") for p in (ROOT / d).rglob("*.py")]
    wrong = [f"{path.relative_to(ROOT)}: {name}" for path in code if path.parent != APP
             for name in _app_imports(path) if _not_a_module(name)]
    assert not wrong
    assert any(_app_imports(p) for p in CLI.glob("*.py"))  # the scan reads the commands' imports


def test_a_command_takes_its_logic_from_one_app_module():
    """A cli module imports the launch's composition and at most one command's module (its own)."""
    taken = {p.name: set(_app_imports(p)) - {"entrypoint.app.launch"} for p in CLI.glob("*.py")}
    assert not {name: found for name, found in taken.items() if len(found) > 1}
    assert taken["plan.py"] == {"entrypoint.app.deploy"} and taken["bench.py"] == {"entrypoint.app.bench"}


def test_the_scan_sees_a_grab_bag_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import entrypoint.app\n\ndef f():\n    from entrypoint.app import build, launch  # noqa\n")
    assert [n for n in _app_imports(planted) if _not_a_module(n)] == ["entrypoint.app", "entrypoint.app.build"]


# ---------------------------------------------------------------- one selection per command

H200 = {"KIMI_HARDWARE": "h200"}
MULTI = {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2"}
PD = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"}
FLEET = {**H200, "KIMI_REPLICAS": "2", "KIMI_REPLICA_ADDRS": "10.0.0.2,10.0.0.3"}
KV = {**H200, "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake"}
KV_HOSTS = {**KV, "KIMI_INSTANCE_ADDRS": "i1,i2", "KIMI_MOONCAKE_MASTER_ADDR": "m", "KIMI_MOONCAKE_STORE_HOST": "s"}


@pytest.fixture
def selections(monkeypatch, tmp_path):
    """A clean environment (no KIMI_*, a private cache) and the count of selections made: the
    one selection function is wrapped wherever a module of the package holds it."""
    import sys

    from entrypoint.app import deploy, launch  # noqa: F401 - the modules that select
    from entrypoint.core.compose import select as core_select

    for key in list(os.environ):
        if key.startswith(("KIMI_", "HF_", "SAGEMAKER_", "AIP_", "AZUREML_", "SKYPILOT_", "LWS_", "SLURM_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KIMI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KIMI_SKIP_MEMORY_CHECK", "1")
    calls = []
    real = core_select.select

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("entrypoint.") and getattr(module, "select", None) is real:
            monkeypatch.setattr(module, "select", counted)

    def run(argv, environ) -> int:
        from entrypoint.cli import main

        for key, value in environ.items():
            monkeypatch.setenv(key, value)
        calls.clear()
        try:
            main(list(argv))
        except SystemExit as done:
            assert done.code in (0, 1, None), f"{argv}: exit {done.code}"
        return len(calls)

    return run


@pytest.mark.parametrize("argv, environ", [
    (["print"], H200),
    (["plan"], H200),
    (["plan", "--format", "json"], PD | {"KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0"}),
    (["explain"], H200),
    (["plan", "--format", "k8s"], H200),
    (["plan", "--format", "k8s"], MULTI),
    (["plan", "--format", "k8s"], PD),
    (["plan", "--format", "k8s"], KV),
    (["plan", "--format", "k8s"], {**H200, "KIMI_REPLICAS": "2"}),
    (["plan", "--format", "compose"], H200),
    (["plan", "--format", "compose"], PD | {"KIMI_PREFILL_NODES": "0", "KIMI_DECODE_NODES": "0"}),
    (["plan", "--format", "skypilot"], MULTI),
    (["plan", "--format", "k8s-bench"], H200),
    ([], H200 | {"KIMI_DRY_RUN": "1"}),
    (["doctor", "--format", "json"], H200),
    (["healthcheck", "--timeout", "1"], H200 | {"KIMI_PORT": "9"}),
], ids=lambda v: " ".join(v) if isinstance(v, list) else ",".join(f"{k}={x}" for k, x in v.items()))
def test_a_command_selects_once(selections, capsys, argv, environ):
    assert selections(argv, environ) == 1


def test_a_cloud_rendering_selects_once_and_once_more_for_the_containers_own_start(selections, capsys):
    """A platform with a port/bind contract: the deployment's selection, then the rendered
    container's start composed as the platform will start it (app/deploy.py), its own selection."""
    assert selections(["plan", "--format", "sagemaker"], H200) == 2
    assert selections(["plan", "--format", "skypilot"], H200) == 1  # no contract binding


def test_a_batch_selects_once_per_line(selections, monkeypatch, tmp_path, capsys):
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(json.dumps(e) for e in (H200, MULTI | {"KIMI_HEAD_ADDR": "10.0.0.1"}, PD)) + "\n")
    assert selections(["plan", "--batch", str(batch)], {}) == 3


def _report(ok: bool = True):
    return types.SimpleNamespace(ok=ok, to_json=lambda: {"ok": ok}, to_text=lambda: "ok")


@pytest.mark.parametrize("args, environ, once", [
    ((), H200, 1),
    ((), KV_HOSTS, 1),
    (("--fleet",), FLEET, 1),
    (("--fleet", "--expect-model", "m", "--features", ""), FLEET, 1),
    (("--expect-model", "m"), H200, 1),
    (("--url", "http://127.0.0.1:9", "--expect-model", "m", "--features", ""), H200, 0),  # nothing to read
])
def test_verify_selects_once(selections, monkeypatch, capsys, args, environ, once):
    """The service's expectations and, with --fleet, the fleet's addresses from one launch."""
    seen = []
    monkeypatch.setattr("entrypoint.cli.verify.run_verify", lambda url, **kw: seen.append(url) or _report())
    assert selections(["verify", "--format", "json", *args], environ) == once
    assert len(seen) == (3 if "--fleet" in args else 1)


@pytest.mark.parametrize("args, environ", [((), H200), ((), KV_HOSTS), (("--fleet",), FLEET)])
def test_bench_selects_once(selections, monkeypatch, capsys, tmp_path, args, environ):
    """The deployment's facts and, with --fleet, the fleet's addresses from one launch."""
    from entrypoint.verify import bench

    runs = []
    monkeypatch.setattr(bench, "client_program", lambda: "vllm")
    monkeypatch.setattr(bench, "check_server", lambda url, model: "m")
    monkeypatch.setattr(bench, "run_bench", lambda spec, **kw: runs.append(spec.url) or {
        "results": [], "reference": None, "files": [], "problems": [], "url": spec.url})
    assert selections(["bench", "--format", "json", "--no-charts", "--output", str(tmp_path / "out"), *args],
                      environ) == 1
    assert len(runs) == (3 if "--fleet" in args else 1)


def test_download_selects_once(selections, monkeypatch, capsys):
    from entrypoint.node import weights

    monkeypatch.setattr(weights, "download", lambda *a, **kw: iter(()))
    assert selections(["download"], H200) == 1
