"""Fixtures of the live shapes (tests/live): on tests/conftest.py's vllm_venv (vLLM's CPU build with
kimi-serve installed beside it, as the image installs the entrypoint into the base's Python) and
tiny_models, the test-only vLLM plugin (tests/live/vllm_cpu_plugin) and one running shape per module.

Real vLLM: these tests skip when the venv cannot be made (no PyPI), but FAIL when CI=true. They are
marked `vllm` (one xdist group: one shape at a time on the machine) and `slow`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict

import pytest

from tests.live.shape import Shape

FIGURES: list = []  # (module, figures) of every shape started, for the terminal summary and the results file


PLUGIN_DIR = Path(__file__).with_name("vllm_cpu_plugin")


def plugin_env() -> Dict[str, str]:
    """What a host sets to load the test-only vLLM plugin (tests/live/vllm_cpu_plugin: vLLM's CPU
    backend gaps for MoE expert and data parallelism): its folder on the path, where Python finds
    the package and its entry point (vllm.general_plugins)."""
    return {"PYTHONPATH": str(PLUGIN_DIR)}


def base_settings(tiny: Path, cache: Path, **more: str) -> Dict[str, str]:
    """The settings a user of the `cpu` target gives for a toy deployment: the tiny Kimi model,
    1 GiB of KV cache and 1 thread per rank, no compile (minutes on 2 cores), a short context."""
    return {"KIMI_HARDWARE": "cpu", "KIMI_MODEL": str(tiny / "kimi"), "KIMI_VLLM_VERSION": "0.32.0",
            "KIMI_CPU_KVCACHE_GIB": "1", "KIMI_CPU_THREADS": "1", "KIMI_CACHE_DIR": str(cache),
            "KIMI_EXTRA_ARGS": "--enforce-eager --max-model-len 2048", "KIMI_DRAIN_TIMEOUT": "10", **more}


@pytest.fixture(scope="module")
def running(request, vllm_venv, tiny_models, host_caches, tmp_path_factory):
    """The module's one shape, started once: the module's SHAPE(tiny, cache) -> (settings, place,
    extra env: the host's, with its caches); stopped at the end (its exit codes in `shape.stopped`)."""
    make: Callable = request.module.SHAPE
    settings, place, extra = make(tiny_models, tmp_path_factory.mktemp("cache"))
    extra = {**host_caches, **extra}
    logs = tmp_path_factory.mktemp("logs")
    shape = Shape(settings, vllm_venv, logs, place, extra_env=extra)
    name = request.module.__name__.rsplit(".", 1)[-1]
    try:
        shape.start()
    except Exception:
        shape.kill()
        raise
    FIGURES.append((name, shape))
    yield shape
    if not getattr(shape, "stopped", None):
        t0 = time.monotonic()
        shape.stopped = shape.stop()
        shape.stop_s = time.monotonic() - t0
    shape.kill()


PROVES = {  # what each module's shape proves, for the results file and docs/shapes.md
    "test_single_node_tp": "TP 2 over two CPU ranks in one entrypoint; the Kimi parsers",
    "test_single_node_tep": "TP 2 + expert parallelism (test-only plugin for vLLM's CPU MoE gap)",
    "test_single_node_dep": "DP 2 + expert parallelism, one API server in front of both ranks (plugin)",
    "test_multi_node_tp": "two entrypoints rendezvous over gloo (--nnodes/--node-rank/--master-addr, headless rank 1); a lost worker node stops rank 0 (peer watch)",
    "test_multi_node_tp_pp": "two pipeline stages on two hosts (plugin: eager pipeline stages)",
    "test_multi_node_tp_dp": "Kimi-K3's TP-per-node, DP-across layout; headless rank 1 (tp-dp-lb-mismatch fixed)",
    "test_multi_node_tep": "TP 2 + expert parallelism across two hosts (plugin)",
    "test_multi_node_dep": "DP 2 + EP across two hosts, each serving HTTP (plugin)",
    "test_pd_cluster": "prefill, decode and the PD router behind the stream front, the prompt's KV cache moved over NIXL; the decode engine killed mid-stream: no survivor, the OpenAI client raises APIError",
    "test_fleet": "two copies behind the stream front and the cache-aware vllm-router, both reached; one SIGKILLed under load and started again (faults); streams continued on the survivor when that copy dies mid-stream; a rolling restart under load and streams",
}


def pytest_sessionfinish(session):
    """KIMI_SHAPES_RESULTS=FILE: the figures of every shape started, as JSON (benchmarks/results/)."""
    out = os.environ.get("KIMI_SHAPES_RESULTS")
    if not out or not FIGURES:
        return
    import json
    import platform

    rows = [{"shape": name.removeprefix("test_"), "strategy": shape.plan.strategy, "recipe": shape.plan.recipe,
             "processes": [n.name for n in shape.nodes], "ready_s": round(shape.started_s, 1),
             "peak_rss_gb": round(shape.peak_rss_mb / 1024, 2), "stop_s": round(getattr(shape, "stop_s", 0), 1),
             "exit_codes": getattr(shape, "stopped", None), "proves": PROVES.get(name, ""),
             **({"faults": shape.faults} if getattr(shape, "faults", None) else {}),
             **({"rolling_restart": shape.rolling} if getattr(shape, "rolling", None) else {}),
             **({"streams": shape.streams} if getattr(shape, "streams", None) else {}),
             **({"no_survivor": shape.no_survivor} if getattr(shape, "no_survivor", None) else {})}
            for name, shape in FIGURES]
    Path(out).write_text(json.dumps({
        "what": "each live shape of tests/live: the plan's own processes started as their containers start "
                "(kimi-serve entrypoints on loopback hosts), vllm-cpu 0.32.0, the tiny Kimi-K2-architecture model",
        "command": f"KIMI_SHAPES_RESULTS={out} python -m pytest tests/live -p no:xdist",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"), "shapes": rows}, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    terminalreporter.section("live shapes (the plan's own processes on vLLM's CPU backend)")
    for name, shape in FIGURES:
        terminalreporter.write_line(f"{name}: {len(shape.nodes)} processes, ready in {shape.started_s:.0f} s, "
                                    f"peak {shape.peak_rss_mb / 1024:.1f} GB, stopped {getattr(shape, 'stopped', '?')} "
                                    f"in {getattr(shape, 'stop_s', 0):.0f} s")
        faults = getattr(shape, "faults", None)
        if faults:
            terminalreporter.write_line(
                f"{name}: a copy killed under load ({faults['clients']} clients): {faults['failed']} of {faults['sent']} "
                f"requests failed ({faults['in_flight_at_kill']} in flight at the kill), the last "
                f"{faults['last_failure_s']} s after it; the router sent it requests until {faults['last_routed_s']} s, "
                f"marked it unhealthy at {faults['unhealthy_s']} s; " + (
                    f"restarted copy healthy in {faults['restart_healthy_s']} s, sent requests again "
                    f"{faults.get('readmitted_s')} s later" if faults.get("restart_healthy_s") is not None
                    else "left down (KIMI_FAULT_RESTART=1 starts it again)"))
        streams = getattr(shape, "streams", None)
        if streams:
            killed = streams["killed"]
            terminalreporter.write_line(
                f"{name}: streams through a copy killed mid-stream ({killed['clients']} clients, "
                f"{killed['max_tokens']} tokens): {killed['complete']} complete, {killed['errors']} errors, "
                f"{killed['silent']} silent; {killed['continued']} continued on the survivor; "
                f"{killed['differ_from_baseline']} differ from the uninterrupted answer, "
                f"{killed['differ_from_continuation']} from prefix + an engine's own continuation")
        rolling = getattr(shape, "rolling", None)
        if rolling:
            terminalreporter.write_line(
                f"{name}: a rolling restart under load ({rolling['clients']} clients): {rolling['failed']} of "
                f"{rolling['sent']} requests failed; per copy: " + "; ".join(
                    f"{c['copy']} exited {c['exit_code']} {c['sigterm_to_exit_s']} s after SIGTERM, "
                    f"{c['routed_while_draining']} requests routed to it while it drained, healthy again in "
                    f"{c['restart_healthy_s']} s, back in rotation {c['readmitted_s']} s later" for c in rolling["copies"]))
    sys.stdout.flush()
