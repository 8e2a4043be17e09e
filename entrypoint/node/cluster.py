"""Cluster wiring with nothing typed by hand: KIMI_HEAD_ADDR / KIMI_NODES / KIMI_NODE_RANK from a
Kubernetes LeaderWorkerSet or a Slurm job, and KIMI_IFACE from the routing table.

A KIMI_* setting from any source (the environment or the KIMI_CONFIG file) wins; this only fills
what no source sets. `wire(environ)` returns the
environment the launch is built from plus one line per decision, for the start-up log.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
import struct
from dataclasses import dataclass
from typing import Iterator, List, Mapping, Optional, Tuple

from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.base.files import read_text_capped
from entrypoint.core.base.net import resolve
from entrypoint.core.compose.settings import BY_ENV, ORIGIN_WORDS, Settings, read_external, read_settings

LWS = (("LWS_LEADER_ADDRESS", "KIMI_HEAD_ADDR"), ("LWS_GROUP_SIZE", "KIMI_NODES"), ("LWS_WORKER_INDEX", "KIMI_NODE_RANK"))


@dataclass(frozen=True)
class Wiring:
    environ: dict  # the input environment with the cluster defaults filled in
    source: str  # "LeaderWorkerSet" | "Slurm" | "" (none)
    decisions: tuple  # one line per value filled in (or why none was)
    iface: tuple = ()  # (interface, how it was found) when this machine's routing chose KIMI_IFACE


def _split_top_level(text: str) -> List[str]:
    parts: List[str] = []
    current: List[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if depth < 0 or depth > 1:
            raise ValueError("brackets do not pair up")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise ValueError("brackets do not pair up")
    return parts + ["".join(current)]


def _range_parts(body: str) -> List[Tuple[str, str]]:
    """[lo, hi] pairs of one bracket ('01-04,07' -> [('01', '04'), ('07', '07')]); ValueError when
    it is not a list of numbers and ascending number ranges."""
    parts = []
    for item in body.split(","):
        lo, dash, hi = item.partition("-")
        if not re.fullmatch(r"[0-9]{1,9}", lo) or (dash and not re.fullmatch(r"[0-9]{1,9}", hi)):
            raise ValueError(f"[{body[:40]}] is not a list of numbers and number ranges")
        if dash and int(hi) < int(lo):
            raise ValueError(f"the range {lo}-{hi} runs backwards: it names no host")
        parts.append((lo, hi if dash else lo))
    return parts


def _range_items(body: str) -> Iterator[str]:
    for lo, hi in _range_parts(body):
        yield from (str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1))


def _count(item: str) -> int:
    """How many hosts one item ('r[1-2]-n[01-04]') names, computed without expanding it."""
    total = 1
    for body in re.findall(r"\[([^\]]*)\]", item):
        total *= sum(int(hi) - int(lo) + 1 for lo, hi in _range_parts(body))
    return total


def _hosts(text: str) -> Iterator[str]:
    for item in (p.strip() for p in _split_top_level(text)):
        match = re.search(r"\[([^\]]*)\]", item)
        if not item:
            continue
        if not match:
            yield item
            continue
        head, tail = item[:match.start()], item[match.end():]
        for middle in _range_items(match.group(1)):
            yield from _hosts(head + middle + tail)


def expand_nodelist(text: str, limit: int = limits.MAX_NODELIST_HOSTS) -> List[str]:
    """Slurm's compact host list: 'gpu[01-04,07]', 'a[1-2],b3', 'r[1-2]-n[1-2]' -> host names (at most
    `limit`; the wiring only needs the first). ValueError when it is not a host list, names no
    host, or names more than MAX_NODELIST_HOSTS: the count is computed before anything is
    expanded (a bound on the expansion, so 'gpu[0-999999999]' ends at once)."""
    if len(text or "") > limits.MAX_NODELIST_CHARS:
        raise ValueError(f"longer than {limits.MAX_NODELIST_CHARS} characters")
    if not (text or "").strip():
        return []  # no list at all (the variable is empty)
    items = [p.strip() for p in _split_top_level(text or "") if p.strip()]
    total = 0
    for item in items:
        total += _count(item)
        if total > limits.MAX_NODELIST_HOSTS:
            raise ValueError(f"it names more than {limits.MAX_NODELIST_HOSTS} hosts (the bound on a host list)")
    if total == 0:
        raise ValueError("it names no host")
    return list(itertools.islice(_hosts(text or ""), limit))


def _scheduler_values(environ: Mapping[str, str], settings: Settings) -> Tuple[str, dict]:
    """(scheduler, {KIMI_* name: value}) from the declared LWS_* / SLURM_* variables."""
    ext = read_external(environ)
    if ext.get("LWS_LEADER_ADDRESS"):
        return "LeaderWorkerSet", {kimi: str(ext[lws]) for lws, kimi in LWS if lws in ext}
    nodes = ext.get("SLURM_NNODES", ext.get("SLURM_JOB_NUM_NODES"))
    if nodes is not None and "SLURM_NODEID" in ext:
        values = {"KIMI_NODES": str(nodes), "KIMI_NODE_RANK": str(ext["SLURM_NODEID"])}
        name = "SLURM_JOB_NODELIST" if ext.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
        try:
            hosts = expand_nodelist(ext[name], limit=1) if ext.get(name) else []  # absent: no head from it
        except ValueError as exc:
            if settings.head_addr:
                hosts = []  # not needed: the head is set
            else:
                raise KimiError(INVALID_VALUE, f"{name}={(ext.get(name) or '')[:80]!r} is not a Slurm host list "
                                f"({exc}), so the head node is unknown: set KIMI_HEAD_ADDR to rank 0's "
                                "address, e.g. KIMI_HEAD_ADDR=10.0.0.1, or give a host list such as gpu[01-04].") from None
        if hosts:
            values["KIMI_HEAD_ADDR"] = hosts[0]
        return "Slurm", values
    return "", {}


# ---------------------------------------------------------------- interface


def _routes(proc_root: str) -> List[Tuple[str, int, int]]:
    """(interface, destination, mask) of /proc/net/route, as integers in address order."""
    routes = []
    try:
        lines = read_text_capped(f"{proc_root.rstrip('/')}/net/route", limits.MAX_NODE_FILE_BYTES).splitlines()[1:]
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            dest, mask = (struct.unpack("<I", bytes.fromhex(f.zfill(8)))[0] for f in (fields[1], fields[7]))
        except ValueError:
            continue
        routes.append((fields[0], dest, mask))
    return routes


def default_route_iface(proc_root: str = "/proc") -> Optional[str]:
    for iface, dest, mask in _routes(proc_root):
        if dest == 0 and mask == 0:
            return iface
    return None


def iface_for(addr: str, proc_root: str = "/proc") -> Optional[str]:
    """The interface of the most specific route that carries `addr` (an IPv4 address or a name)."""
    try:
        ip = int(ipaddress.IPv4Address(addr))
    except ValueError:
        import socket  # noqa: PLC0415 - only for a name to look up: the wiring of a plain start imports no socket

        try:
            found = [a[4][0] for a in resolve(addr, 0, limits.DNS_DEADLINE_S) if a[0] == socket.AF_INET]
            ip = int(ipaddress.IPv4Address(found[0] if found else ""))
        except (OSError, ValueError):
            return None
    best = None
    for iface, dest, mask in _routes(proc_root):
        if ip & mask == dest and (best is None or mask > best[1]):
            best = (iface, mask)
    return best[0] if best else None


def resolve_iface(head_addr: Optional[str], proc_root: str = "/proc") -> Tuple[Optional[str], str]:
    iface = default_route_iface(proc_root)
    if iface:
        return iface, "the default route's interface"
    if head_addr:
        iface = iface_for(head_addr, proc_root)
        if iface:
            return iface, f"the interface that carries the route to {head_addr}"
    return None, "no default route" + (f" and no route to {head_addr}" if head_addr else "")


# ---------------------------------------------------------------- wiring


def _in_cluster(settings: Settings) -> bool:
    return settings.nodes > 1 or bool(settings.prefill_addrs or settings.decode_addrs)


def wire(environ: Mapping[str, str], proc_root: str = "/proc") -> Wiring:
    """The scheduler fills what no source of the settings sets: a value in the environment or in
    the KIMI_CONFIG file wins over LWS_* / SLURM_* (defaults < scheduler < file < environment)."""
    env = dict(environ)
    given = read_settings(environ)
    source, values = _scheduler_values(environ, given)
    decisions = []
    for key, value in values.items():
        name = BY_ENV[key].name
        if given.is_set(name) and given.values[name] is not None:
            where = ORIGIN_WORDS.get(given.origin[name], "as set")
            decisions.append(f"{key}={given.values[name]} {where} ({source} gives {value})")
        else:
            env[key] = value
            decisions.append(f"{key}={value} from {source}")
    filled = read_settings(env)
    chosen: tuple = ()
    iface = (filled.iface or "").strip()
    if iface.lower() == "auto" or (not iface and _in_cluster(filled)):
        found, how = resolve_iface(filled.head_addr, proc_root)
        if found:
            env["KIMI_IFACE"] = found
            chosen = (found, how)
            decisions.append(f"KIMI_IFACE={found}: {how}")
        else:
            env.pop("KIMI_IFACE", None)
            decisions.append(f"KIMI_IFACE not found ({how}): set KIMI_IFACE to the interface between the nodes")
    return Wiring(env, source, tuple(decisions), chosen)
