"""Node checks before exec, so a wrong GPU count, a small /dev/shm or old AMD firmware is found
before a 600 GB load, not after it. Each check says what it found and the way out.

KIMI_PREFLIGHT=on: any error stops the start (exit 2, code preflight_failed); warn: errors are
logged as warnings and the start goes on; off: no checks. `kimi-serve doctor` runs them all.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Tuple

from entrypoint.core.base import limits
from entrypoint.node.detect import visible_gpus
from entrypoint.node.exec import exec_env
from entrypoint.core.base.check import Check
from entrypoint.core.base.errors import PREFLIGHT_FAILED, KimiError, one_line
from entrypoint.core.base.files import read_capped
from entrypoint.core.compose.kv import engine_needs
from entrypoint.core.compose.loading import load_data, load_report
from entrypoint.core.compose.resolve import GIB_GB
from entrypoint.core.compose.settings import env_flag
from entrypoint.node.logs import Entry
from entrypoint.node.facts import NodeFacts, gather
from entrypoint.node.host import host_facts
from entrypoint.core.compose.plan import Process
from entrypoint.core.compose.weights import sources
from entrypoint.core.data.platforms import model_source
from entrypoint.core.data.versions import version_key
from entrypoint.core.vllm.vllm_cli import spec_for
from entrypoint.node.cache import compile_cache_state, uses_modelscope
from entrypoint.node.hub_cache import any_weights, hub_dir, local_state
from entrypoint.node import objectstore
from entrypoint.node.storage import probe

GB = 1000 ** 3
GIB = 1024 ** 3
SHM_MINIMUM_BYTES = 1 * GIB


@dataclass(frozen=True)
class NodeCheck(Check):
    process: Optional[Process] = None  # a corrected process (status "fixed")


def _parallel_sizes(proc: Process) -> str:
    dests = {"tensor_parallel_size": "TP", "pipeline_parallel_size": "PP", "data_parallel_size_local": "DP local"}
    parts = [f"{label} {value}" for dest, label in dests.items()
             if proc.vllm is not None and (value := proc.vllm.text(dest))]  # as vLLM reads them, any spelling
    return " x ".join(parts) or f"{proc.local_gpus} GPUs"


# ---------------------------------------------------------------- checks


def _host(launch):
    """The host backend of the launch's hardware (recipes/hardware.yaml `host_backend`), or None."""
    return launch.catalog.hardware[launch.plan.hardware].host_backend


def _threads(proc: Process) -> int:
    try:
        return max(1, int(proc.env.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def check_hardware(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    det, configured = facts.detection, launch.plan.hardware
    if _host(launch) is not None:
        ram, cores = host_facts()
        gpus = f"; {det.summary()} too, unused" if det.gpus else ""
        return NodeCheck("hardware", "ok", f"configured {configured} (vLLM's CPU backend): {cores} cores, "
                         f"{ram:.1f} GB of RAM{gpus}")
    if det.hardware is None:
        return NodeCheck("hardware", "warning", f"configured {configured}; detection found no known GPU model "
                     f"({det.summary() if det.gpus else det.reason}), so the model is not confirmed: give the "
                     "container the node's GPUs (docker --gpus all, or --device /dev/kfd --device /dev/dri for "
                     "AMD; on Kubernetes the device plugin's resource).")
    if det.hardware == configured:
        return NodeCheck("hardware", "ok", f"configured {configured}, detected {det.hardware}: {det.summary()}")
    brands = launch.catalog.hardware[configured].brand, launch.catalog.hardware[det.hardware].brand
    status = "warning" if brands[0] == brands[1] else "error"
    return NodeCheck("hardware", status, f"configured {configured} but this node has {det.hardware} ({det.summary()}). "
                 f"Set KIMI_HARDWARE={det.hardware} (or auto) and run the image built for it.")


def check_gpu_count(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    if proc.local_gpus == 0:
        return NodeCheck("gpu_count", "skipped", f"the {proc.role} uses no GPU")
    if _host(launch) is not None:  # ranks share the node's cores: more threads than cores slows, never fails
        _, cores = host_facts()
        want = proc.local_gpus * _threads(proc)
        need = (f"the {proc.role} runs {proc.local_gpus} rank(s) ({_parallel_sizes(proc)}) of "
                f"{_threads(proc)} thread(s) each; {cores} cores usable")
        if want <= cores:
            return NodeCheck("gpu_count", "ok", need)
        return NodeCheck("gpu_count", "warning", f"{need}: {want} threads on {cores} cores run slowly. Set "
                         f"KIMI_CPU_THREADS={max(1, cores // proc.local_gpus)} or give the container more cores.")
    seen = visible_gpus(facts.all_gpus, exec_env(proc.env, environ))
    need = f"the {proc.role} process needs {proc.local_gpus} GPU(s) on its node ({_parallel_sizes(proc)})"
    if len(seen) >= proc.local_gpus:
        return NodeCheck("gpu_count", "ok", f"{need}; {len(seen)} visible")
    found = f"{len(facts.all_gpus)} found on the node" + (
        f", {len(seen)} visible through *_VISIBLE_DEVICES" if len(seen) != len(facts.all_gpus) else "")
    return NodeCheck("gpu_count", "error", f"{need}, but only {len(seen)} usable ({found}). Run it on a node with "
                 f"{proc.local_gpus} GPUs and give the container all of them (docker run --gpus all; on AMD "
                 "--device /dev/kfd --device /dev/dri), or choose a plan that needs fewer "
                 "(`kimi-serve list`, KIMI_STRATEGY / KIMI_NODES).")


def check_vram(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    if _host(launch) is not None and proc.local_gpus:
        ram, _ = host_facts()
        minimum, nodes = launch.plan.vram_minimum_gb, max(1, launch.plan.nodes)
        host = _host(launch)
        kv_gb = proc.local_gpus * host.kvcache_gib * GIB_GB  # each rank's KV cache beside the weights (this node's ranks)
        need = minimum / nodes + kv_gb
        what = (f"the model's {launch.plan.local_model_gb:.2f} GB of weights" if launch.plan.local_model_gb is not None
                else f"the {launch.plan.variant} variant")
        what += f" and {proc.local_gpus} rank(s) x {host.kvcache_gib} GiB of KV cache (KIMI_CPU_KVCACHE_GIB)"
        if ram >= need:
            return NodeCheck("vram", "ok", f"{ram:.1f} GB of RAM; {what} need {need:.1f} GB per node")
        status = "warning" if launch.settings.skip_memory_check else "error"
        return NodeCheck("vram", status, f"{ram:.1f} GB of RAM, below the {need:.1f} GB per node {what} need. Use "
                         "a node with more memory, more nodes, fewer ranks (KIMI_CPU_RANKS), a smaller "
                         "KIMI_CPU_KVCACHE_GIB, a smaller model (KIMI_MODEL=/path), or "
                         "KIMI_SKIP_MEMORY_CHECK=1 if you know it fits.")
    gpus = visible_gpus(facts.all_gpus, exec_env(proc.env, environ)) or facts.detection.gpus
    if not gpus or proc.local_gpus == 0:
        return NodeCheck("vram", "skipped", "no GPU memory to measure" if proc.local_gpus else f"the {proc.role} uses no GPU")
    per_gpu = min(g.memory_bytes for g in gpus) / GIB
    minimum = launch.plan.vram_minimum_gb
    short = [(p.name, p.gpus * per_gpu) for p in launch.plan.pools if p.gpus * per_gpu < minimum]
    pools = ", ".join(f"{p.name} {p.gpus} x {per_gpu:.0f} GiB = {p.gpus * per_gpu:.0f} GiB" for p in launch.plan.pools)
    if not short:
        return NodeCheck("vram", "ok", f"{pools}; the {launch.plan.variant} variant needs {minimum:.0f} GB")
    status = "warning" if launch.settings.skip_memory_check else "error"
    return NodeCheck("vram", status, f"{pools}: below the {minimum:.0f} GB the {launch.plan.variant} variant needs "
                 f"(the GPUs detected have {per_gpu:.0f} GiB each). Use more GPUs or nodes, a smaller variant, or "
                 "KIMI_SKIP_MEMORY_CHECK=1 if you know it fits.")


def check_shm(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    if facts.shm_bytes is None:
        return NodeCheck("shm", "warning", "/dev/shm is missing: NCCL/RCCL need it. Run with --ipc=host or --shm-size=16g.")
    size = f"/dev/shm is {facts.shm_bytes / GIB:.2f} GiB"
    if facts.shm_bytes >= SHM_MINIMUM_BYTES or (proc.local_gpus <= 1 and launch.plan.nodes == 1):
        return NodeCheck("shm", "ok", size)
    return NodeCheck("shm", "error", f"{size}, too small for NCCL/RCCL between {proc.local_gpus} GPUs (at least "
                 f"{SHM_MINIMUM_BYTES // GIB} GiB). Run the container with --ipc=host or --shm-size=16g "
                 "(Kubernetes: an emptyDir with medium: Memory on /dev/shm).")


def check_platform(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    hw = launch.catalog.hardware[launch.plan.hardware]
    if facts.arch != hw.arch:
        return NodeCheck("platform", "error", f"this image runs as {facts.arch}, but {launch.plan.hardware} nodes are "
                     f"{hw.arch}: run the {hw.arch} image (tag for target {hw.image_target}).")
    if proc.local_gpus == 0:
        return NodeCheck("platform", "ok", f"{facts.arch}; the {proc.role} needs no GPU device")
    brand = launch.catalog.brands[hw.brand]
    if not brand.devices:
        return NodeCheck("platform", "ok", f"{facts.arch}; {launch.plan.hardware} needs no device")
    if not set(brand.devices) & facts.devices:
        return NodeCheck("platform", "error", f"{launch.plan.hardware} is an {brand.name} GPU but no {brand.name} "
                     f"device ({', '.join(brand.devices)}) is in the container: {brand.device_hint}.")
    return NodeCheck("platform", "ok", f"{facts.arch} image, {hw.brand} devices present")


def check_firmware(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    """The hardware's firmware rule (recipes/hardware.yaml `firmware`): below its minimum, the
    rule's variables are set (unless the user set them), as the recipe guide advises."""
    rule = launch.catalog.hardware[launch.plan.hardware].firmware
    if rule is None or proc.local_gpus == 0:
        return NodeCheck("firmware", "skipped", f"{launch.plan.hardware} has no firmware rule" if rule is None
                     else f"the {proc.role} uses no GPU")
    name, fix = f"{rule.component.upper()} firmware", " ".join(f"{k}={v}" for k, v in rule.below_env.items())
    if not facts.firmware:
        return NodeCheck("firmware", "warning", f"{name} version unreadable ({facts.firmware_source}); if it is "
                     f"below {rule.minimum}, set {fix}.")
    oldest = min(facts.firmware)
    if oldest >= rule.minimum:
        return NodeCheck("firmware", "ok", f"{name} {oldest} ({facts.firmware_source})")
    if all(k in environ or k in proc.env for k in rule.below_env):
        return NodeCheck("firmware", "ok", f"{name} {oldest} < {rule.minimum}; {', '.join(rule.below_env)} already set")
    added = {k: v for k, v in rule.below_env.items() if k not in environ}
    fixed = dataclasses.replace(proc, env={**proc.env, **added},
                                provenance={**proc.provenance, **{k: "preflight" for k in added}})
    return NodeCheck("firmware", "fixed", f"{name} {oldest} < {rule.minimum} ({facts.firmware_source}): setting {fix} "
                 "as the recipe guide advises; a firmware update removes the need.", fixed)


def check_host_limits(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    """Layouts the hardware's vLLM backend cannot run (recipes/hardware.yaml `host_backend.limits`:
    on the CPU backend, MoE expert parallelism over several ranks and MoE data parallelism), for
    the vLLM release launched; KIMI_PREFLIGHT=warn tries anyway (e.g. with a vLLM plugin that closes
    the gap)."""
    host = _host(launch)
    if host is None or not proc.is_engine or proc.vllm is None:
        return NodeCheck("host_limits", "skipped", "no host-backend limit applies" if host is None
                         else f"the {proc.role} runs no vLLM engine")
    vllm, found = launch.selection.vllm_version, proc.vllm
    moe = model_is_moe(launch.plan.model)
    layouts = {"moe_expert_parallel": moe and found.expert_parallel and found.tensor_parallel * found.data_parallel > 1,
               "moe_data_parallel": moe and found.data_parallel > 1,
               "eager_pipeline_parallel": found.pipeline_parallel > 1 and bool(found.get("enforce_eager"))}
    hit = [lim for lim in host.limits if layouts[lim.when] and version_key(vllm) <= version_key(lim.vllm_max)]
    if not hit:
        return NodeCheck("host_limits", "ok", f"vLLM {vllm}'s {launch.plan.hardware} backend runs this layout")
    return NodeCheck("host_limits", "error", "; ".join(
        f"{lim.id}: vLLM {vllm} on {launch.plan.hardware} cannot run it ({lim.why})" for lim in hit)
        + ". Use another layout (KIMI_STRATEGY=single_node_tp or multi_node_tp; a dense model; no --enforce-eager "
        "with pipeline parallelism), or KIMI_PREFLIGHT=warn to try anyway with a vLLM plugin that closes the gap.")


def model_is_moe(model: str) -> bool:
    """Whether the model is a mixture of experts: a local model's config.json names experts; every
    recipe's checkpoint (the Kimi family) is one."""
    path = os.path.join(model, "config.json")
    if "://" in model or not os.path.isfile(path):
        return True
    try:
        config = json.loads(read_capped(path, limits.MAX_NODE_FILE_BYTES))
    except (OSError, ValueError):
        return True
    configs = [config, *(v for v in config.values() if isinstance(v, dict))]  # a text_config inside
    return any(c.get(key) for c in configs for key in ("n_routed_experts", "num_experts", "num_local_experts"))


def check_cache(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    c = facts.cache
    if not proc.reads_weights or c is None:
        return NodeCheck("cache", "skipped", f"the {proc.role} loads no weights")
    if c.problem:
        return NodeCheck("cache", "error", f"KIMI_CACHE_DIR: {c.problem}: point KIMI_CACHE_DIR at a directory "
                     f"(a mounted volume, -v kimi-cache:/cache) this user can write.")
    if c.model_problem:
        return NodeCheck("cache", "error", f"KIMI_MODEL: {c.model_problem}: mount the weights there, readable by this "
                     "user, or set KIMI_MODEL to a repo id to download them.")
    if c.weights_problem:
        return NodeCheck("cache", "error", f"weights: {c.weights_problem}: vLLM would wait on it for ever; put the "
                     "real file there (or remove it and let the start download the weights).")
    if not c.writable:
        return NodeCheck("cache", "error", f"{c.path} is not writable by this user: mount a writable volume there "
                     f"(-v kimi-cache:{c.path}; on OpenShift give the volume the pod's group) or set KIMI_CACHE_DIR.")
    notes = [f"{c.path} on {c.mount_point} ({c.fs_type or 'unknown fs'})"]
    status = "ok"
    if c.mount_point == "/":
        status = "warning"
        notes.append(f"inside the container's own layer: weights and compiled graphs are lost with the container; "
                     f"mount a volume at {c.path}")
    offline = env_flag(environ, "HF_HUB_OFFLINE")
    weights = weights_check(launch, environ, offline)
    if weights is not None and weights[0] != "none":
        level, text = weights
        worst = {"ok": 0, "warning": 1, "error": 2}
        return NodeCheck("cache", max(status, level, key=worst.get), "; ".join(notes + [text]))
    if c.weights_dir:
        return NodeCheck("cache", status, "; ".join(notes + [f"weights present in {c.weights_dir}"]))
    model = launch.plan.model
    if "://" in model:
        return NodeCheck("cache", status, "; ".join(notes + [f"weights stream from {model} (nothing to download here)"]))
    if offline:
        return NodeCheck("cache", "error", f"HF_HUB_OFFLINE is set but the weights of {model} are not in {c.path}: "
                         "run `kimi-serve download` where the hub is reachable and move the cache here, or unset "
                         "HF_HUB_OFFLINE.")
    need = launch.plan.vram_minimum_gb * GB
    if c.free_bytes is not None and c.free_bytes < need:
        return NodeCheck("cache", "error", "; ".join(notes) + f": {c.free_bytes / GB:.0f} GB free, the {model} checkpoint "
                     f"needs up to {need / GB:.0f} GB. Mount a larger volume, or pre-load the weights.")
    return NodeCheck("cache", status, "; ".join(notes + [f"weights not downloaded yet, {c.free_bytes / GB:.0f} GB free"
                                                     if c.free_bytes is not None else "weights not downloaded yet"]))


def check_model_source(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    model = launch.plan.model
    if not proc.reads_weights or not model_source(model).is_object_store:
        return NodeCheck("model_source", "skipped", "the model is not in object storage" if proc.reads_weights
                         else f"the {proc.role} loads no weights")
    found = objectstore.check(model, environ, on_platform=bool(launch.settings.platform))
    return NodeCheck("model_source", found.status, found.message)


def weights_check(launch, environ, offline: bool) -> Optional[Tuple[str, str]]:
    """(level, text) for the hub repositories the launch reads, from the cache alone: "ok"
    complete, "warning" partial (an "error" when offline), "none" nothing there; None when this
    cannot tell (a local model path, ModelScope)."""
    found = sources(launch.plan)
    if not found or uses_modelscope(environ):
        return None
    hub = hub_dir(launch.settings.cache_dir, environ)
    rules = launch.catalog.recipe.model.files
    states = [local_state(hub, s, rules) for s in found]
    if all(st.complete for st in states):
        return "ok", "weights complete: " + ", ".join(f"{st.source.label} ({len(st.expected)} files)" for st in states)
    unknown = [st for st in states if st.expected is None and any_weights(hub, st.source)]
    if unknown and all(st.complete or st in unknown for st in states):
        return "ok", (f"weights present in {hub} (completeness unknown: no hub listing cached; "
                      "`kimi-serve download` checks and completes them)")
    started = [st for st in states if st.present or st.partial_bytes or st in unknown]
    if not started:
        return "none", ""
    gaps = ", ".join(f"{st.source.label}: {len(st.missing)} of {len(st.expected)} files missing" if st.expected
                     else f"{st.source.label}: not downloaded" for st in states if not st.complete and st not in unknown)
    way = ("run `kimi-serve download` where the hub is reachable and move the cache here, or unset HF_HUB_OFFLINE"
           if offline else "run `kimi-serve download` to finish it before the start (vLLM would fetch the rest itself)")
    return ("error" if offline else "warning"), f"weights incomplete in {hub} ({gaps}): {way}"


def check_kv_components(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    """What KIMI_KV_OFFLOAD's connector imports in vLLM's Python (LMCache, Mooncake) is installed."""
    needs = engine_needs(launch.kv, proc)
    if not needs:
        return NodeCheck("kv_components", "skipped", "no KV connector package to import")
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if not missing:
        return NodeCheck("kv_components", "ok", f"{', '.join(needs)} installed for KIMI_KV_OFFLOAD={launch.kv.id}")
    return NodeCheck("kv_components", "error", f"KIMI_KV_OFFLOAD={launch.kv.id}: vLLM imports {', '.join(missing)}, "
                     "which this image does not have (docs/kv-cache.md, Images). Run an image that carries it, or "
                     "choose another KIMI_KV_OFFLOAD.")


def check_load_time(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    """The weights' volume (file system, GPUDirect Storage, a bounded read sample) and the
    expected load time with this launch's loader and with the best one here (core/compose/loading.py)."""
    if not proc.is_engine:
        return NodeCheck("load_time", "skipped", f"the {proc.role} loads no weights")
    if facts.storage is None:
        return NodeCheck("load_time", "skipped", "the weights' volume was not probed")
    version = launch.selection.vllm_version
    status, text = load_report(launch.plan, launch.catalog, proc, spec_for(version), version,
                               launch.load, facts.storage)
    return NodeCheck("load_time", status, text)


def check_compile_cache(launch, proc, facts: NodeFacts, environ) -> NodeCheck:
    """Whether this start finds the compile caches an earlier start of the same launch wrote
    (entrypoint.core.compose.caches: keyed by vLLM, stack, hardware, model and layout; docs/day2.md)."""
    compiled = launch.compile_caches(proc)
    if compiled is None:
        return NodeCheck("compile_cache", "skipped", f"the {proc.role} compiles nothing")
    state = compile_cache_state(launch.settings.cache_dir, environ, compiled)
    warm = {name: n for name, n in state.items() if n}
    where = f"{launch.settings.cache_dir.rstrip('/')}/{compiled.root}/{compiled.key}"
    if warm:
        return NodeCheck("compile_cache", "ok", f"warm: {', '.join(f'{k} {n} file(s)' for k, n in warm.items())} "
                         f"from an earlier start of this launch ({where})")
    return NodeCheck("compile_cache", "ok", f"cold: nothing under {where} yet; this start compiles and autotunes "
                     "(minutes on GPUs) and writes it there, so the next start of the same launch skips that")


CHECKS: Tuple[Callable, ...] = (check_hardware, check_gpu_count, check_vram, check_host_limits, check_shm, check_platform,
                                check_firmware, check_cache, check_model_source, check_kv_components, check_load_time,
                                check_compile_cache)


# ---------------------------------------------------------------- running them


def node_facts(launch, environ: Mapping[str, str]) -> NodeFacts:
    hw, catalog = launch.catalog.hardware[launch.plan.hardware], launch.catalog
    devices = sorted({d for b in catalog.brands.values() for d in b.devices})
    facts = gather(environ, launch.settings.cache_dir, launch.plan.model, architectures=catalog.architectures,
                   device_nodes=devices, firmware=hw.firmware.component if hw.firmware else None)
    storage = probe(launch.plan.model, launch.settings.cache_dir, environ, load_data())
    return dataclasses.replace(facts, storage=storage)


def run_checks(launch, proc: Process, environ: Mapping[str, str], facts: NodeFacts) -> Tuple[Process, List[NodeCheck]]:
    results = []
    for check in CHECKS:
        result = check(launch, proc, facts, environ)
        proc = result.process or proc
        results.append(result)
    return proc, results


def preflight_launch(launch, proc: Process, environ: Mapping[str, str],
                     facts: Optional[NodeFacts] = None, mode: Optional[str] = None) -> Tuple[Process, List[Entry]]:
    mode = mode or launch.settings.preflight
    if mode == "off":
        return proc, [Entry("preflight", "preflight skipped (KIMI_PREFLIGHT=off)", "warning")]
    proc, results = run_checks(launch, proc, environ, facts or node_facts(launch, environ))
    entries = [Entry(f"preflight.{r.name}", f"preflight {r.name}: {r.status}: {r.message}",
                     "info" if r.status in ("ok", "fixed", "skipped") else "warning", {"status": r.status})
               for r in results]
    errors = [r for r in results if r.status == "error"]
    if errors and mode == "on":
        listed = "\n  ".join(f"{r.name}: {one_line(r.message)}" for r in errors)
        raise KimiError(PREFLIGHT_FAILED, f"preflight found {len(errors)} problem(s) on this node:\n  {listed}\n"
                        "Set KIMI_PREFLIGHT=warn to start anyway, or run `kimi-serve doctor` for the full report.",
                        listing=True)
    return proc, entries
