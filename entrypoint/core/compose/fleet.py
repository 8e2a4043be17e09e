"""A fleet: KIMI_REPLICAS copies of any deployment behind one router (docs/fleet.md).

Pure: no environment reads, no I/O but the catalog's fleet part (recipes/fleet.yaml, only when a
launch asks for a fleet). `choose` checks the settings; `layer` (called by core/compose/resolve.py after the KV layer's
gates) checks the fleet's gates and fills the layer composition adds (docs/composition.md):

- single node and multi-node: the copy's processes as they are (each copy runs them on its own
  node or group of nodes), and a `router` process (rank 0): the KV store's cache-aware vllm-router
  (recipes/kv_offload.yaml `router_of`'s router) with the policy KIMI_ROUTER_POLICY, in front of
  KIMI_REPLICA_ADDRS (`--worker-urls`, one address per copy: its head) or, on Kubernetes, of the
  pods KIMI_ROUTER_SELECTOR selects (`--service-discovery`), with its own health checks of every
  copy and its Prometheus endpoint bound for scraping;
- pd_cluster: the PD router is the fleet's router: KIMI_PREFILL_ADDRS / KIMI_DECODE_ADDRS list every
  unit's nodes, unit after unit, and the router names every unit's pool heads (each unit's own
  containers run as the PD cluster of its own addresses), or, on Kubernetes, the router discovers
  each pool's pods by its own selector (KIMI_ROUTER_SELECTOR's `prefill:` / `decode:` terms) on
  one port, the prefill pool's, which every pool's engines then listen on; the policy is the
  prefill pool's, where the prompts are cached;
- kv_aware: every vLLM process also publishes its KV-cache events (`--kv-events-config`, vLLM's
  KVEventsConfig), and the router subscribes to each copy's publisher.

What cannot work is refused (`unsupported_combination`), with a way out.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError, unknown_value
from entrypoint.core.base.net import url_host
from entrypoint.core.compose.kv import load_kv
from entrypoint.core.compose.plan import Kind, Port, Process, StreamFront, service
from entrypoint.core.data.recipe import load_section
from entrypoint.core.data.record import Record
from entrypoint.core.vllm.args import placeholders
from entrypoint.core.vllm.vllm_cli import spec_for

ROLE = "router"  # the fleet router's role (KIMI_ROLE=router), as a PD cluster's
SOURCE = "fleet"  # its provenance
_PLACEHOLDER = "$REPLICA_{}"  # a copy's address not given yet (KIMI_REPLICA_ADDRS)
POOLS = ("prefill", "decode")  # a PD cluster's pools: KIMI_ROUTER_SELECTOR's `prefill:key=value` terms


def load_fleet(directory: Optional[str] = None) -> Record:
    """recipes/fleet.yaml (of `directory`, else of the recipe data): the fleet part of the one
    catalog (core/data/recipe: read bounded, validated and cross-checked with the rest, cached)."""
    return load_section("fleet", directory)


def router_facts(directory: Optional[str] = None) -> Record:
    """The router the fleet runs: the KV store's (recipes/kv_offload.yaml), one definition."""
    return load_kv(directory).stores[load_fleet(directory).router_of].router


@dataclass(frozen=True)
class FleetChoice:
    """What the fleet settings ask for, checked against the data (not yet against the launch)."""

    replicas: int
    front: str  # KIMI_ROUTER: vllm-router | gateway
    policy: str
    addrs: tuple  # KIMI_REPLICA_ADDRS
    selector: tuple  # KIMI_ROUTER_SELECTOR: ("key=value", ...)
    namespace: str  # where the router discovers the copies (KIMI_NAMESPACE)
    router_port: Optional[int]  # KIMI_ROUTER_PORT when given
    autoscaling: str  # KIMI_AUTOSCALING
    stream_front: bool = False  # KIMI_STREAM_FRONT: the stream front before the router (docs/fleet.md)

    @property
    def discovered(self) -> bool:
        return bool(self.selector)

    def pool_selector(self, role: Optional[str] = None) -> List[str]:
        """The selector's terms for one PD pool (its `role:` terms and the plain ones), or, without a
        role, the plain terms (a copy's pods)."""
        out = []
        for item in self.selector:
            pool, sep, term = item.partition(":")
            if not sep:
                out.append(item)
            elif pool == role:
                out.append(term)
        return out

    @property
    def pool_terms(self) -> bool:
        """Whether the selector names a PD pool's own terms (`prefill:key=value`)."""
        return any(":" in item for item in self.selector)


# what asks for a fleet besides KIMI_REPLICAS > 1 (and an autoscaled PD cluster): these settings given, or
# these values (the stream front on: a PD cluster of one unit behind it is a PD fleet of one unit); the
# Helm chart draws a fleet by the same data (buildsys/chart_fleet.py `asked_by`)
FLEET_SETTINGS = ("replica_addrs", "router_selector", "router_policy")
FLEET_VALUES = {"stream_front": "on"}


def choose(settings, directory: Optional[str] = None, pd: bool = False) -> Optional[FleetChoice]:
    """The fleet settings -> a FleetChoice, or None: one copy (KIMI_REPLICAS unset or 1, no fleet
    setting), or KIMI_ROUTER=none (the copies behind a plain Service, as before). A PD cluster
    (`pd`) that an autoscaler scales (KIMI_AUTOSCALING) is a PD fleet, even of one unit: each group
    the autoscaler adds is a unit of its own, which only the fleet's router (discovering every
    group's pods) reaches; for the same reason a PD cluster of several units, or autoscaled, behind
    no router (KIMI_ROUTER=none) is refused."""
    scaled = pd and settings.autoscaling != "off"
    asked = (settings.replicas > 1 or scaled or any(settings.is_set(n) for n in FLEET_SETTINGS)
             or any(getattr(settings, k) == v for k, v in FLEET_VALUES.items()))
    if settings.router == "none" and pd and (settings.replicas > 1 or scaled):
        raise _refuse("KIMI_ROUTER=none puts the copies behind a plain Service, but a PD cluster's units (KIMI_REPLICAS "
                      "> 1, or the groups KIMI_AUTOSCALING adds) are paired only by their router: each further group "
                      "of a pool would get the first unit's addresses, and the PD router would list the first unit's "
                      "pods only. Use KIMI_ROUTER=vllm-router (the default: the PD router discovers every unit's "
                      "pools), or one unit (KIMI_REPLICAS=1, KIMI_AUTOSCALING=off).")
    if not asked or settings.router == "none":
        return None
    data = load_fleet(directory)
    policy = settings.router_policy or data.default_policy
    if policy not in data.policies:
        raise unknown_value("KIMI_ROUTER_POLICY", policy, data.policies, "Unset it for the default "
                            f"({data.default_policy}).")
    addrs, selector = tuple(settings.replica_addrs), tuple(settings.router_selector)
    for item in selector:
        pool, sep, term = item.partition(":")  # a label key has no ':': `prefill:key=value` is a pool's term
        if sep and pool not in POOLS:
            raise KimiError(E.INVALID_VALUE, f"KIMI_ROUTER_SELECTOR: {item[:80]!r} names the pool {pool[:20]!r}; a "
                            f"term's pool is one of {', '.join(POOLS)} (`prefill:key=value`), or none (`key=value`).")
        key, _, value = (term if sep else item).partition("=")
        if not key or not value:
            raise KimiError(E.INVALID_VALUE, f"KIMI_ROUTER_SELECTOR: {item[:80]!r} is not key=value. Give the pod "
                            "labels that select the copies, e.g. app.kubernetes.io/name=<the deployment's name> (or leave it to "
                            "`plan --format k8s`, which sets it).")
    if addrs and selector:
        raise KimiError(E.INVALID_VALUE, "KIMI_REPLICA_ADDRS and KIMI_ROUTER_SELECTOR both name the copies: keep "
                        "one (the addresses on plain hosts and Compose, the selector on Kubernetes).")
    replicas = settings.replicas
    if settings.is_set("replicas") and addrs and len(addrs) != replicas:
        raise KimiError(E.INVALID_VALUE, f"KIMI_REPLICA_ADDRS lists {len(addrs)} addresses but KIMI_REPLICAS="
                        f"{replicas}. Give one address per copy, or set KIMI_REPLICAS={len(addrs)}.")
    if not settings.is_set("replicas") and addrs:
        replicas = len(addrs)
    if settings.stream_front == "on" and settings.router != "vllm-router":
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_STREAM_FRONT=on puts the stream front before the fleet's "
                        f"vllm-router, and KIMI_ROUTER={settings.router} runs none. Use KIMI_ROUTER=vllm-router, or "
                        "unset KIMI_STREAM_FRONT.")
    return FleetChoice(replicas=replicas, front=settings.router, policy=policy, addrs=addrs, selector=selector,
                       namespace=settings.namespace, autoscaling=settings.autoscaling,
                       stream_front=settings.router == "vllm-router" and settings.stream_front != "off",
                       router_port=settings.router_port if settings.is_set("router_port") else None)


# ---------------------------------------------------------------- gates


def _refuse(message: str) -> KimiError:
    return KimiError(E.UNSUPPORTED_COMBINATION, message)


def _check(choice: FleetChoice, data: Record, sel, kv_choice, deploy_type: str) -> None:
    if kv_choice is not None and kv_choice.store and deploy_type == "pd_cluster":
        raise _refuse(f"KIMI_KV_OFFLOAD={kv_choice.id} serves one PD unit's pools from one Mooncake master; units of "
                      "it (KIMI_REPLICAS > 1, or the groups KIMI_AUTOSCALING adds, each a unit of its own) are not "
                      "drawn with a KV store. Size the one unit's pools instead (KIMI_PREFILL_NODES, "
                      "KIMI_DECODE_NODES) with KIMI_REPLICAS=1 and KIMI_AUTOSCALING=off, or leave KIMI_KV_OFFLOAD "
                      "unset for PD units behind the router.")
    if kv_choice is not None and kv_choice.store:
        raise _refuse(f"KIMI_KV_OFFLOAD={kv_choice.id} runs its own engine instances behind its cache-aware router: "
                      "a fleet of it would put a router before routers. Size it with KIMI_KV_INSTANCES instead of "
                      "KIMI_REPLICAS (and unset KIMI_REPLICA_ADDRS, KIMI_ROUTER_POLICY).")
    policy = data.policies[choice.policy]
    if choice.replicas < policy.min_replicas:
        raise _refuse(f"KIMI_ROUTER_POLICY={choice.policy} needs at least {policy.min_replicas} copies (the router "
                      f"refuses to start with fewer), and the fleet has {choice.replicas}. Set KIMI_REPLICAS="
                      f"{policy.min_replicas} or more, or another policy (cache_aware, round_robin).")
    if choice.front == "gateway" and deploy_type == "pd_cluster":
        raise _refuse("KIMI_ROUTER=gateway puts an InferencePool of model servers behind a Gateway; a PD cluster's "
                      "requests go to both pools through its own router, which the endpoint picker does not do. "
                      "Use KIMI_ROUTER=vllm-router for a PD fleet.")
    if choice.front == "gateway" and choice.addrs:
        raise _refuse("KIMI_ROUTER=gateway is a Kubernetes rendering (an InferencePool selects the copies' pods); "
                      "KIMI_REPLICA_ADDRS names hosts. Use KIMI_ROUTER=vllm-router on plain hosts and Compose, or "
                      "render Kubernetes manifests (kimi-serve plan --format k8s) without KIMI_REPLICA_ADDRS.")
    if deploy_type == "pd_cluster" and choice.discovered:
        _check_pd_discovery(choice, sel)
    elif choice.pool_terms:
        raise _refuse(f"KIMI_ROUTER_SELECTOR names a PD pool's terms (`prefill:` / `decode:`), but KIMI_STRATEGY="
                      f"{sel.strategy} has no pools. Give plain key=value terms.")
    if policy.token_ids and choice.front == "vllm-router":
        spec = spec_for(sel.vllm_version)
        missing = [a for a in data.token_ids_args if a.startswith("--") and spec.lookup(a)[0] is None]
        if missing:
            raise _refuse(f"KIMI_ROUTER_POLICY={choice.policy} matches prompts by their token ids, which the router asks "
                          f"each engine's render endpoints for; vLLM {sel.vllm_version} has no {missing[0]} to serve "
                          "them, so the router would route blind to the caches. Run an image on a newer vLLM (0.32.0 "
                          "or later), or choose a policy without token ids: KIMI_ROUTER_POLICY=round_robin, "
                          "power_of_two or consistent_hash.")
    if not policy.kv_events:
        return
    way_out = "Use KIMI_ROUTER_POLICY=cache_aware (the router's own prefix tree, no events)"
    if deploy_type != "single_node":
        raise _refuse(f"KIMI_ROUTER_POLICY={choice.policy} subscribes to each copy's KV-event publisher, which the "
                      f"router takes as static sources of one engine per copy (regular mode); KIMI_STRATEGY="
                      f"{sel.strategy} spreads a copy over several engines or nodes. {way_out}, or a single-node "
                      "strategy.")
    if choice.discovered or choice.front == "gateway":
        raise _refuse(f"KIMI_ROUTER_POLICY={choice.policy} needs each copy's KV-event endpoint given to the router "
                      "(--kv-event-source), which the router's Kubernetes service discovery does not find. "
                      f"{way_out}, or run the fleet on hosts with KIMI_REPLICA_ADDRS.")
    if sel.user.get("kv_events_config") is not None:
        raise _refuse(f"KIMI_ROUTER_POLICY={choice.policy} sets --kv-events-config on every engine, and the vLLM "
                      "arguments (KIMI_EXTRA_ARGS or container arguments) set it too. Keep one: remove it from the "
                      "arguments, or choose another policy.")


def _check_pd_discovery(choice: FleetChoice, sel) -> None:
    """A PD fleet the router discovers (Kubernetes): each pool by a selector of its own, and every pod
    on one port (the router's --service-discovery-port), which a node the pools share cannot give."""
    missing = [role for role in POOLS if len(choice.pool_selector(role)) == len(choice.pool_selector())]
    if missing:
        raise _refuse(f"A PD fleet's router discovers each pool by a selector of its own, and KIMI_ROUTER_SELECTOR "
                      f"names no term of the {missing[0]} pool. Add `{missing[0]}:key=value` terms (the labels of "
                      "that pool's API pods), or leave the selector to `plan --format k8s`, which sets it.")
    shared = [pool.name for pool in sel.pd_pools.values() if pool.shares_node]
    if shared:
        raise _refuse(f"A PD fleet's router reaches every discovered pod on one port, so both pools listen on the "
                      f"prefill pool's port; KIMI_{shared[0].upper()}_NODES=0 shares one node between the pools, "
                      "which then cannot both bind it. Give each pool nodes of its own (KIMI_PREFILL_NODES and "
                      "KIMI_DECODE_NODES 1 or more), or list the units' nodes in KIMI_PREFILL_ADDRS / "
                      "KIMI_DECODE_ADDRS instead of KIMI_ROUTER_SELECTOR.")


# ---------------------------------------------------------------- composition (a layer of core/compose/resolve.py)


def replica_hosts(choice: FleetChoice) -> List[str]:
    """Each copy's address (a placeholder where KIMI_REPLICA_ADDRS gives none yet)."""
    return [choice.addrs[i] if i < len(choice.addrs) else _PLACEHOLDER.format(i + 1) for i in range(choice.replicas)]


def kv_events_config(data: Record) -> str:
    return json.dumps(dict(data.kv_events.config), separators=(",", ":"))


def engine_args(data: Record, policy: str) -> List[str]:
    """What the fleet adds to every vLLM engine for `policy`: the render endpoints the router asks for
    token ids (token_ids), the KV-event publisher (kv_events)."""
    found = data.policies[policy]
    out = list(data.token_ids_args) if found.token_ids else []
    return out + (["--kv-events-config", kv_events_config(data)] if found.kv_events else [])


@dataclass(frozen=True)
class FleetLayer:
    """What a fleet adds to the composition (core/compose/resolve.py composes it, docs/composition.md): a
    layer of arguments after every other on every engine (the policy's: the render endpoints, the
    KV-event publisher), and the router in front of the copies (a PD cluster's own router, which
    names every unit's pool heads)."""

    choice: FleetChoice
    data: Record
    args: tuple  # every engine's added arguments
    source = SOURCE  # the layer's tag

    def _kv_event_args(self, sel, engine: Process, urls: List[str]) -> List[str]:
        out: List[str] = []
        base = self.data.kv_events.port
        local_dp = max(1, engine.engine.data_parallel_local)
        for url, host in zip(urls, replica_hosts(self.choice)):
            endpoints = ",".join(f"tcp://{url_host(host)}:{base + r}" for r in range(local_dp))
            out += ["--kv-event-source", f"{url}={endpoints}"]
        block = engine.engine.number("block_size", self.data.kv_events.default_block_size)
        return out + ["--kv-event-model", sel.served_model_name, "--kv-event-block-size", str(block)]

    def router(self, sel, engines: Sequence[Process]) -> Process:
        """The fleet's router in front of the copies of `engines` (one copy's engines)."""
        choice, data = self.choice, self.data
        router = router_facts()
        port = choice.router_port or router.port
        engine_port = next((p.port for p in engines if p.serves_http and p.port), 8000)
        policy = data.policies[choice.policy]
        args: List[str] = ["--policy", choice.policy]
        urls = [f"http://{url_host(h)}:{engine_port}" for h in replica_hosts(choice)]
        if choice.discovered:
            d = data.discovery
            args += [d.flag, d.selector_flag, *choice.selector, d.namespace_flag, choice.namespace,
                     d.port_flag, str(engine_port)]
        else:
            args += [router.workers_arg, *urls]
        args += ["--host", sel.values.get("ROUTER_HOST", "0.0.0.0"), "--port", str(port)]
        if policy.tuned:
            args += tuned_args(router.args, policy.tuning)
        args += [*data.router_fault_args, *data.metrics.args]
        if policy.kv_events:
            args += self._kv_event_args(sel, engines[0], urls)
        provenance = {tok: SOURCE for tok in args if tok.startswith("--")}
        return service(Kind.ROUTER, ROLE, (router.program, *args), {Port.HTTP: port, Port.METRICS: data.metrics.port},
                       port, provenance=provenance)

    def pd_engines(self, port: int) -> "FleetLayer":
        """The layer of a PD fleet's engines: a discovered fleet's pools all listen on `port` (the
        prefill pool's: the router's one --service-discovery-port)."""
        if not self.choice.discovered:
            return self
        return dataclasses.replace(self, args=(*self.args, self.data.discovery.pd.engine_port_flag, str(port)))

    def pd_discovery_args(self, port: int) -> List[str]:
        """A discovered PD fleet's router: the pods of each pool by the pool's selector, on `port`."""
        d = self.data.discovery
        out = [d.flag]
        for role in POOLS:
            out += [d.pd.selector_flags[role], *self.choice.pool_selector(role)]
        return out + [d.namespace_flag, self.choice.namespace, d.port_flag, str(port)]

    def pd_unit_urls(self, sel, role: str, count: int, nodes: int, port: int) -> List[Tuple[str, str]]:
        """The URLs of every further PD unit's `role` pool heads (`count` of them per unit, its pool
        `nodes` nodes), tagged: the flag the strategy's, the URL the fleet's (a placeholder where
        KIMI_{ROLE}_ADDRS gives no address yet: the start's check asks for it)."""
        out: List[Tuple[str, str]] = []
        for unit in range(1, self.choice.replicas):
            for index in range(1, count + 1):
                name = f"{role.upper()}_NODE_{unit * nodes + index}"
                host = url_host(sel.values[name]) if name in sel.values else f"${name}"
                out += [(f"--{role}", "strategy"), (f"http://{host}:{port}", SOURCE)]
        return out

    def shedding_args(self, found, spec) -> List[str]:
        """An engine's in-flight bound behind the vLLM router (recipes/fleet.yaml `shedding`): a full
        copy answers 503 and the router retries another. None where the release lacks the flag, where
        the launch sets it already, or without the vLLM router (no retries in front)."""
        shed = self.data.shedding
        option = spec.lookup(shed.flag)[0]
        if self.choice.front != "vllm-router" or option is None or found.get(option.dest) is not None:
            return []
        running = found.number("max_num_seqs", shed.default_max_num_seqs)
        return [shed.flag, str(shed.factor * running)]

    def fronted(self, router: Process, drain_s: int) -> Process:
        """The router behind the stream front (KIMI_STREAM_FRONT, entrypoint/front): the front binds the
        router's host and port, the router (its child) the front's loopback port; the router's own
        metrics port is kept. `drain_s`: the engines' drain, which the front gives its streams."""
        streams = self.data.streams
        args = list(router.args)
        host, port = _value(args, "--host"), int(_value(args, "--port"))
        if port == streams.router_port:
            raise _refuse(f"KIMI_ROUTER_PORT={port} is the port the stream front gives the router behind it "
                          f"(recipes/fleet.yaml streams.router_port). Choose another port, or KIMI_STREAM_FRONT=off.")
        args[args.index("--host") + 1], args[args.index("--port") + 1] = streams.router_host, str(streams.router_port)
        front = ["--host", host, "--port", str(port), "--upstream",
                 f"http://{url_host(streams.router_host)}:{streams.router_port}",
                 "--migrations", str(streams.migrations), "--drain-s", str(drain_s), "--"]
        program, *words = streams.program
        provenance = {**router.provenance, **{tok: "stream front" for tok in front if tok.startswith("--")}}
        return dataclasses.replace(router, program=(program,), args=(*words, *front, *router.program, *args),
                                   provenance=provenance,
                                   front=StreamFront(router_port=streams.router_port, migrations=streams.migrations))

    @property
    def pd_router_args(self) -> List[str]:
        """What the PD router adds, after its own arguments: the prefill pool's policy, health, metrics."""
        return ["--prefill-policy", self.choice.policy, *self.data.router_fault_args, *self.data.metrics.args]


def _value(args: Sequence[str], flag: str) -> str:
    """The value the router's argv (composed here and by core/compose/resolve.py) gives `flag`."""
    return args[len(args) - 1 - list(reversed(args)).index(flag) + 1]


def tuned_args(store_args: Sequence[str], tuning: Dict[str, str]) -> List[str]:
    """The store router's cache-aware tuning with the fleet's own values (recipes/fleet.yaml
    `policies.<policy>.tuning`) in place of its own."""
    args = list(store_args)
    for flag, value in tuning.items():
        if flag not in args[:-1]:
            raise ValueError(f"recipes/fleet.yaml tuning: {flag} is not among the store router's options {args}")
        args[args.index(flag) + 1] = value
    return args


def layer(sel, cat, choice: FleetChoice, kv_choice=None, directory: Optional[str] = None) -> FleetLayer:
    """The fleet choice checked against the launch (its gates) and filled: the layer composition adds."""
    data = load_fleet(directory)
    _check(choice, data, sel, kv_choice, cat.strategies[sel.strategy].deploy_type)
    extra = engine_args(data, choice.policy) if choice.front == "vllm-router" else []
    if choice.stream_front:  # the derender endpoint a chat stream's continuation is parsed by, where the release has it
        spec = spec_for(sel.vllm_version)
        extra += [a for a in data.streams.engine_args if a not in extra and spec.lookup(a)[0] is not None]
    return FleetLayer(choice=choice, data=data, args=tuple(extra))


def unfilled(proc: Process) -> List[str]:
    """The copies' addresses a router process still lacks (placeholders), for the start's check."""
    return sorted({name for tok in proc.argv for name in placeholders(tok)})


def check_start(proc: Process) -> None:
    """The router may start only once it knows every copy's address."""
    missing = unfilled(proc)
    if missing:
        raise KimiError(E.MISSING_SETTING, f"The fleet's router needs the address of every copy ({', '.join(missing)}): "
                        "set KIMI_REPLICA_ADDRS (a comma list, one address per copy: a multi-node copy's head; a "
                        "PD unit's nodes in KIMI_PREFILL_ADDRS / KIMI_DECODE_ADDRS, unit after unit).")
