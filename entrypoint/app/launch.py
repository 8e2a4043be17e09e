"""A launch composed from its inputs: environment + container args + the node -> settings ->
the node's facts -> the one composition (entrypoint.core.compose.launch.compose_launch).

Every command, the exec path and every renderer get their launch from here; nothing else ties
the pure core (entrypoint.core) to its inputs (the environment, cluster wiring, detection). The
node's facts (RAM, cores, hostname, the local model's files, the weights' volume, the detected GPUs
and vLLM) are read here, and only where the process runs on its node (`build`, `load_launch`:
start, print, doctor); a launch for other machines (`platform_launch`, app/deploy.py's renderings)
gets the facts its settings declare (core's declared_facts). `kimi-serve print` imports this
module alone of the package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Callable, Mapping, Optional

from entrypoint.core.compose.launch import (Composition, NodeFacts, compose_launch, declared_facts,
                                            selection_of)
from entrypoint.core.compose.plan import Process
from entrypoint.core.compose.settings import BY_ENV, Settings, read_settings
from entrypoint.core.data.recipe import Catalog
from entrypoint.core.vllm.vllm_cli import spec_for
from entrypoint.node.cluster import wire
from entrypoint.node.dist_info import installed_vllm_version
from entrypoint.node.exec import as_applied
from entrypoint.node.platform import PlatformWiring, apply_platform, check_contract

if TYPE_CHECKING:  # imported where used: kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.compose.loading import StorageFacts


@dataclass(frozen=True)
class Launch(Composition):
    """A composed launch, with the cloud platform's wiring it started under (None: none applied)."""

    platform: Optional[PlatformWiring] = None
    # the user's settings as written (settings.given_settings), where a rendering passes them on untouched
    given: Optional[Mapping] = None


def launch_of(composition: Composition, platform: Optional[PlatformWiring] = None,
              given: Optional[Mapping] = None) -> Launch:
    """The Launch of a composition (what core returns), with the platform's wiring."""
    return Launch(**{f.name: getattr(composition, f.name) for f in fields(Composition)}, platform=platform,
                  given=given)


def node_facts(settings: Settings, catalog: Optional[Catalog] = None, detected_hardware: Optional[str] = None,
               detected_vllm: Optional[str] = None,
               storage: Optional[Callable[[str], StorageFacts]] = None) -> NodeFacts:
    """This machine's facts, for a launch that runs here: its RAM and cores (a `cpu` target's
    size), hostname (a KV store's address), a local KIMI_MODEL's weights (its files), the weights'
    volume (`storage`: a probe of the selected model, asked only for KIMI_LOAD_FORMAT other than
    `recipe`), and the detection's hardware id and installed vLLM the caller found."""
    from entrypoint.core.base.files import local_model_gb, local_model_problem  # noqa: PLC0415 - a local model is sized from its own files
    from entrypoint.node.host import host_facts  # noqa: PLC0415 - sizes the cpu target where its settings give no size

    ram, cores = host_facts()
    model_gb = local_model_gb(settings.model) if settings.model else None
    problem = local_model_problem(settings.model) if settings.model and model_gb is None else None
    facts = NodeFacts(ram_gb=ram, cores=cores, hostname=os.uname().nodename,  # gethostname(), without importing socket
                      model_gb=model_gb, model_problem=problem, hardware=detected_hardware, vllm=detected_vllm)
    if storage is not None and settings.load_format != "recipe":
        facts = replace(facts, storage=storage(selection_of(settings, facts, catalog).model))
    return facts


def on_node(settings: Settings, detected_hardware: Optional[str] = None, catalog: Optional[Catalog] = None,
            detected_vllm: Optional[str] = None) -> Launch:
    """The launch of `settings` on this machine (its facts read here), without detection or wiring."""
    return launch_of(compose_launch(settings, node_facts(settings, catalog, detected_hardware, detected_vllm), catalog))


def build(environ: Mapping[str, str], user_args: tuple = (), detected_hardware: Optional[str] = None,
          catalog: Optional[Catalog] = None) -> Launch:
    """The launch of an already wired environment on this machine (no detection, no cluster wiring;
    a Kubernetes pod's peers named, as its container's start names them: with_peers)."""
    return on_node(read_settings({**environ, **with_peers(environ)}, user_args), detected_hardware, catalog)


def platform_launch(environ: Mapping[str, str], args: tuple = ()) -> Launch:
    """The launch of a container described by its variables alone (a `plan --batch` line, a cloud
    rendering's container): the platform's contract applied as that container would start, never
    this machine's network, GPUs, memory or files (the facts its settings declare). One fact is
    this machine's: the hostname a KV store advertises without KIMI_MOONCAKE_STORE_HOST (the
    container's own at its start; the renderings set the setting, so none of them shows it)."""
    platform = wire_platform(args, environ)
    settings = read_settings(platform.environ, platform.args)
    facts = replace(declared_facts(settings), hostname=os.uname().nodename)  # gethostname(), without importing socket
    return _checked(launch_of(compose_launch(settings, facts), platform))


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


def wire_platform(user_args: tuple = (), environ: Optional[Mapping[str, str]] = None) -> PlatformWiring:
    """The cloud platform's contract applied to the environment and the container arguments, and a
    Kubernetes deployment's peers named (with_peers)."""
    platform = apply_platform(os.environ if environ is None else environ, tuple(user_args))
    peers = with_peers(platform.environ)
    if not peers:
        return platform
    return replace(platform, environ={**platform.environ, **peers},
                   decisions=(*platform.decisions, *(f"{k}={v} (the pods of deployment {platform.environ.get('KIMI_NAME')}: "
                                                     "KIMI_PEER_NAMES=k8s)" for k, v in peers.items())))


def with_peers(environ: Mapping[str, str]) -> dict:
    """KIMI_PEER_NAMES=k8s (every container of a Kubernetes rendering: plan --format k8s, the chart): the
    addresses of this pod's peers, as the deployment KIMI_NAME names its pods (render/k8s.py
    peer_addresses: a KV store's Services and pods, the PD pools' pods of this pod's own
    LeaderWorkerSet group), for each the settings leave unset. No pod carries them, no template
    spells them: the container names them as the rendering did."""
    if not (environ.get("KIMI_PEER_NAMES") or "").strip():
        return {}
    from entrypoint.core.data.recipe import load_catalog, with_recipe  # noqa: PLC0415 - only a Kubernetes pod names its peers
    from entrypoint.render.k8s import peer_addresses  # noqa: PLC0415 - as above
    from entrypoint.render.k8s_fleet import GROUP_VAR  # noqa: PLC0415 - as above

    settings = read_settings(environ)
    if settings.peer_names != "k8s":
        return {}
    selection = selection_of(settings, declared_facts(settings), with_recipe(load_catalog(), settings.recipe))
    group = (environ.get(GROUP_VAR) or "0").strip()
    return {k: v for k, v in peer_addresses(settings, selection, group).items() if not settings.is_set(BY_ENV[k].name)}


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

    def storage(model: str) -> StorageFacts:  # the volume the weights are read from decides `auto`, and the budget
        return weights_storage(model, settings.cache_dir, wiring.environ, sample=False)

    launch = launch_of(compose_launch(settings, node_facts(settings, None, detected, vllm, storage)))
    notes: tuple = launch.notes
    if wiring.iface:  # this machine's routing chose the interface: say so (a rendering reader may not be there)
        said = "KIMI_IFACE=auto" if (platform.environ.get("KIMI_IFACE") or "").strip().lower() == "auto" else \
            "KIMI_IFACE is unset"
        found, how = wiring.iface
        notes += (f"{said}: this plan uses {found} ({how} on this machine), and each node's container finds its "
                 "own at its start. Set KIMI_IFACE to name the interface between the nodes.",)
    return _checked(replace(launch, platform=platform, notes=notes))


def weights_storage(model: str, cache_dir: str, environ: Mapping[str, str], sample: bool = True) -> StorageFacts:
    """The weights' volume on this node: file system, GPUDirect Storage, a bounded read sample."""
    from entrypoint.core.compose.loading import load_data  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.node.storage import probe  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    return probe(model, cache_dir, environ, load_data(), sample=sample)


def applied(launch: Launch, environ: Mapping[str, str]) -> Process:
    """This container's process with only the env the project applies here (what `print` shows)."""
    return as_applied(launch.this_process(), environ)
