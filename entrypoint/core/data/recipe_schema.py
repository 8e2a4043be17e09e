"""Pydantic models of the recipe data (recipes/*.yaml): the schema the data is validated against.

Every model rejects unknown keys; `Catalog` checks that every feature, variant, strategy and
hardware id named anywhere exists. `entrypoint.core.data.recipe` loads the data, validates it with these
models and hands out read-only records of the result; nothing here decides a launch.
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from entrypoint.core.data.platform_schema import PlatformsFile
from entrypoint.core.data.record import FrozenDict, Record
from entrypoint.core.data.versions import RELEASE, is_digest, version_key

Args = List[str]
Env = Dict[str, str]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- hardware


class Brand(Strict):
    name: str  # as people write it
    devices: List[str]  # any one present in the container = the GPUs are there (empty: no device needed)
    device_hint: str  # how to give a container the GPUs
    k8s_resource: Optional[str]  # the device plugin's extended resource (None: the pod requests no device)
    k8s_product_label: Optional[str]  # the node label that names the GPU product (None: no node selector)
    compose: Dict[str, Any]  # what a Compose service adds to reach the GPUs
    k8s_supplemental_groups: List[int] = []  # host GIDs owning the device nodes (a pod's user joins them)
    # How a second container of the pod sees the GPUs the first one was given (KIMI_PRELOAD's
    # sidecar; the device plugin gives each GPU to one container): empty = it cannot
    k8s_sidecar_gpus_env: Dict[str, str] = {}


class Firmware(Strict):
    component: Literal["mec"]  # the firmware detection reads (node/detect.py)
    minimum: int = Field(gt=0)
    below_env: Env  # set on a node whose firmware is below the minimum


class Detect(Strict):
    names: List[str]  # substrings of the product name reported by the driver tools
    memory_gb: float  # nominal memory of one GPU


class PodResources(Strict):
    """CPU and host memory a Kubernetes pod requests (and is limited to: Guaranteed QoS)."""

    cpu: int = Field(gt=0)  # cores
    memory_gib: int = Field(gt=0)


class HostLimit(Strict):
    """A layout the hardware's vLLM backend cannot run (a preflight error naming it; KIMI_PREFLIGHT=warn
    tries anyway, e.g. with a vLLM plugin that closes the gap)."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    # EP over > 1 rank / DP > 1, on a MoE model; pipeline parallel > 1 with --enforce-eager
    when: Literal["moe_expert_parallel", "moe_data_parallel", "eager_pipeline_parallel"]
    vllm_max: str = Field(pattern=RELEASE)  # the newest release known to have the gap
    why: str  # what fails, with vLLM's file


class HostBackend(Strict):
    """A target whose "GPUs" are ranks of a host backend (vLLM's CPU backend): sized by the node's
    settings, with its own per-rank environment and the GPU-only recipe settings it drops."""

    ranks_setting: str  # the setting that gives a node's ranks (replaces gpu_count)
    memory_setting: str  # the setting that gives a node's memory (replaces vram_gb; default: the node's RAM)
    env: Env  # per rank: $CPU_THREADS, $CPU_KVCACHE_GIB, $CPU_THREADS_BIND filled from the settings
    kvcache_gib: int = Field(gt=0)  # VLLM_CPU_KVCACHE_SPACE when KIMI_CPU_KVCACHE_GIB is unset
    threads_bind: str  # VLLM_CPU_OMP_THREADS_BIND when KIMI_CPU_THREADS_BIND is unset
    drop_args: Dict[str, str]  # recipe flag -> why this backend leaves it out (the user's own are kept)
    drop_env: Dict[str, str]  # recipe variable or prefix (ending in `_`) -> why it is left out
    json_args: Dict[str, Dict[str, Any]] = {}  # flag -> keys merged into its JSON value (e.g. NIXL's buffer device)
    gpu_floors: bool  # whether the recipes' strategy_min_gpus (sized for their GPUs) apply
    kv_offload_refused: Optional[str] = None  # why KIMI_KV_OFFLOAD does not apply here (None: it may)
    limits: List[HostLimit] = []


class Hardware(Strict):
    brand: str  # a key of `brands`
    generation: str  # hopper | blackwell | amd
    display_name: str
    description: str = ""
    gpu_count: int = Field(gt=0)
    vram_gb: float = Field(gt=0)  # the whole node
    arch: Literal["amd64", "arm64"]
    image_target: str  # the project image target that serves it (images/targets.yaml)
    k8s_product: str  # the value of the brand's GPU product node label
    gfx: Optional[str] = None  # AMD gfx target
    multi_node_nvlink: bool = False
    # What a pod using all gpu_count GPUs of a node requests and is limited to; a pod using fewer
    # GPUs gets its share. Sized from the smallest common host of the hardware (hardware.yaml).
    pod_resources: PodResources
    detect: Optional[Detect] = None  # None: never picked by KIMI_HARDWARE=auto
    firmware: Optional[Firmware] = None
    # Every recipe runs on it (the recipes' `hardware` lists the GPU targets of the recipe page)
    serves_every_recipe: bool = False
    host_backend: Optional[HostBackend] = None

    @model_validator(mode="after")
    def _amd_has_gfx(self):
        if self.brand == "amd" and not self.gfx:
            raise ValueError("AMD hardware needs its gfx target (gfx)")
        return self


class HardwareFile(Strict):
    architectures: Dict[str, Literal["amd64", "arm64"]]
    multi_node_nvlink_args: Dict[str, List[str]] = {}  # flag -> values that need multi-node NVLink
    brands: Dict[str, Brand]
    hardware: Dict[str, Hardware]

    @model_validator(mode="after")
    def _brands_exist(self):
        unknown = {hid: hw.brand for hid, hw in self.hardware.items() if hw.brand not in self.brands}
        if unknown:
            raise ValueError(f"hardware names brands that `brands` does not declare: {unknown}")
        return self


# ---------------------------------------------------------------- serving


class ImageUser(Strict):
    """The image's default user (images/Dockerfile USER, HOME; the image tests check they agree)."""

    uid: int = Field(ge=10000)  # a high UID, outside any host's range of real users
    gid: int = Field(ge=10000)
    home: str


class ImageRepo(Strict):
    registry: str  # the published images: <registry>/<name>:<tag>
    name: str
    user: ImageUser
    # vLLM release -> the image targets built on it (images/targets.yaml, which build.py checks
    # against this): a rendering runs <registry>/<name>:<vllm>-<target> of the release it is judged by
    releases: Dict[str, List[str]]
    # image tag (<vllm>-<target>) -> the digest of its published image (sha256:<64 hex>), once
    # locked: rendered deployments then reference <registry>/<name>:<tag>@<digest>
    digests: Dict[str, str] = {}

    @model_validator(mode="after")
    def _digests_are_sha256(self):
        bad = {t: d for t, d in self.digests.items() if not is_digest(d)}
        if bad:
            raise ValueError(f"image digests must be sha256:<64 hex digits>: {bad}")
        tags = {f"{v}-{t}" for v, targets in self.releases.items() for t in targets}
        unknown = sorted(set(self.digests) - tags)
        if unknown:
            raise ValueError(f"image digests are keyed by a built image's tag <vllm>-<target> (releases): "
                             f"{', '.join(unknown)} is none of them")
        return self


class Health(Strict):
    path: str
    interval_s: int = Field(gt=0)
    timeout_s: int = Field(gt=0)
    retries: int = Field(gt=0)
    start_period_s: int = Field(gt=0)


class Stop(Strict):
    """How a process is stopped (docs/day2.md): taken out of routing, a pause, SIGTERM, the drain."""
    pause_s: int = Field(gt=0)  # preStop: time for endpoints, proxies and gateways to stop routing to it
    margin_s: int = Field(gt=0)  # after the drain: the process's own exit (engine teardown, log flush)
    readiness_period_s: int = Field(gt=0)  # how often readiness is asked: a stop is seen within it

    @model_validator(mode="after")
    def _the_pause_outlasts_a_readiness_period(self):
        if self.pause_s < 2 * self.readiness_period_s:
            raise ValueError(f"stop.pause_s ({self.pause_s}) must cover two readiness periods "
                             f"({self.readiness_period_s} s each): the probe that sees the stop, then the endpoints")
        return self


class CacheVar(Strict):
    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    subdir: str = Field(pattern=r"^[a-z0-9_]+$")
    brands: Optional[List[str]] = None  # None: every brand


class CompileCaches(Strict):
    dir: str = Field(pattern=r"^[a-z0-9_]+$")  # under KIMI_CACHE_DIR
    env: List[CacheVar]


class Alert(Strict):
    name: str = Field(pattern=r"^[A-Z][A-Za-z0-9]+$")
    expr: str  # PromQL; ${match} and ${<setting>} are filled by the renderers
    for_: str = Field(alias="for", pattern=r"^[0-9]+[smh]$")
    severity: Literal["critical", "warning", "info"]
    summary: str
    action: str  # what the operator does (docs/operate.md lists the same)


class ScaleTrigger(Strict):
    name: str = Field(pattern=r"^[a-z][-a-z0-9]*$")
    query: str
    target: str  # the setting that holds the trigger's target value
    average: bool  # target per copy (AverageValue) or of the query itself (Value)
    adapter_metric: str  # the Prometheus adapter's name for the metric (the HPA alternative)


class Panel(Strict):
    title: str
    unit: str
    exprs: Dict[str, str]  # legend -> PromQL


class Dashboard(Strict):
    title: str
    uid: str
    variable_metric: str  # a series every engine exports: the dashboard's variables list its labels
    panels: List[Panel]


class Monitoring(Strict):
    """How the engines are monitored and scaled (render/monitoring.py, render/autoscaling.py, the chart)."""

    path: str
    interval_s: int = Field(gt=0)
    pod_labels: Dict[str, str]  # pod label -> the series label the PodMonitor copies it to
    alerts: List[Alert]
    scale_triggers: List[ScaleTrigger]
    dashboard: Dashboard


class PeerWatch(Strict):
    """The nodes of one multi-node copy watch each other where no scheduler restarts the group
    (node/peers.py): rank 0 listens on `port`, every other rank holds a connection to it; a lost
    connection stops the node, so every survivor exits and the copy restarts as a unit."""

    port: int = Field(gt=0, lt=65536)
    keepalive_idle_s: int = Field(gt=0)  # a silent peer (a node lost with its power) is probed after this
    keepalive_interval_s: int = Field(gt=0)
    keepalive_probes: int = Field(gt=0)
    grace_s: int = Field(gt=0)  # after SIGTERM, before SIGKILL


class Streams(Strict):
    """What a proxy in front of a stream waits between two chunks (ingress, gateways)."""
    idle_timeout_s: int = Field(gt=0)
    ingress_annotations: List[str] = []  # the Ingress annotations that set it (their value: the seconds)


class DefaultVllm(Strict):
    release: str  # a recorded release (recipes/vllm/<release>.json): checked where the catalog is loaded
    why: str


class Serving(Strict):
    default_vllm: DefaultVllm  # the release a plan is for when nothing names one
    streams: Streams
    image: ImageRepo
    health: Health
    stop: Stop
    peer_watch: PeerWatch
    compile_caches: CompileCaches
    default_recipe: str  # the recipe KIMI_RECIPE names when unset (a slug of recipes/models/)
    monitoring: Monitoring


# ---------------------------------------------------------------- strategies


class Role(Strict):
    vllm_args: Args = []
    env: Env = {}


class Router(Strict):
    program: str
    policy: str
    args: Args = []
    resources: PodResources  # the router's pod (no GPU) on Kubernetes


class Strategy(Strict):
    name: str
    deploy_type: Literal["single_node", "multi_node", "pd_cluster"]
    display_name: str
    description: str = ""
    vllm_args: Args = []
    parallel_flag: str = "--tensor-parallel-size"
    parallelism: Optional[Literal["tp_pp", "tp_dp"]] = None
    tp_from_variant: bool = False
    env: Env = {}
    roles: Dict[Literal["prefill", "decode"], Role] = {}
    router: Optional[Router] = None
    multi_node_nvlink_env: List[str] = []

    @model_validator(mode="after")
    def _pd_has_roles(self):
        if self.deploy_type == "pd_cluster" and (set(self.roles) != {"prefill", "decode"} or not self.router):
            raise ValueError("a pd_cluster strategy needs prefill and decode roles and a router")
        return self


# ---------------------------------------------------------------- recipe


class ArgsOverride(Strict):
    extra_args: Args = []
    extra_env: Env = {}


class FeatureOverride(Strict):
    args: Args = []
    env: Env = {}


VllmVersion = Annotated[str, StringConstraints(pattern=f"^{RELEASE}$")]


class Feature(Strict):
    description: str
    min_vllm: Optional[VllmVersion] = None  # the oldest vLLM release that accepts its args
    args: Args = []
    env: Env = {}
    # keyed by hw id > generation > brand > `default`; replaces args (and env when given)
    hardware_overrides: Dict[str, FeatureOverride] = {}
    conflicts_with: List[str] = []
    # The strategies it applies to (None = every one); on the others its args are left out, as the
    # recipe site does (K3: DSpark is off multi_node_tp_pp, DCP only on single_node_tp).
    strategies: Optional[List[str]] = None
    # Flags of a declared exclusive partner that a hardware override adds on its own (the partner
    # being absent from this recipe): with this feature selected they are left out, since the
    # feature the user chose makes them moot (docs/composition.md, `forced-exclusive-flag`).
    conflicts_with_args: List[str] = []


TpSetting = Union[int, Dict[str, int]]  # a number, or a map keyed by hw id > generation > brand > default


class Variant(Strict):
    model_id: Optional[str] = None
    precision: str
    vram_minimum_gb: float = Field(gt=0)
    description: str = ""
    supported_hardware: Optional[List[str]] = None
    supported_generations: Optional[List[str]] = None
    tp: Optional[TpSetting] = None
    extra_args: Args = []
    extra_env: Env = {}
    hardware_overrides: Dict[str, ArgsOverride] = {}  # keyed by hw id (step 2) or generation (step 5)


class PoolDefaults(Strict):
    # None: as many nodes as the pool needs for the variant's memory and the strategy GPU floor
    nodes: Optional[int] = Field(None, ge=0)
    parallelism: Literal["tp", "tep", "dep"] = "dep"
    tp: Optional[int] = Field(None, gt=0)
    extra_args: Args = []
    vllm_args: Args = []
    env: Env = {}
    hardware_overrides: Dict[str, ArgsOverride] = {}


class RouterOverride(Strict):
    # the router's --intra-node-data-parallel-size, pinned (else the largest DEP pool's local DP)
    intra_node_data_parallel_size: Optional[int] = Field(None, gt=0)


class StrategyOverride(Strict):
    tp: Optional[int] = Field(None, gt=0)
    extra_args: Args = []
    vllm_args: Args = []
    env: Env = {}
    extra_env: Env = {}
    hardware_overrides: Dict[str, ArgsOverride] = {}
    prefill: Optional[PoolDefaults] = None
    decode: Optional[PoolDefaults] = None
    router: Optional[RouterOverride] = None


class RequiredArg(Strict):
    min: Optional[float] = None


class Profile(Strict):
    description: str
    min_vllm: Optional[VllmVersion] = None  # the oldest vLLM release that accepts its args
    hardware: List[str]
    variants: List[str]
    strategies: List[str]
    forbidden_args: List[str] = []
    args: Args = []
    env: Env = {}
    env_when_tp_below: Dict[int, Env] = {}
    required_args: Dict[str, RequiredArg] = {}


class ModelFiles(Strict):
    """What vLLM reads from a checkpoint repo, as patterns on the files at the repo's top: the
    first `weights` pattern that matches any (as vLLM picks it), and every `top_level` match."""

    weights: List[str]
    top_level: List[str] = []


class RemovedEnv(Strict):
    """An environment variable the recipe sets that vLLM dropped in a later release."""

    removed_in: VllmVersion  # the first release whose vllm.envs no longer has it
    replacement_args: Args = []  # what to pass instead from that release on ([] = nothing is needed)
    why: str  # what vLLM does instead, in a sentence
    source: str  # where in vLLM's source/release notes this was read (file + version)


class Stack(Strict):
    """What the image's GPU software stack must be at least (read from the base: images/targets.yaml)."""

    cuda: Optional[VllmVersion] = None  # e.g. 13.0.0: a CUDA 13 build (r580+ driver)
    rocm: Optional[VllmVersion] = None
    why: str = ""


class ModelInfo(Strict):
    model_id: str
    min_vllm_version: VllmVersion
    # Releases at or above the floor the recipe says to avoid: release -> why, in a clause ("it has
    # a known ... regression: ..."). Refused like a release below the floor (docs/composition.md).
    refused_vllm_versions: Dict[VllmVersion, str] = {}
    context_length: int
    base_args: Args = []
    base_env: Env = {}
    files: ModelFiles
    min_stack: Stack = Stack()

    @model_validator(mode="after")
    def _refused_above_the_floor(self):
        below = [v for v in self.refused_vllm_versions if version_key(v) < version_key(self.min_vllm_version)]
        if below:
            raise ValueError(f"refused_vllm_versions {below} are below min_vllm_version {self.min_vllm_version}, "
                             "which refuses them already")
        return self


class Chat(Strict):
    """How a client talks to this model (verify's expectations)."""

    # chat_template_kwargs that turn thinking on / off for one request (None: the template has no switch)
    thinking_on: Optional[Dict[str, Any]] = None
    thinking_off: Optional[Dict[str, Any]] = None
    # The model's own tool-call markup: all of these in a reply's content = a whole tool call that
    # the server's tool-call parser did not split out (verify names the recipe's parser flags)
    tool_call_markup: List[str] = []
    # The longest a streamed answer may go without a chunk (a tool call's arguments are held back
    # until whole), with its source: proxies in front of a stream must wait longer (serving.yaml streams)
    longest_silence: Optional["Silence"] = None


class Silence(Strict):
    seconds: int = Field(gt=0)
    source: str


StrategySupport = Literal["supported", "unsupported"]
DnsLabel = Annotated[str, StringConstraints(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=40)]


class Provisional(Strict):
    """A recipe made from cited sources before the vLLM recipe collection publishes a page for the
    model: `list`, `plan` and the docs say so, with `why` and what ends it (`until`)."""
    why: str
    until: str


class Recipe(Strict):
    id: str  # the recipe's slug (KIMI_RECIPE), the file's name
    provisional: Optional[Provisional] = None  # None: the recipe collection's page is the source
    # fact -> where it was read (a page, a file of a release's wheel with lines): every fact of a
    # provisional recipe has one
    sources: Dict[str, str] = {}
    title: str
    provider: str
    description: str = ""
    deployment_name: DnsLabel  # the default KIMI_NAME of its rendered deployments
    # What the model takes (the recipe's meta.tasks): `multimodal` = it reads images too (verify's
    # image check); text only otherwise.
    tasks: List[Literal["text", "multimodal"]] = ["text"]
    model: ModelInfo
    chat: Chat = Chat()
    hardware: List[str]
    # hw id or brand -> why the recipe has no launch there (said when one asks for it)
    hardware_left_out: Dict[str, str] = {}
    default_hardware: Optional[str] = None  # the site's landing hardware (shown by `list`)
    features: Dict[str, Feature]
    opt_in_features: List[str] = []
    hardware_opt_in_features: Dict[str, List[str]] = {}
    variants: Dict[str, Variant]
    compatible_strategies: List[str]
    default_strategy: Optional[str] = None  # one node (its multi_node_ sibling on several); else single_node_tp
    # strategy -> {hw id | generation | brand | default: supported | unsupported}: grants a strategy
    # the list lacks, or takes one away, on that hardware (most specific key wins)
    strategy_hardware: Dict[str, Dict[str, StrategySupport]] = {}
    # The fewest GPUs a layout may span: keyed by strategy id, or by hw id for every layout on that
    # hardware; the highest value that applies wins. PD pools use multi_node_<mode>.
    strategy_min_gpus: Dict[str, int] = {}
    hardware_overrides: Dict[str, ArgsOverride] = {}
    strategy_overrides: Dict[str, StrategyOverride] = {}
    profiles: Dict[str, Profile] = {}
    kv_offload_support: Dict[str, Literal["verified"]] = {}  # KV Offload option -> verified (requires_opt_in)
    kv_cache_strategy_hardware: Dict[str, List[str]] = {}  # KV store -> the hardware it runs on (absent = all)

    @model_validator(mode="after")
    def _provisional_cites(self):
        if self.provisional is not None and not self.sources:
            raise ValueError("a provisional recipe cites its sources: `sources` (fact -> where it was read)")
        return self


# ---------------------------------------------------------------- catalog


class Catalog(Strict):
    """The recipes, the hardware profiles and the strategies, cross-checked. `recipe` is the
    default recipe here; `entrypoint.core.data.recipe.with_recipe` hands out the catalog of another."""

    recipes: Dict[str, Recipe]  # slug -> recipe (recipes/models/<slug>.yaml)
    recipe: Recipe
    hardware: Dict[str, Hardware]
    brands: Dict[str, Brand]
    architectures: Dict[str, str]
    strategies: Dict[str, Strategy]
    serving: Serving
    platforms: PlatformsFile  # cloud container platforms (recipes/platforms.yaml)
    multi_node_nvlink_args: Dict[str, List[str]] = {}  # hardware.yaml: flag -> values needing NVL trays
    # Environment the recipes set that a later vLLM dropped (recipes/vllm/removed_env.yaml): from
    # `removed_in` on, the variable is left out and `replacement_args` go in instead.
    vllm_env_removed: Dict[str, RemovedEnv] = {}

    @model_validator(mode="after")
    def _references_exist(self):
        problems: List[str] = []
        if self.serving.default_recipe not in self.recipes:
            problems.append(f"serving.default_recipe '{self.serving.default_recipe}' is not a recipe "
                            f"(recipes/models/: {', '.join(self.recipes)})")
        names: Dict[str, str] = {}
        for slug, r in self.recipes.items():
            if r.id != slug:
                problems.append(f"recipe file {slug}.yaml declares id '{r.id}'")
            if r.deployment_name in names:
                problems.append(f"recipes {names[r.deployment_name]} and {slug} share deployment_name "
                                f"'{r.deployment_name}'")
            names[r.deployment_name] = slug
            problems += self._recipe_problems(r)
        for name, strat in self.strategies.items():
            if strat.name != name:
                problems.append(f"strategy file {name}.yaml declares name '{strat.name}'")
        for pid, found in self.platforms.platforms.items():
            need_all = [h for h in found.offerings if h not in self.hardware]
            problems += [f"platform {pid}'s offerings names hardware '{h}', which does not exist" for h in need_all]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _recipe_problems(self, r: Recipe) -> List[str]:
        problems: List[str] = []

        def need(kind: str, names, known, where: str):
            for name in names:
                if name not in known:
                    problems.append(f"{r.id}: {where} names {kind} '{name}', which does not exist")

        generations = {h.generation for h in self.hardware.values()} | {"nvidia"}
        hw_keys = set(self.hardware) | generations | set(self.brands) | {"default"}
        need("hardware", r.hardware, self.hardware, "recipe.hardware")
        need("hardware", [r.default_hardware] if r.default_hardware else [], r.hardware, "recipe.default_hardware")
        need("strategy", r.compatible_strategies, self.strategies, "recipe.compatible_strategies")
        need("strategy", [r.default_strategy] if r.default_strategy else [], self.strategies, "recipe.default_strategy")
        need("strategy", r.strategy_overrides, self.strategies, "recipe.strategy_overrides")
        need("strategy", r.strategy_hardware, self.strategies, "recipe.strategy_hardware")
        for sid, by_hw in r.strategy_hardware.items():
            need("hardware, generation or brand", by_hw, hw_keys, f"recipe.strategy_hardware.{sid}")
        need("strategy or hardware", r.strategy_min_gpus, set(self.strategies) | set(self.hardware),
             "recipe.strategy_min_gpus")
        need("feature", r.opt_in_features, r.features, "recipe.opt_in_features")
        need("hardware", r.hardware_opt_in_features, self.hardware, "recipe.hardware_opt_in_features")
        for hw, feats in r.hardware_opt_in_features.items():
            need("feature", feats, r.features, f"recipe.hardware_opt_in_features.{hw}")
        need("generation", r.hardware_overrides, generations, "recipe.hardware_overrides")
        for fid, feat in r.features.items():
            need("feature", feat.conflicts_with, r.features, f"feature {fid}.conflicts_with")
            need("hardware, generation or brand", feat.hardware_overrides, hw_keys, f"feature {fid}.hardware_overrides")
            need("strategy", feat.strategies or [], self.strategies, f"feature {fid}.strategies")
        for vid, var in r.variants.items():
            need("hardware", var.supported_hardware or [], self.hardware, f"variant {vid}.supported_hardware")
            need("generation", var.supported_generations or [], generations, f"variant {vid}.supported_generations")
            need("hardware or generation", var.hardware_overrides, set(self.hardware) | generations,
                 f"variant {vid}.hardware_overrides")
            if isinstance(var.tp, dict):
                need("hardware, generation or brand", var.tp, hw_keys, f"variant {vid}.tp")
        for sid, so in r.strategy_overrides.items():
            need("hardware or generation", so.hardware_overrides, set(self.hardware) | generations,
                 f"strategy_overrides.{sid}.hardware_overrides")
            for role in ("prefill", "decode"):
                pool = getattr(so, role)
                if pool is not None:
                    need("hardware", pool.hardware_overrides, self.hardware,
                         f"strategy_overrides.{sid}.{role}.hardware_overrides")
        for pid, prof in r.profiles.items():
            need("hardware", prof.hardware, self.hardware, f"profile {pid}.hardware")
            need("variant", prof.variants, r.variants, f"profile {pid}.variants")
            need("strategy", prof.strategies, self.strategies, f"profile {pid}.strategies")
        if "default" not in r.variants:
            problems.append(f"{r.id}: recipe.variants needs a 'default' variant")
        return problems


def freeze(value: Any) -> Any:
    """The validated models as read-only records, all the way down: mappings become FrozenDicts
    and lists tuples, so no caller can change the catalog every later caller shares."""
    if isinstance(value, BaseModel):
        return Record(type(value).__name__, {name: freeze(getattr(value, name)) for name in type(value).model_fields})
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(freeze(item) for item in value)
    return value
