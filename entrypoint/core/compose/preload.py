"""KIMI_PRELOAD=1: weights kept across engine restarts (issue 30, docs/day2.md).

`vllm preload` runs beside the engine (its own process of the plan, `Kind.PRELOAD`): one daemon
per GPU loads the checkpoint once and holds the sharded weights in GPU memory; the engine is
started with `--load-format ipc_cache` and maps them over CUDA IPC (a Unix socket per GPU in a
directory both mount), so an engine crash or a config-only restart does not read the checkpoint
again. What each release's `preload` takes is data read from vLLM itself (recipes/vllm/preload.yaml);
a release, a GPU brand or a deployment type it does not record is refused here, before anything
starts. Pure: no I/O."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

from entrypoint.core.base.errors import UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.data.recipe import default_recipes_dir, load_section
from entrypoint.core.data.record import Record
from entrypoint.core.vllm.args import Tagged, tag
from entrypoint.core.vllm.vllm_cli import parse, spec_for

ROLE = "preload"  # KIMI_ROLE of the sidecar / companion container
SOURCE = "settings (KIMI_PRELOAD)"
WAY_OUT = "or unset KIMI_PRELOAD (the engine then loads the checkpoint itself at every start)"


def load_preload(directory=None) -> Record:
    """recipes/vllm/preload.yaml, validated with the rest of the catalog."""
    return load_section("preload", Path(directory or default_recipes_dir()))


def release(sel, cat, deploy_type: str, kv=None, data: Optional[Record] = None) -> Record:
    """The release's `vllm preload` facts, or the refusal (what is wrong, what would work)."""
    data = data or load_preload()
    found = data.releases.get(sel.vllm_version)
    if found is None:
        recorded = ", ".join(sorted(data.releases))
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_PRELOAD=1: no evidence of `vllm preload` for vLLM "
                        f"{sel.vllm_version} (recipes/vllm/preload.yaml records {recorded}). Use an image of vLLM "
                        f"{recorded} (KIMI_VLLM_VERSION={recorded} for print/plan), " + WAY_OUT + ".")
    brand = cat.hardware[sel.hardware].brand
    if brand not in found.brands:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_PRELOAD=1: vLLM {sel.vllm_version}'s weight cache shares "
                        f"weights over {'/'.join(found.platforms)} IPC only, not on {cat.brands[brand].name} GPUs "
                        f"(KIMI_HARDWARE={sel.hardware}). Brands it runs on: "
                        f"{', '.join(cat.brands[b].name for b in found.brands)}; " + WAY_OUT + ".")
    if deploy_type in found.refused_deploy_types or sel.is_multi_node:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_PRELOAD=1 with KIMI_STRATEGY={sel.strategy} "
                        f"({deploy_type}, {sel.nodes} node(s)): kimi-serve runs the weight cache beside one "
                        "single-node engine only (vLLM's daemons across nodes or PD pools are not drawn). Choose a "
                        "single-node strategy (`kimi-serve list`), " + WAY_OUT + ".")
    if kv is not None:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_PRELOAD=1 with KIMI_KV_OFFLOAD={kv.id}: the weight cache "
                        "is drawn beside a plain single-node engine only. Unset KIMI_KV_OFFLOAD, " + WAY_OUT + ".")
    if sel.user is not None and sel.user.get("load_format") is not None:
        raise KimiError(UNSUPPORTED_COMBINATION, "KIMI_PRELOAD=1 launches the engine with --load-format "
                        f"{found.engine_load_format}, but the vLLM args set --load-format too. Remove it from "
                        "KIMI_EXTRA_ARGS (the weight cache loads with the launch's own loader), " + WAY_OUT + ".")
    option = spec_for(sel.user.version).lookup(found.engine_extra_config_option)[0] if sel.user is not None else None
    if option is not None and sel.user.get(option.dest) is not None:  # the recorded grammar's own destination
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_PRELOAD=1 gives the engine {found.engine_extra_config_option} "
                        f"{{\"{found.engine_socket_key}\": ...}} (where the weight cache's daemons listen), but the vLLM "
                        f"args set {found.engine_extra_config_option} too, which would replace it: the engine would "
                        "miss the daemons and load every weight from disk. Remove it from KIMI_EXTRA_ARGS, "
                        + WAY_OUT + ".")
    return found


def engine_layer(found: Record, data: Record) -> Tagged:
    """What the engine adds: load from the daemons, whose sockets are in the shared directory."""
    extra = json.dumps({found.engine_socket_key: data.socket_dir}, separators=(",", ":"))
    return tag(SOURCE, ["--load-format", found.engine_load_format, found.engine_extra_config_option, extra])


def daemon_options(args: Tagged, spec, found: Record) -> Tagged:
    """The engine's own arguments (deduplicated, without the preload layer) the daemon takes: less
    the serve-only options its parser lacks (the API server's: port, host, tool parser ...)."""
    serve_only = set(found.serve_only_options)
    out: List = []
    for unit in parse(args, spec):
        if unit.option is None or any(s in serve_only for s in unit.option.strings):
            continue
        out += unit.tokens
    return out


def daemon_argv(found: Record, data: Record, model: str, options) -> tuple:
    """`vllm preload --model <model> <options>`, then where it puts its sockets and its /health."""
    return (*found.program, found.model_option, model, *options,
            found.socket_dir_option, data.socket_dir, found.health_port_option, str(data.health_port))
