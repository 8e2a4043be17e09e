"""Settings + recipe data -> Selection: every choice made and checked, nothing composed yet.

No node: the settings come read, detected hardware (KIMI_HARDWARE=auto) and the installed vLLM are
passed in; it reads only vLLM's grammar files of the data directory (core/data/datadir.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Tuple

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError, unknown_value
from entrypoint.core.compose.plan import Choice, Pool
from entrypoint.core.compose.settings import Settings
from entrypoint.core.data.platforms import load_platforms, model_source
from entrypoint.core.data.recipe import Catalog, default_features
from entrypoint.core.data.versions import release_refusal, version_key  # resolve imports version_key from here
from entrypoint.core.data.versions import release_window, stack_shortfall
from entrypoint.core.vllm.vllm_cli import available_versions, engine_args, spec_for

if TYPE_CHECKING:  # for the annotation only: select imports vllm_cli's functions where it calls them
    from entrypoint.core.vllm.vllm_cli import EngineArgs

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
class Selection(Choice):
    node_rank: int
    role: Optional[str]
    prefill: Optional[Pool]
    decode: Optional[Pool]
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
    user: Optional[EngineArgs] = None  # the user's vLLM args as the launched vLLM reads them, parsed once
    name: str = ""  # the rendered deployment's name: KIMI_NAME, else the recipe's deployment_name
    preload: bool = False  # KIMI_PRELOAD: `vllm preload` beside the engine (core/compose/preload.py)
    drain_s: int = 0  # KIMI_DRAIN_TIMEOUT: vLLM's --shutdown-timeout (0 = vLLM's abort on SIGTERM)
    stop_grace_s: int = 0  # KIMI_STOP_GRACE: every container's grace period, which must hold the drain

    @property
    def is_multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def pools(self) -> Tuple[Pool, ...]:
        """The serving pools chosen: a PD cluster's prefill and decode pools, else the deployment's
        one pool (of KIMI_NODES nodes per copy); the resolver sizes them, the plan fills them."""
        if self.prefill is not None and self.decode is not None:
            return (self.prefill, self.decode)
        return (Pool(name="deployment", nodes=self.nodes),)

    @property
    def pd_pools(self) -> Dict[str, Pool]:
        """A pd_cluster's two pools by role (prefill first): a PD selection has both, any other none."""
        if self.prefill is None or self.decode is None:
            raise ValueError(f"{self.strategy} is not a pd_cluster strategy: it has no prefill and decode pools")
        return {"prefill": self.prefill, "decode": self.decode}


def hardware_targets(catalog: Catalog) -> list:
    """Every KIMI_HARDWARE id the recipe launches on: its GPU targets, then the targets that serve
    every recipe (cpu: vLLM's CPU backend)."""
    recipe = catalog.recipe
    return [*recipe.hardware, *(h for h, hw in catalog.hardware.items()
                                if hw.serves_every_recipe and h not in recipe.hardware and not left_out(recipe, catalog, h))]


def _valid_hardware(settings: Settings, catalog: Catalog, detected: Optional[str]) -> str:
    recipe = catalog.recipe
    targets = hardware_targets(catalog)
    hw = settings.hardware or settings.image_hardware
    source = "KIMI_HARDWARE" if settings.hardware else "the image's default hardware (KIMI_IMAGE_HARDWARE)"
    if hw is None:
        raise KimiError(E.MISSING_SETTING, "KIMI_HARDWARE is not set and this is not an image with a default target. "
                        f"Set KIMI_HARDWARE to one of: {', '.join(targets)}, or auto.")
    if hw == "auto":
        if detected is None:
            raise KimiError(E.MISSING_SETTING, "KIMI_HARDWARE=auto but no supported GPU was detected on this node: "
                            f"set KIMI_HARDWARE to its target, one of: {', '.join(targets)} (cpu: vLLM's CPU "
                            "backend, for a node without GPUs).",
                            see="`kimi-serve doctor` shows what each probe saw.")
        hw = detected
    if hw not in catalog.hardware:
        raise unknown_value(source, hw, targets, "Or use auto to detect it.")
    why = left_out(recipe, catalog, hw)
    if hw not in recipe.hardware and (why or not catalog.hardware[hw].serves_every_recipe):
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"The {recipe.title} recipe has no launch for {hw}"
                        f"{': ' + why.rstrip('.') if why else ''}. Supported: {', '.join(recipe.hardware)}.")
    serves = settings.image_serves
    if serves and hw not in serves:
        target = settings.image_target or "this image"
        raise KimiError(E.UNSUPPORTED_COMBINATION,
                        f"KIMI_HARDWARE={hw}, but image target {target} serves only {', '.join(serves)}. "
                        f"Run the image built for {hw} (tag {catalog.serving.image.name}:<version>-<target>), or set KIMI_HARDWARE to "
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


def strategy_support(catalog: Catalog, sid: str, hw: str) -> Optional[str]:
    """The recipe's `strategy_hardware` word for a strategy on this hardware (hw id > generation >
    brand > default), or None when it says nothing."""
    found = catalog.recipe.strategy_hardware.get(sid, {})
    hardware = catalog.hardware[hw]
    for key in (hw, hardware.generation, hardware.brand, "default"):
        if key in found:
            return found[key]
    return None


def left_out(recipe, catalog: Catalog, hw: str) -> Optional[str]:
    """Why `recipe` has no launch on `hw` where its data says (`hardware_left_out`, by hw id or
    brand), else None: it wins over a target that serves every recipe (the `cpu` target)."""
    return recipe.hardware_left_out.get(hw) or recipe.hardware_left_out.get(catalog.hardware[hw].brand)


def offered_strategies(catalog: Catalog, hw: str) -> list:
    """The strategies the recipe offers on this hardware: its list, plus what `strategy_hardware`
    grants there, less what it takes away there; none where the recipe leaves the hardware out."""
    recipe = catalog.recipe
    if left_out(recipe, catalog, hw):
        return []
    candidates = list(recipe.compatible_strategies) + [s for s in recipe.strategy_hardware
                                                       if s not in recipe.compatible_strategies]
    # A host backend (KIMI_HARDWARE=cpu) stands in for any of the recipe's targets at toy scale: a
    # layout the recipe grants on some hardware is offered on it too.
    anywhere = ({s for s, by_hw in recipe.strategy_hardware.items() if "supported" in by_hw.values()}
                if catalog.hardware[hw].host_backend is not None else set())
    out = []
    for sid in candidates:
        support = strategy_support(catalog, sid, hw)
        if support == "unsupported" or (support is None and sid not in recipe.compatible_strategies
                                        and sid not in anywhere):
            continue
        out.append(sid)
    return out


def min_gpus(catalog: Catalog, sid: str, hw: str) -> int:
    """The fewest GPUs the recipe lets a layout of strategy `sid` span on `hw` (0: no floor)."""
    floors = catalog.recipe.strategy_min_gpus
    backend = catalog.hardware[hw].host_backend
    if backend is not None and not backend.gpu_floors:  # sized for the recipe's GPUs, not a host's ranks
        return 0
    return max(floors.get(sid, 0), floors.get(hw, 0))


def default_strategy(catalog: Catalog, nodes: int) -> str:
    base = catalog.recipe.default_strategy or "single_node_tp"
    if nodes > 1 and catalog.strategies[base].deploy_type == "single_node":
        return base.replace("single_node_", "multi_node_")
    return base


def _valid_strategy(settings: Settings, catalog: Catalog, hw: str) -> str:
    recipe = catalog.recipe
    nodes = settings.nodes
    sid = settings.strategy or default_strategy(catalog, nodes)
    if sid not in catalog.strategies:
        raise unknown_value("KIMI_STRATEGY", sid, catalog.strategies)
    offered = offered_strategies(catalog, hw)
    if sid not in offered:
        why = (f"is marked unsupported on {hw} by the {recipe.title} recipe" if strategy_support(catalog, sid, hw)
               == "unsupported" else f"is not one the {recipe.title} recipe offers on {hw}")
        sibling = sid.replace("single_node_", "multi_node_")
        across = (f" It offers the layout across nodes: KIMI_STRATEGY={sibling} with KIMI_NODES=2 or more."
                  if sibling != sid and sibling in offered else "")
        way = f"Use one of: {', '.join(offered)}." if offered else \
            f"It offers no strategy on {hw}: choose other hardware (`kimi-serve list`)."
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_STRATEGY={sid} {why}. {way}{across}")
    strat = catalog.strategies[sid]
    if strat.deploy_type == "single_node" and nodes > 1:
        alt = sid.replace("single_node_", "multi_node_")
        hint = f" Use KIMI_STRATEGY={alt} for {nodes} nodes." if alt in offered else ""
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_STRATEGY={sid} runs on one node, but KIMI_NODES={nodes}.{hint}")
    floor = min_gpus(catalog, sid, hw)
    count = catalog.hardware[hw].gpu_count
    spans = count * (nodes if strat.deploy_type == "multi_node" else 1)
    if strat.deploy_type != "pd_cluster" and spans < floor:
        need = math.ceil(floor / count)
        multi = sid if strat.deploy_type == "multi_node" else sid.replace("single_node_", "multi_node_")
        way = (f"KIMI_NODES={need}" + ("" if multi == sid else f" with KIMI_STRATEGY={multi}")) \
            if multi in offered else f"another strategy ({', '.join(offered)})"
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_STRATEGY={sid} on {spans} x {hw} GPUs: the "
                        f"{recipe.title} recipe runs it on at least {floor} GPUs (strategy_min_gpus). Use {way}.")
    return sid


def parse_features(spec: Optional[str], defaults: tuple, known, label: str = "KIMI_FEATURES entry",
                   owner: str = "The recipe") -> tuple:
    """None = defaults; "" = none; plain entries form the list; +f / -f edit it (defaults if no plain entry).
    A recipe without features (`known` empty) takes only None or ""."""
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
            setting = label.split()[0]
            raise unknown_value(label, name, known, "" if known else f"{owner} has no features: leave {setting} "
                                "unset or set it to an empty string.")
        if entry[0] == "+" and name not in chosen:
            chosen.append(name)
        elif entry[0] == "-" and name in chosen:
            chosen.remove(name)
    return tuple(dict.fromkeys(chosen))


def _named(spec: Optional[str]) -> set:
    """Features a KIMI_FEATURES value names to have (plain or +f entries)."""
    entries = [e.strip() for e in (spec or "").split(",") if e.strip()]
    return {e.lstrip("+").strip() for e in entries if e[0] != "-"}


def _valid_features(settings: Settings, catalog: Catalog, hw: str, sid: str) -> tuple:
    recipe = catalog.recipe
    chosen = parse_features(settings.features, default_features(recipe, hw), recipe.features,
                            owner=f"The {recipe.title} recipe")
    named = _named(settings.features)
    kept = []
    for fid in chosen:
        allowed = recipe.features[fid].strategies
        if allowed is None or sid in allowed:
            kept.append(fid)
        elif fid in named:
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"Feature {fid} applies to {', '.join(allowed)} in the "
                            f"{recipe.title} recipe, not to KIMI_STRATEGY={sid}. Drop it (KIMI_FEATURES=-{fid}) or "
                            "choose one of those strategies.")
    chosen = tuple(kept)  # a default feature the strategy does not take is left out, as the recipe says
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
        raise unknown_value("KIMI_PROFILE", pid, profiles, "" if profiles else
                            f"The {catalog.recipe.title} recipe has no profiles: leave KIMI_PROFILE unset.")
    prof = profiles[pid]
    for what, value, allowed, setting in (("hardware", hw, prof.hardware, "KIMI_HARDWARE"),
                                          ("variant", vid, prof.variants, "KIMI_VARIANT"),
                                          ("strategy", sid, prof.strategies, "KIMI_STRATEGY")):
        if value not in allowed:
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_PROFILE={pid} ({prof.description}) needs {what} "
                            f"{' or '.join(allowed)}; {setting}={value}. Drop KIMI_PROFILE or change {setting}.")
    return pid


def default_release(catalog: Catalog, hw: Optional[str] = None) -> str:
    """The release a plan is for when nothing names one: recipes/serving.yaml default_vllm, unless the
    recipe refuses it (a later floor) or no image of it is built for `hw`'s image target; then the
    nearest recorded release that has both, later ones first."""
    default = catalog.serving.default_vllm.release
    known = available_versions()
    later = [v for v in known if version_key(v) > version_key(default)]
    earlier = [v for v in reversed(known) if version_key(v) < version_key(default)]
    fits = [v for v in [default, *later, *earlier] if release_refusal(catalog.recipe.model, v) is None]
    target = catalog.hardware[hw].image_target if hw in catalog.hardware else None
    built = [v for v in fits if target is None or target in catalog.serving.image.releases.get(v, ())]
    return (built or fits or [default])[0]


def _valid_vllm_version(settings: Settings, catalog: Catalog, detected: Optional[str], known,
                        hw: Optional[str] = None) -> str:
    """KIMI_VLLM_VERSION, else the installed vLLM's (`detected`), else `default_release` for `hw`."""
    raw = settings.vllm_version or detected or default_release(catalog, hw)
    source = "KIMI_VLLM_VERSION" if settings.vllm_version else ("the installed vLLM" if detected else "")
    # x.y.z in ASCII digits ('０.３３.０' is no release), an optional v, a build suffix (+cu130) ignored
    match = re.fullmatch(r"v?([0-9]+\.[0-9]+\.[0-9]+)(?:[.+-][0-9A-Za-z.+-]*)?", raw.strip())
    if not match:
        raise KimiError(E.INVALID_VALUE, f"{source or 'KIMI_VLLM_VERSION'}={raw!r} is not a vLLM release like "
                        f"{known[-1]}. Supported: {', '.join(known)}.")
    version = match.group(1)
    model = catalog.recipe.model
    why = release_refusal(model, version)  # before any grammar lookup (it falls back to the oldest file)
    if why:
        fit = [v for v in known if release_refusal(model, v) is None]
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"{source or 'KIMI_VLLM_VERSION'}={version}: the "
                        f"{catalog.recipe.title} recipe {why.rstrip('.')}. It runs on vLLM "
                        f"{release_window(model)}: use an image built on vLLM {', '.join(fit) or model.min_vllm_version} "
                        "(the default tags; <vllm>-<target> for another release), or another KIMI_RECIPE.")
    return version


def _check_stack(settings: Settings, catalog: Catalog, hw: str) -> None:
    """A recipe's `min_stack` (K3: CUDA 13) against the image's base, where the image says it:
    CUDA on NVIDIA hardware, ROCm on the others."""
    need = catalog.recipe.model.min_stack
    nvidia = catalog.brands[catalog.hardware[hw].brand].name.lower() == "nvidia"
    short = stack_shortfall(need, {"cuda": settings.image_cuda if nvidia else None,
                                   "rocm": None if nvidia else settings.image_rocm})
    if short:
        stack, want, have = short
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"The {catalog.recipe.title} recipe needs {stack.upper()} >= "
                        f"{want}, but this image's base has {have} (KIMI_IMAGE_{stack.upper()}). {need.why} Run an "
                        f"image built on a {stack.upper()} {want.split('.')[0]} base (the default tags).")


def _check_version_needs(catalog: Catalog, version: str, pid: Optional[str], features: tuple) -> None:
    recipe = catalog.recipe
    needs = [(f"KIMI_PROFILE={pid}", recipe.profiles[pid].min_vllm)] if pid else []
    needs += [(f"feature {fid}", recipe.features[fid].min_vllm) for fid in features]
    for what, minimum in needs:
        if minimum and version_key(version) < version_key(minimum):
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"{what} needs vLLM >= {minimum}, but the launch is for vLLM "
                            f"{version} (KIMI_VLLM_VERSION, or the image's vLLM). Run an image built on vLLM >= "
                            f"{minimum} (the default tags), or drop {what.split('=')[0] if '=' in what else what}.")


def version_classes(catalog: Catalog) -> list:
    """The vLLM releases from which plan's verdict on the same other settings may change, oldest
    first: every recorded grammar (a release without its own is judged by the newest not newer,
    vllm_cli.spec_for), every floor the recipe data records (a model's min_vllm_version, a
    feature's or profile's min_vllm, an env var's removed_in), and every release a model refuses
    with the one after it. A release is judged as the newest class not newer than it; "0.0.0"
    stands for those below all. (KV options' floors, the loaders' exact release lists and the
    router's grammar needs are judged by their own rules.)"""
    found = {"0.0.0", *available_versions(), *(r.removed_in for r in catalog.vllm_env_removed.values())}
    for recipe in catalog.recipes.values():
        found.add(recipe.model.min_vllm_version)
        found.update(x.min_vllm for x in (*recipe.features.values(), *recipe.profiles.values()) if x.min_vllm)
        for refused in recipe.model.refused_vllm_versions:
            major, minor, patch = version_key(refused)
            found.update((refused, f"{major}.{minor}.{patch + 1}"))
    return sorted(found, key=version_key)


def pool_tp(catalog: Catalog, hw: str, defaults) -> Optional[int]:
    """The TP a PD pool's ranks run by the recipe (`strategy_overrides.pd_cluster.<role>.tp`), None
    where the recipe gives none or the hardware's ranks are not the GPUs it is sized for (a host
    backend without gpu_floors: like the GPU floors, the recipe's pool TP sizes its GPUs)."""
    backend = catalog.hardware[hw].host_backend
    if defaults is None or (backend is not None and not backend.gpu_floors):
        return None
    return defaults.tp


def derived_pool(catalog: Catalog, hw: str, vid: str, role: str, mode: Optional[str] = None,
                 model_gb: Optional[float] = None) -> Pool:
    """The pool of `role` the settings get when they name no size: the recipe's pool defaults, else
    as many whole nodes as the variant's memory and the recipe's GPU floor for the layout need."""
    recipe, hardware = catalog.recipe, catalog.hardware[hw]
    defaults = getattr(recipe.strategy_overrides.get("pd_cluster"), role, None)
    mode = mode or (defaults.parallelism if defaults else "tp")
    nodes = defaults.nodes if defaults is not None else None
    if nodes is None:
        floor = min_gpus(catalog, f"multi_node_{mode}", hw)
        vram = model_gb if model_gb is not None else recipe.variants[vid].vram_minimum_gb
        nodes = max(1, math.ceil(vram / hardware.vram_gb), math.ceil(floor / hardware.gpu_count))
    return Pool(name=role, nodes=nodes, parallelism=mode)


def pool_parallelisms(catalog: Catalog) -> list:
    """The layouts a PD pool may take: those of the recipe's multi-node strategies."""
    allowed = []
    for sid in catalog.recipe.compatible_strategies:
        for suffix, m in _POOL_MODE_BY_SUFFIX:
            if sid.endswith(suffix) and m not in allowed:
                allowed.append(m)
    return allowed


def _pool(settings: Settings, catalog: Catalog, role: str, hw: str, vid: str, model_gb: Optional[float]) -> Pool:
    pool = derived_pool(catalog, hw, vid, role, settings.values[f"{role}_parallelism"], model_gb)
    allowed = pool_parallelisms(catalog)
    if pool.parallelism not in allowed:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_{role.upper()}_PARALLELISM={pool.parallelism} is not offered "
                        f"by the recipe's strategies; use one of {', '.join(allowed)}.")
    nodes = settings.values[f"{role}_nodes"]
    if nodes is not None:
        pool = Pool(name=role, nodes=nodes, parallelism=pool.parallelism)
    _check_pool(catalog, hw, pool)
    return pool


def pool_rules(catalog: Catalog, hw: str, role: str) -> dict:
    """What the recipe's data asks of a PD pool of `role` on `hw`, per parallelism: its GPU floor
    (strategy_min_gpus), whether the recipe marks the layout unsupported, and the pool's TP with the
    way out when a tp/tep layout would run another (`_check_pool`; the chart's facts carry the same)."""
    recipe, count = catalog.recipe, catalog.hardware[hw].gpu_count
    defaults = getattr(recipe.strategy_overrides.get("pd_cluster"), role, None)
    setting = f"KIMI_{role.upper()}"
    layouts = {m: {"min_gpus": min_gpus(catalog, f"multi_node_{m}", hw),
                   "unsupported": strategy_support(catalog, f"multi_node_{m}", hw) == "unsupported"}
               for m in ("tp", "tep", "dep")}
    tp = pool_tp(catalog, hw, defaults)
    way = None
    if tp:
        ways = []
        if count % tp == 0 and not layouts["dep"]["unsupported"]:
            ways.append(f"{setting}_PARALLELISM=dep (TP {tp} per data-parallel rank)")
        if tp % count == 0:
            ways.append(f"{setting}_NODES={tp // count} if the model fits")
        way = " or ".join(ways) if ways else f"another strategy: a {tp}-GPU tensor-parallel group does not fit a " \
            f"{hw} pool of whole nodes ({count} GPUs each)"
    rank_way = None  # a dep pool whose rank (TP `tp`) is wider than a node: the tensor-parallel layouts
    if tp and tp > count:
        ways = [f"{setting}_PARALLELISM={m} with {setting}_NODES={tp // count}" for m in ("tep", "tp")
                if not layouts[m]["unsupported"] and tp % count == 0]
        rank_way = " or ".join(ways) or "another strategy"
    return {"layouts": layouts, "tp": tp, "tp_way": way, "rank_way": rank_way}


def _check_pool(catalog: Catalog, hw: str, pool: Pool) -> None:
    """Pools the recipe's own data rules out (docs/composition.md: the site renders them anyway)."""
    recipe, role = catalog.recipe, pool.name
    count = catalog.hardware[hw].gpu_count
    gpus = pool.node_count * pool.gpus_per_node(count)
    setting = f"KIMI_{role.upper()}"
    rules = pool_rules(catalog, hw, role)
    layouts = rules["layouts"]
    if layouts[pool.parallelism]["unsupported"]:
        others = [m for m in layouts if m != pool.parallelism and not layouts[m]["unsupported"]]
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"The {role} pool's {pool.parallelism} layout: the {recipe.title} "
                        f"recipe marks multi_node_{pool.parallelism} unsupported on {hw}. Set "
                        f"{setting}_PARALLELISM to {' or '.join(others)}.")
    floor = layouts[pool.parallelism]["min_gpus"]
    if gpus < floor:
        need = math.ceil(floor / count)
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"The {role} pool spans {gpus} x {hw} GPUs, but the {recipe.title} "
                        f"recipe runs a {pool.parallelism} layout on at least {floor} (strategy_min_gpus). Set "
                        f"{setting}_NODES={need}.")
    tp = rules["tp"]
    if tp and pool.parallelism == "dep" and tp > pool.gpus_per_node(count):
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"The {recipe.title} recipe gives the {role} pool tensor parallel "
                        f"size {tp} per data-parallel rank, but its dep layout keeps each rank on one node and a "
                        f"{hw} node gives the pool {pool.gpus_per_node(count)} GPUs. Use {rules['rank_way']}.")
    if tp and pool.parallelism in ("tp", "tep") and gpus != tp:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"The {recipe.title} recipe gives the {role} pool tensor parallel "
                        f"size {tp}, but its {pool.parallelism} layout spans {gpus} x {hw} GPUs and would run TP "
                        f"{gpus}, not what the recipe means. Use {rules['tp_way']}.")


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


def with_addresses(selection: Selection, settings: Settings) -> Selection:
    """`selection` with the addresses and ports of `settings` (HEAD_IP, PREFILL_NODE_1, ...): a
    deployment's own addresses, known only once the selection is made, filled in without
    selecting again."""
    return replace(selection, values=_placeholder_values(settings))


def select(settings: Settings, catalog: Catalog, detected_hardware: Optional[str] = None,
           detected_vllm: Optional[str] = None, model_gb: Optional[float] = None) -> Selection:
    """`model_gb`: a local model's weights (KIMI_MODEL=/path), which size derived PD pools instead of
    the recipe variant's minimum."""
    # The recipe's vLLM window first: a release it refuses is refused on any hardware (and before
    # any grammar lookup, which falls back to the oldest grammar file for a release it lacks).
    named = settings.vllm_version or detected_vllm
    vllm_version = _valid_vllm_version(settings, catalog, detected_vllm, available_versions()) if named else ""
    hw = _valid_hardware(settings, catalog, detected_hardware)
    vllm_version = vllm_version or _valid_vllm_version(settings, catalog, None, available_versions(), hw)
    _check_stack(settings, catalog, hw)
    vid = _valid_variant(settings, catalog, hw)
    sid = _valid_strategy(settings, catalog, hw)
    features = _valid_features(settings, catalog, hw, sid)
    pid = _valid_profile(settings, catalog, hw, vid, sid)
    _check_version_needs(catalog, vllm_version, pid, features)
    strat = catalog.strategies[sid]
    is_pd = strat.deploy_type == "pd_cluster"
    nodes = settings.nodes if strat.deploy_type == "multi_node" else 1
    prefill = _pool(settings, catalog, "prefill", hw, vid, model_gb) if is_pd else None
    decode = _pool(settings, catalog, "decode", hw, vid, model_gb) if is_pd else None
    if prefill is not None and decode is not None:
        for pool in (prefill, decode):
            addrs = settings.values[f"{pool.name}_addrs"]
            units = settings.replicas if settings.router != "none" else 1  # a PD fleet: every unit's nodes (core/compose/fleet.py)
            if len(addrs) > pool.node_count * units:
                raise KimiError(E.INVALID_VALUE, f"KIMI_{pool.name.upper()}_ADDRS lists {len(addrs)} addresses but the "
                                f"{pool.name} pool has {pool.node_count} node(s). Give one address per node, or set "
                                f"KIMI_{pool.name.upper()}_NODES={len(addrs)}.")
    elif settings.node_rank >= nodes and settings.role != "instance":  # a KV store's instances: core/compose/kv.py
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
    user = engine_args(user_args, spec_for(vllm_version))
    return Selection(
        hardware=hw, variant=vid, strategy=sid, features=features, profile=pid,
        nodes=nodes, node_rank=settings.node_rank, role=settings.role,
        prefill=prefill, decode=decode,
        model=model,
        served_model_name=settings.served_model_name or model_id,
        recipe=catalog.recipe.id,
        host=settings.host, port=settings.port,
        user_args=user_args,
        skip_memory_check=settings.skip_memory_check,
        vllm_version=vllm_version,
        values=_placeholder_values(settings),
        load_args=_load_args(model, user),
        user=user,
        revision=settings.model_revision,
        name=settings.name or catalog.recipe.deployment_name,
        drain_s=settings.drain_timeout,
        stop_grace_s=settings.stop_grace,
        preload=settings.preload,
    )


def _load_args(model: str, user) -> tuple:
    """A model in object storage (s3://, gs://) is streamed by vLLM's object-storage loader."""
    if "://" not in model:
        return ()
    model_source(model)  # a scheme vLLM cannot stream from is an error here
    wanted = load_platforms().object_storage.load_format
    given = user.get("load_format")
    if given is not None and given != wanted:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_MODEL={model} is in object storage, which vLLM loads only "
                        f"with --load-format {wanted}, but the arguments give --load-format {given}. Remove it, or "
                        "load from a local path.")
    return ("--load-format", wanted)
