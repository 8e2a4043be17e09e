"""The launch plan: every process of a deployment, typed, with argv, env and where each piece came from.

A Plan is what the pure resolver returns; renderers, preflight and exec only read it. Each process
knows what it is (`Kind`), its program and arguments, its ports by purpose and, for a vLLM engine,
its effective vLLM arguments (`vllm_cli.EngineArgs`, parsed once when it is made: `engine`); the
deployment's facts (engines, GPUs, TP, served name, tokenizer) are the Plan's, and so is its shape:
`Plan.topology` (engine pools and their groups of nodes, the router in front, the helpers beside,
the one role-to-process lookup), computed once when the Plan is made from the pools the selection
chose (one `Pool` type from the selection to the plan) and the pool each engine was made for
(`Process.pool`). No reader slices or re-parses
argv (tests/architecture/test_typed_plan.py), nor works the shape out again from role names.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, Optional, Sequence

from entrypoint.core.vllm.vllm_cli import EngineArgs, Spec, engine_args


class Kind(Enum):
    """What a process of the plan is. "Is this a vLLM engine?" is asked one way: `proc.is_engine`."""

    ENGINE = "vLLM engine"  # `vllm serve <model>`: single, head, worker, prefill, decode, instance
    ROUTER = "router"  # vllm-router in front of the engines
    KV_MASTER = "KV master"  # a KV store's metadata coordinator (mooncake_master)
    KV_STORE = "KV store"  # a KV store's memory pool service (mooncake_store_service)
    KV_SERVER = "KV cache server"  # a node-local KV cache server beside the engine (LMCache's)
    PRELOAD = "weight cache"  # `vllm preload` beside the engine: its weights in GPU memory (KIMI_PRELOAD)


class Port(Enum):
    """What a port of a process is for."""

    HTTP = "http"  # the OpenAI-compatible API (an engine's or the router's); vLLM's /metrics too
    METRICS = "metrics"  # where Prometheus scrapes (/metrics)
    DP_RPC = "data-parallel rpc"  # a data-parallel pool's head coordinator
    KV_SIDE_CHANNEL = "kv side channel"  # NIXL's handshake port
    MASTER_RPC = "master rpc"  # a KV master's RPC port
    KV_RPC = "kv rpc"  # a KV cache server's connection from the engine
    SERVICE = "service"  # a KV store's own API (what its health check connects to)
    HEALTH = "health"  # a /health endpoint and nothing else (the `vllm preload` launcher's)
    KV_EVENTS = "kv events"  # vLLM's KV-event publisher (--kv-events-config): the first of one per local DP rank


# How the name of an engine's env variable that sets a port it listens on ends, by purpose.
ENV_PORTS = {"_SIDE_CHANNEL_PORT": Port.KV_SIDE_CHANNEL}


@dataclass(frozen=True)
class StreamFront:
    """The stream front a router process runs before the router (entrypoint/front): the process binds
    the deployment's public port and starts the router as its child on `router_port` (loopback)."""

    router_port: int  # where the router behind it listens
    migrations: int  # engines a stream may be continued on


@dataclass(frozen=True)
class Process:
    """One program to run on one node."""

    role: str  # the serialised name: single | head | worker | prefill | decode | router | master | store | instance | lmcache
    rank: int  # node rank (multi-node) or node index within its pool (PD); 0 otherwise
    kind: Kind
    program: tuple  # the words before the arguments: ("vllm", "serve", <model>), ("vllm-router",) ...
    args: tuple  # the arguments after them
    env: dict  # only what the project sets (user-set variables are never overridden at exec)
    # For each flag (e.g. "--tensor-parallel-size") and env name: the layer it came from
    # ("base", "variant", "strategy", "hardware override", "feature:<id>", "profile:<id>", "user").
    provenance: dict = field(default_factory=dict)
    local_gpus: int = 0  # GPUs this process needs visible on its node (0 for the router)
    port: Optional[int] = None  # the port it listens on: vLLM's HTTP API when serves_http, else a TCP service
    ports: Dict[Port, int] = field(default_factory=dict)  # every port it listens on, by purpose
    vllm: Optional[EngineArgs] = None  # an engine's effective vLLM arguments (None for any other kind)
    model: Optional[str] = None  # the model an engine serves (its positional argument)
    # Configuration files the entrypoint writes before exec: {absolute path: text} (KV stores).
    files: dict = field(default_factory=dict)
    # Seconds the process drains its running requests after SIGTERM (an engine's effective
    # --shutdown-timeout; the router and the KV helpers: the deployment's budget). 0 = none.
    drain_s: int = 0
    front: Optional[StreamFront] = None  # a router run behind the stream front (KIMI_STREAM_FRONT)
    pool: Optional[str] = None  # an engine's pool (Pool.name), given by the resolver; None for any other process

    @property
    def argv(self) -> tuple:
        """The full argv: the program words, then the arguments."""
        return tuple(self.program) + tuple(self.args)

    @property
    def router_argv(self) -> tuple:
        """The router's own argv: the argv, or behind the stream front (`front`) the program the
        front starts as its child (after its `--`)."""
        if self.front is None:
            return self.argv
        return tuple(self.args[self.args.index("--") + 1:])

    @property
    def is_engine(self) -> bool:
        return self.kind is Kind.ENGINE

    @property
    def engine(self) -> EngineArgs:
        """An engine's effective vLLM arguments: `vllm`, for a process known to be an engine (a
        reader of any process asks `vllm`, which is None for the others)."""
        if self.vllm is None:
            raise ValueError(f"{self.role} {self.rank} is a {self.kind.value}, not a vLLM engine: it has no vLLM arguments")
        return self.vllm

    @property
    def reads_weights(self) -> bool:
        """It reads the checkpoint from the cache or the model's source: an engine, and the weight
        cache (`vllm preload`) that loads them for the engine beside it."""
        return self.kind in (Kind.ENGINE, Kind.PRELOAD)

    @property
    def serves_http(self) -> bool:
        return Port.HTTP in self.ports

    @property
    def listens(self) -> list:
        """The ports it binds, one per socket (vLLM's /metrics is on its HTTP socket; a fleet's router
        binds its Prometheus endpoint on a socket of its own)."""
        out = [port for purpose, port in self.ports.items() if not (purpose is Port.METRICS and self.is_engine)]
        if Port.KV_EVENTS in self.ports and self.vllm is not None:  # vLLM offsets the port by the local DP rank
            out += [self.ports[Port.KV_EVENTS] + i for i in range(1, max(1, self.vllm.data_parallel_local))]
        return out

    @property
    def served_name(self) -> Optional[str]:
        """The name an engine answers to: its effective --served-model-name, else its model."""
        if self.vllm is None:
            return None
        return self.vllm.served_name or self.model

    def as_dict(self) -> dict:
        out = {"role": self.role, "rank": self.rank, "argv": list(self.argv), "env": dict(self.env)}
        if self.files:
            out["files"] = dict(self.files)
        return out


ENGINE_PROGRAM = ("vllm", "serve")


def _kv_events_port(config) -> Optional[int]:
    """The port a --kv-events-config's publisher binds (`"endpoint": "tcp://*:5557"`), None when it
    publishes nothing or connects out instead."""
    try:
        found = json.loads(config) if isinstance(config, str) else None
    except ValueError:
        return None
    if not isinstance(found, dict) or not found.get("enable_kv_cache_events"):
        return None
    endpoint = str(found.get("endpoint") or "")
    head, _, port = endpoint.rpartition(":")
    return int(port) if head.startswith("tcp://") and port.isdigit() else None


def engine(role: str, rank: int, model: str, args: Sequence[str], env: dict, provenance: dict, spec: Spec,
           files: Optional[dict] = None, pool: Optional[str] = None) -> Process:
    """A vLLM engine, its arguments parsed once by `spec` (the grammar of the release launched)
    into the facts every consumer reads: GPUs, ports, served name."""
    found = engine_args(args, spec)
    ports: Dict[Port, int] = {}
    if not found.headless:
        ports[Port.HTTP] = ports[Port.METRICS] = found.port
    if rank == 0 and found.data_parallel_rpc_port is not None:
        ports[Port.DP_RPC] = found.data_parallel_rpc_port  # the pool's DP head listens on it
    events = _kv_events_port(found.get("kv_events_config"))
    if events is not None:
        ports[Port.KV_EVENTS] = events
    for name, value in env.items():
        for suffix, purpose in ENV_PORTS.items():
            if name.endswith(suffix) and str(value).isdigit():
                ports[purpose] = int(value)
    return Process(role=role, rank=rank, kind=Kind.ENGINE, program=(*ENGINE_PROGRAM, model), args=tuple(args),
                   env=env, provenance=provenance, local_gpus=found.gpus_needed, port=ports.get(Port.HTTP),
                   ports=ports, vllm=found, model=model, files=dict(files or {}),
                   drain_s=found.drain_s, pool=pool)


def service(kind: Kind, role: str, argv: Sequence[str], ports: Dict[Port, int], port: int, env: Optional[dict] = None,
            provenance: Optional[dict] = None, files: Optional[dict] = None) -> Process:
    """A process that is not a vLLM engine (the router, a KV master, store or cache server): its
    program is its first word, no GPU, `port` the one its health check connects to."""
    program, *args = argv
    return Process(role=role, rank=0, kind=kind, program=(program,), args=tuple(args), env=dict(env or {}),
                   provenance=dict(provenance or {}), local_gpus=0, port=port, ports=dict(ports),
                   files=dict(files or {}))


def preload(role: str, argv: Sequence[str], env: dict, provenance: dict, gpus: int, health_port: int) -> Process:
    """The weight cache beside an engine (`vllm preload`): the GPUs of the engine it serves, its
    launcher's /health on `health_port`; no vLLM API (not an engine: `vllm`, the parsed serve
    arguments, is None)."""
    program, verb, *args = argv
    return Process(role=role, rank=0, kind=Kind.PRELOAD, program=(program, verb), args=tuple(args), env=dict(env),
                   provenance=dict(provenance), local_gpus=gpus, port=health_port,
                   ports={Port.HEALTH: health_port})


def engines_drain(processes) -> int:
    """The engines' longest drain (each one's --shutdown-timeout as vLLM reads it; 0: none drains)."""
    return max((p.drain_s for p in processes if p.is_engine), default=0)


def with_helper_drain(processes) -> tuple:
    """The processes, each one that is not an engine (the router, the KV helpers) given the
    engines' longest drain: it keeps serving them (proxying their streams, holding their KV) while
    they drain."""
    drain = engines_drain(processes)
    return tuple(dataclasses.replace(p, drain_s=drain) if not p.is_engine else p for p in processes)


# The roles of the engines, as the resolver names them (KIMI_ROLE, the plan's `role`).
SINGLE, HEAD, WORKER, INSTANCE, PREFILL, DECODE = "single", "head", "worker", "instance", "prefill", "decode"
PD_POOLS = (PREFILL, DECODE)  # a PD cluster's pools, in plan order
DEPLOYMENT = "deployment"  # the pool of a deployment without PD pools (its copies: a KV store's `instance` pool)


@dataclass(frozen=True)
class Group:
    """The engines of one copy of the model in a pool: one per node, the leader (rank 0 of the group) first."""

    nodes: tuple  # of Process

    @property
    def leader(self) -> Process:
        return self.nodes[0]

    @property
    def serves_every_node(self) -> bool:
        """Every node's engine serves the API (DEP), not only the leader's."""
        return all(p.serves_http for p in self.nodes)


@dataclass(frozen=True)
class Pool:
    """Engines that do one job, each group of them one copy of the model: the deployment's
    (`deployment`), a KV store's instances (`instance`), or a PD cluster's `prefill` / `decode` pool.
    The one pool type, carried from the selection (name, nodes, a PD pool's parallelism) through
    the resolver (the GPUs one copy really has, checked for memory) into the plan, where its
    engines fill its groups (`Plan.pools`, the same objects as `Plan.topology.pools`)."""

    name: str  # "deployment", "instance", "prefill", "decode"
    # A PD pool's KIMI_<POOL>_NODES (0 = half of one node, shared with the other pool); else the
    # nodes of one copy (KIMI_NODES).
    nodes: int
    parallelism: str = ""  # a PD pool's: tp | tep | dep
    gpus: int = 0  # GPUs one copy really has (TP x PP x DP of its first engine), set by the resolver
    vram_gb: float = 0.0  # memory those GPUs hold
    groups: tuple = ()  # of Group, in rank order: set when the plan is made (topology)

    @property
    def node_count(self) -> int:
        """Nodes the pool runs on (a shared PD pool: its one node)."""
        return max(1, self.nodes)

    @property
    def shares_node(self) -> bool:
        """A PD pool of 0 nodes: half of one node's GPUs, beside the other pool."""
        return self.name in PD_POOLS and self.nodes == 0

    @property
    def serving_nodes(self) -> int:
        """How many of a PD pool's nodes serve the API (the router's workers): every DEP node (its own
        API server, --data-parallel-hybrid-lb), else the head only."""
        return self.node_count if self.parallelism == "dep" else 1

    def gpus_per_node(self, gpu_count: int) -> int:
        """GPUs a PD pool has on each of its nodes: all of them, or the half of a shared node
        (deliberate difference 3: the site sizes a shared pool as if it had the whole node)."""
        return gpu_count if self.nodes >= 1 else max(1, gpu_count // 2)

    @property
    def engines(self) -> tuple:
        return tuple(p for g in self.groups for p in g.nodes)

    @property
    def group_nodes(self) -> int:
        """Nodes of one group (1 for a single-node copy)."""
        return len(self.groups[0].nodes) if self.groups else 0


@dataclass(frozen=True)
class Topology:
    """What a deployment is made of, computed once from its processes (`topology`): its engine pools,
    the router in front of them (a PD cluster's, a KV store's, a fleet's) if any, and the processes
    beside them (a KV store's master and store, LMCache's server, the weight cache). The one
    answer to "is this PD?", "multi-node?", "which process is KIMI_ROLE / KIMI_NODE_RANK?"."""

    pools: tuple  # of Pool (its groups filled), in plan order
    router: Optional[Process] = None  # the router in front of the engines, None where an engine serves clients
    helpers: tuple = ()  # the processes that are neither an engine nor the router, in plan order
    processes: tuple = ()  # every process, in plan order

    @property
    def pd(self) -> bool:
        """Prefill and decode pools (KIMI_STRATEGY=pd_cluster)."""
        return any(pool.name in PD_POOLS for pool in self.pools)

    @property
    def multi_node(self) -> bool:
        """A copy of the model spans several nodes (multi_node_* strategies, a KV store's multi-node instances)."""
        return any(pool.group_nodes > 1 for pool in self.pools if pool.name not in PD_POOLS)

    @property
    def kv_store(self) -> bool:
        """A KV store's master (and store) beside the engines (docs/kv-cache.md)."""
        return any(p.kind is Kind.KV_MASTER for p in self.helpers)

    @property
    def front(self) -> Optional[Process]:
        """The process a client of the whole deployment reaches: the router, else the first engine."""
        return self.router or next((p for pool in self.pools for p in pool.engines), None)

    def pool(self, name: str) -> Optional[Pool]:
        return next((pool for pool in self.pools if pool.name == name), None)

    def helper(self, kind: Kind) -> Optional[Process]:
        """The one process beside the engines of this kind (a KV master, a KV store), None without one."""
        return next((p for p in self.helpers if p.kind is kind), None)

    def roles(self) -> list:
        """Every process's role, once each, in plan order."""
        return list(dict.fromkeys(p.role for p in self.processes))

    def count(self, role: str) -> int:
        return sum(1 for p in self.processes if p.role == role)

    def process(self, role: str, rank: int) -> Optional[Process]:
        """The process of `role` a container runs: an engine by its node rank, any other (the router,
        a KV helper, the weight cache: one per deployment) at rank 0; None when there is none."""
        ranked = any(p.is_engine for p in self.processes if p.role == role)
        return find(self.processes, role, rank if ranked else 0)


def find(processes, role: str, rank: int) -> Optional[Process]:
    for proc in processes:
        if proc.role == role and proc.rank == rank:
            return proc
    return None


def topology(processes: Sequence[Process], pools: Sequence[Pool]) -> Topology:
    """The topology of a plan: its pools (the selection's, sized by the resolver), each filled with
    the engines that carry its name (`Process.pool`) in rank order: a PD pool one group, any other
    cut in groups of its `nodes` (a KV store's instance i holds ranks i*nodes..); the router; the
    helpers beside them."""
    engines = sorted((p for p in processes if p.is_engine), key=lambda p: p.rank)
    filled = []
    for pool in pools:
        members = tuple(p for p in engines if p.pool == pool.name)
        if pool.name in PD_POOLS:
            groups: tuple = (Group(members),) if members else ()
        else:
            size = max(1, pool.nodes)
            groups = tuple(Group(members[i:i + size]) for i in range(0, len(members), size))
        filled.append(dataclasses.replace(pool, groups=groups))
    router = next((p for p in processes if p.kind is Kind.ROUTER), None)
    helpers = tuple(p for p in processes if not p.is_engine and p.kind is not Kind.ROUTER)
    return Topology(pools=tuple(filled), router=router, helpers=helpers, processes=tuple(processes))


@dataclass(frozen=True)
class Choice:
    """What a deployment is: the choices a Selection makes and its Plan carries."""

    recipe: str  # the recipe's slug (recipes/models/<slug>.yaml)
    hardware: str
    variant: str
    strategy: str
    features: tuple
    profile: Optional[str]
    nodes: int

    def headline(self, title: str) -> str:
        """The one line that names a deployment (`title` is the recipe's), for every header."""
        return (f"{title} on {self.hardware}: variant {self.variant}, strategy {self.strategy}, features "
                f"{','.join(self.features) or 'none'}, profile {self.profile or 'none'}")


@dataclass(frozen=True)
class Plan(Choice):
    model: str  # the model argument given to vLLM
    served_model_name: str  # the name clients use
    vram_minimum_gb: float
    pools: tuple  # of Pool: the selection's, sized by the resolver; their groups filled when the plan is made
    processes: tuple  # of Process
    local_model_gb: Optional[float] = None  # a local model's weights (KIMI_MODEL=/path), which size it
    stop_grace_s: int = 0  # KIMI_STOP_GRACE: every container's grace period (it holds the pause, drain, margin)
    # Its engine pools and groups, router and helpers (`topology`), computed from the processes when
    # the plan is made (and again by dataclasses.replace): what every reader asks instead of the
    # strategy's name, the roles or the argv.
    topology: Topology = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        shape = topology(self.processes, self.pools)
        object.__setattr__(self, "topology", shape)
        object.__setattr__(self, "pools", shape.pools)  # one pool type, one set of pools: the topology's

    def without_router(self) -> "Plan":
        """The plan of one copy of a fleet: its router left out (render/k8s_fleet.py draws the copies)."""
        return dataclasses.replace(self, processes=tuple(p for p in self.processes if p is not self.topology.router))

    def as_dict(self) -> dict:
        return {"recipe": self.recipe, "processes": [p.as_dict() for p in self.processes]}

    @property
    def engines(self) -> tuple:
        """Every vLLM engine of the deployment, in plan order."""
        return tuple(p for p in self.processes if p.is_engine)

    @property
    def first_engine(self) -> Optional[Process]:
        return next(iter(self.engines), None)

    @property
    def front(self) -> Optional[Process]:
        """The process a client of the whole deployment reaches: its router (a PD cluster's, a KV
        store's or a fleet's, rank 0), else its first engine."""
        return self.topology.front

    @property
    def gpus(self) -> int:
        """GPUs the deployment holds: every engine's GPUs on its node, summed over the nodes."""
        return sum(p.local_gpus for p in self.engines)

    @property
    def tensor_parallel(self) -> Optional[int]:
        """The engines' tensor-parallel size (None without an engine)."""
        first = self.first_engine
        return first.engine.tensor_parallel if first is not None else None

    @property
    def trust_remote_code(self) -> bool:
        first = self.first_engine
        return bool(first is not None and first.engine.trust_remote_code)

    @property
    def served_name(self) -> str:
        """The name clients use: the engines' effective --served-model-name, else the model."""
        first = self.first_engine
        return (first.served_name if first is not None else None) or self.served_model_name

    @property
    def tokenizer(self) -> str:
        """Where a client's tokenizer comes from: the engines' --tokenizer, else the model."""
        first = self.first_engine
        return (first.engine.text("tokenizer") if first is not None else None) or self.model

    def find(self, role: str, rank: int) -> Optional[Process]:
        return find(self.processes, role, rank)
