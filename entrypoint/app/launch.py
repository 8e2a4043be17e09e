"""A launch composed from its inputs: environment + container args + the node -> settings ->
selection (once) -> plan, with the checks that hold for every launch.

Every command, the exec path and every renderer get their launch from here; nothing else ties
the pure core (entrypoint.core) to its inputs (the environment, cluster wiring, detection).
`kimi-serve print` imports this module alone of the package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Tuple

from entrypoint.core.base.errors import INSUFFICIENT_MEMORY, INVALID_VALUE, KimiError
from entrypoint.core.compose import kv, placement
from entrypoint.core.compose.kv import KvChoice
from entrypoint.core.compose.plan import Plan, Process
from entrypoint.core.compose.resolve import resolve, this_process
from entrypoint.core.compose.select import Selection, select, with_addresses
from entrypoint.core.compose.settings import Settings, read_settings
from entrypoint.core.data.recipe import Catalog, load_catalog, with_host, with_recipe
from entrypoint.core.vllm.vllm_cli import spec_for, unrecorded_note
from entrypoint.node.cluster import wire
from entrypoint.node.dist_info import installed_vllm_version
from entrypoint.node.exec import as_applied
from entrypoint.node.platform import apply_platform, check_contract


NODE_ADDR_ENV = "VLLM_HOST_IP"  # the address vLLM's ranks advertise to the other nodes (vllm/envs.py)


@dataclass(frozen=True)
class Launch:
    """One configuration's launch: its settings, the recipe catalog, the selection made once, the
    plan composed from it, and what the platform, KV offload, the load decision and the fleet
    contributed."""

    settings: Settings
    catalog: Catalog
    selection: Selection
    plan: Plan
    platform: Any = None  # the cloud platform's wiring (entrypoint.node.platform.PlatformWiring)
    kv: Optional[KvChoice] = None  # KIMI_KV_OFFLOAD's choice (entrypoint.core.compose.kv), None without one
    load: Any = None  # what KIMI_LOAD_FORMAT made of it (entrypoint.core.compose.loading.Decision)
    fleet: Any = None  # KIMI_REPLICAS' fleet (entrypoint.core.compose.fleet.FleetChoice), None for one copy
    notes: tuple = ()  # what a reader should know: a release judged by another's grammar, the interface chosen here

    @property
    def name(self) -> str:
        """The rendered deployment's name (KIMI_NAME, else the recipe's deployment_name)."""
        return self.selection.name

    def compile_caches(self, proc: Process):
        """Where `proc`'s compile caches go (entrypoint.core.compose.caches), None for a process without GPUs."""
        from entrypoint.core.compose.caches import compile_caches  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        s = self.settings
        stack = f"cu{s.image_cuda}" if s.image_cuda else f"rocm{s.image_rocm}" if s.image_rocm else ""
        return compile_caches(self.catalog, self.selection, self.plan, proc, stack)

    def this_process(self) -> Process:
        """The process this container runs (KIMI_ROLE / KIMI_NODE_RANK): the fleet's router, a KV
        store's process, or the plan's own; a process that is not a vLLM engine refuses vLLM
        arguments given to the container."""
        proc = this_process(self.plan, self.selection, kv=self.kv, fleet=self.fleet)
        if self.settings.node_addr and proc.is_engine:  # where the other nodes reach this one (vLLM's own variable)
            proc = replace(proc, env={**proc.env, NODE_ADDR_ENV: self.settings.node_addr},
                            provenance={**proc.provenance, NODE_ADDR_ENV: "settings (KIMI_NODE_ADDR)"})
        if not proc.is_engine and self.settings.user_args:
            raise KimiError(INVALID_VALUE, f"KIMI_ROLE={proc.role} runs {proc.program[0]}, which takes no vLLM "
                            f"arguments, but the container was given {len(self.settings.user_args)}: give them to "
                            "the engines' containers (or KIMI_EXTRA_ARGS, which every vLLM engine of the deployment "
                            f"gets) and start the {proc.role} without arguments.")
        return proc


def compose(settings: Settings, detected_hardware: Optional[str] = None, catalog: Optional[Catalog] = None,
            detected_vllm: Optional[str] = None, storage=None, selection: Optional[Selection] = None) -> Launch:
    """`_compose`, with a local KIMI_MODEL that holds no weights named (path and reason) where the
    memory check, which could not size it, refuses the recipe's variant instead."""
    try:
        return _compose(settings, detected_hardware, catalog, detected_vllm, storage, selection)
    except KimiError as exc:
        from entrypoint.core.base.files import local_model_problem  # noqa: PLC0415 - only on a refusal

        why = local_model_problem(settings.model) if settings.model and exc.code == INSUFFICIENT_MEMORY else None
        if why is None:
            raise
        raise KimiError(INVALID_VALUE, f"KIMI_MODEL={settings.model!r} {why}, so it cannot be sized or loaded. Give "
                        "the directory that holds the checkpoint's *.safetensors (or a Hugging Face repo id), or unset "
                        "KIMI_MODEL to serve the recipe's model (rendering for a node where the path exists: "
                        "KIMI_SKIP_MEMORY_CHECK=1).") from None


def _compose(settings: Settings, detected_hardware: Optional[str] = None, catalog: Optional[Catalog] = None,
             detected_vllm: Optional[str] = None, storage=None, selection: Optional[Selection] = None) -> Launch:
    """The pure part: settings -> selection (once) -> plan (of the recipe KIMI_RECIPE names). `storage`:
    the node's weights volume (entrypoint.core.compose.loading.StorageFacts), for KIMI_LOAD_FORMAT other than
    `recipe`; or a function of the selected model that probes it (the node's, at a start).
    `selection`: one already made from these settings before their addresses were added (a
    rendered deployment's, see app/deploy.py); it gets the addresses of `settings` and is not made
    again."""
    from entrypoint.core.base.files import local_model_gb  # noqa: PLC0415 - a local model is sized from its own files

    from entrypoint.node.host import host_facts  # noqa: PLC0415 - sizes the cpu target where its settings give no size

    catalog = with_host(with_recipe(catalog or load_catalog(), settings.recipe), settings, *host_facts())
    model_gb = local_model_gb(settings.model) if settings.model else None
    if selection is None:
        selection = select(settings, catalog, detected_hardware, detected_vllm, model_gb=model_gb)
    else:
        selection = with_addresses(selection, settings)
    spec = spec_for(selection.vllm_version)
    placement.check_addresses(settings)
    placement.check_thread_lists(settings)
    placement.check_user_args(selection.user, spec)
    decision = None
    if settings.load_format != "recipe":
        from entrypoint.core.compose import loading  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        if callable(storage):
            storage = storage(selection.model)
        decision = loading.decide(settings.load_format, selection.vllm_version, selection.user_args, spec,
                                  "://" in selection.model, storage, brand=catalog.hardware[selection.hardware].brand)
    choice = kv.choose(settings, hostname=os.uname().nodename)  # gethostname(), without importing socket
    from entrypoint.core.compose import fleet  # noqa: PLC0415 - KIMI_REPLICAS: the copies behind one router (docs/fleet.md)

    fleet_choice = fleet.choose(settings, pd=selection.prefill is not None)
    plan = resolve(selection, catalog, kv=choice, load=decision, fleet=fleet_choice, model_gb=model_gb)  # the one composition (docs/composition.md)
    placement.check_role(settings, plan)
    placement.check_node_fit(plan, catalog.hardware[plan.hardware].gpu_count, settings)
    placement.check_head_ports(plan, catalog.serving.peer_watch.port)
    unrecorded = unrecorded_note(selection.vllm_version)  # judged by another release's grammar: said, never silent
    notes: Tuple[str, ...] = (unrecorded,) if unrecorded else ()
    provisional = catalog.recipe.provisional
    if provisional:  # made from cited sources, no recipe page yet: said wherever the plan is shown
        notes += (f"the {catalog.recipe.title} recipe is provisional: {provisional.why.rstrip('.')}; until "
                  f"{provisional.until.rstrip('.')} (its sources: recipes/models/{catalog.recipe.id}.yaml).",)
    return Launch(settings=settings, catalog=catalog, selection=selection, plan=plan, load=decision, kv=choice,
                  fleet=fleet_choice, notes=notes)


def build(environ: Mapping[str, str], user_args: tuple = (), detected_hardware: Optional[str] = None,
          catalog: Optional[Catalog] = None) -> Launch:
    """The launch of an already wired environment (no detection, no cluster wiring)."""
    return compose(read_settings(environ, user_args), detected_hardware, catalog)


def platform_launch(environ: Mapping[str, str], args: tuple = ()) -> Launch:
    """The launch of a container described by its variables alone (a `plan --batch` line, a cloud
    rendering's container): the platform's contract applied as that container would start, never
    this machine's network or GPUs."""
    platform = wire_platform(args, environ)
    return _checked(replace(build(platform.environ, platform.args), platform=platform))


def _checked(launch: Launch) -> Launch:
    """A platform's contract holds for the launch: the vLLM args may not move the port or the
    bind address the platform sends traffic to."""
    if launch.platform is not None and launch.platform.platform:
        check_contract(launch.platform, launch.plan, spec_for(launch.selection.vllm_version))
    return launch


def wants_detection(settings: Settings) -> bool:
    """Whether the settings ask for the node's GPUs to be detected (KIMI_HARDWARE=auto)."""
    return (settings.hardware or "").lower() == "auto"


def detected_hardware(environ: Mapping[str, str]) -> Optional[str]:
    """The hardware id the node detection found, or None. Only asked when KIMI_HARDWARE=auto."""
    from entrypoint.node.detect import detect_hardware_id  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    return detect_hardware_id(environ)


def wire_platform(user_args: tuple = (), environ: Optional[Mapping[str, str]] = None):
    """The cloud platform's contract applied to the environment and the container arguments."""
    return apply_platform(os.environ if environ is None else environ, tuple(user_args))


def load_launch(user_args: tuple = (), environ: Optional[Mapping[str, str]] = None, wiring=None,
                platform=None) -> Launch:
    """The launch from the environment after the platform's contract and cluster wiring (LWS /
    Slurm / KIMI_IFACE=auto); pass `platform` / `wiring` when the caller has applied them already
    (it also logs the decisions)."""
    if platform is None:
        platform = wire_platform(user_args, environ)
    if wiring is None:
        wiring = wire(platform.environ)
    settings = read_settings(wiring.environ, platform.args)
    detected = detected_hardware(wiring.environ) if wants_detection(settings) else None
    vllm = None
    if not settings.vllm_version:
        vllm = installed_vllm_version()

    def storage(model: str):  # the volume the weights are read from decides `auto`, and the budget
        return weights_storage(model, settings.cache_dir, wiring.environ, sample=False)

    launch = compose(settings, detected, detected_vllm=vllm, storage=storage)
    notes: tuple = launch.notes
    if wiring.iface:  # this machine's routing chose the interface: say so (a rendering reader may not be there)
        said = "KIMI_IFACE=auto" if (platform.environ.get("KIMI_IFACE") or "").strip().lower() == "auto" else \
            "KIMI_IFACE is unset"
        found, how = wiring.iface
        notes += (f"{said}: this plan uses {found} ({how} on this machine), and each node's container finds its "
                 "own at its start. Set KIMI_IFACE to name the interface between the nodes.",)
    return _checked(replace(launch, platform=platform, notes=notes))


def weights_storage(model: str, cache_dir: str, environ: Mapping[str, str], sample: bool = True):
    """The weights' volume on this node: file system, GPUDirect Storage, a bounded read sample."""
    from entrypoint.core.compose.loading import load_data  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.node.storage import probe  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    return probe(model, cache_dir, environ, load_data(), sample=sample)


def applied(launch: Launch, environ: Mapping[str, str]) -> Process:
    """This container's process with only the env the project applies here (what `print` shows)."""
    return as_applied(launch.this_process(), environ)
