"""How the weights get from storage to the GPUs: KIMI_LOAD_FORMAT, the loader `auto` picks for a
storage kind, the loader's extra config checked against vLLM's own rules, the expected load time
and the start-up budget. The facts are recipes/loaders.yaml (validated by `loading_schema`); the
node's storage facts come from `entrypoint.node.storage`. Pure apart from reading the data file.

KIMI_LOAD_FORMAT=recipe (the default) changes nothing: the launch is the recipe's.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError
from entrypoint.core.data.recipe import default_recipes_dir, load_section
from entrypoint.core.vllm.vllm_cli import parse, values

RECIPE, AUTO = "recipe", "auto"
SETTING = "KIMI_LOAD_FORMAT"
FORMAT_FLAG, CONFIG_FLAG = "--load-format", "--model-loader-extra-config"


def _load(directory: str):
    """The loaders part of the one catalog (core/data/recipe: read, validated and cross-checked with the rest)."""
    return load_section("loaders", Path(directory))


def load_data(directory: Optional[Path] = None):
    """recipes/loaders.yaml, validated (read only when a launch, doctor or a renderer needs it)."""
    return _load(str(directory or default_recipes_dir()))


# ---------------------------------------------------------------- the node's storage


@dataclass(frozen=True)
class StorageFacts:
    """What the node layer found about the weights' volume."""

    path: Optional[str] = None  # the directory the weights are (or will be) read from
    fstype: Optional[str] = None  # its file system type (/proc/self/mountinfo)
    gds_driver: bool = False  # the nvidia-fs driver is loaded
    object_store: bool = False  # the model is an s3:// or gs:// URL
    sample_bytes: int = 0  # bytes of a weights file read in the sample
    sample_s: float = 0.0
    sample_direct: bool = False  # read with O_DIRECT (past the page cache)
    note: str = ""  # why there is no sample, or what limited it
    installed: Optional[tuple] = None  # loader ids whose packages vLLM's Python has (None: not checked)

    @property
    def sample_gbps(self) -> Optional[float]:
        return self.sample_bytes / self.sample_s / 1e9 if self.sample_bytes and self.sample_s > 0 else None


def storage_kind(facts: Optional[StorageFacts], data=None) -> str:
    data = data or load_data()
    if facts is None:
        return "unknown"
    if facts.object_store:
        return "object"
    fstype = (facts.fstype or "").lower()
    if not fstype:
        return "unknown"
    if fstype in data.storage.network_fs or fstype.startswith("fuse."):
        return "network"
    if fstype in data.storage.memory_fs:
        return "memory"
    if fstype in data.storage.gds_fs and facts.gds_driver:
        return "local_gds"
    return "local"


# ---------------------------------------------------------------- measured speeds


def _measured_kind(kind: str, data) -> str:
    rule = data.auto[kind]
    return rule.measured_as or kind


def measured_gbps(loader: str, kind: str, data=None) -> Optional[float]:
    """The median of `loader`'s measured GB/s over every measurement of storage `kind`."""
    data = data or load_data()
    kind = _measured_kind(kind, data)
    found = [m.loaders[loader] for m in data.measurements if m.storage == kind and loader in m.loaders]
    return statistics.median(found) if found else None


def disk_ratio(loader: str, kind: str, data=None) -> Optional[float]:
    """`loader`'s measured speed over the disk limit measured in the same run (median over runs)."""
    data = data or load_data()
    kind = _measured_kind(kind, data)
    found = [m.loaders[loader] / m.limits.disk_gbps for m in data.measurements
             if m.storage == kind and loader in m.loaders]
    return statistics.median(found) if found else None


def planning_gbps(loader: str, kind: str, data=None) -> float:
    """`loader`'s speed on storage `kind`: measured there, else the kind's planning figure scaled by
    the loader's measured ratio to the disk limit on any storage (how much of a disk it uses)."""
    data = data or load_data()
    measured = measured_gbps(loader, kind, data)
    if measured:
        return measured
    return data.budget.planning_gbps[kind] * min(1.0, _any_ratio(loader, data))


def _any_ratio(loader: str, data) -> float:
    """`loader`'s measured speed over the disk limit, over every measurement (1 where never measured)."""
    ratios = [m.loaders[loader] / m.limits.disk_gbps for m in data.measurements if loader in m.loaders]
    return statistics.median(ratios) if ratios else 1.0


# ---------------------------------------------------------------- the choice


@dataclass(frozen=True)
class Decision:
    """What KIMI_LOAD_FORMAT made of the launch: the arguments it adds and why."""

    setting: str  # recipe | auto | a load format
    loader: Optional[str] = None  # the loader id (recipes/loaders.yaml `loaders`), None: vLLM's default/the recipe's
    load_format: Optional[str] = None
    extra_config: Dict[str, object] = field(default_factory=dict)
    storage: str = "unknown"
    reason: str = ""

    @property
    def args(self) -> Tuple[str, ...]:
        if self.load_format is None:
            return ()
        out: Tuple[str, ...] = (FORMAT_FLAG, self.load_format)
        if self.extra_config:
            out += (CONFIG_FLAG, json.dumps(self.extra_config, sort_keys=True, separators=(",", ":")))
        return out


# printf-style (the vLLM version, the versions listed), so that the Helm chart refuses in the same words
UNLISTED_VERSION = (SETTING + " needs the load formats of vLLM %s, which recipes/loaders.yaml does not list (it has "
                    "%s). Use " + SETTING + "=recipe, or set KIMI_VLLM_VERSION to one of those.")


def formats_of(vllm_version: str, data=None) -> tuple:
    data = data or load_data()
    if vllm_version not in data.load_formats:
        raise KimiError(E.UNSUPPORTED_COMBINATION, UNLISTED_VERSION % (vllm_version, ", ".join(data.load_formats)))
    return tuple(data.load_formats[vllm_version])


def best_loader(kind: str, vllm_version: str, data=None, installed: Optional[tuple] = None,
                brand: Optional[str] = None) -> Tuple[str, str]:
    """(loader id, why) for storage `kind`: the fastest measured loader that vLLM accepts, that runs
    on the GPU `brand` and (when `installed` is known) whose packages are there; else the rule, else
    vLLM's default."""
    data = data or load_data()
    accepted = formats_of(vllm_version, data)
    rule = data.auto[kind]
    runs = {lid for lid, ld in data.loaders.items() if not ld.brands or brand is None or brand in ld.brands}
    usable = {lid for lid, ld in data.loaders.items() if ld.load_format in accepted and lid in runs
              and (installed is None or lid in installed or not ld.packages)}
    speeds = {lid: g for lid in usable if (g := measured_gbps(lid, kind, data)) is not None}
    missing = sorted(lid for lid in data.loaders if lid not in usable and lid in runs)
    lacks = f" (this node's Python lacks {', '.join(missing)})" if installed is not None and missing else ""
    if rule.rule not in usable:
        return data.vllm_default, f"vLLM's default: the rule for {kind} storage, {rule.rule}, is not usable{lacks}"
    if speeds and kind != "object":
        lid = max(speeds, key=lambda k: speeds[k])
        basis = _measured_kind(kind, data)
        others = ", ".join(f"{k} {v:.2f}" for k, v in sorted(speeds.items(), key=lambda kv: -kv[1]) if k != lid)
        return lid, (f"the fastest measured on {basis} storage: {speeds[lid]:.2f} GB/s"
                     + (f" against {others}" if others else "") + lacks)
    return rule.rule, f"the rule for {kind} storage; nothing measured there{lacks}"


def _config_class(load_format: str, data) -> Optional[str]:
    """The vLLM loader class serving `load_format` whose extra config the data describes, or None."""
    return next((cls for cls, c in data.extra_config.items() if load_format in c.formats), None)


def _loader_id(load_format: str, data) -> Optional[str]:
    return next((lid for lid, ld in data.loaders.items() if ld.load_format == load_format), None)


def _user_config(user_args: Sequence[str], spec) -> Tuple[Dict[str, object], bool]:
    """The extra config the user's arguments give (JSON value and `--model-loader-extra-config.key v`
    forms), and whether they give any."""
    config: Dict[str, object] = {}
    given = False
    for unit in parse([(t, "user") for t in user_args], spec, strict=False):
        if unit.option is None or unit.option.dest != "model_loader_extra_config" or not unit.values:
            continue
        given = True
        raw = unit.values[0]
        if unit.dotted:
            key = unit.tokens[0][0].split("=", 1)[0].split(".", 1)[1]
            try:
                config[key] = json.loads(raw)
            except ValueError:
                config[key] = raw
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            raise KimiError(E.INVALID_VALUE, f"{CONFIG_FLAG} {raw[:80]!r} is not JSON (in KIMI_EXTRA_ARGS or the "
                            "container arguments). Give an object, e.g. '{\"concurrency\": 32}'.") from None
        if not isinstance(value, dict):
            raise KimiError(E.INVALID_VALUE, f"{CONFIG_FLAG} must be a JSON object, not {type(value).__name__} "
                            "(in KIMI_EXTRA_ARGS or the container arguments).")
        config = dict(value)
    return config, given


def _check_value(key: str, kind: str, value: object, load_format: str) -> None:
    ok = {"bool": isinstance(value, bool),
          "positive_int": isinstance(value, int) and not isinstance(value, bool) and value > 0,
          "memory_limit": isinstance(value, int) and not isinstance(value, bool) and value >= -1}[kind]
    if not ok:
        want = {"bool": "true or false", "positive_int": "a whole number above 0",
                "memory_limit": "a whole number of bytes, or -1 for no limit"}[kind]
        raise KimiError(E.INVALID_VALUE, f"{CONFIG_FLAG}: {key} must be {want} for --load-format {load_format}, "
                        f"not {json.dumps(value)[:40]}.")


def check_extra_config(config: Dict[str, object], load_format: str, vllm_version: str, data=None) -> None:
    """vLLM's own rules for the loader's extra config (its loader class's allowed keys and their
    kinds in that release), so a bad key fails here and not after the container started."""
    data = data or load_data()
    cls = _config_class(load_format, data)
    if cls is None or not config:
        return
    allowed = data.extra_config[cls].keys.get(vllm_version)
    if allowed is None:
        return
    unknown = sorted(k for k in config if k not in allowed)
    if unknown:
        raise KimiError(E.INVALID_VALUE, f"{CONFIG_FLAG} has {', '.join(unknown)}, which --load-format {load_format} "
                        f"does not take in vLLM {vllm_version} (it takes {', '.join(allowed) or 'no key'}).")
    for key, value in config.items():
        _check_value(key, allowed[key], value, load_format)


def decide(setting: str, vllm_version: str, user_args: Sequence[str], spec, model_is_object: bool,
           storage: Optional[StorageFacts], data=None, brand: Optional[str] = None) -> Decision:
    """What KIMI_LOAD_FORMAT adds to every vLLM process of the launch."""
    if setting == RECIPE:
        return Decision(setting)
    data = data or load_data()
    given = values(list(user_args), spec).get("load_format")
    if given is not None:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"{SETTING}={setting} chooses the load format, but the vLLM "
                        f"arguments give --load-format {given} too. Keep one: unset {SETTING} (or set it to "
                        f"`recipe`), or remove --load-format from KIMI_EXTRA_ARGS / the container arguments.")
    user_config, user_gave = _user_config(user_args, spec)
    object_rule = data.auto["object"].rule
    if setting == AUTO:
        if model_is_object:
            storage = StorageFacts(object_store=True)
        if storage is None:
            return Decision(setting, storage="unknown", reason="decided on the node at start (auto)")
        kind = storage_kind(storage, data)
        lid, why = best_loader(kind, vllm_version, data, storage.installed, brand)
        rule = data.auto[kind]
        extra = {} if user_gave or lid != rule.rule else dict(rule.extra_config)
        fmt = data.loaders[lid].load_format
        check_extra_config(user_config or extra, fmt, vllm_version, data)
        return Decision(setting, lid, fmt, extra, kind, why)
    fmt = setting.lower()
    accepted = formats_of(vllm_version, data)
    if fmt not in accepted:
        raise KimiError(E.UNKNOWN_VALUE, f"{SETTING}={setting} is not a load format of vLLM {vllm_version}. It "
                        f"accepts: {', '.join(accepted)}; or `recipe` (the recipe's own flags) or `auto`."
                        + E.did_you_mean(fmt, [*accepted, "recipe", "auto"]))
    if model_is_object and fmt != data.loaders[object_rule].load_format:
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"{SETTING}={setting}, but the model is in object storage, "
                        f"which vLLM loads only with {data.loaders[object_rule].load_format}. Set {SETTING}=auto "
                        "or recipe, or load from a local path.")
    check_extra_config(user_config, fmt, vllm_version, data)
    kind = "object" if model_is_object else storage_kind(storage, data) if storage else "unknown"
    return Decision(setting, _loader_id(fmt, data), fmt, {}, kind, f"{SETTING}={setting}")


# ---------------------------------------------------------------- time and budget


def checkpoint_gb(recipe_id: str, variant: str, vram_minimum_gb: float, data=None) -> float:
    """The checkpoint's size on disk (GB): recipes/loaders.yaml, else the variant's VRAM minimum."""
    data = data or load_data()
    return float(data.checkpoints.get(recipe_id, {}).get(variant, vram_minimum_gb))


def node_share_gb(size_gb: float, pools) -> float:
    """What one node reads: a pool holds one copy over its nodes (0 nodes: two pools share one)."""
    nodes = [p.nodes for p in pools] or [1]
    if min(nodes) == 0:
        return size_gb * 2
    return size_gb / min(nodes)


def expected_load_s(share_gb: float, loader: str, kind: str, sample_gbps: Optional[float] = None,
                    data=None) -> Tuple[float, str]:
    """(seconds, basis): the node's share over the loader's speed, from this node's sample scaled
    by the loader's measured ratio to the disk limit when there is a sample, else the data's."""
    data = data or load_data()
    ratio = disk_ratio(loader, kind, data) or _any_ratio(loader, data)
    if sample_gbps:
        gbps = sample_gbps * ratio
        return share_gb / gbps, f"{gbps:.2f} GB/s: the sample x {ratio:.2f}, {loader}'s measured share of the disk"
    gbps = planning_gbps(loader, kind, data)
    return share_gb / gbps, f"{gbps:.2f} GB/s, recipes/loaders.yaml"


def startup_budget_s(floor_s: int, interval_s: int, share_gb: float, loader: Optional[str], kind: str,
                     data=None) -> int:
    """The start-up budget: overhead + margin x the expected load, never below `floor_s`
    (recipes/serving.yaml's start period), rounded up to whole health-check intervals."""
    data = data or load_data()
    lid = loader or data.vllm_default
    load_s, _ = expected_load_s(share_gb, lid, kind, None, data)
    want = data.budget.engine_overhead_s + data.budget.margin * load_s
    budget = max(floor_s, int(want + 0.999))
    return -(-budget // interval_s) * interval_s


def budget_s(catalog, recipe_id: str, variant: str, vram_minimum_gb: float, pools, decision: Optional[Decision]) -> int:
    """The start-up budget of a deployment: recipes/serving.yaml's start period for
    KIMI_LOAD_FORMAT=recipe (unchanged launches), else what the checkpoint's size, each node's share
    of it (`pools`) and the loader ask, never less."""
    health = catalog.serving.health
    if decision is None or decision.setting == RECIPE:
        return health.start_period_s
    data = load_data()
    size = checkpoint_gb(recipe_id, variant, vram_minimum_gb, data)
    return startup_budget_s(health.start_period_s, health.interval_s, node_share_gb(size, pools),
                            decision.loader, decision.storage, data)


def startup_bound_s(catalog) -> int:
    """The recipe's bound on any start (Kubernetes' startupProbe and an autoscaled Deployment's
    progress deadline, the same for every launch of the recipe, so a rendering looks it up and
    computes none): the longest budget any of its launches can get, whatever its variant, loader or
    pools (a node reading two pools' copies: PD pools sharing one node), where storage is unknown or
    an object store as it is when a deployment is rendered. The container keeps its own launch's
    budget itself (node/startup.py), so the probe is only the bound past a hang of its own."""
    health, data = catalog.serving.health, load_data()
    sizes = [checkpoint_gb(catalog.recipe.id, vid, v.vram_minimum_gb, data) for vid, v in catalog.recipe.variants.items()]
    return max([health.start_period_s] + [
        startup_budget_s(health.start_period_s, health.interval_s, size * share, loader, kind, data)
        for size in sizes for share in (1, 2) for loader in data.loaders for kind in ("unknown", "object")])


def launch_budget_s(plan, catalog, decision: Optional[Decision]) -> int:
    """The start-up budget of a composed launch (the renderers' start period)."""
    return budget_s(catalog, catalog.recipe.id, plan.variant, plan.vram_minimum_gb, plan.pools, decision)


def ready_wait(env: Dict[str, str], budget: int, spec) -> Dict[str, str]:
    """The start-up budget's layer of an engine's env (composition's last, core/compose/resolve.py): vLLM's
    engine-ready wait set to the budget where the release reads the variable, never shorter than
    a wait the recipe sets itself ({} then); a value the user set still wins at exec."""
    name = load_data().budget.vllm_env
    if name not in spec.env:
        return {}
    recipe_s = env.get(name, "")
    if recipe_s.isdigit() and int(recipe_s) >= budget:  # the recipe's own wait is longer: it stays
        return {}
    return {name: str(budget)}


def _in_use(proc, data) -> str:
    """The loader id the process's arguments load with (vLLM's default when none is given)."""
    fmt = proc.vllm.load_format if proc.vllm is not None else None
    return _loader_id(str(fmt).lower(), data) or data.vllm_default if fmt else data.vllm_default


def _duration(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 60} min {s % 60:02d} s" if s >= 120 else f"{s} s"


def load_report(plan, catalog, proc, spec, vllm_version: str, decision: Optional[Decision],
                storage: Optional[StorageFacts]) -> Tuple[str, str]:
    """(status, message) of the expected load time on this node: the storage found, the loader the
    process uses and its expected time, the best loader here, and the start-up budget."""
    data = load_data()
    kind = storage_kind(storage, data)
    size = (plan.local_model_gb if plan.local_model_gb is not None
            else checkpoint_gb(catalog.recipe.id, plan.variant, plan.vram_minimum_gb, data))
    share = node_share_gb(size, plan.pools)
    sample = storage.sample_gbps if storage else None
    used = _in_use(proc, data)
    used_s, basis = expected_load_s(share, used, kind, sample, data)
    brand = catalog.hardware[plan.hardware].brand
    best, why = best_loader(kind, vllm_version, data, storage.installed if storage else None, brand)
    best_s, _ = expected_load_s(share, best, kind, sample, data)
    gds = bool(storage and storage.gds_driver and (storage.fstype or "") in data.storage.gds_fs)
    where = (f"{storage.path or 'the weights'} on {storage.fstype or 'an unknown file system'} ({kind} storage; "
             f"GPUDirect Storage {'usable' if gds else 'not usable'})") if storage else "storage unknown"
    if sample and storage:
        where += (f"; sample {storage.sample_bytes / 2 ** 20:.0f} MiB at {sample:.2f} GB/s "
                  f"({'O_DIRECT' if storage.sample_direct else 'through the page cache'})")
    elif storage and storage.note:
        where += f"; {storage.note}"
    budget = launch_budget_s(plan, catalog, decision)
    text = (f"{where}. This node reads {share:.0f} GB of the {size:.0f} GB checkpoint: ~{_duration(used_s)} with "
            f"{used} ({basis})")
    if best != used:
        text += f"; ~{_duration(best_s)} with {best}, the best loader here ({why}): KIMI_LOAD_FORMAT=auto picks it"
    else:
        text += f"; {used} is the best loader here ({why})"
    text += f". Start-up budget {budget} s."
    if used_s + data.budget.engine_overhead_s > budget:
        return "warning", text + (f" The expected load and start ({_duration(used_s + data.budget.engine_overhead_s)})"
                                  f" exceed it: the health check may stop the container first. Set "
                                  f"KIMI_LOAD_FORMAT=auto (its budget follows the loader), or put the weights on "
                                  f"faster storage.")
    return "ok", text
