"""Whether a plan can run where it is placed: checked before anything is written or started.

- every address setting is one host (a DNS name, an IPv4 or an IPv6 address), so that each URL
  and flag rendered from it reads back as that host;
- KIMI_ROLE names a process of the plan (a role is only meaningful for a pd_cluster);
- no process needs more GPUs than its node has;
- no two processes placed on one host (the pools of a shared node, or of addresses listed twice)
  share a GPU or a port.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Dict, List, Optional, Tuple

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.plan import Kind, Plan, Process
from entrypoint.core.compose.settings import BY_NAME, Settings
from entrypoint.core.vllm.mask import mask_value
from entrypoint.core.vllm.vllm_cli import refusal

_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
ADDRESS_SETTINGS = ("head_addr", "node_addr", "host", "router_host", "prefill_addrs", "decode_addrs", "instance_addrs", "replica_addrs",
                    "mooncake_master_addr", "mooncake_store_host")
# Variables a process's env names its GPUs with (declared in core/compose/settings.py).
VISIBILITY_SETTINGS = ("cuda_visible_devices", "hip_visible_devices", "rocr_visible_devices")


def host_problem(text: str) -> Optional[str]:
    """Why `text` is not one host (None when it is): a name, an IPv4 or an IPv6 address."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ipaddress.ip_address(bare)
        return None
    except ValueError:
        pass
    if "@" in text:
        return "carries user information (user:password@): give the host alone; credentials never go in an address"
    if text.startswith("["):
        return "is not an IPv6 address in brackets"
    if re.fullmatch(r"[^:]+:[0-9]+", text):
        return "carries a port; give the address alone (each process's port is a setting of its own)"
    if ":" in text:
        return "is not an IPv6 address"
    name = text[:-1] if text.endswith(".") else text
    if len(name) > 253 or not name or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        return "is not a host name (letters, digits, '-' and '.') nor an IP address"
    return None


def same_host(text: str) -> str:
    """One spelling per host: names in lower case without the root's dot, addresses in their
    compressed form (`[fd00:0::1]` and `fd00::1`, `Node-1.` and `node-1` are one host)."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return ipaddress.ip_address(bare).compressed
    except ValueError:
        return text.rstrip(".").lower()


def _quoted(item: str) -> str:
    """An address as a message may quote it: at most 80 characters, its user information masked
    (the one mask, core/vllm/mask.py)."""
    return mask_value(item, host=True)[:80]


def check_addresses(settings: Settings) -> None:
    for name in ADDRESS_SETTINGS:
        field, value = BY_NAME[name], settings.values[name]
        items = value if isinstance(value, tuple) else (value,) if value else ()
        for item in items:
            why = host_problem(item)
            if why:
                raise KimiError(E.INVALID_VALUE, f"{field.env}: {_quoted(item)!r} {why}. Write one host per entry, e.g. "
                                "10.0.0.1, node-1.cluster.local or fd00::1.")
        first: Dict[str, int] = {}
        for i, item in enumerate(items):  # each entry of a list is a node of its own, as a pool's are
            j = first.setdefault(same_host(item), i)
            if j != i:
                raise KimiError(E.INVALID_VALUE, f"{field.env} lists one host twice: entry {j + 1} ({_quoted(items[j])}) "
                                f"and entry {i + 1} ({_quoted(item)}). Each entry is a node of its own: give each its "
                                "own address.")


def thread_list_problem(text: str, ranks: int) -> Optional[str]:
    """Why a core list per rank (VLLM_CPU_OMP_THREADS_BIND's `0-3|4-7`: a `|` between ranks, `,`
    between ranges) cannot bind `ranks` ranks, or None: one list per rank, ranges low to high, no
    core in two ranks' lists (vLLM's CPU worker indexes the lists by its local rank)."""
    groups = text.split("|")
    if len(groups) != ranks:
        return (f"gives {len(groups)} core list(s) for {ranks} rank(s) (KIMI_CPU_RANKS): give one per rank, "
                "separated by '|'")
    owner: Dict[int, int] = {}
    for rank, group in enumerate(groups):
        for item in group.split(","):
            low, dash, high = item.partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                return f"has {item!r} in rank {rank}'s list: write a core (3) or a range of cores (0-3)"
            first, last = int(low), int(high) if dash else int(low)
            if last < first:
                return f"has the range {item!r} in rank {rank}'s list running backwards: write {last}-{first}"
            if last - first > 65536:
                return f"has the range {item!r}: more cores than a node holds"
            for core in range(first, last + 1):
                other = owner.setdefault(core, rank)
                if other != rank:
                    return f"binds core {core} to rank {other} and rank {rank}: give each rank cores of its own"
    return None


def check_thread_lists(settings: Settings) -> None:
    """Every thread list setting judged alike (KIMI_CPU_THREADS_BIND)."""
    text = settings.values.get("cpu_threads_bind")
    if text and text not in ("nobind", "auto"):
        why = thread_list_problem(text, settings.cpu_ranks)
        if why:
            raise KimiError(E.INVALID_VALUE, f"{BY_NAME['cpu_threads_bind'].env}={text[:80]!r} {why}. Or use nobind "
                            "(no binding) or auto (a NUMA node per rank).")


def check_user_args(user, spec) -> None:
    """The user's vLLM arguments (`user`: vllm_cli.EngineArgs of KIMI_EXTRA_ARGS and the container
    arguments) set none of the options the plan draws the deployment from (vllm_cli.SHAPE_DESTS:
    parallel sizes, ports, host, drain, load format, KV transfer, model, served name, revision), in
    any spelling vLLM accepts: each is a typed setting's, which every rendering reads. `spec`: the
    grammar that parsed them (names the option as vLLM spells it)."""
    for dest in user.shape_given():
        option = next((o for o in spec.options.values() if o.dest == dest), None)
        name = option.name if option is not None else "--" + dest.replace("_", "-")
        value = user.get(dest)
        text = "" if isinstance(value, bool) else user.text(dest) or ""
        shown = f"{name} {mask_value(text)[:80]!r}" if text else name if value is not False else \
            f"{name} off ({', '.join(option.negative) if option is not None else 'its negative form'})"
        raise KimiError(E.INVALID_VALUE, f"the vLLM arguments (KIMI_EXTRA_ARGS, the container arguments) set "
                        f"{shown}, which draws the deployment (its GPUs, processes, ports, probes, wiring or grace "
                        f"period) and is not a vLLM argument's{refusal(dest, name)}")


def check_role(settings: Settings, plan: Plan) -> None:
    role = settings.role
    if role and role not in plan.topology.roles():
        raise KimiError(E.UNSUPPORTED_COMBINATION, f"KIMI_ROLE={role}, but the {plan.strategy} plan has no {role} "
                        f"process ({', '.join(sorted(plan.topology.roles()))}). The settings that make "
                        "roles: prefill and decode, KIMI_STRATEGY=pd_cluster; router, a fleet (KIMI_REPLICAS > 1 "
                        "with KIMI_ROUTER other than none) or a pd_cluster; preload, KIMI_PRELOAD=1; the KV "
                        "helpers, KIMI_KV_OFFLOAD (docs/kv-cache.md). Set the one for this role, or unset KIMI_ROLE.")


def _host(settings: Settings, proc: Process) -> Optional[str]:
    addrs = settings.values.get(f"{proc.role}_addrs") if proc.role in ("prefill", "decode") else None
    if not addrs:
        return None
    return addrs[proc.rank] if proc.rank < len(addrs) else None


def _gpus(proc: Process) -> Optional[Tuple[int, ...]]:
    for name in VISIBILITY_SETTINGS:
        text = proc.env.get(BY_NAME[name].env)
        if text is not None:
            ids = [t.strip() for t in str(text).split(",") if t.strip()]
            return tuple(int(t) for t in ids) if all(t.isdigit() for t in ids) else None
    return tuple(range(proc.local_gpus)) if proc.local_gpus else ()


def check_one_host(plan: Plan) -> None:
    """Every process of the plan on one host (a Compose file): no two listen on one port."""
    owner: Dict[int, Process] = {}
    for proc in plan.processes:
        for port in proc.listens:
            other = owner.setdefault(port, proc)
            if other is not proc:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"{proc.role} rank {proc.rank} and {other.role} rank "
                                f"{other.rank} would both listen on port {port} of the one host a Compose file "
                                "runs on. Give them different ports (KIMI_ROUTER_PORT, KIMI_*_DP_RPC_PORT).")


def check_node_fit(plan: Plan, gpu_count: int, settings: Settings) -> None:
    for proc in plan.processes:
        if proc.local_gpus > gpu_count:
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"{proc.role} rank {proc.rank} needs {proc.local_gpus} GPUs "
                            f"on its node (TP x PP x local DP of its layout), but a {plan.hardware} node has "
                            f"{gpu_count}. Choose a smaller layout (KIMI_STRATEGY, KIMI_PREFILL_PARALLELISM / "
                            "KIMI_DECODE_PARALLELISM) or span nodes with a multi-node strategy (`kimi-serve list`).")
    for cache in (p for p in plan.processes if p.kind is Kind.PRELOAD):  # beside its engine: one node, one pod
        for proc in plan.processes:
            shared = sorted(set(cache.listens) & set(proc.listens)) if proc is not cache and proc.rank == cache.rank \
                and proc.is_engine else []
            if shared:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"the weight cache ({cache.role}, KIMI_PRELOAD=1) and the engine "
                                f"({proc.role} rank {proc.rank}) run on one node (one pod on Kubernetes) and would both "
                                f"listen on port {shared[0]}, the weight cache's health port (recipes/vllm/preload.yaml). "
                                "Give the engine another port (KIMI_PORT), or unset KIMI_PRELOAD.")
    seen: Dict[str, List[Tuple[Process, Tuple[int, ...], List[int]]]] = {}
    for proc in plan.processes:
        ports = proc.listens
        twice = sorted({p for p in ports if ports.count(p) > 1})
        if twice:
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"{proc.role} rank {proc.rank} would listen twice on port "
                            f"{twice[0]} (its HTTP port, its data-parallel RPC port, its KV side channel and its KV-event "
                            "publisher's ports, 5557 on, one per local DP rank, must differ, and a fleet router's API "
                            "and Prometheus ports). Choose another KIMI_PORT / "
                            "KIMI_ROUTER_PORT / KIMI_*_DP_RPC_PORT.")
        host = _host(settings, proc)
        if host is None:
            continue
        gpus = _gpus(proc) or ()
        for other, other_gpus, other_ports in seen.get(host, []):
            what = (f"{proc.role} rank {proc.rank} and {other.role} rank {other.rank} both run on {host}")
            shared = sorted(set(gpus) & set(other_gpus))
            if shared:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"{what} and would share GPU(s) "
                                f"{','.join(map(str, shared))}. Give each pool its own nodes (other addresses), or "
                                "split one node between them with KIMI_PREFILL_NODES=0 and KIMI_DECODE_NODES=0.")
            clash = sorted(set(ports) & set(other_ports))
            if clash:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"{what} and would both listen on port {clash[0]}. Give "
                                "them other addresses, or other ports (KIMI_PORT, KIMI_ROUTER_PORT, KIMI_*_DP_RPC_PORT; "
                                "each pool's port comes from the strategy).")
        seen.setdefault(host, []).append((proc, gpus, ports))


def check_head_ports(plan: Plan, peer_port: int) -> None:
    """A multi-node copy's head (rank 0 of an engine spanning --nnodes): the peer watch its entrypoint
    forks before vLLM starts (recipes/serving.yaml peer_watch, node/peers.py) and vLLM's master port
    (--master-port) listen beside its own ports; no two may be one port."""
    for proc in plan.processes:
        if not proc.is_engine or proc.vllm is None or proc.vllm.nnodes < 2 or proc.vllm.number("node_rank", 0):
            continue
        owned = [(port, "its own ports (KIMI_PORT, KIMI_*_DP_RPC_PORT, the KV ports)") for port in proc.listens]
        master = proc.vllm.text("master_port")
        if master and master.isdigit():
            owned.append((int(master), "vLLM's master port (--master-port)"))
        owned.append((peer_port, "the peer watch (recipes/serving.yaml peer_watch.port), which the head's entrypoint "
                      "starts before vLLM"))
        seen: Dict[int, str] = {}
        for port, what in owned:
            other = seen.setdefault(port, what)
            if other is not what:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"{proc.role} rank {proc.rank}, the head of a "
                                f"{proc.vllm.nnodes}-node copy, would listen on port {port} twice: for {other} and for "
                                f"{what}. Choose another KIMI_PORT, or another --master-port in KIMI_EXTRA_ARGS.")
