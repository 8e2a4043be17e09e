"""The container's start (`kimi-serve` with no command, or only vLLM arguments): wire the
platform and the cluster, compose the launch, log its decisions, fetch the weights when
KIMI_DOWNLOAD asks, run the preflight, announce the process, fork the watches that outlive the
exec beside it (a lost peer node, the start-up budget), then exec it."""

from __future__ import annotations

from typing import Mapping, Optional

from entrypoint.app.download import fetch_weights
from entrypoint.app.healthcheck import health_target_of
from entrypoint.app.launch import load_launch, wire_platform
from entrypoint.core.compose.plan import Kind, Process
from entrypoint.core.vllm.mask import mask_argv, mask_env
from entrypoint.node import peers, startup
from entrypoint.node.cluster import wire
from entrypoint.node.exec import as_applied, exec_process, split_env
from entrypoint.node.logs import Entry, log_decisions
from entrypoint.node.platform import record_launch
from entrypoint.node.preflight import preflight_launch
from entrypoint.render.deployment import health
from entrypoint.render.shell import render_process


def start(user_args, termination_log: str = "") -> None:
    """The container's start: wire, compose, log, preflight, announce, then exec (never returns
    unless KIMI_DRY_RUN=1)."""
    platform = wire_platform(tuple(user_args))
    environ = platform.environ
    wiring = wire(environ)
    launch = load_launch(tuple(user_args), wiring=wiring, platform=platform)
    proc = launch.this_process()
    compiled = launch.compile_caches(proc)  # keyed by the process's kind, GPUs and layout, which preflight keeps
    log = log_decisions(launch, environ, wiring=wiring, compiled=compiled)
    for entry in platform_entries(platform):
        log.emit(entry)
    if not proc.is_engine and proc.kind is not Kind.PRELOAD and launch.settings.extra_args:
        log.warning("settings", f"KIMI_EXTRA_ARGS holds vLLM arguments; the {proc.role} takes none and starts "
                    "without them")
    # A dry run only prints: preflight problems are reported, never a reason to stop (exit 0).
    mode = "warn" if launch.settings.dry_run and launch.settings.preflight == "on" else None
    if launch.settings.download and not launch.settings.dry_run:
        fetch_weights(launch, environ, log)
    proc, preflight_notes = preflight_launch(launch, proc, environ, mode=mode)
    for entry in preflight_notes:
        log.emit(entry)
    announce(proc, environ, log)
    if launch.settings.dry_run:
        log.info("launch", "KIMI_DRY_RUN=1, not starting it")
        return
    record_launch(proc, platform)
    peers.start(proc, launch.settings, launch.catalog.serving.peer_watch, environ)  # a lost node stops this one
    keep_budget(launch, proc, termination_log)  # a load past its budget stops this one, saying so
    exec_process(proc, environ, launch.settings.cache_dir, compiled)


def keep_budget(launch, proc: Process, termination_log: str = "") -> Optional[int]:
    """Fork the start-up watch (node/startup.py) of an engine that serves HTTP, or of the weight
    cache's launcher: the launch's start-up budget (render/deployment.health), told in one line
    when a load outruns it. The watcher's PID, or None where nothing is watched."""
    if not (proc.is_engine or proc.kind is Kind.PRELOAD):
        return None
    target = health_target_of(launch, proc)
    if target.url is None:  # a headless rank: its group's head is watched
        return None
    budget = health(launch).start_period_s
    setting = launch.load.setting if launch.load is not None else "recipe"
    basis = ("recipes/serving.yaml's start period" if setting == "recipe" else
             "the time the checkpoint's share takes with its loader, recipes/loaders.yaml")
    message = (f"the server ({proc.role}) did not answer healthy at {target.url} within its start-up budget of {budget} s "
               f"(KIMI_LOAD_FORMAT={setting}: {basis}), so it is stopped. The log above shows how far the load got, "
               "and `kimi-serve doctor` this node's expected load time: put the weights on faster storage, or set "
               "KIMI_LOAD_FORMAT=auto (the fastest loader here).")
    return startup.start(target.url, budget, launch.catalog.serving.stop.margin_s, message, termination_log)


def announce(proc: Process, environ: Mapping[str, str], log) -> None:
    """Log the variables the environment keeps over the recipe's, then the process as it will be
    exec'd (argv and applied env, secrets masked)."""
    _, kept = split_env(proc.env, environ)
    for key, value in mask_env(kept).items():
        log.info("env", f"keeping {key}={value} as set in the environment (the recipe would set "
                 f"{mask_env({key: proc.env[key]})[key]})", name=key)
    applied = as_applied(proc, environ)
    text = render_process(applied) if log.fmt == "text" else " ".join(mask_argv(applied.argv))
    log.info("launch", f"launching {proc.role} (rank {proc.rank}):" + ("\n" if log.fmt == "text" else " ") + text,
             role=proc.role, rank=proc.rank, argv=mask_argv(applied.argv), env=mask_env(applied.env))


def platform_entries(platform) -> list:
    """The start log's lines for the cloud platform's contract: which platform, why, and each
    decision it made; without a platform, the peers a Kubernetes pod named."""
    if not platform.platform:  # a Kubernetes pod's peers, named at its start (app/launch.py with_peers)
        return [Entry("cluster", f"cluster: {line}") for line in platform.decisions]
    head = Entry("platform", f"platform {platform.platform} ({platform.display_name}), chosen by {platform.reason}",
                 "info", {"platform": platform.platform})
    return [head] + [Entry("platform", f"platform: {line}") for line in platform.decisions]
