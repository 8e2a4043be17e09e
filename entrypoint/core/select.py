"""Settings + recipe data -> Selection: every choice made and checked, nothing composed yet.

Pure: no environment reads, no I/O. Detected hardware (for KIMI_HARDWARE=auto) is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from entrypoint.core import errors as E
from entrypoint.core.errors import KimiError, unknown_value
from entrypoint.core.plan import Choice
from entrypoint.core.recipe import Catalog, default_features
from entrypoint.core.settings import Settings

# Placeholders the recipe data uses, and the setting that fills each one.
PLACEHOLDER_SETTINGS = {
    "HEAD_IP": "KIMI_HEAD_ADDR",
    "IFACE_NAME": "KIMI_IFACE",
    "PREFILL_DP_RPC_PORT": "KIMI_PREFILL_DP_RPC_PORT",
    "DECODE_DP_RPC_PORT": "KIMI_DECODE_DP_RPC_PORT",
    "ROUTER_HOST": "KIMI_ROUTER_HOST",
    "ROUTER_PORT": "KIMI_ROUTER_PORT",
    "PREFILL_NODE_<i>": "KIMI_PREFILL_ADDRS",
    "DECODE_NODE_<i>": "KIMI_DECODE_ADDRS",
}

_POOL_MODE_BY_SUFFIX = (("_dep", "dep"), ("_tep", "tep"), ("_tp", "tp"), ("_tp_pp", "tp"), ("_tp_dp", "tp"))


@dataclass(frozen=True)
class PoolChoice:
    role: str  # prefill | decode
    nodes: int  # 0 = half of one node, shared with the other pool
    parallelism: str  # tp | tep | dep

    @property
    def node_count(self) -> int:
        return max(1, self.nodes)


@dataclass(frozen=True)
class Selection(Choice):
    node_rank: int
    role: Optional[str]
    prefill: Optional[PoolChoice]
    decode: Optional[PoolChoice]
    model: str
    served_model_name: str
    host: Optional[str]
    port: Optional[int]
    user_args: tuple
    skip_memory_check: bool
    vllm_version: str
    values: Mapping[str, str]  # placeholder name -> value (PREFILL_NODE_1, HEAD_IP, ...)
    load_args: tuple = ()  # how vLLM loads the model's source (object storage: --load-format ...)
    revision: Optional[str] = None  # KIMI_MODEL_REVISION: vLLM's --revision

    @property
    def is_multi_node(self) -> bool:
        return self.nodes > 1


def _valid_hardware(settings: Settings, catalog: Catalog, detected: Optional[str]) -> str:
    recipe = catalog.recipe
    hw = settings.hardware or settings.image_hardware
    source = "KIMI_HARDWARE" if settings.hardware else "the image's default hardware (KIMI_IMAGE_HARDWARE)"
    if hw is None:
        raise KimiError(E.MISSING_SETTING, "KIMI_HARDWARE is not set and this is not an image with a default target. "
                        f"Set KIMI_HARDWARE to one of: {', '.join(recipe.hardware)}, or auto.")
    if hw == "auto":
        if detected is None:
            raise KimiError(E.MISSING_SETTING, "KIMI_HARDWARE=auto but no supported GPU was detected on this node. "
                            "Run `kimi-serve doctor` to see what was found, or set KIMI_HARDWARE explicitly.")
        hw = detected
    if hw not in catalog.hardware:
        raise unknown_value(source, hw, recipe.hardware, "Or use auto to detect it.")
    if hw not in recipe.hardware:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"Kimi-K2.5 has no recipe for {hw}. Supported: "
                        f"{', '.join(recipe.hardware)}.")
    serves = settings.image_serves
    if serves and hw not in serves:
        target = settings.image_target or "this image"
        raise KimiError(E.UNSUPPORTED_COMBINATION,
                        f"KIMI_HARDWARE={hw}, but image target {target} serves only {', '.join(serves)}. "
                        f"Run the image built for {hw} (tag kimi-k2.5:<version>-<target>), or set KIMI_HARDWARE to "
                        f"one of {', '.join(serves)}.")
    return hw


def variant_unsupported(catalog: Catalog, vid: str, hw: str) -> Optional[str]:
    """Why variant `vid` cannot run on hardware `hw` (a message with a way out), or None."""
    recipe, hardware = catalog.recipe, catalog.hardware[hw]
    var = recipe.variants[vid]
    if var.supported_hardware is not None and hw not in var.supported_hardware:
        return (f"KIMI_VARIANT={vid} ({var.precision}) runs only on {', '.join(var.supported_hardware)}, "
                f"not on {hw}. Use KIMI_VARIANT=default on {hw}.")
    if var.supported_generations is not None and hardware.generation not in var.supported_generations:
        fits = [h for h in recipe.hardware if catalog.hardware[h].generation in var.supported_generations]
        return (f"KIMI_VARIANT={vid} ({var.precision}) needs {' or '.join(var.supported_generations)} GPUs "
                f"({', '.join(fits)}); {hw} is {hardware.generation}. Use KIMI_VARIANT=default on {hw}.")
    return None


def _valid_variant(settings: Settings, catalog: Catalog, hw: str) -> str:
    vid = settings.variant or "default"
    if vid not in catalog.recipe.variants:
        raise unknown_value("KIMI_VARIANT", vid, catalog.recipe.variants)
    reason = variant_unsupported(catalog, vid, hw)
    if reason:
        raise KimiError(E.UNSUPPORTED_COMBINATION, reason)
    return vid


def _valid_strategy(settings: Settings, catalog: Catalog) -> str:
    recipe = catalog.recipe
    nodes = settings.nodes
    sid = settings.strategy or ("multi_node_tp" if nodes > 1 else "single_node_tp")
    if sid not in catalog.strategies:
        raise unknown_value("KIMI_STRATEGY", sid, catalog.strategies)
    if sid not in recipe.compatible_strategies:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_STRATEGY={sid} is not one the Kimi-K2.5 recipe lists. "
                        f"Use one of: {', '.join(recipe.compatible_strategies)}.")
    strat = catalog.strategies[sid]
    if strat.deploy_type == "single_node" and nodes > 1:
        alt = sid.replace("single_node_", "multi_node_")
        hint = f" Use KIMI_STRATEGY={alt} for {nodes} nodes." if alt in recipe.compatible_strategies else ""
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_STRATEGY={sid} runs on one node, but KIMI_NODES={nodes}.{hint}")
    return sid


def parse_features(spec: Optional[str], defaults: tuple, known, label: str = "KIMI_FEATURES entry") -> tuple:
    """None = defaults; "" = none; plain entries form the list; +f / -f edit it (defaults if no plain entry)."""
    if spec is None:
        return defaults
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    if not entries:
        return ()
    plain = [e for e in entries if e[0] not in "+-"]
    chosen = list(plain) if plain else list(defaults)
    for entry in entries:
        name = entry[1:].strip() if entry[0] in "+-" else entry
        if name not in known:
            raise unknown_value(label, name, known)
        if entry[0] == "+" and name not in chosen:
            chosen.append(name)
        elif entry[0] == "-" and name in chosen:
            chosen.remove(name)
    return tuple(dict.fromkeys(chosen))


def _valid_features(settings: Settings, catalog: Catalog, hw: str) -> tuple:
    recipe = catalog.recipe
    chosen = parse_features(settings.features, default_features(recipe, hw), recipe.features)
    for fid in chosen:
        for other in recipe.features[fid].conflicts_with:
            if other in chosen:
                raise KimiError(E.CONFLICTING_FEATURES, f"Features {fid} and {other} cannot be used together: "
                                f"{recipe.features[fid].description.rstrip('.')}. Drop one, e.g. KIMI_FEATURES=-{other}.")
    return chosen


def _valid_profile(settings: Settings, catalog: Catalog, hw: str, vid: str, sid: str) -> Optional[str]:
    pid = settings.profile
    if not pid:
        return None
    profiles = catalog.recipe.profiles
    if pid not in profiles:
        raise unknown_value("KIMI_PROFILE", pid, profiles)
    prof = profiles[pid]
    for what, value, allowed, setting in (("hardware", hw, prof.hardware, "KIMI_HARDWARE"),
                                          ("variant", vid, prof.variants, "KIMI_VARIANT"),
                                          ("strategy", sid, prof.strategies, "KIMI_STRATEGY")):
        if value not in allowed:
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_PROFILE={pid} ({prof.description}) needs {what} "
                            f"{' or '.join(allowed)}; {setting}={value}. Drop KIMI_PROFILE or change {setting}.")
    return pid


def version_key(version: str) -> tuple:
    return tuple(int(x) for x in version.split("."))


def _valid_vllm_version(settings: Settings, catalog: Catalog, detected: Optional[str], known) -> str:
    """KIMI_VLLM_VERSION, else the installed vLLM's (`detected`), else the newest supported."""
    import re

    raw = settings.vllm_version or detected or known[-1]
    source = "KIMI_VLLM_VERSION" if settings.vllm_version else ("the installed vLLM" if detected else "")
    match = re.match(r"^v?(\d+\.\d+\.\d+)", raw.strip())
    if not match:
        raise KimiError(E.INVALID_VALUE, f"{source or 'KIMI_VLLM_VERSION'}={raw!r} is not a vLLM release like "
                        f"{known[-1]}. Supported: {', '.join(known)}.")
    version = match.group(1)
    floor = catalog.recipe.model.min_vllm_version
    if version_key(version) < version_key(floor):
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"{source}={version}: the Kimi-K2.5 recipe needs vLLM >= {floor}. "
                        f"Use an image built on vLLM {', '.join(known)} (tags <vllm>-<target>).")
    return version


def _check_version_needs(catalog: Catalog, version: str, pid: Optional[str], features: tuple) -> None:
    recipe = catalog.recipe
    needs = [(f"KIMI_PROFILE={pid}", recipe.profiles[pid].min_vllm)] if pid else []
    needs += [(f"feature {fid}", recipe.features[fid].min_vllm) for fid in features]
    for what, minimum in needs:
        if minimum and version_key(version) < version_key(minimum):
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"{what} needs vLLM >= {minimum}, but the launch is for vLLM "
                            f"{version} (KIMI_VLLM_VERSION, or the image's vLLM). Run an image built on vLLM >= "
                            f"{minimum} (the default tags), or drop {what.split('=')[0] if '=' in what else what}.")


def _pool(settings: Settings, catalog: Catalog, role: str) -> PoolChoice:
    defaults = getattr(catalog.recipe.strategy_overrides.get("pd_cluster"), role, None)
    nodes = settings.values[f"{role}_nodes"]
    if nodes is None:
        nodes = defaults.nodes if defaults else (1 if settings.nodes > 1 else 0)
    mode = settings.values[f"{role}_parallelism"] or (defaults.parallelism if defaults else "dep")
    allowed = []
    for sid in catalog.recipe.compatible_strategies:
        for suffix, m in _POOL_MODE_BY_SUFFIX:
            if sid.endswith(suffix) and m not in allowed:
                allowed.append(m)
    if mode not in allowed:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_{role.upper()}_PARALLELISM={mode} is not offered by the "
                        f"recipe's strategies; use one of {', '.join(allowed)}.")
    return PoolChoice(role=role, nodes=nodes, parallelism=mode)


def _placeholder_values(settings: Settings) -> dict:
    values = {
        "HEAD_IP": settings.head_addr,
        "IFACE_NAME": settings.iface,
        "PREFILL_DP_RPC_PORT": str(settings.prefill_dp_rpc_port),
        "DECODE_DP_RPC_PORT": str(settings.decode_dp_rpc_port),
        "ROUTER_HOST": settings.router_host,
        "ROUTER_PORT": str(settings.router_port),
    }
    for role in ("prefill", "decode"):
        for i, addr in enumerate(settings.values[f"{role}_addrs"], start=1):
            values[f"{role.upper()}_NODE_{i}"] = addr
    return {k: v for k, v in values.items() if v}


def select(settings: Settings, catalog: Catalog, detected_hardware: Optional[str] = None,
           detected_vllm: Optional[str] = None) -> Selection:
    from entrypoint.core.vllm_cli import available_versions

    hw = _valid_hardware(settings, catalog, detected_hardware)
    vllm_version = _valid_vllm_version(settings, catalog, detected_vllm, available_versions())
    vid = _valid_variant(settings, catalog, hw)
    sid = _valid_strategy(settings, catalog)
    features = _valid_features(settings, catalog, hw)
    pid = _valid_profile(settings, catalog, hw, vid, sid)
    _check_version_needs(catalog, vllm_version, pid, features)
    strat = catalog.strategies[sid]
    is_pd = strat.deploy_type == "pd_cluster"
    nodes = settings.nodes if strat.deploy_type == "multi_node" else 1
    prefill = _pool(settings, catalog, "prefill") if is_pd else None
    decode = _pool(settings, catalog, "decode") if is_pd else None
    if is_pd:
        for pool in (prefill, decode):
            addrs = settings.values[f"{pool.role}_addrs"]
            if len(addrs) > pool.node_count:
                raise KimiError(E.INVALID_VALUE, f"KIMI_{pool.role.upper()}_ADDRS lists {len(addrs)} addresses but the "
                                f"{pool.role} pool has {pool.node_count} node(s). Give one address per node, or set "
                                f"KIMI_{pool.role.upper()}_NODES={len(addrs)}.")
    elif settings.node_rank >= nodes and settings.role != "instance":  # a KV store's instances: core/kv.py
        raise KimiError(E.INVALID_VALUE, f"KIMI_NODE_RANK={settings.node_rank} but the deployment has {nodes} "
                        f"node(s): ranks run from 0 to {nodes - 1}.")
    model_id = catalog.recipe.variants[vid].model_id or catalog.recipe.model.model_id
    for name in ("model", "served_model_name", "host"):
        value = settings.values[name]
        if value and value.startswith("-"):
            raise KimiError(E.INVALID_VALUE, f"KIMI_{name.upper()}={value!r} starts with '-': vLLM would read it as "
                            f"an option, not as a value. Give a {name.replace('_', ' ')} that does not start with '-' "
                            "(a local path can be written ./-name).")
    model = settings.model or model_id
    user_args = settings.vllm_user_args()
    return Selection(
        hardware=hw, variant=vid, strategy=sid, features=features, profile=pid,
        nodes=nodes, node_rank=settings.node_rank, role=settings.role,
        prefill=prefill, decode=decode,
        model=model,
        served_model_name=settings.served_model_name or model_id,
        host=settings.host, port=settings.port,
        user_args=user_args,
        skip_memory_check=settings.skip_memory_check,
        vllm_version=vllm_version,
        values=_placeholder_values(settings),
        load_args=_load_args(model, user_args, vllm_version),
        revision=settings.model_revision,
    )


def _load_args(model: str, user_args: tuple, vllm_version: str) -> tuple:
    """A model in object storage (s3://, gs://) is streamed by vLLM's object-storage loader."""
    if "://" not in model:
        return ()
    from entrypoint.core.platforms import load_platforms, model_source
    from entrypoint.core.vllm_cli import spec_for, values

    model_source(model)  # a scheme vLLM cannot stream from is an error here
    wanted = load_platforms().object_storage.load_format
    given = values(user_args, spec_for(vllm_version)).get("load_format")
    if given is not None and given != wanted:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_MODEL={model} is in object storage, which vLLM loads only "
                        f"with --load-format {wanted}, but the arguments give --load-format {given}. Remove it, or "
                        "load from a local path.")
    return ("--load-format", wanted)
