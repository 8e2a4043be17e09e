"""A deployment's own processes, run for real on this machine: every process of the plan started
exactly as its container starts, as the image's entrypoint (`kimi-serve`, installed beside vLLM's
CPU build as the image installs it beside the base's vLLM) given that container's settings: the
ones every container of the rendering gets (render/deployment.py `container_env`), plus what the
cluster runtime gives each node (KIMI_NODE_RANK, KIMI_HEAD_ADDR) and what its host gives it (its
address: KIMI_HOST / KIMI_ROUTER_HOST to bind, KIMI_NODE_ADDR to advertise).

"Hosts" are loopback addresses (127.0.1.1, 127.0.1.2, ...): each node binds its own, so two nodes
on one machine never share a port, as two hosts would not. No test writes a `vllm serve` argv: the
entrypoint composes and execs the plan's.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from entrypoint.app.launch import build
from entrypoint.core.compose.plan import Kind, Port, Process
from entrypoint.render.deployment import container_env

READY_WITHIN_S = 900  # 37-107 s measured per shape on 2 busy cores (real-shapes.md); room for a loaded CI
STOP_WITHIN_S = 120  # a drain with nothing running ends at once; the router and helpers exit in seconds
HOSTS = tuple(f"127.0.1.{i}" for i in range(1, 30))  # one loopback address per "host"


def host(i: int) -> str:
    return HOSTS[i]


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: no orphan after a killed run


def _rss_kb(pid: int) -> int:
    """Resident memory of a process and its descendants (kB)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo += [int(c) for c in children]
    return total


@dataclass
class Node:
    """One container of the shape: its process of the plan, the host it stands on, its entrypoint."""

    proc: Process
    addr: str
    env: Dict[str, str]
    log: Path
    name: str
    popen: Optional[subprocess.Popen] = None

    def url(self, port: Optional[int] = None) -> str:
        return f"http://{self.addr}:{port or self.proc.ports[Port.HTTP]}"

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Shape:
    """The processes of the plan that `settings` make (the user's KIMI_* settings, as a rendering's
    containers get them), one entrypoint each; `place(proc)` says which host a process stands on."""

    settings: Dict[str, str]
    venv: Path  # vLLM's CPU build with kimi-serve installed beside it (the image's Python)
    logs: Path
    place: Callable[[Process], str]
    extra_env: Dict[str, str] = field(default_factory=dict)  # the host's own (HF_HUB_OFFLINE, a test plugin)
    nodes: List[Node] = field(default_factory=list)
    started_s: float = 0.0
    peak_rss_mb: float = 0.0

    def __post_init__(self):
        self.launch = build(self.settings)  # the plan every container resolves for itself
        self.plan = self.launch.plan
        # A fleet's copies (KIMI_REPLICAS, core/compose/fleet.py) are the same plan on each replica address
        copies = (self.launch.settings.replica_addrs if self.launch.fleet is not None and
                  self.launch.selection.prefill is None else ())
        for proc in self.plan.processes:
            for copy, addr in enumerate(copies if copies and proc.is_engine else (self.place(proc),)):
                env = {**container_env(self.launch, proc), "KIMI_NODE_RANK": str(proc.rank)}
                if proc.kind is Kind.ROUTER:
                    env["KIMI_ROUTER_HOST"] = addr
                else:
                    env.update(KIMI_HOST=addr, KIMI_NODE_ADDR=addr)
                if "KIMI_HEAD_ADDR" in self.settings:
                    env["KIMI_HEAD_ADDR"] = self.settings["KIMI_HEAD_ADDR"]
                name = f"{proc.role}-{proc.rank}" + (f"-copy{copy}" if copies and proc.is_engine else "")
                self.nodes.append(Node(proc, addr, env, self.logs / f"{name}.log", name))

    @property
    def front(self) -> Node:
        front = self.plan.front
        return next(n for n in self.nodes if n.proc is front)

    def engines(self) -> List[Node]:
        return [n for n in self.nodes if n.proc.is_engine]

    def start(self) -> float:
        """Start every container's entrypoint; wait until the front and every engine with an API
        answer /health. Seconds from the first start to ready."""
        self.logs.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        for node in self.nodes:
            self.start_node(node)
        waiting = [n for n in self.nodes if Port.HTTP in n.proc.ports]
        while waiting:
            if time.monotonic() - t0 > READY_WITHIN_S:
                raise RuntimeError(f"not ready within {READY_WITHIN_S} s: {[n.name for n in waiting]}\n{self.tails()}")
            for node in list(self.nodes):
                if node.popen.poll() is not None:
                    raise RuntimeError(f"{node.name} exited with {node.popen.returncode}\n{self.tails()}")
            waiting = [n for n in waiting if not healthy(n.url())]
            self.peak_rss_mb = max(self.peak_rss_mb, self.rss_mb())
            time.sleep(1)
        self.started_s = time.monotonic() - t0
        return self.started_s

    def start_node(self, node: Node, append: bool = False) -> None:
        """Start one container's entrypoint (again, with `append`: its log kept), as its runtime does."""
        base = {"PATH": f"{self.venv / 'bin'}:{os.environ.get('PATH', '')}", "HOME": os.environ.get("HOME", "/root"),
                "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1",
                **host_data(), **self.extra_env}
        cwd = self.logs / node.name
        cwd.mkdir(exist_ok=True)
        scratch = self.scratch(node)  # the container's own /tmp (the renderings mount a fresh one)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        out = node.log.open("ab" if append else "wb")
        node.popen = subprocess.Popen([str(self.venv / "bin" / "kimi-serve")],
                                      env={**base, "TMPDIR": str(scratch), **node.env}, cwd=cwd,
                                      stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True, preexec_fn=_die_with_parent)
        out.close()

    def scratch(self, node: Node) -> Path:
        return self.logs / node.name / "tmp"

    def in_container(self, node: Node, args: List[str], timeout: float) -> subprocess.CompletedProcess:
        """`kimi-serve ARGS` run inside `node`'s container (as a preStop hook or a probe runs): its
        environment and its /tmp."""
        env = {"PATH": f"{self.venv / 'bin'}:{os.environ.get('PATH', '')}", "HOME": os.environ.get("HOME", "/root"),
               "TMPDIR": str(self.scratch(node)), **host_data(), **self.extra_env, **node.env}
        return subprocess.run([str(self.venv / "bin" / "kimi-serve"), *args], env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def rss_mb(self) -> float:
        return sum(_rss_kb(n.popen.pid) for n in self.nodes if n.popen and n.popen.poll() is None) / 1024

    def tails(self, lines: int = 25) -> str:
        return "\n".join(f"--- {n.name} ({n.addr}) ---\n{n.tail(lines)}" for n in self.nodes)

    def stop(self) -> Dict[str, Optional[int]]:
        """SIGTERM every container (as a runtime stops them), front first; each one's exit code
        (None: killed after STOP_WITHIN_S)."""
        codes: Dict[str, Optional[int]] = {}
        for node in sorted(self.nodes, key=lambda n: n is not self.front):
            if node.popen and node.popen.poll() is None:
                os.killpg(node.popen.pid, signal.SIGTERM)
        end = time.monotonic() + STOP_WITHIN_S
        for node in self.nodes:
            if node.popen is None:
                continue
            try:
                codes[node.name] = node.popen.wait(max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(node.popen.pid, signal.SIGKILL)
                node.popen.wait(30)
                codes[node.name] = None
        return codes

    def kill(self) -> None:
        for node in self.nodes:
            if node.popen and node.popen.poll() is None:
                try:
                    os.killpg(node.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def host_data() -> Dict[str, str]:
    """KIMI_RECIPES_DIR where the test run sets it: the recipe data every container reads (an image
    built with that data; benchmarks/faults.py compares router settings this way)."""
    return {k: os.environ[k] for k in ("KIMI_RECIPES_DIR",) if os.environ.get(k)}


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=3) as answer:  # noqa: S310 - loopback
            return answer.status == 200
    except (OSError, ValueError):
        return False


def post(url: str, body: dict, timeout: float = 300, tries: int = 2) -> dict:
    """POST JSON, the answer's JSON; one retry of a 5xx (NIXL's handshake has a hard-coded 5 s
    receive timeout that a loaded machine misses about 1 time in 8: real-shapes.md). A router's 503
    "No available workers" is waited out for up to 20 s more: on two cores shared by four test lanes an
    engine's /health can miss the router's 3 s timeout twice (recipes/fleet.yaml router_fault_args),
    and the router takes the engine back after two good checks 5 s apart (seen once in a quiet full
    run, 2026-12-05: the PD router's decode engine, between two answered requests)."""
    data = json.dumps(body).encode()
    attempt, readmit_by = 0, time.monotonic() + 20
    while True:
        request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - loopback
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            text = exc.read()[:2000]
            said = text.lower()  # vllm-router's: "No available workers", "no healthy decode workers"
            if exc.code == 503 and (b"no available" in said or b"no healthy" in said) and time.monotonic() < readmit_by:
                time.sleep(2)
                continue
            attempt += 1
            if exc.code < 500 or attempt == tries:
                raise AssertionError(f"{url}: HTTP {exc.code}: {text!r}") from None
            time.sleep(2)


def metric(url: str, name: str) -> float:
    """The sum of a Prometheus counter's samples whose line starts with `name` (labels included)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
