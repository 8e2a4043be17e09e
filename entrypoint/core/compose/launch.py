"""The one composition: settings + the node's facts -> the launch (selection, plan, and what the
KV offload, the load decision and the fleet contributed). Pure: nothing here reads the machine.

The facts are a value (`NodeFacts`): gathered on the node where the process runs (entrypoint/app/
launch.py: its RAM and cores, the local model's files, its hostname, the weights' volume, the
detected GPUs and vLLM), or declared by the settings alone for a rendering meant for other
machines (`declared_facts`): a `cpu` target sized from KIMI_CPU_RANKS / KIMI_CPU_MEMORY_GB /
KIMI_CPU_THREADS, a local model from KIMI_MODEL_GB. A rendering is therefore the same on any
machine that renders it (tests/entrypoint/test_composition.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional, Tuple

from entrypoint.core.base.errors import INSUFFICIENT_MEMORY, INVALID_VALUE, MISSING_SETTING, KimiError
from entrypoint.core.base.files import is_local_path
from entrypoint.core.compose import kv, placement
from entrypoint.core.compose.kv import KvChoice
from entrypoint.core.compose.plan import Plan, Process
from entrypoint.core.compose.resolve import resolve, this_process
from entrypoint.core.compose.select import Selection, select, with_addresses
from entrypoint.core.compose.settings import Settings
from entrypoint.core.data.recipe import Catalog, load_catalog, with_host, with_recipe
from entrypoint.core.vllm.vllm_cli import spec_for, unrecorded_note

if TYPE_CHECKING:  # imported where used: kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.compose.caches import CompileCaches
    from entrypoint.core.compose.fleet import FleetChoice
    from entrypoint.core.compose.loading import Decision, StorageFacts

NODE_ADDR_ENV = "VLLM_HOST_IP"  # the address vLLM's ranks advertise to the other nodes (vllm/envs.py)


@dataclass(frozen=True)
class NodeFacts:
    """What the node a launch runs on holds. On the node: found there (entrypoint/app/launch.py);
    for a rendering meant for other machines: what the settings declare (`declared_facts`), never
    the rendering machine's."""

    ram_gb: Optional[float] = None  # the node's RAM (sizes a `cpu` target without KIMI_CPU_MEMORY_GB); None: unknown
    cores: Optional[int] = None  # the cores this process may use (a `cpu` rank's threads); None: unknown
    hostname: str = ""  # what a KV store advertises without KIMI_MOONCAKE_STORE_HOST; "": none
    model_gb: Optional[float] = None  # a local KIMI_MODEL's weights in GB (its files, or KIMI_MODEL_GB)
    model_problem: Optional[str] = None  # why a local KIMI_MODEL holds no weights on this node, words after its path
    storage: Optional[StorageFacts] = None  # the weights' volume (KIMI_LOAD_FORMAT other than `recipe`)
    hardware: Optional[str] = None  # the hardware id the node's detection found (KIMI_HARDWARE=auto)
    vllm: Optional[str] = None  # the vLLM release installed beside this Python


def declared_facts(settings: Settings) -> NodeFacts:
    """The facts of a node that is not this machine (a rendering, a `plan --batch` line), as the
    settings declare them: a local model's size from KIMI_MODEL_GB; nothing read. A local
    KIMI_MODEL without it is refused where the memory check would size it."""
    model = settings.model or ""
    if not is_local_path(model):
        return NodeFacts()
    if settings.model_gb is not None:
        return NodeFacts(model_gb=float(settings.model_gb))
    if settings.skip_memory_check:  # nothing is judged against its size: the recipe's variant stands in
        return NodeFacts()
    raise KimiError(MISSING_SETTING, f"KIMI_MODEL={model!r} is a path of the nodes the deployment runs on, which a "
                    "rendering for them cannot read: give KIMI_MODEL_GB=<GB of its weights> to size it (or "
                    "KIMI_SKIP_MEMORY_CHECK=1 to render without the memory check).")


@dataclass(frozen=True)
class Composition:
    """One configuration's launch: its settings, the recipe catalog (sized for the node), the
    selection made once, the plan composed from it, and what KV offload, the load decision and the
    fleet contributed."""

    settings: Settings
    catalog: Catalog
    selection: Selection
    plan: Plan
    kv: Optional[KvChoice] = None  # KIMI_KV_OFFLOAD's choice, None without one
    load: Optional[Decision] = None  # what KIMI_LOAD_FORMAT made of it, None for `recipe`
    fleet: Optional[FleetChoice] = None  # KIMI_REPLICAS' fleet (core/compose/fleet.py), None for one copy
    notes: Tuple[str, ...] = ()  # what a reader should know: a release judged by another's grammar, ...

    @property
    def name(self) -> str:
        """The rendered deployment's name (KIMI_NAME, else the recipe's deployment_name)."""
        return self.selection.name

    def compile_caches(self, proc: Process) -> Optional[CompileCaches]:
        """Where `proc`'s compile caches go (core/compose/caches.py), None for a process without GPUs."""
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


def node_catalog(settings: Settings, facts: NodeFacts, catalog: Optional[Catalog] = None) -> Catalog:
    """The recipe KIMI_RECIPE names, its host-backend targets (`cpu`) sized for the node."""
    return with_host(with_recipe(catalog or load_catalog(), settings.recipe), settings, facts.ram_gb, facts.cores)


def selection_of(settings: Settings, facts: NodeFacts, catalog: Optional[Catalog] = None) -> Selection:
    """The selection the settings make on the node (what `compose_launch` selects)."""
    return select(settings, node_catalog(settings, facts, catalog), facts.hardware, facts.vllm, model_gb=facts.model_gb)


def compose_launch(settings: Settings, facts: NodeFacts, catalog: Optional[Catalog] = None,
                   selection: Optional[Selection] = None) -> Composition:
    """settings + the node's facts -> selection (once) -> the plan (docs/composition.md), with the
    decisions and checks that hold for every launch. `selection`: one already made from these
    settings before their addresses were added (a rendered deployment's, app/deploy.py); it gets
    the addresses of `settings` and is not made again. A local KIMI_MODEL that holds no weights
    (facts.model_problem) is named where the memory check, which could not size it, refuses the
    recipe's variant instead."""
    try:
        return _launch(settings, facts, catalog, selection)
    except KimiError as exc:
        if facts.model_problem is None or exc.code != INSUFFICIENT_MEMORY:
            raise
        raise KimiError(INVALID_VALUE, f"KIMI_MODEL={settings.model!r} {facts.model_problem}, so it cannot be sized "
                        "or loaded. Give the directory that holds the checkpoint's *.safetensors (or a Hugging Face "
                        "repo id), or unset KIMI_MODEL to serve the recipe's model (rendering for a node where the "
                        "path exists: KIMI_MODEL_GB or KIMI_SKIP_MEMORY_CHECK=1).") from None


def _launch(settings: Settings, facts: NodeFacts, catalog: Optional[Catalog], selection: Optional[Selection]) -> Composition:
    catalog = node_catalog(settings, facts, catalog)
    if selection is None:
        selection = select(settings, catalog, facts.hardware, facts.vllm, model_gb=facts.model_gb)
    else:
        selection = with_addresses(selection, settings)
    spec = spec_for(selection.vllm_version)
    placement.check_addresses(settings)
    placement.check_thread_lists(settings)
    placement.check_user_args(selection.user, spec)
    decision = None
    if settings.load_format != "recipe":
        from entrypoint.core.compose import loading  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        decision = loading.decide(settings.load_format, selection.vllm_version, selection.user_args, spec,
                                  "://" in selection.model, facts.storage, brand=catalog.hardware[selection.hardware].brand)
    choice = kv.choose(settings, hostname=facts.hostname)
    from entrypoint.core.compose import fleet  # noqa: PLC0415 - KIMI_REPLICAS: the copies behind one router (docs/fleet.md)

    fleet_choice = fleet.choose(settings, pd=selection.prefill is not None)
    plan = resolve(selection, catalog, kv=choice, load=decision, fleet=fleet_choice, model_gb=facts.model_gb)
    placement.check_role(settings, plan)
    placement.check_node_fit(plan, catalog.hardware[plan.hardware].gpu_count, settings)
    placement.check_head_ports(plan, catalog.serving.peer_watch.port)
    unrecorded = unrecorded_note(selection.vllm_version)  # judged by another release's grammar: said, never silent
    notes: Tuple[str, ...] = (unrecorded,) if unrecorded else ()
    provisional = catalog.recipe.provisional
    if provisional:  # made from cited sources, no recipe page yet: said wherever the plan is shown
        notes += (f"the {catalog.recipe.title} recipe is provisional: {provisional.why.rstrip('.')}; until "
                  f"{provisional.until.rstrip('.')} (its sources: recipes/models/{catalog.recipe.id}.yaml).",)
    return Composition(settings=settings, catalog=catalog, selection=selection, plan=plan, load=decision, kv=choice,
                       fleet=fleet_choice, notes=notes)
