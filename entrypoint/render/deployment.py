"""What the compose and k8s renderers share: the image, the shape of the deployment, the
settings each container gets as environment, the GPU brand's facts, health-check timing (all
from the recipe data) and the Hugging Face token.

Containers run the project's image, whose ENTRYPOINT (`kimi-serve`) resolves its own launch from
KIMI_* variables; so a rendered service or pod carries the user's settings as environment, never
a command line.
"""

from __future__ import annotations

import posixpath
import re
from typing import Mapping

from entrypoint.core.base.errors import INVALID_VALUE, UNSUPPORTED_COMBINATION, KimiError
from entrypoint.core.compose.fleet import router_facts
from entrypoint.core.compose.kv import load_kv
from entrypoint.core.compose.loading import launch_budget_s, startup_bound_s
from entrypoint.core.compose.plan import Kind, Process
from entrypoint.core.compose.plan import SINGLE as ROLE_SINGLE
from entrypoint.core.compose.preload import load_preload
from entrypoint.core.compose.settings import BY_NAME as _BY_NAME
from entrypoint.core.compose.settings import BY_NAME, KIMI_FIELDS
from entrypoint.core.data.platforms import offering, platform
from entrypoint.core.data.record import Record as Hardware
from entrypoint.core.vllm.mask import mask_argv

HF_TOKEN = "HF_TOKEN"  # the Secret key (Kubernetes); never written into a rendered file
# The token reaches the containers as a file, never as an environment variable: huggingface_hub
# (and so vLLM's download) reads the file HF_TOKEN_PATH names; a missing file means no token.
HF_TOKEN_PATH = "HF_TOKEN_PATH"
TOKEN_DIR = "/run/secrets/kimi-serve"
TOKEN_FILE = "hf_token"
# Every Kubernetes container: its last log lines are its termination message when it fails without
# writing one (the entrypoint writes its one-line refusal to /dev/termination-log), so `kubectl get
# pods` and `describe` say why a container stopped, not only `Error` or `CrashLoopBackOff`.
TERMINATION_MESSAGE = {"terminationMessagePolicy": "FallbackToLogsOnError"}
SINGLE, MULTI_NODE, PD_CLUSTER, KV_STORE = "single", "multi_node", "pd_cluster", "kv_store"

# Settings no container gets: the renderer's own (image, name), the image's identity, the config
# file (its values are passed one by one), and what each container gets on its own (role; rank and
# head from the cluster runtime).
_NOT_PASSED = {"image", "image_digest", "name", "namespace", "config", "config_json", "peer_names", "recipes_dir", "image_target", "image_hardware",
               "image_serves", "role", "node_rank", "head_addr", "node_addr",
               # how the deployment is operated (render/monitoring.py, render/autoscaling.py)
               "monitoring", "slo_ttft_ms", "slo_itl_ms", "autoscaling", "replicas", "max_replicas",
               "scale_waiting", "scale_kv_percent", "prometheus_url", "scraper_namespace", "scraper_labels",
               # what fronts a fleet: the renderer's choice (render/k8s_fleet.py, render/gateway.py)
               "router"}


def passed(field) -> bool:
    """Whether a setting reaches the containers as environment (else it is the renderer's own)."""
    return field.name not in _NOT_PASSED


def with_defaults(environ: Mapping[str, str], defaults: Mapping[str, str]) -> dict:
    """`environ` plus `defaults` for every variable it does not set (what the user sets wins)."""
    merged = dict(environ)
    for key, value in defaults.items():
        if not merged.get(key, "").strip():
            merged[key] = value
    return merged


def shape(launch) -> str:
    """How the plan's topology is drawn: a KV store (its PD pools included), a PD cluster, several
    nodes (a fleet's router fronts copies of it), or one node."""
    topology = launch.plan.topology
    if topology.kv_store:  # a Mooncake KV store (docs/kv-cache.md), PD pools included
        return KV_STORE
    if topology.pd:
        return PD_CLUSTER
    return MULTI_NODE if topology.multi_node else SINGLE


def is_companion(proc: Process) -> bool:
    """A process beside the engine on its node, in its pod (LMCache's server)."""
    return proc.kind is Kind.KV_SERVER


def weight_cache(launch):
    """The weight cache's process (KIMI_PRELOAD, `vllm preload`) and where its sockets live, or None."""
    found = launch.plan.topology.helper(Kind.PRELOAD)
    if found is None:
        return None
    return found, load_preload()


def hardware(launch) -> Hardware:
    return launch.catalog.hardware[launch.plan.hardware]


def helper_resources(launch, proc: Process) -> Hardware:
    """CPU and memory of a process without GPUs: a KV helper's from recipes/kv_offload.yaml, the PD
    router's from its strategy."""
    if launch.kv is not None:
        data = load_kv()
        if launch.kv.store:
            entry = data.stores[launch.kv.id]
            found = {Kind.KV_MASTER: entry.master, Kind.KV_STORE: entry.store,
                     Kind.ROUTER: entry.router if not launch.plan.topology.pd else None}.get(proc.kind)
        else:
            companion = data.options[launch.kv.id].companion
            found = companion if companion is not None and is_companion(proc) else None
        if found is not None:
            return found.resources
    if getattr(launch, "fleet", None) is not None and not launch.plan.topology.pd:
        return router_facts().resources  # the fleet's router: the KV store's (recipes/fleet.yaml)
    return launch.catalog.strategies[launch.plan.strategy].router.resources


def brand(launch) -> Hardware:
    """The GPU brand's facts (devices, Kubernetes resource and label, Compose access)."""
    return launch.catalog.brands[hardware(launch).brand]


def health(launch) -> Hardware:
    """Health endpoint and timings (recipes/serving.yaml), with the launch's start-up budget as
    the start period: serving.yaml's for KIMI_LOAD_FORMAT=recipe, else what the checkpoint's size
    and the loader ask (core/compose/loading.py), never less."""
    base = launch.catalog.serving.health
    if getattr(launch, "load", None) is None:
        return base
    budget = launch_budget_s(launch.plan, launch.catalog, launch.load)
    return base if budget == base.start_period_s else Hardware("Health", {**base._fields, "start_period_s": budget})


def startup_bound(launch) -> int:
    """Kubernetes' bound on a start (its startupProbe, an autoscaled Deployment's progress deadline):
    the recipe's, the same for every launch of it (core/compose/loading.startup_bound_s); the
    container stops a load that outruns its own launch's budget itself (node/startup.py)."""
    return startup_bound_s(launch.catalog)


def image(launch) -> str:
    """KIMI_IMAGE, else the published image of this hardware's target built on the vLLM release the
    launch is judged by (recipes/serving.yaml `image.releases`: <registry>/<name>:<vllm>-<target>),
    by tag and, once one is locked there for that tag, by digest too; KIMI_IMAGE_DIGEST pins either
    to that digest (issue 30: an upgrade is a new digest, never a moved tag)."""
    pin = launch.settings.image_digest
    if launch.settings.image:
        ref = launch.settings.image
    else:
        repo, target = launch.catalog.serving.image, hardware(launch).image_target
        if target not in repo.releases.get(launch.selection.vllm_version, ()):
            built = [v for v, targets in repo.releases.items() if target in targets]
            raise KimiError(UNSUPPORTED_COMBINATION, f"no {repo.name} image is built on vLLM "
                            f"{launch.selection.vllm_version} for {launch.plan.hardware} (image target {target}; "
                            f"built: {', '.join(built) or 'none'}): set KIMI_VLLM_VERSION to one of those, or KIMI_IMAGE "
                            f"to an image of vLLM {launch.selection.vllm_version} for it.")
        ref = published(repo, launch.selection.vllm_version, target, locked=not pin)
    if not pin:
        return ref
    named, _, given = ref.partition("@")
    if given and given != pin:
        raise KimiError(INVALID_VALUE, f"KIMI_IMAGE={ref} names digest {given}, but KIMI_IMAGE_DIGEST={pin}: "
                        "keep one of them.")
    return f"{named}@{pin}"


class StopBudget:
    """How one process stops (recipes/serving.yaml `stop`, docs/day2.md): out of routing, a pause
    (`pause_s`, the preStop hook), SIGTERM, up to `drain_s` of drain, `margin_s` to exit; `grace_s`
    (terminationGracePeriodSeconds, stop_grace_period: KIMI_STOP_GRACE, as given) holds it all: the
    plan refuses a drain it cannot hold (resolve._check_stop_grace). A process that serves no
    client (a headless worker, the KV helpers, LMCache's server) waits through the drain too
    (k8s_pod.pre_stop): it gets SIGTERM only once the engines it backs have drained."""

    def __init__(self, pause_s: int, drain_s: int, margin_s: int, grace_s: int):
        self.pause_s, self.drain_s, self.margin_s, self.grace_s = pause_s, drain_s, margin_s, grace_s


def stop(launch, proc: Process) -> StopBudget:
    """The stop budget of `proc`: its drain (an engine's --shutdown-timeout; the router's and a
    helper's: the engines'), the pause and margin of the data, the plan's grace (KIMI_STOP_GRACE)."""
    data = launch.catalog.serving.stop
    return StopBudget(data.pause_s, proc.drain_s, data.margin_s, launch.plan.stop_grace_s)


def deployment_stop(launch) -> StopBudget:
    """The stop budget of the deployment's longest-draining process (a pod of several containers,
    a whole rendering)."""
    return max((stop(launch, p) for p in launch.plan.processes), key=lambda b: b.drain_s)


def published(repo, release: str, target: str, locked: bool = True) -> str:
    """The published image of `target` built on vLLM `release`: by tag, and by the digest locked for
    that tag where one is (`locked`)."""
    tag = f"{release}-{target}"
    digest = repo.digests.get(tag) if locked else None
    return f"{repo.registry.rstrip('/')}/{repo.name}:{tag}" + (f"@{digest}" if digest else "")


def image_user(launch):
    """The image's default user: uid, gid, home (recipes/serving.yaml)."""
    return launch.catalog.serving.image.user


def scratch(launch) -> dict:
    """Where the image's programs write besides the cache (Python, Triton, torch.compile,
    FlashInfer, vLLM's usage stats): writable scratch under a read-only root filesystem."""
    return {"tmp": "/tmp", "home": image_user(launch).home}


SHM = "/dev/shm"  # vLLM's workers share memory there (a memory-backed volume in a pod)


def separate_mounts(launch) -> dict:
    """What each container mounts besides the cache, by what it is: no cache directory there."""
    return {**{f"the image's scratch ({name})": path for name, path in scratch(launch).items()},
            "shared memory": SHM, "the token's directory": TOKEN_DIR}


def cache_mount(launch) -> str:
    """KIMI_CACHE_DIR as a rendered file mounts it: a path no other mount of the container uses
    (the scratch of /tmp and HOME, /dev/shm, the token's directory), so that every container,
    the download step included, sees the one cache volume there. Else exit 2, before writing."""
    cache = posixpath.normpath(re.sub("/+", "/", launch.settings.cache_dir))
    for what, path in separate_mounts(launch).items():
        if cache in (posixpath.normpath(path), "/"):
            where = "the root" if cache == "/" else what
            raise KimiError(INVALID_VALUE, f"KIMI_CACHE_DIR={launch.settings.cache_dir} is {where}, which the rendered "
                            "containers mount separately: the cache volume would be hidden (the "
                            "download step's files lost). Choose a directory of its own, e.g. /cache.")
    return cache


def pinned(reference: str) -> bool:
    """Whether an image reference names its content (a digest), not only a tag that can move."""
    return "@sha256:" in reference


def token_path() -> str:
    return f"{TOKEN_DIR}/{TOKEN_FILE}"


def service_name(launch, proc: Process) -> str:
    """`<name>` for a single node, `<name>-<role>` for the processes of a PD cluster."""
    return launch.name if proc.role == ROLE_SINGLE else f"{launch.name}-{proc.role}"


def _env_value(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


SECRET_ARGS = ("KIMI_EXTRA_ARGS carries a secret (--api-key, --hf-token, ...), which a rendered file would write "
               "down. Remove it, and give the API key to vLLM as VLLM_API_KEY from a secret store (a Kubernetes "
               "Secret, the shell that runs Compose).")


def pinned_settings(launch) -> dict:
    """The resolved choices every container is given, so that each resolves the same plan: the
    hardware and strategy, and the nodes, pool sizes or KV instances its shape was drawn for."""
    sel = launch.selection
    pinned = {"hardware": sel.hardware, "strategy": sel.strategy}
    if shape(launch) == MULTI_NODE:
        pinned["nodes"] = sel.nodes
    if launch.plan.topology.pd:
        pinned.update({f"{pool.name}_nodes": pool.nodes for pool in launch.plan.topology.pools})
    if launch.kv is not None and launch.kv.store and not launch.plan.topology.pd:
        pinned["kv_instances"] = launch.kv.instances
    return pinned


def settings_env(launch) -> dict:
    """KIMI_* every container of the deployment gets: what the user set (environment or config
    file) plus the resolved choices that make every container resolve the same plan."""
    s = launch.settings
    if mask_argv(s.vllm_user_args()) != list(s.vllm_user_args()):
        raise KimiError(INVALID_VALUE, SECRET_ARGS)
    pinned = pinned_settings(launch)
    env = {}
    for field in KIMI_FIELDS:
        if not passed(field):
            continue
        if field.name in pinned:
            env[field.env] = _env_value(pinned[field.name])
        elif s.is_set(field.name) and s.values[field.name] is not None:
            env[field.env] = _env_value(s.values[field.name])
    return env


def container_env(launch, proc: Process) -> dict:
    env = settings_env(launch)
    if shape(launch) in (PD_CLUSTER, KV_STORE) or is_companion(proc) or proc.kind in (Kind.ROUTER, Kind.PRELOAD):
        env[BY_NAME["role"].env] = proc.role
    return env



# ---------------------------------------------------------------- cloud container platforms


def platform_offering(launch, pid: str):
    """(platform data, what it offers for this hardware): a clear error when it offers nothing."""
    return platform(pid), offering(pid, launch.plan.hardware)


def refuse_fleet(launch, display_name: str) -> None:
    """A cloud platform scales its own copies behind its own load balancer: no fleet router (docs/fleet.md)."""
    if getattr(launch, "fleet", None) is not None:
        raise KimiError(UNSUPPORTED_COMBINATION, f"KIMI_REPLICAS={launch.fleet.replicas} puts the copies behind "
                        f"vllm-router (Kubernetes, Compose, hosts: docs/fleet.md); {display_name} runs its copies "
                        "behind its own load balancer. Unset KIMI_REPLICAS (and KIMI_REPLICA_ADDRS, "
                        "KIMI_ROUTER_POLICY) and set the platform's instance count, or render Kubernetes "
                        "(--format k8s).")


def one_instance(launch, pid: str, display_name: str) -> None:
    """Managed endpoints run one copy of the model per instance: a plan of one node."""
    refuse_fleet(launch, display_name)
    if shape(launch) != SINGLE or len(launch.plan.processes) > 1:  # a companion (LMCache) is a second container
        raise KimiError(UNSUPPORTED_COMBINATION, f"{display_name} runs each copy of the model on one instance, but "
                        f"this plan ({launch.plan.strategy}, {len(launch.plan.processes)} processes) spans several "
                        f"nodes or processes. Choose a one-node plan (KIMI_NODES=1 on hardware that holds the model: "
                        f"`kimi-serve list`), or render SkyPilot (--format skypilot) or Kubernetes (--format k8s).")


def platform_env(launch, pid: str) -> dict:
    """The settings every container gets, plus the platform it runs on (no detection needed)."""
    # One container and no init step: the start itself fetches the weights first (resumable,
    # with progress; nothing to fetch when the platform or object storage holds the model).
    return {**settings_env(launch), _BY_NAME["platform"].env: pid, _BY_NAME["download"].env: "1"}


def checkpoint_gb(launch) -> int:
    """Disk the weights need when they are downloaded to the instance (the variant's minimum)."""
    return int(launch.plan.vram_minimum_gb + 0.999)


def serving_port(launch) -> int:
    proc = launch.plan.processes[0]
    return proc.port or 8000
