"""The one settings model: every variable the entrypoint reads, declared once with its type,
default and help: the KIMI_* settings, and the variables others set that it reads (a
LeaderWorkerSet's LWS_*, Slurm's SLURM_*, the GPU visibility and hub variables).

Precedence (lowest to highest): built-in defaults < the TOML file named by KIMI_CONFIG (a `.json`
file: the same keys in JSON; keys in
lower case without the prefix; KIMI_* settings only) < KIMI_CONFIG_JSON (the same keys as a JSON
object in the variable: a Kubernetes deployment's settings ConfigMap) < the other variables. Container arguments are
vLLM arguments and come after KIMI_EXTRA_ARGS. Each setting is declared once, as an attribute of
`Settings` (`text`, `number`, `choice`, `flag`, `items`, `spec`: its type follows from the kind and
the default); `FIELDS` lists them in that order, and the README's tables are generated from it.
`{hardware}` and `{variants}` in a help text are filled from the recipe data when documented.
"""

from __future__ import annotations

import difflib
import re
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Mapping, Optional, Tuple, TypedDict, TypeVar, Union, overload

from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, KimiError, unknown_value
from entrypoint.core.base.files import read_capped
from entrypoint.core.data.versions import DIGEST
from entrypoint.core.vllm.mask import mask_argv, mask_value

if TYPE_CHECKING:  # Python 3.10's typing has no Unpack; read by mypy only
    from typing_extensions import Unpack

# An image reference (github.com/distribution/reference, regexp.go): [domain[:port]/]path[:tag][@digest]
_DOMAIN = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])(?:\.(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]))*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = (rf"(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                   r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")

# A setting's value: what _convert reads for its kind (a list: a tuple of strings), or None when unset.
Value = Union[str, int, bool, Tuple[str, ...], None]


@dataclass(frozen=True)
class Field:
    name: str  # attribute name and TOML key
    # str | int | bool | list | choice | spec (a comma list kept as written: "" = none, unset = default)
    kind: str
    default: Value
    default_doc: str  # the default as documented (may be a rule, not a value)
    help: str
    choices: tuple = ()
    # A variable someone else sets (a scheduler, the GPU runtime, the hub): its own name, who sets
    # it; read from the environment only, never from the KIMI_CONFIG file.
    external: Optional[str] = None
    owner: str = ""
    minimum: Optional[int] = None  # int: smallest value (default 0)
    maximum: Optional[int] = None  # int: largest value; list: most entries (core/base/limits.py says why)
    pattern: Optional[str] = None  # str: the whole value must match
    lower: bool = False  # str: a keyword (or a name vLLM reads in lower case), read the same in any case
    pattern_doc: str = ""  # what the pattern asks for, in words

    @property
    def env(self) -> str:
        return self.external or "KIMI_" + self.name.upper()


T = TypeVar("T")


class _Options(TypedDict, total=False):
    """A declaration's optional parts (Field's)."""

    external: str
    owner: str
    minimum: int
    maximum: int
    pattern: str
    lower: bool
    pattern_doc: str


class _Setting(Generic[T]):
    """A setting, declared once: a Settings attribute typed T (its kind's value, Optional where it
    may be unset), holding the Field that reads it (`field`, named after the attribute)."""

    def __init__(self, kind: str, default: Value, default_doc: str, help: str, choices: Tuple[str, ...] = (),
                 **options: Unpack[_Options]) -> None:
        self._declared = (kind, default, default_doc, help, choices, options)

    def __set_name__(self, owner: type, name: str) -> None:
        kind, default, default_doc, help, choices, options = self._declared
        self.name = name
        self.field = Field(name, kind, default, default_doc, help, choices, **options)
        self.__doc__ = help

    @overload
    def __get__(self, settings: None, owner: type) -> _Setting[T]: ...
    @overload
    def __get__(self, settings: Settings, owner: type) -> T: ...
    def __get__(self, settings: Optional[Settings], owner: type) -> Union[T, _Setting[T]]:
        return self if settings is None else settings.values[self.name]  # read_settings converted it to T


# One declaration per setting: the kind of value is the function's, its type follows from it and
# from the default (None: the setting may be unset, so Optional).
@overload
def text(default: None, default_doc: str, help: str, **options: Unpack[_Options]) -> _Setting[Optional[str]]: ...
@overload
def text(default: str, default_doc: str, help: str, **options: Unpack[_Options]) -> _Setting[str]: ...
def text(default: Optional[str], default_doc: str, help: str,
         **options: Unpack[_Options]) -> Union[_Setting[Optional[str]], _Setting[str]]:
    """A string setting."""
    return _Setting[Optional[str]]("str", default, default_doc, help, **options)


@overload
def number(default: None, default_doc: str, help: str, **options: Unpack[_Options]) -> _Setting[Optional[int]]: ...
@overload
def number(default: int, default_doc: str, help: str, **options: Unpack[_Options]) -> _Setting[int]: ...
def number(default: Optional[int], default_doc: str, help: str,
           **options: Unpack[_Options]) -> Union[_Setting[Optional[int]], _Setting[int]]:
    """A whole number, between `minimum` (default 0) and `maximum`."""
    return _Setting[Optional[int]]("int", default, default_doc, help, **options)


@overload
def choice(default: None, default_doc: str, help: str, choices: Tuple[str, ...],
           **options: Unpack[_Options]) -> _Setting[Optional[str]]: ...
@overload
def choice(default: str, default_doc: str, help: str, choices: Tuple[str, ...],
           **options: Unpack[_Options]) -> _Setting[str]: ...
def choice(default: Optional[str], default_doc: str, help: str, choices: Tuple[str, ...],
           **options: Unpack[_Options]) -> Union[_Setting[Optional[str]], _Setting[str]]:
    """One of `choices`, read in any case."""
    return _Setting[Optional[str]]("choice", default, default_doc, help, choices, **options)


def flag(default: bool, default_doc: str, help: str, **options: Unpack[_Options]) -> _Setting[bool]:
    """A yes/no setting (parse_bool)."""
    return _Setting[bool]("bool", default, default_doc, help, **options)


def items(default: Tuple[str, ...], default_doc: str, help: str, **options: Unpack[_Options]) -> _Setting[Tuple[str, ...]]:
    """A comma list (a list in the KIMI_CONFIG file), at most `maximum` entries."""
    return _Setting[Tuple[str, ...]]("list", default, default_doc, help, **options)


def spec(default: None, default_doc: str, help: str, **options: Unpack[_Options]) -> _Setting[Optional[str]]:
    """A comma list kept as written: "" = none, unset = the default."""
    return _Setting[Optional[str]]("spec", default, default_doc, help, **options)


@dataclass(frozen=True)
class Settings:
    """Typed settings: one attribute per setting, each declared once below (its kind, default, help;
    its type follows from the kind and the default). `values` holds them by name
    for code that picks a setting by a computed name (f"{role}_addrs"): typed Any there, since the
    type depends on the name; the attributes are the typed access. `origin` says where each value
    came from."""

    values: Mapping[str, Any]
    origin: Mapping[str, str]  # field name -> "default" | "file" | "env"
    user_args: tuple = ()  # container arguments (vLLM args)
    warnings: tuple = ()

    def is_set(self, name: str) -> bool:
        return self.origin.get(name, "default") != "default"

    def vllm_user_args(self) -> tuple:
        """KIMI_EXTRA_ARGS (shell-split, never run through a shell) then the container args."""
        extra = self.extra_args
        try:
            parts = shlex.split(extra) if extra else []
        except ValueError as exc:
            raise KimiError(INVALID_VALUE, f"KIMI_EXTRA_ARGS cannot be split like a shell line ({exc}): "
                            f"{_shown(BY_NAME['extra_args'], extra)}. Check its quotes.") from None
        return tuple(parts) + tuple(self.user_args)

    # Every setting, declared once: KIMI_* first, then the variables others set (external=...).
    recipe = text(None, "`{default_recipe}`", "Which Kimi model: a recipe slug ({recipes}).")
    hardware = text(None, "the image's own target; `auto` = detect",
      "Hardware id: {hardware}, or `auto`.")
    variant = text("default", "`default`", "Checkpoint variant: {variants}.")
    strategy = text(None, "`single_node_tp`; `multi_node_tp` when KIMI_NODES > 1",
      "Serving strategy id (`kimi-serve list` shows them).")
    features = spec(None, "the recipe's defaults for the hardware",
      "Comma list of features; empty = none; `+f` / `-f` add to / remove from the defaults.")
    profile = text(None, "none", "Tuned profile: {profiles}.")
    cpu_ranks = number(1, "`1`", "KIMI_HARDWARE=cpu: vLLM ranks per node (what a GPU target's GPUs are).",
      minimum=1, maximum=limits.MAX_CPU_RANKS)
    cpu_memory_gb = number(None, "this node's RAM; a rendering: the target's nominal `vram_gb` (16, "
      "recipes/hardware.yaml)", "KIMI_HARDWARE=cpu: GB of memory per node the memory check counts, and a rendered "
      "pod's memory (`<N>G`).", minimum=1, maximum=limits.MAX_CPU_MEMORY_GB)
    cpu_cores = number(None, "this node's cores; a rendering: the target's nominal 4 (recipes/hardware.yaml)",
      "KIMI_HARDWARE=cpu: cores per node: a rendered pod's cpu, and what KIMI_CPU_THREADS divides among the ranks.",
      minimum=1, maximum=limits.MAX_CPU_THREADS)
    cpu_threads = number(None, "KIMI_CPU_CORES over KIMI_CPU_RANKS", "KIMI_HARDWARE=cpu: OpenMP threads per rank "
      "(OMP_NUM_THREADS).", minimum=1, maximum=limits.MAX_CPU_THREADS)
    cpu_kvcache_gib = number(None, "`4` (recipes/hardware.yaml)", "KIMI_HARDWARE=cpu: GiB of KV cache per rank "
      "(VLLM_CPU_KVCACHE_SPACE).", minimum=1, maximum=limits.MAX_CPU_MEMORY_GB)
    cpu_threads_bind = text(None, "`nobind` (recipes/hardware.yaml)", "KIMI_HARDWARE=cpu: how ranks bind their "
      "threads (VLLM_CPU_OMP_THREADS_BIND): `nobind`, `auto` (a NUMA node per rank), or core lists `0-3|4-7`.",
      pattern=r"nobind|auto|[0-9][0-9,|-]*", pattern_doc="nobind, auto, or core ranges per rank like 0-3|4-7")
    nodes = number(1, "`1`", "Number of nodes of a multi-node deployment.", minimum=1, maximum=limits.MAX_NODES)
    node_rank = number(0, "`0`", "This node's rank (multi-node) or its index in its pool (prefill/decode).",
      maximum=limits.MAX_NODES - 1)
    head_addr = text(None, "required when KIMI_NODES > 1", "Rendezvous address of rank 0 (`$HEAD_IP`).")
    node_addr = text(None, "the address of the route vLLM finds (KIMI_IFACE's interface)",
      "This node's address as the other nodes reach it (vLLM's VLLM_HOST_IP): where a node has several, or the "
      "nodes share a host.")  # judged as every address is (placement.ADDRESS_SETTINGS)
    iface = text(None, "required where the strategy needs it",
      "Network interface for GLOO/NCCL (`$IFACE_NAME`).")
    role = choice(None, "required to launch a pd_cluster process",
      "Which process of a pd_cluster, KV deployment or fleet (its router) this container runs (docs/kv-cache.md, "
      "docs/fleet.md); `preload`: KIMI_PRELOAD's weight cache (docs/day2.md).",
      ("prefill", "decode", "router", "master", "store", "instance", "lmcache", "preload"))
    prefill_nodes = number(None, "the recipe's pools", "Prefill pool size in nodes; 0 = the two pools share one node.",
      maximum=limits.MAX_POOL_NODES)
    decode_nodes = number(None, "the recipe's pools", "Decode pool size in nodes; 0 = the two pools share one node.",
      maximum=limits.MAX_POOL_NODES)
    prefill_parallelism = choice(None, "the recipe's", "Prefill pool parallelism.", ("tp", "tep", "dep"))
    decode_parallelism = choice(None, "the recipe's", "Decode pool parallelism.", ("tp", "tep", "dep"))
    prefill_addrs = items((), "required for pd_cluster", "Comma list of prefill node addresses (`$PREFILL_NODE_i`).",
      maximum=limits.MAX_ADDRESSES)
    decode_addrs = items((), "required for pd_cluster", "Comma list of decode node addresses (`$DECODE_NODE_i`).",
      maximum=limits.MAX_ADDRESSES)
    prefill_dp_rpc_port = number(29550, "`29550`", "DP RPC port of the prefill pool.", minimum=1, maximum=65535)
    decode_dp_rpc_port = number(29560, "`29560`", "DP RPC port of the decode pool.", minimum=1, maximum=65535)
    router_host = text("0.0.0.0", "`0.0.0.0`", "Router bind address.")
    router_port = number(8000, "`8000`; a KV store's router: its `router.port` (30080)", "Router port.",
      minimum=1, maximum=65535)
    # A fleet: KIMI_REPLICAS copies behind one router (entrypoint/core/compose/fleet.py, recipes/fleet.yaml; docs/fleet.md).
    router = choice("vllm-router", "`vllm-router`", "What fronts the copies of a fleet (KIMI_REPLICAS > 1): "
      "`vllm-router` (the cache-aware router), `gateway` (a Gateway API InferencePool and its endpoint picker; "
      "Kubernetes), `none` (a plain Service: connections spread blind to the caches).",
      ("vllm-router", "gateway", "none"))
    stream_front = choice(None, "`on` for a fleet behind `vllm-router`", "The stream front before a fleet's "
      "router (docs/fleet.md): a stream whose engine stops continues on another copy, or ends with an explicit "
      "error; `on` also puts a PD cluster of one unit behind it; `off`: the router alone.", ("on", "off"))
    router_policy = text(None, "`cache_aware`", "The fleet router's policy (recipes/fleet.yaml): cache_aware, "
      "round_robin, random, power_of_two, consistent_hash, sticky_least_loaded, or kv_aware (the engines publish "
      "their KV-cache events).")
    replica_addrs = items((), "required for the router outside Kubernetes",
      "Comma list of the fleet's copies, one address each (a multi-node copy: its head; `$REPLICA_i`).",
      maximum=limits.MAX_ADDRESSES)
    router_selector = items((), "set by `plan --format k8s`", "Kubernetes label selector (comma list of "
      "key=value): the router discovers the copies' pods in its namespace instead of KIMI_REPLICA_ADDRS.",
      maximum=limits.MAX_ADDRESSES)
    kv_offload = text(None, "none", "KV cache beyond the GPU (docs/kv-cache.md): simple, offloading_cpu, "
      "offloading_fs, lmcache, kv_store_centralized_mooncake or kv_store_distributed_mooncake.")
    kv_instances = number(None, "the KV store's `default_instances` (centralized 2, distributed 1)",
      "Engine instances behind the cache-aware router of a KV store (1 = no router).", minimum=1,
      maximum=limits.MAX_NODES)
    instance_addrs = items((), "required for the router and multi-node instances",
      "Comma list of the KV store's instance addresses, one per instance (`$VLLM_INSTANCE_i`).",
      maximum=limits.MAX_ADDRESSES)
    mooncake_master_addr = text(None, "required for a KV store",
      "Address of the mooncake_master every instance and the store reach (`$MOONCAKE_MASTER_IP`).")
    mooncake_device_name = text("", "`\"\"` (auto-selection)", "RDMA NICs of the instances' Mooncake config, "
      "e.g. mlx5_0,mlx5_1 (`$MOONCAKE_DEVICE_NAME`).")
    mooncake_store_device_name = text("", "`\"\"` (auto-selection)", "RDMA NICs of the store node "
      "(`$MOONCAKE_STORE_DEVICE_NAME`).")
    mooncake_store_host = text(None, "this machine's hostname",
      "Address the Mooncake store advertises to the instances (its config's `local_hostname`).")
    model = text(None, "the variant's model id", "A local path or another repo id to load instead.")
    model_gb = number(None, "the local model's own files (on its node)", "GB of the weights of a local KIMI_MODEL "
      "(a path): what a rendering for other nodes sizes it by, since their files are not on the rendering machine.",
      minimum=1, maximum=limits.MAX_CPU_MEMORY_GB)
    model_revision = text(None, "the repo's default branch (not emitted)",
      "Branch, tag or commit of the model repo: `--revision` of the launch and what `kimi-serve download` fetches.")
    served_model_name = text(None, "the variant's model id (also when KIMI_MODEL is a path)",
      "Name clients use; `--served-model-name` is emitted only when it differs from the model argument.")
    host = text(None, "vLLM's default (not emitted)", "API bind address.")
    port = number(None, "vLLM's default, 8000 (not emitted)", "API port (single node and multi-node head).",
      minimum=1, maximum=65535)
    vllm_version = text(None, "the image's vLLM (baked in at build); else the installed vLLM's; else "
      "recipes/serving.yaml `default_vllm.release` (a recipe whose floor is later: its floor)",
      "vLLM release the launch is for (e.g. 0.19.1): flags, choices and env are checked against its "
      "grammar (recipes/vllm/); set it for `print`/`plan` of another image. Renderings run the image built on it.")
    load_format = text("recipe", "`recipe`", "How vLLM loads the weights: `recipe` (the recipe's own flags), "
      "`auto` (the fastest measured loader for this node's storage: recipes/loaders.yaml, docs/cold-start.md), or a "
      "`--load-format` of the image's vLLM (e.g. `runai_streamer`, `fastsafetensors`, `instanttensor`).",
      lower=True)
    drain_timeout = number(300, "`300`", "Seconds a stopped engine drains its running requests: vLLM's "
      "`--shutdown-timeout` on every engine (where the release has it). It must fit KIMI_STOP_GRACE with the "
      "preStop pause and the exit's margin (docs/day2.md). 0 = vLLM's own default: SIGTERM aborts every open stream.",
      maximum=limits.MAX_DRAIN_S)
    stop_grace = number(345, "`345`", "Seconds the platform gives each container to stop, from the stop to "
      "SIGKILL: every pod's `terminationGracePeriodSeconds` (`plan --format k8s`, the Helm chart) and Compose's "
      "`stop_grace_period`; give `docker stop -t` the same. It must hold the preStop pause, KIMI_DRAIN_TIMEOUT and "
      "the exit's margin (recipes/serving.yaml `stop`: 15 + 300 + 30 by default); a drain it cannot hold is "
      "refused, naming the grace it needs (docs/day2.md).", minimum=1, maximum=limits.MAX_STOP_GRACE_S)
    preload = flag(False, "`0`", "1 = keep the weights across engine restarts: `vllm preload` beside the engine "
      "(a sidecar container on Kubernetes, a companion service in Compose) holds them in GPU memory and the engine "
      "maps them (`--load-format ipc_cache`); one node, a release and GPU brand recorded in recipes/vllm/preload.yaml "
      "(docs/day2.md).")
    extra_args = text(None, "none", "More vLLM args, split like a shell would (shlex), never run through a shell.")
    skip_memory_check = flag(False, "`0`", "1 = allow a deployment below the variant's VRAM minimum.")
    download = flag(False, "`0`; `1` in the cloud renderings",
      "1 = the start runs `kimi-serve download` before preflight (platforms with one container and no init step).")
    download_backoff_s = number(2, "`2`", "Seconds before the first retry of a failed hub request (`kimi-serve "
      "download`); each retry doubles it, up to 60; 0 = retry at once.", maximum=60)
    dry_run = flag(False, "`0`", "1 = print the launch and exit 0.")
    preflight = choice("on", "`on`", "Node checks before exec: on, warn (errors become warnings), off.",
      ("on", "warn", "off"))
    log_format = choice("text", "`text`", "Start-up log format: text or json.", ("text", "json"))
    cache_dir = text("/cache", "`/cache`", "Mount point for the Hugging Face and vLLM caches.",
      pattern=r"/.*", pattern_doc="an absolute path")
    debug = flag(False, "`0`", "1 = an unexpected error shows its full Python traceback (for a bug report).")
    image = text(None, "the project's published image for the target", "Image that rendered deployments run.",
      pattern=IMAGE_REFERENCE, pattern_doc="an image reference like registry.example/team/kimi:v1 (the OCI "
      "grammar: [registry[:port]/]name[:tag][@algorithm:digest], no blanks, one tag and one digest at most)")
    image_digest = text(None, "the digest recipes/serving.yaml locks for the target, if any",
      "Pin the rendered image by content: `sha256:<64 hex digits>`, added to KIMI_IMAGE (or the published image) "
      "as `@sha256:...`, so every pod and service runs exactly that build; an upgrade is a new digest (docs/day2.md).",
      pattern=DIGEST, pattern_doc="an image digest, sha256: and 64 lower-case hex digits")
    name = text(None, "the recipe's (`{default_name}` for {default_recipe})",
      "Name of a rendered deployment (a DNS label: a-z, 0-9, `-`).",
      pattern=r"[a-z]([-a-z0-9]*[a-z0-9])?", pattern_doc=f"a DNS label: lower-case letters, digits and '-', "
      f"starting with a letter, ending with a letter or digit, at most {limits.MAX_NAME_LENGTH} characters")
    namespace = text("kimi-serve", "`kimi-serve`",
      "Kubernetes namespace of every rendered object (rendered as a Namespace with Pod Security `restricted`).")
    # Operating a Kubernetes deployment (`plan --format k8s`, the Helm chart; docs/operate.md). Renderer settings:
    # no container gets them.
    monitoring = flag(False, "`0`", "1 = `plan --format k8s` also renders a PodMonitor, a PrometheusRule (the "
      "alerts) and a Grafana dashboard ConfigMap (Prometheus Operator and Grafana's dashboard sidecar).")
    slo_ttft_ms = number(2000, "`2000`", "Time-to-first-token SLO in ms: the p95 above it for 10 min alerts.",
      minimum=1, maximum=limits.MAX_SLO_MS)
    slo_itl_ms = number(100, "`100`", "Inter-token latency SLO in ms: the p95 above it for 10 min alerts.",
      minimum=1, maximum=limits.MAX_SLO_MS)
    autoscaling = choice("off", "`off`", "Autoscaler `plan --format k8s` renders for each engine group: a "
      "KEDA ScaledObject (`keda`) or an HPA on the Prometheus adapter's metrics (`hpa`), with a "
      "PodDisruptionBudget, surge-one rollouts and zone spread.", ("off", "keda", "hpa"))
    replicas = number(1, "`1`", "Copies of the deployment (each engine group), behind one router (KIMI_ROUTER); the fewest when autoscaling.",
      minimum=1, maximum=limits.MAX_REPLICAS)
    max_replicas = number(4, "`4`", "Most copies the autoscaler scales each engine group to (KIMI_REPLICAS or more).",
      minimum=1, maximum=limits.MAX_REPLICAS)
    scale_waiting = number(8, "`8`", "Requests waiting per copy above which the autoscaler adds one.",
      minimum=1, maximum=limits.MAX_SCALE_WAITING)
    scale_kv_percent = number(80, "`80`", "Average KV-cache usage (percent) above which the autoscaler adds a copy.",
      minimum=1, maximum=100)
    prometheus_url = text("http://prometheus-operated.monitoring.svc:9090", "`http://prometheus-operated.monitoring.svc:9090`",
      "Prometheus the KEDA ScaledObject queries (`autoscaling=keda`).", pattern=r"https?://[^\s]+",
      pattern_doc="an http(s) URL")
    scraper_namespace = text("monitoring", "`monitoring`",
      "Namespace of the Prometheus that scrapes the engines: the NetworkPolicies admit it to every metrics port.",
      pattern=r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", pattern_doc="a Kubernetes namespace name")
    scraper_labels = items((), "none (any pod of KIMI_SCRAPER_NAMESPACE)",
      "Comma list of `key=value` pod labels of that Prometheus (e.g. `app.kubernetes.io/name=prometheus`).",
      maximum=16)
    image_target = text(None, "baked in at build", "The image's build target (set by the image).")
    image_hardware = text(None, "baked in at build", "The image's default KIMI_HARDWARE (set by the image).")
    image_serves = items((), "baked in at build", "Hardware ids the image serves (set by the image).")
    image_cuda = text(None, "baked in at build (CUDA images)",
      "CUDA version of the image's base (set by the image; a recipe's `min_stack` is checked against it).")
    image_rocm = text(None, "baked in at build (ROCm images)",
      "ROCm version of the image's base (set by the image; a recipe's `min_stack` is checked against it).")
    config = text(None, "none", "Path of a TOML file (or a .json file: JSON) with the same keys in lower case, without the prefix.")
    config_json = text(None, "none", "The same keys as a JSON object, in the variable itself: what a Kubernetes "
      "deployment gives every container from its `<name>-settings` ConfigMap (the user's settings as written). "
      "Over KIMI_CONFIG's file, under the other variables.")
    peer_names = choice(None, "none (the settings' addresses)", "Set by the Kubernetes renderings (`plan --format k8s`, "
      "the chart) on every container: the container takes its peers' addresses (a PD cluster's pools, of its own "
      "LeaderWorkerSet group; a KV store's master, store and instances) from the names the deployment KIMI_NAME gives "
      "its pods, where the settings give none.", ("k8s",))
    platform = text(None, "detected from the platform's own variables (and SageMaker's `serve` argument)",
      "Cloud container platform whose contract the container follows: sagemaker, vertex, azureml, skypilot, or "
      "`none` (docs/cloud.md).")
    recipes_dir = text(None, "the recipe data of the checkout or the package",
      "A directory of recipe data (models/, hardware.yaml, strategies/, ...) to use instead; for maintainers.")
    # Variables others set, read by the cluster wiring, detection and preflight (env only).
    lws_leader_address = text(None, "-", "Address of the group's leader pod: KIMI_HEAD_ADDR when unset.",
      external="LWS_LEADER_ADDRESS", owner="LeaderWorkerSet")
    lws_group_size = number(None, "-", "Pods in the group: KIMI_NODES when unset.",
      external="LWS_GROUP_SIZE", owner="LeaderWorkerSet", minimum=1, maximum=limits.MAX_NODES)
    lws_worker_index = number(None, "-", "This pod's index in its group: KIMI_NODE_RANK when unset.",
      external="LWS_WORKER_INDEX", owner="LeaderWorkerSet", maximum=limits.MAX_NODES - 1)
    slurm_nnodes = number(None, "-", "Nodes of the job step: KIMI_NODES when unset.",
      external="SLURM_NNODES", owner="Slurm", minimum=1, maximum=limits.MAX_NODELIST_HOSTS)
    slurm_job_num_nodes = number(None, "-", "Nodes of the job (when SLURM_NNODES is absent).",
      external="SLURM_JOB_NUM_NODES", owner="Slurm", minimum=1, maximum=limits.MAX_NODELIST_HOSTS)
    slurm_nodeid = number(None, "-", "This node's index in the job: KIMI_NODE_RANK when unset.",
      external="SLURM_NODEID", owner="Slurm", maximum=limits.MAX_NODELIST_HOSTS - 1)
    slurm_job_nodelist = text(None, "-", "The job's compact host list; its first host is KIMI_HEAD_ADDR.",
      external="SLURM_JOB_NODELIST", owner="Slurm")
    slurm_nodelist = text(None, "-", "The host list (when SLURM_JOB_NODELIST is absent).",
      external="SLURM_NODELIST", owner="Slurm")
    cuda_visible_devices = text(None, "-", "GPUs the process may use (NVIDIA; AMD when HIP_VISIBLE_DEVICES is unset).",
      external="CUDA_VISIBLE_DEVICES", owner="GPU runtime")
    hip_visible_devices = text(None, "-", "GPUs the process may use (AMD).",
      external="HIP_VISIBLE_DEVICES", owner="GPU runtime")
    rocr_visible_devices = text(None, "-", "GPUs the ROCm runtime exposes (AMD), applied first.",
      external="ROCR_VISIBLE_DEVICES", owner="GPU runtime")
    hf_hub_offline = flag(False, "`0`", "1 = no hub access: the weights must be in the cache already.",
      external="HF_HUB_OFFLINE", owner="Hugging Face Hub")
    hf_token = text(None, "none", "Token for gated or private repos (`kimi-serve download`, vLLM); masked in every output.",
      external="HF_TOKEN", owner="Hugging Face Hub")
    hf_token_path = text(None, "`$HF_HOME/token`",
      "File holding the token (rendered deployments mount their secret there; huggingface_hub reads it).",
      external="HF_TOKEN_PATH", owner="Hugging Face Hub")
    hf_endpoint = text(None, "`https://huggingface.co`", "The hub `kimi-serve download` and vLLM fetch from (a mirror).",
      external="HF_ENDPOINT", owner="Hugging Face Hub")
    vllm_use_modelscope = flag(False, "`0`", "1 = vLLM loads from ModelScope: its cache holds the weights.",
      external="VLLM_USE_MODELSCOPE", owner="vLLM")
    # Cloud container platforms (recipes/platforms.yaml, docs/cloud.md) and object storage.
    sagemaker_bind_to_port = number(None, "-", "Port SageMaker sends traffic to (multi-container endpoints); 8080 when unset: KIMI_PORT.",
      external="SAGEMAKER_BIND_TO_PORT", owner="SageMaker")
    sm_vllm_model = text(None, "-", "Model to load (AWS's vLLM containers' convention): KIMI_MODEL when unset.",
      external="SM_VLLM_MODEL", owner="SageMaker")
    hf_model_id = text(None, "-", "Model to load (the Hugging Face containers' convention): KIMI_MODEL when unset.",
      external="HF_MODEL_ID", owner="SageMaker")
    sm_vllm_flags = text(None, "-", "`SM_VLLM_<NAME>=v` is the vLLM flag `--<name> v` (`true`: a bare flag, `false`: none), before KIMI_EXTRA_ARGS.",
      external="SM_VLLM_<NAME>", owner="SageMaker")
    aip_http_port = number(None, "-", "Port Vertex AI sends probes and predictions to: KIMI_PORT (must agree).",
      external="AIP_HTTP_PORT", owner="Vertex AI")
    aip_mode = text(None, "-", "`PREDICTION` in a serving container (detection).",
      external="AIP_MODE", owner="Vertex AI")
    aip_health_route = text(None, "-", "Route Vertex AI probes; must be one the server answers.",
      external="AIP_HEALTH_ROUTE", owner="Vertex AI")
    aip_predict_route = text(None, "-", "Route Vertex AI sends predictions to; must be one the server answers.",
      external="AIP_PREDICT_ROUTE", owner="Vertex AI")
    aip_storage_uri = text(None, "-", "gs:// copy of the model's artifacts: KIMI_MODEL when unset.",
      external="AIP_STORAGE_URI", owner="Vertex AI")
    azureml_model_dir = text(None, "-", "Where the deployment's registered model is mounted: KIMI_MODEL when unset and it holds a checkpoint.",
      external="AZUREML_MODEL_DIR", owner="Azure ML")
    skypilot_num_nodes = number(None, "-", "Nodes of the task: KIMI_NODES when unset.",
      external="SKYPILOT_NUM_NODES", owner="SkyPilot")
    skypilot_node_rank = number(None, "-", "This node's rank: KIMI_NODE_RANK when unset.",
      external="SKYPILOT_NODE_RANK", owner="SkyPilot")
    skypilot_node_ips = text(None, "-", "Node addresses, one a line, rank 0 first: the first is KIMI_HEAD_ADDR when unset.",
      external="SKYPILOT_NODE_IPS", owner="SkyPilot")
    aws_endpoint_url_s3 = text(None, "-", "S3-compatible endpoint for s3:// models (else AWS_ENDPOINT_URL, else AWS).",
      external="AWS_ENDPOINT_URL_S3", owner="you (S3)")
    aws_endpoint_url = text(None, "-", "Endpoint of every AWS service, used for s3:// models.",
      external="AWS_ENDPOINT_URL", owner="you (S3)")
    aws_region = text(None, "-", "Region of the bucket (else AWS_DEFAULT_REGION, else us-east-1).",
      external="AWS_REGION", owner="you / the platform (S3)")
    aws_default_region = text(None, "-", "Region of the bucket when AWS_REGION is unset.",
      external="AWS_DEFAULT_REGION", owner="you / the platform (S3)")
    aws_access_key_id = text(None, "-", "Key id for s3:// models (masked in every output).",
      external="AWS_ACCESS_KEY_ID", owner="you / the platform (S3)")
    aws_secret_access_key = text(None, "-", "Secret key for s3:// models (masked in every output).",
      external="AWS_SECRET_ACCESS_KEY", owner="you / the platform (S3)")
    aws_session_token = text(None, "-", "Session token of temporary credentials (masked).",
      external="AWS_SESSION_TOKEN", owner="you / the platform (S3)")
    aws_profile = text(None, "-", "Named profile: preflight names it as the credential source, vLLM's loader resolves it.",
      external="AWS_PROFILE", owner="you (S3)")
    aws_web_identity_token_file = text(None, "-", "Web identity credentials (named by preflight, resolved by the loader).",
      external="AWS_WEB_IDENTITY_TOKEN_FILE", owner="EKS / the platform (S3)")
    aws_container_credentials_relative_uri = text(None, "-", "Container credentials (named by preflight, resolved by the loader).",
      external="AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", owner="ECS / the platform (S3)")
    aws_container_credentials_full_uri = text(None, "-", "Container credentials (named by preflight, resolved by the loader).",
      external="AWS_CONTAINER_CREDENTIALS_FULL_URI", owner="the platform (S3)")
    aws_ec2_metadata_disabled = text(None, "-", "`true`: no instance-metadata credentials (S3-compatible stores).",
      external="AWS_EC2_METADATA_DISABLED", owner="you (S3)")
    google_application_credentials = text(None, "-", "Service-account key file for gs:// models (else the metadata server).",
      external="GOOGLE_APPLICATION_CREDENTIALS", owner="you (GCS)")


FIELDS: Tuple[Field, ...] = tuple(a.field for a in vars(Settings).values() if isinstance(a, _Setting))
BY_NAME = {f.name: f for f in FIELDS}
BY_ENV = {f.env: f for f in FIELDS}
KIMI_FIELDS = tuple(f for f in FIELDS if not f.external)
EXTERNAL_FIELDS = tuple(f for f in FIELDS if f.external)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bool(text: Any) -> Optional[bool]:
    """The one reading of a yes/no value: 1/true/yes/on, 0/false/no/off/empty; None otherwise."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


# Keys a KIMI_CONFIG file may not set: they are read before (or without) the file.
ENV_ONLY = ("config", "config_json", "peer_names", "recipes_dir", "debug")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _kind_of(raw: Any) -> str:
    return {dict: "a table", list: "a list", tuple: "a list", bool: "a boolean", float: "a number",
            int: "a number"}.get(type(raw), type(raw).__name__)


def _shown(field: Field, raw: Any) -> str:
    """The value as an error message may show it: scalars only, shortened, secrets masked."""
    if not isinstance(raw, (str, int, float)):
        return _kind_of(raw)
    text = str(raw)
    if field.name == "extra_args":
        text = " ".join(mask_argv(text.split()))
    text = mask_value(text)  # `u:password@host` typed into any setting
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _text(field: Field, raw: Any, label: str) -> str:
    text = str(raw)
    if len(text) > limits.MAX_SETTING_CHARS:
        raise KimiError(INVALID_VALUE, f"{label} is {len(text)} characters long; at most "
                        f"{limits.MAX_SETTING_CHARS} are read.")
    if _CONTROL.search(text):
        raise KimiError(INVALID_VALUE, f"{label} contains a control character (such as NUL): {_shown(field, raw)}. "
                        "Write it as plain text.")
    return text


def _int(field: Field, raw: Any, label: str) -> int:
    low = 0 if field.minimum is None else field.minimum
    high = 10 ** limits.MAX_INT_DIGITS - 1 if field.maximum is None else field.maximum
    bounds = f"between {low} and {high}"
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise KimiError(INVALID_VALUE, f"{label} must be a whole number {bounds}, not {_shown(field, raw)}.")
    text = _text(field, raw, label).strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        hint = ""
        if field.name == "port" and "://" in text:
            hint = (" This looks like a Kubernetes service link (a Service named 'kimi'): set "
                    "enableServiceLinks: false in the pod spec or rename the Service.")
        raise KimiError(INVALID_VALUE, f"{label} must be a whole number {bounds}, not {_shown(field, raw)}.{hint}")
    digits = text.lstrip("+-").lstrip("0")
    value = int(text) if len(digits) <= limits.MAX_INT_DIGITS else None
    if value is None or not low <= value <= high:
        shown = text if len(text) <= 20 else f"a {len(digits)}-digit number"
        raise KimiError(INVALID_VALUE, f"{label} must be {bounds}, not {shown}"
                        + (f" (at most {high}: core/base/limits.py says why)." if value is None or value > high else "."))
    return value


def _list(field: Field, raw: Any, label: str) -> tuple:
    if isinstance(raw, (list, tuple)):
        if not all(isinstance(i, (str, int)) and not isinstance(i, bool) for i in raw):
            raise KimiError(INVALID_VALUE, f"{label} must be a list of strings, not a list holding "
                            f"{', '.join(sorted({_kind_of(i) for i in raw if not isinstance(i, str)}))}.")
        parts = [_text(field, i, label) for i in raw]
    elif isinstance(raw, str):
        parts = _text(field, raw, label).split(",")
    else:
        raise KimiError(INVALID_VALUE, f"{label} must be a comma list or a list of strings, not {_kind_of(raw)}.")
    items = tuple(i.strip() for i in parts if i.strip())
    if field.maximum is not None and len(items) > field.maximum:
        raise KimiError(INVALID_VALUE, f"{label} has {len(items)} entries; at most {field.maximum} "
                        "(core/base/limits.py says why).")
    return items


ORIGIN_WORDS = {"file": "in the KIMI_CONFIG file", "config_json": "in KIMI_CONFIG_JSON"}  # where a key was read


def _convert(field: Field, raw: Any, where: str) -> Any:
    label = field.env if where == "env" else f"{field.name} {ORIGIN_WORDS[where]}"
    if field.kind == "int":
        return _int(field, raw, label)
    if field.kind == "bool":
        value = parse_bool(_text(field, raw, label)) if isinstance(raw, (str, int)) else None
        if value is not None:
            return value
        raise KimiError(INVALID_VALUE, f"{label} must be 1 or 0 (true/false), not {_shown(field, raw)}.")
    if field.kind == "list":
        return _list(field, raw, label)
    if field.kind == "spec":
        return ",".join(_list(field, raw, label)) if isinstance(raw, (list, tuple)) else \
            _text(field, raw, label).strip() if isinstance(raw, str) else _list(field, raw, label)
    if field.name == "extra_args" and isinstance(raw, (list, tuple)):  # TOML: an argv list, no quoting needed
        return shlex.join(_list(Field("extra_args", "list", (), "", ""), raw, label)) or None
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
        raise KimiError(INVALID_VALUE, f"{label} must be a string, not {_kind_of(raw)}.")
    text = _text(field, raw, label).strip()
    if field.kind == "choice":
        if text == "":
            return field.default
        if not text.isascii() or text.lower() not in field.choices:  # 'K' (KELVIN SIGN) folds to 'k': no choice
            raise unknown_value(field.env, text, field.choices)
        return text.lower()
    if not text:
        return field.default  # an empty value means the default (as if unset)
    if field.lower and not text.isascii():  # 'K' (KELVIN SIGN) would fold to 'k'
        raise KimiError(INVALID_VALUE, f"{label}={_shown(field, text)} is not ASCII: write it in ASCII letters.")
    text = text.lower() if field.lower else text
    if field.pattern and not (re.fullmatch(field.pattern, text) and
                              (field.name != "name" or len(text) <= limits.MAX_NAME_LENGTH)):
        raise KimiError(INVALID_VALUE, f"{label}={_shown(field, text)} is not {field.pattern_doc}.")
    return text


def _depth(value: Any, level: int = 1) -> int:
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def _json_table(path: str, text: str, where: str = "") -> dict:
    import json  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    where = where or f"KIMI_CONFIG={path}"
    try:
        table = json.loads(text)
    except ValueError as exc:
        raise KimiError(INVALID_VALUE, f"{where} is not valid JSON: {exc}.") from None
    except RecursionError:
        raise KimiError(INVALID_VALUE, f"{where} nests deeper than {limits.MAX_CONFIG_DEPTH} levels; "
                        "settings are strings, numbers or lists of strings.") from None
    if not isinstance(table, dict) or None in table.values():
        raise KimiError(INVALID_VALUE, f"{where} is not a JSON object of settings (strings, numbers, "
                        "booleans or lists of strings; no null).")
    return table


def _checked_table(where: str, table) -> dict:
    """A settings table's depth and keys, judged: the KIMI_CONFIG file's and KIMI_CONFIG_JSON's."""
    if table is None or _depth(table) > limits.MAX_CONFIG_DEPTH:
        raise KimiError(INVALID_VALUE, f"{where} nests deeper than {limits.MAX_CONFIG_DEPTH} levels; "
                        "settings are strings, numbers or lists of strings.")
    keys = [f.name for f in KIMI_FIELDS if f.name not in ENV_ONLY]
    unknown = [k for k in table if k not in keys]
    if unknown:
        key = unknown[0]
        raise unknown_value(f"key in {where}", str(key)[:80], keys,
                            "Keys are the KIMI_* names in lower case without the prefix.")
    return table


def _read_file(path: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib as _toml  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    else:  # Python < 3.11
        import tomli as _toml  # noqa: PLC0415 - a third party only this path needs
    try:
        data = read_capped(path, limits.MAX_CONFIG_BYTES)  # a FIFO or a device is refused, not waited on
    except OSError as exc:
        raise KimiError(INVALID_VALUE, f"KIMI_CONFIG={path}: cannot read it ({exc.strerror or exc}). "
                        "Mount the file readable or unset KIMI_CONFIG.") from None
    if len(data) > limits.MAX_CONFIG_BYTES:
        raise KimiError(INVALID_VALUE, f"KIMI_CONFIG={path} is larger than {limits.MAX_CONFIG_BYTES} bytes; a "
                        "settings file holds a few dozen keys.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KimiError(INVALID_VALUE, f"KIMI_CONFIG={path} is not UTF-8 text (byte {exc.start}): TOML files are "
                        "UTF-8.") from None
    try:
        # a .json file: the same keys as JSON (the Helm chart writes its settings value so, as given)
        table = _json_table(path, text) if path.endswith(".json") else _toml.loads(text)
    except _toml.TOMLDecodeError as exc:
        raise KimiError(INVALID_VALUE, f"KIMI_CONFIG={path} is not valid TOML: {exc}.") from None
    except RecursionError:
        table = None
    return _checked_table(f"KIMI_CONFIG file {path}", table)


# Kubernetes injects <SERVICE>_SERVICE_HOST/_PORT and <SERVICE>_PORT_<n>_<PROTO>[_ADDR|_PORT|_PROTO]
# for a Service named "kimi": never a warning or an error for those.
_SERVICE_LINK = re.compile(r"KIMI_(SERVICE_(HOST|PORT)(_[A-Z0-9_]+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)")


def _one_edit(a: str, b: str) -> bool:
    """Damerau-Levenshtein distance exactly 1 (one letter added, dropped, changed or swapped)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


# The project's own helper variables (its scripts', its test harness', its image build's): KIMI_* names
# that are not settings and never reach a launch; a shell that ran a script may still hold them, so they
# are neither warned about nor taken for a typo (tests/edges/test_round6.py finds every KIMI_* name the
# scripts and images use, and checks each is a setting or declared here; tests/architecture/test_docs_truth.py
# every one the docs and messages name).
HELPER_VARIABLES = frozenset({
    "KIMI_VENV", "KIMI_VLLM_VENV", "KIMI_VLLM_PYTHON", "KIMI_VLLM_CPU_VERSION",  # scripts/venv.sh, vLLM venvs
    "KIMI_HELM_DIR",  # scripts/helm.sh
    "KIMI_REGISTRY_DIR", "KIMI_REGISTRY_PORT", "KIMI_TRY_PORT", "KIMI_DEMO_REAL",  # scripts/demo.sh, try.sh
    "KIMI_STANDIN_DIR", "KIMI_STANDIN_KERNELS", "KIMI_STANDIN_VLLM_VERSION", "KIMI_DOWNLOAD_KERNELS",  # stand-ins
    "KIMI_NIXL", "KIMI_KV_CACHE", "KIMI_UID",  # images/ build arguments, scripts/kv-components-env.sh
    "KIMI_BUILD_BASE_OVERRIDE", "KIMI_BUILD_CACHE", "KIMI_BUILDKIT_DOCKER",  # buildsys/ (build.py)
    "KIMI_CHART_SEED", "KIMI_CHART_SAMPLE", "KIMI_CHECKOV_VENV",  # tests/chart, tests/security
    "KIMI_SHAPES_RESULTS", "KIMI_FAULT_LOAD_PACE_S", "KIMI_FAULT_RESTART",  # tests/live, benchmarks/faults.py
})


def check_names(environ: Mapping[str, str]) -> tuple:
    """(errors, warnings) about KIMI_* names that are not settings: a name one edit from a setting
    is an error (a typo that would silently change the launch); any other a warning."""
    errors, warnings = [], []
    for env_name in sorted(environ):
        if not env_name.startswith("KIMI_") or env_name in BY_ENV or env_name in HELPER_VARIABLES \
                or _SERVICE_LINK.fullmatch(env_name):
            continue
        near = [f.env for f in KIMI_FIELDS if _one_edit(env_name, f.env)]
        if near:
            errors.append(f"{env_name} is not a kimi-serve setting; did you mean {near[0]}? Rename it, or unset it "
                          f"(`kimi-serve --help` points to the settings table).")
        else:
            warnings.append(f"{env_name} is not a kimi-serve setting and is ignored" + _did_you_mean(env_name))
    return errors, warnings


def read_settings(environ: Mapping[str, str], user_args: tuple = ()) -> Settings:
    """Defaults < KIMI_CONFIG file < environment. Pure apart from reading the named file."""
    values = {f.name: f.default for f in FIELDS}
    origin = {f.name: "default" for f in FIELDS}
    errors, warnings = check_names(environ)
    if errors:
        raise KimiError(INVALID_VALUE, errors[0])
    for where, table in _given_tables(environ):
        for key, raw in table.items():
            values[key] = _convert(BY_NAME[key], raw, where)
            origin[key] = where
    for field in FIELDS:
        raw = environ.get(field.env)
        if raw is None or (not raw.strip() and field.kind != "spec"):
            continue  # unset, or empty: the default (KIMI_FEATURES= alone means "none")
        values[field.name] = _convert(field, raw, "env")
        origin[field.name] = "env"
    return Settings(values=values, origin=origin, user_args=tuple(user_args), warnings=tuple(warnings))


def _given_tables(environ: Mapping[str, str]) -> list:
    """[(origin, {key: value as written})]: the KIMI_CONFIG file's, then KIMI_CONFIG_JSON's (over it)."""
    tables = []
    config_path = environ.get("KIMI_CONFIG")
    if config_path:
        tables.append(("file", _read_file(config_path)))
    inline = environ.get("KIMI_CONFIG_JSON", "")
    if inline.strip():
        if len(inline.encode("utf-8")) > limits.MAX_CONFIG_BYTES:
            raise KimiError(INVALID_VALUE, f"KIMI_CONFIG_JSON is larger than {limits.MAX_CONFIG_BYTES} bytes; it holds a "
                            "few dozen settings.")
        tables.append(("config_json", _checked_table("KIMI_CONFIG_JSON",
                                                     _json_table("KIMI_CONFIG_JSON", inline, "KIMI_CONFIG_JSON"))))
    return tables


def given_file(environ: Mapping[str, str]) -> dict:
    """The settings of the KIMI_CONFIG file, then KIMI_CONFIG_JSON's over them, as written ({key: value})."""
    return {key: raw for _, table in _given_tables(environ) for key, raw in table.items()}


def given_settings(environ: Mapping[str, str]) -> dict:
    """The user's settings as written, file values over nothing and variables over them: {key: the
    file's value, or the variable's text}. A Kubernetes rendering passes these to its containers
    untouched (render/k8s_pod.py: the `<name>-settings` ConfigMap)."""
    table = given_file(environ)
    for field in KIMI_FIELDS:
        if field.name in ("config", "config_json"):  # where settings are, not one
            continue
        raw = environ.get(field.env)
        if raw is not None and (raw.strip() or field.kind == "spec"):
            table[field.name] = raw
    return table


def _did_you_mean(env_name: str) -> str:
    close = difflib.get_close_matches(env_name, [f.env for f in KIMI_FIELDS], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def read_external(environ: Mapping[str, str]) -> dict:
    """The variables others set (LWS_*, SLURM_*, ...) that are present, typed: {env name: value}."""
    return {f.env: _convert(f, environ[f.env], "env") for f in EXTERNAL_FIELDS if environ.get(f.env, "").strip()}


def env_flag(environ: Mapping[str, str], name: str) -> bool:
    """A declared yes/no variable others set (e.g. HF_HUB_OFFLINE), read with the one boolean parser;
    a value it cannot read counts as the default (the variable's owner decides what else it means)."""
    value = parse_bool(environ.get(name, ""))
    return BY_ENV[name].default is True if value is None else value
