"""The composition rules: Selection x Catalog -> Plan. No node and no settings read here; only
vLLM's grammar files of the data directory (core/data/datadir.py).

The order of layers follows the recipe site (docs/composition.md); the project's deliberate
differences (conflicting features, memory check, half-node pools, NVLink-only settings,
resolved placeholders) are marked where they happen.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError
from entrypoint.core.base.net import url_host

from entrypoint.core.compose.fleet import FleetChoice, check_start, ROLE
from entrypoint.core.compose.fleet import layer as fleet_layer
from entrypoint.core.compose.kv import KvChoice
from entrypoint.core.compose.kv import layer as kv_layer
from entrypoint.core.compose.plan import (DEPLOYMENT, INSTANCE, Kind, Plan, Pool, Port, Process, engine, engines_drain,
                                         service, with_helper_drain)
from entrypoint.core.compose.plan import preload as preload_process
from entrypoint.core.compose.select import (PLACEHOLDER_SETTINGS, Selection, pool_tp, variant_unsupported,
                                            version_key)
from entrypoint.core.data.recipe import Catalog, gpu_vram_gb
from entrypoint.core.data.record import Record
from entrypoint.core.vllm.args import Tagged, substitute, tag
from entrypoint.core.vllm.vllm_cli import EngineArgs, check, dedupe, engine_args, parse, spec_for

if TYPE_CHECKING:  # imported where used: kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.compose.loading import Decision

GIB_GB = 2 ** 30 / 1e9  # a GiB (VLLM_CPU_KVCACHE_SPACE's unit) in GB (the memory check's)

EnvLayers = List[Tuple[str, Dict[str, str]]]  # (source, env)
# A local model's weights times this is the memory it needs (activations, buffers, the runtime)
LOCAL_MODEL_OVERHEAD = 1.2


class _Ctx:
    """Everything one resolution reads, looked up once."""

    def __init__(self, sel: Selection, cat: Catalog, load=None, model_gb: Optional[float] = None):
        self.sel, self.cat, self.load = sel, cat, load
        self.recipe = cat.recipe
        self.hw: Record = cat.hardware[sel.hardware]
        self.variant = self.recipe.variants[sel.variant]
        self.strategy = cat.strategies[sel.strategy]
        self.override = self.recipe.strategy_overrides.get(sel.strategy)
        self.profile = self.recipe.profiles[sel.profile] if sel.profile else None
        self.spec = spec_for(sel.vllm_version)  # vLLM's own grammar for the version launched
        self.host = self.hw.host_backend  # a host backend's ranks (KIMI_HARDWARE=cpu), None on GPUs
        # The memory the model needs: a local model's own weights (KIMI_MODEL=/path) with room for
        # vLLM's activations, else the recipe variant's minimum
        self.need_gb = (round(model_gb * LOCAL_MODEL_OVERHEAD, 3) if model_gb is not None
                        else self.variant.vram_minimum_gb)

    def removed_env(self) -> Dict[str, Record]:
        """Recipe env vars this vLLM version no longer has, with what replaces each."""
        version = version_key(self.sel.vllm_version)
        return {k: r for k, r in self.cat.vllm_env_removed.items() if version >= version_key(r.removed_in)}

    def by_generation(self, mapping):
        """Generation key first, then `nvidia` for NVIDIA hardware."""
        if self.hw.generation in mapping:
            return mapping[self.hw.generation]
        if self.hw.brand == "nvidia":
            return mapping.get("nvidia")
        return None

    def by_specificity(self, mapping):
        """hw id > generation > brand > default."""
        for key in (self.sel.hardware, self.hw.generation, self.hw.brand, "default"):
            if key in mapping:
                return mapping[key]
        return None


# ---------------------------------------------------------------- layers shared by every vLLM process


def _override_layers(ctx: _Ctx, pool_defaults) -> Tuple[Tagged, EnvLayers]:
    """Step 5: hardware overrides (strategy-level generation override replaces the recipe's and
    the variant's), then exact-hardware strategy and role overrides."""
    args: Tagged = []
    env: EnvLayers = []
    so = ctx.override
    gen_so = ctx.by_generation(so.hardware_overrides) if so else None
    if gen_so is None or not _restates(gen_so, ctx.by_generation(ctx.recipe.hardware_overrides)):
        # Deliberate difference (`hw-baseline-dropped`): a strategy generation block that restates
        # nothing of the recipe's adds to it; the site would drop the recipe's whole baseline.
        for source, mapping in (("hardware override", ctx.recipe.hardware_overrides),
                                ("variant hardware override", ctx.variant.hardware_overrides)):
            found = ctx.by_generation(mapping)
            if found is not None:
                args += tag(source, found.extra_args)
                env.append((source, found.extra_env))
    if gen_so is not None:
        args += tag("strategy hardware override", gen_so.extra_args)
        env.append(("strategy hardware override", gen_so.extra_env))
    exact = [so.hardware_overrides.get(ctx.sel.hardware) if so else None,
             pool_defaults.hardware_overrides.get(ctx.sel.hardware) if pool_defaults else None]
    for found in exact:
        if found is not None:
            args += tag("strategy hardware override", found.extra_args)
            env.append(("strategy hardware override", found.extra_env))
    return args, env


def _restates(block, baseline) -> bool:
    """Whether a strategy's generation block sets any flag or variable the recipe's own block does
    (then it replaces that block, as the recipe site does)."""
    if baseline is None:
        return True
    flags = {a.split("=", 1)[0] for a in block.extra_args if a.startswith("-")}
    return bool(flags & {a.split("=", 1)[0] for a in baseline.extra_args if a.startswith("-")}
                or set(block.extra_env) & set(baseline.extra_env))


def _drop_moot(ctx: _Ctx, args: Tagged) -> Tagged:
    """Deliberate difference (`forced-exclusive-flag`): flags a hardware override adds that a
    selected feature makes moot (its `conflicts_with_args`) are left out."""
    moot = {flag for fid in ctx.sel.features for flag in ctx.recipe.features[fid].conflicts_with_args}
    if not moot:
        return args
    out: Tagged = []
    skip_value = False
    for tok, source in args:
        if skip_value:
            skip_value = False
            if not tok.startswith("-"):
                continue
        if "hardware override" in source and tok.split("=", 1)[0] in moot:
            skip_value = "=" not in tok
            continue
        out.append((tok, source))
    return out


def _drop_nvlink_only(ctx: _Ctx, args: Tagged) -> Tagged:
    """Deliberate difference 4: recipe values that need a multi-node NVLink domain (hardware.yaml
    `multi_node_nvlink_args`) are left out on hardware without one; the user's own args are kept."""
    rules = ctx.cat.multi_node_nvlink_args
    if ctx.hw.multi_node_nvlink or not rules:
        return args
    out: Tagged = []
    i = 0
    while i < len(args):
        tok, source = args[i]
        flag, _, inline = tok.partition("=")
        value = inline if inline else (args[i + 1][0] if i + 1 < len(args) else "")
        if source != "user" and flag in rules and value in rules[flag]:
            i += 1 if inline else 2
            continue
        out.append(args[i])
        i += 1
    return out


def host_drops_env(host, name: str) -> Optional[str]:
    """Why a host backend (recipes/hardware.yaml `host_backend`) leaves variable `name` out, or None."""
    for key, why in host.drop_env.items():
        if name == key or (key.endswith("_") and name.startswith(key)):
            return why
    return None


def _host_args(ctx: _Ctx, args: Tagged) -> Tagged:
    """A host backend's view of the recipe's flags, read as vLLM's own parser splits them
    (vllm_cli.parse, the launched release's grammar: any spelling, a flag's values whatever they
    look like): its GPU-only ones left out (`drop_args`, each with its reason; the user's own are
    kept for vLLM to judge), and keys merged into JSON values (`json_args`: NIXL's KV buffer on the
    host)."""
    host = ctx.host
    if host is None:
        return args
    drop = {ctx.spec.lookup(flag)[0] for flag in host.drop_args} - {None}
    merge = {opt: dict(keys) for flag, keys in host.json_args.items() if (opt := ctx.spec.lookup(flag)[0])}
    out: Tagged = []
    for unit in parse(args, ctx.spec, strict=False):  # unknown tokens stay for check() to refuse
        opt, source = unit.option, unit.source
        if opt is not None and source != "user" and opt in drop:
            continue
        if opt is not None and opt in merge and len(unit.values) == 1 and not unit.dotted:
            try:
                merged = json.dumps({**json.loads(unit.values[0]), **merge[opt]}, separators=(",", ":"))
            except (ValueError, TypeError):
                merged = unit.values[0]  # not a JSON object: vLLM's parser judges it as given
            where = f"{source}; hardware ({ctx.sel.hardware})"
            flag = unit.tokens[0][0].partition("=")[0]
            out += [(f"{flag}={merged}", where)] if len(unit.tokens) == 1 else [(flag, source), (merged, where)]
            continue
        out += unit.tokens
    return out


def _feature_layers(ctx: _Ctx) -> Tuple[Tagged, EnvLayers]:
    args: Tagged = []
    env: EnvLayers = []
    for fid in ctx.sel.features:
        feat = ctx.recipe.features[fid]
        over = ctx.by_specificity(feat.hardware_overrides)
        args += tag(f"feature:{fid}", over.args if over is not None else feat.args)
        env.append((f"feature:{fid}", over.env if over is not None and over.env else feat.env))
    return args, env


def _compose_vllm(ctx: _Ctx, strategy_args: Tagged, strategy_env: EnvLayers, pool_defaults,
                  own_port: bool) -> Tuple[Tagged, Dict[str, str], Dict[str, str]]:
    """Steps 1-7 for one vLLM process: (its args, every layer tagged, checked by vLLM's grammar but
    not yet deduplicated (the KV layer comes after them: `_finish` dedupes once), env, env provenance)."""
    sel, recipe, var = ctx.sel, ctx.recipe, ctx.variant
    args: Tagged = tag("base", recipe.model.base_args)
    args += tag("variant", var.extra_args)
    exact_var = var.hardware_overrides.get(sel.hardware)
    if exact_var is not None:
        args += tag("variant hardware override", exact_var.extra_args)
    args += strategy_args
    so = ctx.override
    if pool_defaults is not None:
        args += tag("strategy override", pool_defaults.extra_args + pool_defaults.vllm_args)
    elif so is not None:
        args += tag("strategy override", so.extra_args + so.vllm_args)
    hw_args, hw_env = _override_layers(ctx, pool_defaults)
    args += hw_args
    feat_args, feat_env = _feature_layers(ctx)
    args += feat_args
    if ctx.profile is not None:
        args += tag(f"profile:{sel.profile}", ctx.profile.args)
    removed = ctx.removed_env()
    for name, rule in removed.items():
        args += tag(f"vllm {sel.vllm_version}: replaces {name}", rule.replacement_args)
    if sel.revision:
        args += tag("settings", ["--revision", sel.revision])
    if sel.served_model_name != sel.model:
        args += tag("settings", ["--served-model-name", sel.served_model_name])
    args += tag("settings (model source)", sel.load_args)
    if ctx.load is not None:  # KIMI_LOAD_FORMAT's loader (core/compose/loading.py decide)
        args += tag("settings (KIMI_LOAD_FORMAT)", ctx.load.args)
    if sel.host:
        args += tag("settings", ["--host", sel.host])
    if sel.port is not None and own_port:
        args += tag("settings", ["--port", str(sel.port)])
    args += drain_args(sel, ctx.spec)
    args += tag("user", sel.user_args)
    args = _host_args(ctx, _drop_nvlink_only(ctx, _drop_moot(ctx, args)))
    check(args, ctx.spec)  # the layers so far, as vLLM's parser reads them (a bad user arg fails here)

    layers: EnvLayers = [("base", recipe.model.base_env), ("variant", var.extra_env)]
    if exact_var is not None:
        layers.append(("variant hardware override", exact_var.extra_env))
    layers += strategy_env
    layers += hw_env
    layers += feat_env
    if ctx.profile is not None:
        layers.append((f"profile:{sel.profile}", ctx.profile.env))
        tp = engine_args([a for a, _ in args], ctx.spec).tensor_parallel
        for limit, extra in sorted(ctx.profile.env_when_tp_below.items()):
            if tp < limit:
                layers.append((f"profile:{sel.profile} (TP {tp} < {limit})", extra))
    if ctx.host is not None:
        layers.append((f"hardware ({ctx.sel.hardware})", dict(ctx.host.env)))
    env: Dict[str, str] = {}
    origin: Dict[str, str] = {}
    for source, layer in layers:
        for key, value in layer.items():
            if key in removed or (ctx.host is not None and host_drops_env(ctx.host, key)):
                continue
            env[key] = value
            origin[key] = source
    return args, env, origin


DRAIN_FLAG = "--shutdown-timeout"


def drain_args(sel: Selection, spec) -> Tagged:
    """KIMI_DRAIN_TIMEOUT as vLLM's drain budget: SIGTERM then lets running requests finish for up to
    that long (mode=drain) instead of aborting them (vLLM's default 0). A deliberate addition to the
    recipe site's commands; none where the release's grammar lacks the flag, or for 0 (the user's
    own --shutdown-timeout, later, wins)."""
    if not sel.drain_s or spec.lookup(DRAIN_FLAG)[0] is None:
        return []
    return tag("settings (drain)", [DRAIN_FLAG, str(sel.drain_s)])


# ---------------------------------------------------------------- parallel layouts


def _single_node_size(ctx: _Ctx) -> int:
    hw, var = ctx.hw, ctx.variant
    if not ctx.strategy.tp_from_variant:
        return hw.gpu_count
    tp = var.tp
    if isinstance(tp, dict):
        tp = ctx.by_specificity(tp)
    if tp is not None:
        return min(tp, hw.gpu_count)
    so_tp = ctx.override.tp if ctx.override else None
    if so_tp is not None:
        return so_tp
    return 1 if var.vram_minimum_gb <= gpu_vram_gb(hw) else hw.gpu_count


def _multi_node_flags(ctx: _Ctx, rank: int) -> List[str]:
    gpus, nodes, strat = ctx.hw.gpu_count, ctx.sel.nodes, ctx.strategy
    if strat.parallel_flag == "--data-parallel-size":
        flags = ["--data-parallel-size", str(gpus * nodes), "--data-parallel-size-local", str(gpus),
                 "--data-parallel-address", "$HEAD_IP"]
        return flags + (["--data-parallel-start-rank", str(rank * gpus)] if rank > 0 else [])
    if strat.parallelism == "tp_dp":
        flags = ["--tensor-parallel-size", str(gpus), "--data-parallel-size", str(nodes),
                 "--data-parallel-size-local", "1", "--data-parallel-address", "$HEAD_IP"]
        # Deliberate difference (`tp-dp-lb-mismatch`): rank > 0 is headless. The site's worker, with
        # a start rank and an API server of its own, is external load balancing, while rank 0 runs
        # vLLM's internal one, which refuses it ("Remote engine 1 must use --headless unless in
        # external or hybrid dp lb mode": vllm/v1/engine/utils.py; found by the live shape).
        return flags + (["--data-parallel-start-rank", str(rank), "--headless"] if rank > 0 else [])
    if strat.parallelism == "tp_pp":
        flags = ["--tensor-parallel-size", str(gpus), "--pipeline-parallel-size", str(nodes)]
    else:
        flags = ["--tensor-parallel-size", str(gpus * nodes)]
    flags += ["--nnodes", str(nodes), "--node-rank", str(rank), "--master-addr", "$HEAD_IP"]
    return flags + (["--headless"] if rank > 0 else [])


def _pool_local_dp(ctx: _Ctx, pool: Pool, defaults) -> int:
    if pool.parallelism != "dep":
        return 0
    tp = pool_tp(ctx.cat, ctx.sel.hardware, defaults) or 1
    return max(1, pool.gpus_per_node(ctx.hw.gpu_count) // tp)


def _pool_flags(ctx: _Ctx, pool: Pool, defaults, k: int) -> List[str]:
    role, n = pool.name.upper(), pool.nodes
    head = f"${role}_NODE_1"
    if pool.parallelism == "dep":
        local = _pool_local_dp(ctx, pool, defaults)
        tp = pool_tp(ctx.cat, ctx.sel.hardware, defaults)
        flags = ["--tensor-parallel-size", str(tp)] if tp else []
        if pool.node_count * local == 1:
            # One data-parallel rank: no data-parallel wiring. vLLM reads --data-parallel-start-rank
            # with one local rank as external load balancing, which a DP size of 1 refuses
            # (vllm/engine/arg_utils.py create_engine_config; found by the live pd_cluster shape).
            return flags + ["--enable-expert-parallel"]
        flags += ["--data-parallel-size", str(pool.node_count * local), "--data-parallel-size-local", str(local),
                  "--data-parallel-start-rank", str(k * local), "--data-parallel-address", head,
                  "--data-parallel-rpc-port", f"${role}_DP_RPC_PORT"]
        if n > 1:
            flags.append("--data-parallel-hybrid-lb")
        return flags + ["--enable-expert-parallel"]
    flags = ["--tensor-parallel-size", str(pool.node_count * pool.gpus_per_node(ctx.hw.gpu_count))]
    if pool.parallelism == "tep":
        flags.append("--enable-expert-parallel")
    if n > 1:
        flags += ["--nnodes", str(n), "--node-rank", str(k), "--master-addr", head]
        if k > 0:
            flags.append("--headless")
    return flags


def _visible_devices(ctx: _Ctx, pool: Pool) -> str:
    gpus = ctx.hw.gpu_count
    if pool.nodes >= 1:
        ids = range(gpus)
    else:
        half = gpus // 2
        ids = range(half) if pool.name == "prefill" else range(half, 2 * half)
    return ",".join(str(i) for i in ids)


# ---------------------------------------------------------------- processes


def _placeholder_lookup(sel: Selection):
    def lookup(name: str) -> str:
        if name in sel.values:
            return sel.values[name]
        setting = PLACEHOLDER_SETTINGS.get(name)
        if setting is None:
            for prefix in ("PREFILL", "DECODE"):
                if name.startswith(prefix + "_NODE_"):
                    index = name.rsplit("_", 1)[1]
                    setting = PLACEHOLDER_SETTINGS[f"{prefix}_NODE_<i>"]
                    raise KimiError(E.MISSING_SETTING, f"{setting} needs an address for {prefix.lower()} node "
                                    f"{index} (a comma list, one address per node of the {prefix.lower()} pool).")
            raise KimiError(E.MISSING_SETTING, f"The launch needs ${name}, which no setting provides.")
        why = {"KIMI_HEAD_ADDR": "the address of rank 0, reachable from every node, e.g. KIMI_HEAD_ADDR=10.0.0.1 (a "
                                 "LeaderWorkerSet's LWS_LEADER_ADDRESS, the first host of a Slurm job's "
                                 "SLURM_JOB_NODELIST or SkyPilot's SKYPILOT_NODE_IPS fills it in the cluster)",
               "KIMI_IFACE": "the network interface GLOO/NCCL use between nodes, e.g. eth0"}.get(setting, "")
        raise KimiError(E.MISSING_SETTING, f"{setting} is required for this configuration"
                        + (f": {why}." if why else "."))
    return lookup


@dataclass(frozen=True)
class _Draft:
    """One engine as its layers compose it, before the KV layer, the start-up budget and the
    one dedupe (`_finish`): what the memory and profile checks read."""

    role: str
    rank: int
    args: Tagged  # every layer so far, tagged and checked, not deduplicated
    env: Dict[str, str]
    origin: Dict[str, str]  # env name -> its layer
    found: EngineArgs  # what vLLM reads from `args` (last wins), placeholders unfilled
    pool: str  # the selection's pool it serves in (Pool.name)

    @property
    def port(self) -> Optional[int]:
        return None if self.found.headless else self.found.port


def _draft(ctx: _Ctx, role: str, rank: int, args: Tagged, env: Dict[str, str], origin: Dict[str, str],
           pool: str) -> _Draft:
    return _Draft(role, rank, args, env, origin, engine_args([a for a, _ in args], ctx.spec), pool)


def _provenance(args: Tagged, env: Dict[str, str], env_origin: Dict[str, str]) -> Dict[str, str]:
    provenance: Dict[str, str] = {}
    for tok, source in args:
        if tok.startswith("-"):
            provenance[tok.split("=", 1)[0]] = source
    for key, source in env_origin.items():
        if key in env:
            provenance[key] = source
    return provenance


def _router_finish(ctx: _Ctx, program: str, args: Tagged, fleet=None) -> Process:
    lookup = _placeholder_lookup(ctx.sel)
    kept = fleet.source if fleet is not None else None  # a fleet's units' addresses: checked at the start
    words = tuple(a if source == kept else substitute(a, lookup) for a, source in args)
    port = int(ctx.sel.values.get("ROUTER_PORT", "8000"))
    ports = {Port.HTTP: port, **({Port.METRICS: fleet.data.metrics.port} if fleet is not None else {})}
    return service(Kind.ROUTER, "router", (program, *words), ports, port, {}, _provenance(args, {}, {}))


def _finish(ctx: _Ctx, draft: _Draft, kv=None, budget_s: Optional[int] = None, role: Optional[str] = None,
            rank: Optional[int] = None, values: Optional[Dict[str, str]] = None, fleet=None,
            pool: Optional[str] = None) -> Process:
    """The typed engine: the draft's layers, then the KV layer's args (after every other, the
    user's included) and env (after the strategy's and the pool placement's), then a fleet's args
    (core/compose/fleet.py: its policy's), deduplicated once by vLLM's grammar, placeholders filled
    (`values` first: an instance's own head), then the start-up budget's engine-ready wait."""
    args, env, origin = list(draft.args), dict(draft.env), dict(draft.origin)
    files: Dict[str, str] = {}
    if kv is not None:
        args += tag(kv.source, kv.engine_args(draft.role))
        for key, value in kv.env.items():
            if key not in env or origin.get(key) in kv.env_after:
                env[key] = value
                origin[key] = kv.source
        files = dict(kv.files)
    if fleet is not None:
        args += tag(fleet.source, [*fleet.args, *fleet.shedding_args(draft.found, ctx.spec)])
    args = dedupe(args, ctx.spec)
    base = _placeholder_lookup(ctx.sel)
    lookup = (lambda name: values[name] if name in values else base(name)) if values else base
    # Placeholders live in recipe data only: user and settings values pass through untouched, and the
    # KV layer's are filled by core/compose/kv.py.
    filled = ("user", "settings", kv.source if kv is not None else None, fleet.source if fleet is not None else None)
    words = tuple(a if source in filled else substitute(a, lookup) for a, source in args)
    final_env = {k: (v if origin.get(k) == (kv.source if kv is not None else None) else substitute(v, lookup))
                 for k, v in env.items()}
    if budget_s is not None:
        from entrypoint.core.compose.loading import ready_wait  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        for key, value in ready_wait(final_env, budget_s, ctx.spec).items():
            final_env[key] = value
            origin[key] = "settings (KIMI_LOAD_FORMAT: start-up budget)"
    return engine(role or draft.role, draft.rank if rank is None else rank, ctx.sel.model, words, final_env,
                  _provenance(args, final_env, origin), ctx.spec, files, pool=pool or draft.pool)


def _plain_processes(ctx: _Ctx) -> List[_Draft]:
    sel, strat = ctx.sel, ctx.strategy
    env_layers: EnvLayers = [("strategy", strat.env)]
    if ctx.override is not None:
        env_layers += [("strategy override", ctx.override.env), ("strategy override", ctx.override.extra_env)]
    procs = []
    for rank in range(sel.nodes):
        if sel.is_multi_node:
            flags = _multi_node_flags(ctx, rank)
            role = "head" if rank == 0 else "worker"
        else:
            flags = [strat.parallel_flag, str(_single_node_size(ctx))]
            role = "single"
        strategy_args = tag("strategy", [*strat.vllm_args, *flags])
        args, env, origin = _compose_vllm(ctx, strategy_args, env_layers, None, own_port=True)
        procs.append(_draft(ctx, role, rank, args, env, origin, DEPLOYMENT))
    return procs


def _pool_process(ctx: _Ctx, pool: Pool, k: int) -> _Draft:
    strat = ctx.strategy
    role_data = strat.roles[pool.name]
    defaults = getattr(ctx.override, pool.name, None) if ctx.override else None
    strategy_args = tag("strategy", [*role_data.vllm_args, *_pool_flags(ctx, pool, defaults, k)])
    placement = {"CUDA_VISIBLE_DEVICES": _visible_devices(ctx, pool)}
    if pool.nodes >= 2:
        placement.update({"GLOO_SOCKET_IFNAME": "$IFACE_NAME", "NCCL_SOCKET_IFNAME": "$IFACE_NAME"})
    env_layers: EnvLayers = [("strategy", role_data.env), ("pool placement", placement)]
    if ctx.override is not None:
        env_layers.append(("strategy override", ctx.override.env))
    if defaults is not None:
        env_layers.append(("strategy override", defaults.env))
    args, env, origin = _compose_vllm(ctx, strategy_args, env_layers, defaults, own_port=False)
    if not ctx.hw.multi_node_nvlink:  # deliberate difference: NVL4-tray settings only on GB200/GB300
        env = {k2: v for k2, v in env.items() if k2 not in strat.multi_node_nvlink_env}
    if pool.parallelism == "dep" and k > 0:  # each DEP node binds its own NIXL side channel
        head, own = f"${pool.name.upper()}_NODE_1", f"${pool.name.upper()}_NODE_{k + 1}"
        env = {key: (own if value == head else value) for key, value in env.items()}
    return _draft(ctx, pool.name, k, args, env, origin, pool.name)


def _router_process(ctx: _Ctx, pools: Dict[str, Pool], heads: Dict[str, _Draft], fleet=None) -> Process:
    """The PD router in front of the pools' heads; with a fleet (core/compose/fleet.py), of every unit's
    heads, its policy on the prefill pool."""
    router = ctx.strategy.router
    argv: List[str] = ["--policy", router.policy] + list(router.args)
    units: Tagged = []
    locals_ = [0]
    discovered = fleet is not None and fleet.choice.discovered  # Kubernetes: the router finds every unit's pods
    if discovered:
        units = tag(fleet.source, fleet.pd_discovery_args(heads["prefill"].port or 8000))
    for role in ("prefill", "decode"):
        pool = pools[role]
        defaults = getattr(ctx.override, role, None) if ctx.override else None
        port = heads[role].port or 8000
        count = pool.serving_nodes
        for i in range(1, count + 1 if not discovered else 1):
            name = f"{role.upper()}_NODE_{i}"
            host = url_host(ctx.sel.values[name]) if name in ctx.sel.values else f"${name}"  # IPv6 in brackets
            argv += [f"--{role}", f"http://{host}:{port}"]
        if fleet is not None and not discovered:
            units += fleet.pd_unit_urls(ctx.sel, role, count, pool.node_count, port)
        locals_.append(_pool_local_dp(ctx, pool, defaults))
    pinned = ctx.override.router.intra_node_data_parallel_size if ctx.override and ctx.override.router else None
    tail = ["--host", "$ROUTER_HOST", "--port", "$ROUTER_PORT",
            "--intra-node-data-parallel-size", str(pinned or max(max(locals_), 1))]
    fleet_tail = tag(fleet.source, fleet.pd_router_args) if fleet is not None else []
    return _router_finish(ctx, router.program, tag("strategy", argv) + units + tag("strategy", tail) + fleet_tail,
                          fleet)


@dataclass(frozen=True)
class _RouterSlot:
    """Where a PD cluster's router stands in plan order: `_compose_topology` builds it there, once,
    when the layers it fronts (a fleet's) are known."""

    role: str = "router"
    rank: int = 0


def _pd_processes(ctx: _Ctx) -> list:
    pools = ctx.sel.pd_pools
    per_pool = {role: [_pool_process(ctx, pool, k) for k in range(pool.node_count)] for role, pool in pools.items()}
    ports = {role: procs[0].port for role, procs in per_pool.items()}
    if (pools["prefill"].nodes == 0 or pools["decode"].nodes == 0) and ports["prefill"] == ports["decode"]:
        raise KimiError(E.INVALID_VALUE, f"prefill and decode share one node but would both listen on port "
                        f"{ports['prefill']} (the strategy's data, recipes/strategies). Give each pool its own nodes "
                        "(KIMI_PREFILL_NODES / KIMI_DECODE_NODES) or its own port in the strategy.")
    ordered: list = []
    for k in range(max(len(p) for p in per_pool.values())):
        for role in ("prefill", "decode"):
            if k < len(per_pool[role]):
                ordered.append(per_pool[role][k])
        if k == 0:
            ordered.append(_RouterSlot())
    return ordered


# ---------------------------------------------------------------- memory (deliberate difference 2)


def _pools(ctx: _Ctx, processes: list) -> List[Pool]:
    """The selection's pools, each sized by the GPUs one copy of the model spans, read from the
    launch's effective vLLM arguments (TP x PP x DP of the pool's first engine), so `-tp 2` in the
    user's args is what is checked, not the recipe's layout."""
    per_gpu = gpu_vram_gb(ctx.hw)
    out = []
    for pool in ctx.sel.pools:
        head = next(p for p in processes if isinstance(p, _Draft) and p.pool == pool.name and p.rank == 0)
        gpus = head.found.world_size
        out.append(dataclasses.replace(pool, gpus=gpus, vram_gb=gpus * per_gpu))
    return out


def _check_memory(ctx: _Ctx, pools: List[Pool]) -> None:
    need = ctx.need_gb
    hw, sel = ctx.hw, ctx.sel
    gpus_word, memory_word = ("ranks", "memory") if ctx.host is not None else ("GPUs", "GPU memory")
    what = (f"the model at {sel.model} ({need:.1f} GB with vLLM's working memory)" if need != ctx.variant.vram_minimum_gb
            else f"KIMI_VARIANT={sel.variant}")
    for pool in pools:
        # a host backend's ranks each allocate their KV cache (VLLM_CPU_KVCACHE_SPACE, GiB) beside the weights
        kv_gb = round(pool.gpus * ctx.host.kvcache_gib * GIB_GB, 1) if ctx.host is not None else 0.0
        if pool.vram_gb >= need + kv_gb:
            continue
        if kv_gb and pool.vram_gb >= need:  # the weights fit: the ranks' KV cache does not
            raise KimiError(E.INSUFFICIENT_MEMORY,
                            f"{what} and the KV cache of {pool.gpus} rank(s) x {ctx.host.kvcache_gib} GiB "
                            f"(KIMI_CPU_KVCACHE_GIB: {kv_gb:g} GB vLLM's CPU backend allocates beside the weights) need "
                            f"{need + kv_gb:.0f} GB, but the ranks' node(s) hold {pool.vram_gb:.0f} GB (KIMI_CPU_MEMORY_GB). "
                            "Ways "
                            f"out: a smaller KIMI_CPU_KVCACHE_GIB; fewer ranks (KIMI_CPU_RANKS); a larger "
                            "KIMI_CPU_MEMORY_GB on a node that has it; KIMI_SKIP_MEMORY_CHECK=1 to try anyway.")
        nodes_needed = math.ceil(need / hw.vram_gb)
        fitting = [v for v, var in ctx.recipe.variants.items()
                   if var.vram_minimum_gb <= pool.vram_gb and not variant_unsupported(ctx.cat, v, sel.hardware)
                   and need == ctx.variant.vram_minimum_gb]
        where = (f"the {pool.name} pool's {pool.gpus} x {sel.hardware} {gpus_word}" if pool.name != "deployment" else
                 f"{pool.gpus} x {sel.hardware} {gpus_word}")
        ways = []
        node_gpus = hw.gpu_count * max(1, pool.nodes)
        if pool.gpus < node_gpus:
            ways.append(f"span all {node_gpus} GPUs (the layout gives TP x PP x DP = {pool.gpus}: choose a wider "
                        "one with KIMI_STRATEGY or KIMI_PREFILL_PARALLELISM / KIMI_DECODE_PARALLELISM)")
        current = pool.node_count
        if nodes_needed <= current:  # the nodes hold it: only the layout leaves GPUs out
            pass
        elif pool.name == "deployment":
            ways.append(f"KIMI_NODES={nodes_needed} with a multi-node strategy (e.g. KIMI_STRATEGY=multi_node_tp, "
                        f"{nodes_needed * hw.vram_gb:.0f} GB)")
        else:
            ways.append(f"KIMI_{pool.name.upper()}_NODES={nodes_needed} ({nodes_needed * hw.vram_gb:.0f} GB)")
        if fitting:
            ways.append(f"KIMI_VARIANT={' or '.join(fitting)}")
        if ctx.host is not None:
            ways.append("a larger KIMI_CPU_MEMORY_GB (the node's memory) on a node that has it")
            ways.append("KIMI_MODEL=/path/to/a smaller model of the architecture (sized from its files, or KIMI_MODEL_GB)")
        ways.append("KIMI_SKIP_MEMORY_CHECK=1 to try anyway")
        raise KimiError(E.INSUFFICIENT_MEMORY,
                        f"{what} needs at least {need:.0f} GB of {memory_word}, but {where} hold "
                        f"{pool.vram_gb:.0f} GB. Ways out: {'; '.join(ways)}.")


# ---------------------------------------------------------------- profile checks on the final launch


def _check_parallel_sizes(ctx: _Ctx, processes: list) -> None:
    """vLLM's own rule (ParallelConfig): the decode context parallel size divides the tensor
    parallel size. The site renders K2-Instruct's tp_pp override against it on 4-GPU trays."""
    for proc in processes:
        if not isinstance(proc, _Draft):
            continue
        dcp = proc.found.number("decode_context_parallel_size", 1)
        tp = proc.found.tensor_parallel
        if dcp > 1 and tp % dcp:
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"--decode-context-parallel-size {dcp} does not divide "
                            f"--tensor-parallel-size {tp} ({proc.role} of {ctx.sel.strategy} on {ctx.sel.hardware}); "
                            "vLLM refuses it. Use a layout whose TP is a multiple of it (e.g. a node of 8 GPUs), or "
                            f"give --decode-context-parallel-size {math.gcd(dcp, tp)} in KIMI_EXTRA_ARGS.")


def _dest(ctx: _Ctx, flag: str) -> str:
    """The destination of a flag the profile data names (checked against vLLM's grammar)."""
    option = ctx.spec.lookup(flag)[0]
    if option is None:
        raise KimiError(E.UNKNOWN_VALUE, f"KIMI_PROFILE={ctx.sel.profile} names {flag}, which vLLM "
                        f"{ctx.sel.vllm_version} does not have (recipes/models/{ctx.sel.recipe}.yaml).")
    return option.dest


def _check_profile_args(ctx: _Ctx, processes: list) -> None:
    prof, pid = ctx.profile, ctx.sel.profile
    if prof is None:
        return
    for proc in processes:
        if not isinstance(proc, _Draft):
            continue
        found = proc.found.found
        for flag in prof.forbidden_args:
            if _dest(ctx, flag) in found:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_PROFILE={pid} does not support {flag} "
                                f"({prof.description}). Remove it from the vLLM args or drop the profile.")
        for flag, rule in prof.required_args.items():
            value = found.get(_dest(ctx, flag))
            example = f"KIMI_EXTRA_ARGS='{flag} {int(rule.min) if rule.min is not None else '...'}'"
            if not value:
                raise KimiError(E.MISSING_SETTING, f"KIMI_PROFILE={pid} needs {flag}"
                                + (f" >= {rule.min:g}" if rule.min is not None else "")
                                + f" among the vLLM args, e.g. {example} or as a container argument.")
            try:
                number = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                number = None
            if rule.min is not None and (number is None or number < rule.min):
                raise KimiError(E.INVALID_VALUE, f"KIMI_PROFILE={pid} needs {flag} >= {rule.min:g}, got {value}. "
                                f"Use e.g. {example}.")


def resolve(sel: Selection, cat: Catalog, kv: Optional[KvChoice] = None, load: Optional[Decision] = None,
            fleet: Optional[FleetChoice] = None, model_gb: Optional[float] = None) -> Plan:
    """The one composition (docs/composition.md): every engine's layers (base ... user, with
    KIMI_LOAD_FORMAT's loader among the settings), the serving topology (nodes, or the PD pools and
    their router), the memory and profile checks, then the KV layer (`kv`: a core.compose.kv.KvChoice; its
    gates first) with its topology step (a KV store's instances beside the PD pools) and the
    start-up budget (`load`: a core.compose.loading.Decision), each engine deduplicated once; then a fleet's
    layer (`fleet`: a core.compose.fleet.FleetChoice; its gates first): its engines' arguments and its
    router in front of the copies (docs/fleet.md)."""
    ctx = _Ctx(sel, cat, load, model_gb)
    release = None
    if sel.preload:  # KIMI_PRELOAD's refusals first: no layout is composed for what it cannot run beside
        from entrypoint.core.compose import preload  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        release = preload.release(sel, cat, ctx.strategy.deploy_type, kv)
    if ctx.strategy.deploy_type == "pd_cluster":
        serving = _pd_processes(ctx)
    else:
        serving = _plain_processes(ctx)
    pools = _pools(ctx, serving)
    if not sel.skip_memory_check:
        _check_memory(ctx, pools)
    _check_parallel_sizes(ctx, serving)
    _check_profile_args(ctx, serving)
    layer = None
    if kv is not None:
        layer = kv_layer(sel, cat, kv, ctx.strategy.deploy_type)
    budget = None
    if load is not None:
        from entrypoint.core.compose.loading import budget_s  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        budget = budget_s(cat, sel.recipe, sel.variant, ctx.need_gb, pools, load)
    copies = None
    if fleet is not None:
        copies = fleet_layer(sel, cat, fleet, kv)
    if layer is not None and layer.instances:  # the deployment's copies are the KV store's instances
        pools = [dataclasses.replace(pool, name=INSTANCE) for pool in pools]
    weights: Optional[Process] = None
    if release is not None:  # KIMI_PRELOAD: `vllm preload` beside the one engine (core/compose/preload.py)
        serving, weights = _with_preload(ctx, serving, release)
    processes = _compose_topology(ctx, serving, layer, budget, copies)
    if weights is not None:
        processes.append(weights)
    _check_stop_grace(sel, cat, processes)
    return Plan(recipe=sel.recipe, hardware=sel.hardware, variant=sel.variant, strategy=sel.strategy, features=sel.features,
                profile=sel.profile, nodes=sel.nodes, model=sel.model, served_model_name=sel.served_model_name,
                vram_minimum_gb=ctx.need_gb, pools=tuple(pools), local_model_gb=model_gb,
                processes=with_helper_drain(processes), stop_grace_s=sel.stop_grace_s)


def _check_stop_grace(sel: Selection, cat: Catalog, processes: List[Process]) -> None:
    """KIMI_STOP_GRACE holds a stop (recipes/serving.yaml `stop`, docs/day2.md): the preStop pause, the
    engines' drain (each one's --shutdown-timeout as vLLM reads it), the margin to exit. A grace that
    cannot hold it would have the kubelet or Docker SIGKILL a draining engine, cutting its streams."""
    drain = engines_drain(processes)
    stop = cat.serving.stop
    need = stop.pause_s + drain + stop.margin_s
    if need > sel.stop_grace_s:
        raise KimiError(E.INVALID_VALUE, f"KIMI_STOP_GRACE={sel.stop_grace_s} cannot hold a stop: the {stop.pause_s} s "
                        f"pause, the engines' {drain} s drain (KIMI_DRAIN_TIMEOUT) and {stop.margin_s} s to exit need "
                        f"{need} s. Set KIMI_STOP_GRACE={need} or more (and give the platform that grace), or a "
                        f"shorter KIMI_DRAIN_TIMEOUT (docs/day2.md).")


def _with_preload(ctx: _Ctx, serving: list, found: Record) -> Tuple[list, Process]:
    """The engine's draft with the preload layer before the user's args (the user's still win), and
    the weight cache: `vllm preload` with the engine's own arguments (less the API server's), env
    and GPUs, its placeholders filled as the engine's."""
    from entrypoint.core.compose import preload  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    data = preload.load_preload()
    draft = serving[0]
    options = preload.daemon_options(dedupe(list(draft.args), ctx.spec), ctx.spec, found)
    filled = _finish(ctx, dataclasses.replace(draft, args=options))
    weights = preload_process(preload.ROLE, preload.daemon_argv(found, data, ctx.sel.model, filled.args), filled.env,
                              {**filled.provenance, found.model_option: preload.SOURCE}, filled.local_gpus,
                              data.health_port)
    at = next((i for i, (_, source) in enumerate(draft.args) if source == "user"), len(draft.args))
    args = [*draft.args[:at], *preload.engine_layer(found, data), *draft.args[at:]]
    check(args, ctx.spec)
    return [_draft(ctx, draft.role, draft.rank, args, draft.env, draft.origin, draft.pool), *serving[1:]], weights


def _compose_topology(ctx: _Ctx, serving: list, layer, budget: Optional[int], fleet=None) -> List[Process]:
    """The processes in plan order: a KV layer's front (master, store), the engines (once per KV
    store instance where the store has instances: role `instance`, node ranks i*nodes+r, each
    multi-node instance headed by its own address), the router, a KV layer's companions; a
    fleet's router last (a PD fleet's is the PD router, in front of every unit)."""
    if layer is None or not layer.instances:
        pd = ctx.strategy.deploy_type == "pd_cluster"
        pd_fleet = fleet is not None and pd
        if pd:
            pools = ctx.sel.pd_pools
            heads = {role: next(p for p in serving if isinstance(p, _Draft) and p.pool == role and p.rank == 0)
                     for role in pools}
        engine_layer = fleet.pd_engines(heads["prefill"].port or 8000) if pd_fleet else fleet  # one port if discovered
        engines = [_router_process(ctx, pools, heads, fleet) if isinstance(p, _RouterSlot)
                   else _finish(ctx, p, layer, budget, fleet=engine_layer) if isinstance(p, _Draft) else p
                   for p in serving]
        out = [*(layer.front if layer else ()), *engines, *(layer.after if layer else ())]
        if fleet is not None and fleet.choice.front == "vllm-router" and ctx.strategy.deploy_type != "pd_cluster":
            out.append(fleet.router(ctx.sel, [p for p in out if p.is_engine]))
        if fleet is not None and fleet.choice.stream_front:  # the stream front before the fleet's router
            drain = engines_drain(out)
            out = [fleet.fronted(p, drain) if p.kind is Kind.ROUTER else p for p in out]
        return out
    instances: List[Process] = []
    for i in range(layer.instances):
        values = None
        if ctx.sel.is_multi_node:  # each instance's head is its own address
            if i == 0 and not layer.choice.values.get("VLLM_INSTANCE_1"):
                _placeholder_lookup(ctx.sel)("HEAD_IP")  # no head at all: KIMI_HEAD_ADDR's error first
            values = {"HEAD_IP": layer.instance_head(ctx.sel, i)}
        instances += [_finish(ctx, p, layer, budget, role=INSTANCE, rank=i * ctx.sel.nodes + p.rank, values=values,
                              pool=INSTANCE) for p in serving]
    out = [*layer.front, *instances]
    if layer.router is not None:
        out.append(layer.router_process(ctx.sel, next(p.port for p in instances if p.serves_http) or 8000))
    return out


def this_process(plan: Plan, sel: Selection, kv: Optional[KvChoice] = None, fleet: Optional[FleetChoice] = None) -> Process:
    """The process this container runs, read from the plan's topology by KIMI_ROLE and KIMI_NODE_RANK
    (the one role-to-process lookup): a fleet's router (`fleet`: its FleetChoice), a process of a KV
    deployment (`kv`: its KvChoice), the weight cache, a PD pool's node, else the node's own rank."""
    topology = plan.topology
    router = topology.router
    if fleet is not None and sel.role == ROLE and router is not None:  # the fleet's router (core/compose/fleet.py)
        check_start(router)
        return router
    if kv is not None:
        return _kv_process(plan, sel, kv)
    if sel.role is not None and not topology.pd and topology.helper(Kind.PRELOAD) is not None:
        found = topology.process(sel.role, 0)  # the weight cache's container (KIMI_ROLE=preload)
        if found is not None and found.kind is Kind.PRELOAD:
            return found
    if not topology.pd:
        return plan.processes[sel.node_rank]
    if sel.role is None:
        raise KimiError(E.MISSING_SETTING, "KIMI_ROLE is required to launch a pd_cluster process: prefill, decode "
                        "or router (`kimi-serve plan` shows all of them).")
    proc = topology.process(sel.role, sel.node_rank)
    if proc is None:
        pool = sel.pd_pools["prefill" if sel.role == "prefill" else "decode"]
        raise KimiError(E.INVALID_VALUE, f"KIMI_NODE_RANK={sel.node_rank} but the {sel.role} pool has "
                        f"{pool.node_count} node(s): ranks run from 0 to {pool.node_count - 1}.")
    return proc


def _kv_process(plan: Plan, sel: Selection, choice) -> Process:
    """The process this container runs in a KV deployment: KIMI_ROLE (+ KIMI_NODE_RANK)."""
    topology = plan.topology
    roles = topology.roles()
    role = sel.role
    if role is None:
        if not choice.store and not topology.pd:
            return plan.processes[sel.node_rank]
        raise KimiError(E.MISSING_SETTING, f"KIMI_ROLE is required to launch a process of KIMI_KV_OFFLOAD={choice.id}: "
                        f"{', '.join(roles)} (`kimi-serve plan` shows all of them).")
    if role not in roles:
        raise KimiError(E.INVALID_VALUE, f"KIMI_ROLE={role} is not a process of this deployment; its roles: "
                        f"{', '.join(roles)}.")
    proc = topology.process(role, sel.node_rank)  # engines have ranks
    if proc is None:
        count = topology.count(role)
        raise KimiError(E.INVALID_VALUE, f"KIMI_NODE_RANK={sel.node_rank} but the deployment has {count} {role} "
                        f"process(es): ranks run from 0 to {count - 1}.")
    return proc
