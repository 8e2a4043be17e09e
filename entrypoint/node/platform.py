"""The cloud container platform this container runs on, and what its contract sets.

A platform is chosen by KIMI_PLATFORM, or detected from its own start: a container argument it
passes (SageMaker's `serve`, consumed here and never given to vLLM) or a variable only it sets.
Its contract (recipes/platforms.yaml) then fills KIMI_* settings: the port and bind address it
sends traffic to, the model it names or mounts, vLLM flags from its variables, cluster wiring.
An explicit KIMI_* setting wins over a platform default; one that differs from what the platform
requires (its port, its bind address) is a conflict (exit 2). Routes the platform will call are
checked against the routes the server answers. `apply_platform` returns the environment the
launch is built from and one line per decision (for the start-up log, doctor and explain).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from entrypoint.core.base import errors as E, limits
from entrypoint.core.base.errors import KimiError
from entrypoint.core.base.files import read_capped, write_file
from entrypoint.core.compose.settings import BY_NAME, ORIGIN_WORDS, read_settings
from entrypoint.core.data.platforms import load_platforms, platform as platform_data
from entrypoint.core.vllm.mask import mask_argv
from entrypoint.core.vllm.vllm_cli import refusal, refused_dests, secret_spec

NONE = "none"
CHECKPOINT_MARKER = "config.json"  # a Hugging Face checkpoint directory has it


def state_file() -> Path:
    """Where the container's start leaves its launch for `kimi-serve healthcheck` (which gets no
    container arguments): the temporary directory (tempfile is imported here, not by `print`)."""
    import tempfile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    return Path(tempfile.gettempdir()) / "kimi-serve-launch.json"


@dataclass(frozen=True)
class PlatformWiring:
    environ: dict  # the input environment with the platform's values filled in
    args: tuple  # the container arguments left for vLLM
    platform: str  # platform id, or "" for none
    display_name: str
    reason: str  # why this platform (or why none)
    decisions: tuple  # one line per value filled in or checked

    def as_dict(self) -> dict:
        return {"platform": self.platform or None, "name": self.display_name or None, "reason": self.reason,
                "decisions": list(self.decisions)}


def _set(environ: Mapping[str, str], name: str) -> Optional[str]:
    value = environ.get(name)
    return value if value not in (None, "") else None


def detect(environ: Mapping[str, str], args: tuple) -> Tuple[str, str]:
    """(platform id or "", reason). KIMI_PLATFORM from any source of the settings (the
    environment, else the KIMI_CONFIG file) comes first."""
    given = read_settings(environ)
    explicit = (given.platform or "").strip().lower()
    where = "KIMI_PLATFORM" if given.origin["platform"] == "env" else f"platform {ORIGIN_WORDS.get(given.origin['platform'], ORIGIN_WORDS['file'])}"
    if explicit == NONE:
        return "", f"{where}=none"
    if explicit:
        platform_data(explicit)  # unknown id: a clear error
        return explicit, f"{where}={explicit}"
    data = load_platforms()
    for pid, found in data.platforms.items():
        if args and args[0] in found.detect.args:
            return pid, f"the container argument `{args[0]}`"
    for pid, found in data.platforms.items():
        seen = [name for name in found.detect.env if _set(environ, name)]
        if seen:
            return pid, f"{seen[0]} is set"
    return "", "no platform detected (no KIMI_PLATFORM, no platform argument or variable)"


def checkpoint_dir(path: str) -> Optional[str]:
    """`path` if it holds a checkpoint, or its one subdirectory that does (a registered folder)."""
    root = Path(path)
    try:
        if (root / CHECKPOINT_MARKER).is_file():
            return str(root)
        subdirs = [p for p in root.iterdir() if p.is_dir() and (p / CHECKPOINT_MARKER).is_file()]
    except OSError:
        return None
    return str(subdirs[0]) if len(subdirs) == 1 else None


class _Apply:
    def __init__(self, environ: Mapping[str, str], pid: str):
        self.env = dict(environ)
        self.settings = read_settings(environ)
        self.pid, self.found = pid, platform_data(pid)
        self.decisions: List[str] = []

    def fill(self, setting: str, value: str, origin: str, binding: str) -> None:
        kimi = BY_NAME[setting].env
        if self.settings.is_set(setting) and self.settings.values[setting] is not None:
            mine = str(self.settings.values[setting])
            if binding == "contract" and mine != value:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"{kimi}={mine}, but {self.found.display_name} requires "
                                f"{value} ({origin}). Unset {kimi} (the platform's value applies), or set "
                                "KIMI_PLATFORM=none if this is not that platform.")
            self.decisions.append(f"{kimi}={mine} as set ({self.pid} would give {value} from {origin})")
            return
        self.env[kimi] = value
        self.decisions.append(f"{kimi}={value} from {origin}")

    def contract(self) -> None:
        for setting, binding in self.found.contract.items():
            named = [(v, self.env[v]) for v in binding.env if _set(self.env, v)]
            if named:
                self.fill(setting, named[0][1], named[0][0], binding.binding)
            elif binding.value is not None:
                self.fill(setting, binding.value, f"{self.pid}'s contract", binding.binding)
        if self.settings.values["model"] is None and not _set(self.env, BY_NAME["model"].env):
            self.model_dir()

    def model_dir(self) -> None:
        where = self.found.model_dir
        origin = where
        if self.found.model_dir_env:
            where = _set(self.env, self.found.model_dir_env)
            origin = f"{self.found.model_dir_env}={where}"
        if not where:
            return
        found = checkpoint_dir(where)
        if found:
            self.fill("model", found, f"the model artifacts at {origin}", "default")
        else:
            self.decisions.append(f"no checkpoint ({CHECKPOINT_MARKER}) in {origin}: loading the configured model")

    def routes(self) -> None:
        served = load_platforms().served_routes
        for kind, route in self.found.routes.items():
            if not route.env:
                self.decisions.append(f"{kind} route {route.path} (the platform's)")
                continue
            given = _set(self.env, route.env)
            if given is None:
                continue
            if given not in served:
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"{route.env}={given}: {self.found.display_name} will "
                                f"send {kind} requests there, but the server answers only {', '.join(served)}. "
                                f"Create the model with the {kind} route {route.path} (kimi-serve plan --format "
                                f"{self.pid} renders it).")
            self.decisions.append(f"{kind} route {given} ({route.env})")

    def flags(self) -> None:
        prefix = self.found.flag_prefix
        if not prefix:
            return
        flags: List[str] = []
        for name in sorted(k for k in self.env if k.startswith(prefix) and k[len(prefix):]):
            bare = name[len(prefix):]
            if bare in self.found.flag_prefix_skip:
                continue
            flag, value = "--" + bare.lower().replace("_", "-"), self.env[name]
            opt, _ = secret_spec().lookup(flag)  # every spelling vLLM accepts: `SM_VLLM_POR` is --port
            if opt is not None and opt.dest in refused_dests():
                raise KimiError(E.UNSUPPORTED_COMBINATION, f"{name} would set {opt.name}, which draws the "
                                f"deployment and is not a vLLM argument's{refusal(opt.dest, name, 'from the environment')}")
            if value.strip().lower() == "false":
                continue
            new = [flag] if value.strip().lower() in ("", "true") else [flag, value]
            flags += new
            self.decisions.append(f"{shlex.join(mask_argv(new))} from {name}")
        if flags:
            mine = self.settings.values.get("extra_args") or ""
            self.env[BY_NAME["extra_args"].env] = " ".join([shlex.join(flags), mine]).strip()

    def cluster(self) -> None:
        c = self.found.cluster
        if c is None:
            return
        for env, setting in ((c.nodes_env, "nodes"), (c.rank_env, "node_rank")):
            if _set(self.env, env):
                self.fill(setting, self.env[env].strip(), env, "default")
        ips = (_set(self.env, c.head_list_env) or "").split()
        if ips:
            self.fill("head_addr", ips[0], f"{c.head_list_env} (rank 0)", "default")


def apply_platform(environ: Mapping[str, str], args: tuple = ()) -> PlatformWiring:
    args = tuple(args)
    pid, reason = detect(environ, args)
    if not pid:
        return PlatformWiring(dict(environ), args, "", "", reason, ())
    work = _Apply(environ, pid)
    if args and args[0] in work.found.detect.args:
        work.decisions.append(f"consumed the container argument `{args[0]}` (the platform's start command)")
        args = args[1:]
    work.env[BY_NAME["platform"].env] = pid
    work.contract()
    work.routes()
    work.flags()
    work.cluster()
    return PlatformWiring(work.env, args, pid, work.found.display_name, reason, tuple(work.decisions))


def check_contract(wiring: PlatformWiring, plan, spec) -> None:
    """The port and bind address the platform sends traffic to (`binding: contract`) are what each
    vLLM process really gets, after the vLLM args (which come last and win): else exit 2."""
    found = platform_data(wiring.platform)
    settled = read_settings(wiring.environ)  # the environment, else the KIMI_CONFIG file
    for proc in plan.processes:
        if not proc.is_engine:
            continue
        given = proc.vllm.found
        for setting, binding in found.contract.items():
            want = settled.values.get(setting)
            have = proc.port if setting == "port" else given.get(setting)
            if binding.binding != "contract" or not want or have is None or str(have) == str(want):
                continue
            raise KimiError(E.UNSUPPORTED_COMBINATION, f"the vLLM arguments give --{setting.replace('_', '-')} "
                            f"{have}, but {found.display_name} requires {want} ({BY_NAME[setting].env}, its "
                            "contract): remove it from KIMI_EXTRA_ARGS and the container arguments, or set "
                            "KIMI_PLATFORM=none if this is not that platform.")


def record_launch(proc, wiring: PlatformWiring) -> None:
    """Leave the port this container serves on for `kimi-serve healthcheck` (best effort)."""
    try:
        write_file(state_file(), json.dumps({"pid": os.getpid(), "port": proc.port, "role": proc.role,
                                           "platform": wiring.platform}))  # the one writer: never through a link
    except OSError:
        pass


def recorded_port() -> Optional[int]:
    """The port the container's start recorded, when this process runs in that container."""
    try:
        state = json.loads(read_capped(state_file(), limits.MAX_NODE_FILE_BYTES))
        return int(state["port"]) if state.get("port") and state.get("pid") == 1 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
