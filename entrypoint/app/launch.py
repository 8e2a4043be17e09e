"""The one composition root: environment + container args + the node -> the launch.

Every command, the exec path and every renderer get their launch from here; nothing else ties
the pure core (entrypoint.core) to its inputs (the environment, cluster wiring, detection).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from entrypoint.core import kv
from entrypoint.core.kv import KvChoice
from entrypoint.core.plan import Kind, Plan, Process
from entrypoint.core.recipe import Catalog, load_catalog, with_recipe
from entrypoint.core.resolve import resolve, this_process
from entrypoint.core.select import Selection, select
from entrypoint.core.settings import BY_NAME, Settings, read_settings


@dataclass(frozen=True)
class Launch:
    settings: Settings
    catalog: Catalog
    selection: Selection
    plan: Plan
    platform: Any = None  # the cloud platform's wiring (entrypoint.node.platform.PlatformWiring)
    kv: Optional[KvChoice] = None  # KIMI_KV_OFFLOAD's choice (entrypoint.core.kv), None without one
    load: Any = None  # what KIMI_LOAD_FORMAT made of it (entrypoint.core.loading.Decision)
    fleet: Any = None  # KIMI_REPLICAS' fleet (entrypoint.core.fleet.FleetChoice), None for one copy

    @property
    def name(self) -> str:
        """The rendered deployment's name (KIMI_NAME, else the recipe's deployment_name)."""
        return self.selection.name

    def compile_caches(self, proc: Process):
        """Where `proc`'s compile caches go (entrypoint.core.caches), None for a process without GPUs."""
        from entrypoint.core.caches import compile_caches

        s = self.settings
        stack = f"cu{s.image_cuda}" if s.image_cuda else f"rocm{s.image_rocm}" if s.image_rocm else ""
        return compile_caches(self.catalog, self.selection, self.plan, proc, stack)

    def this_process(self) -> Process:
        from entrypoint.core import fleet

        if self.fleet is not None and self.selection.role == fleet.ROLE:  # the fleet's router (core/fleet.py)
            proc = fleet.router_of(self.plan)
            fleet.check_start(proc)
        elif self.kv:
            proc = kv.this_process(self.plan, self.selection, self.kv)
        else:
            proc = this_process(self.plan, self.selection)
        if not proc.is_engine and self.settings.user_args:
            from entrypoint.core.errors import INVALID_VALUE, KimiError

            raise KimiError(INVALID_VALUE, f"KIMI_ROLE={proc.role} runs {proc.program[0]}, which takes no vLLM "
                            f"arguments, but the container was given {len(self.settings.user_args)}: give them to "
                            "the engines' containers (or KIMI_EXTRA_ARGS, which every vLLM engine of the deployment "
                            f"gets) and start the {proc.role} without arguments.")
        return proc


def compose(settings: Settings, detected_hardware: Optional[str] = None, catalog: Optional[Catalog] = None,
            detected_vllm: Optional[str] = None, storage=None) -> Launch:
    """The pure part: settings -> selection (once) -> plan (of the recipe KIMI_RECIPE names). `storage`:
    the node's weights volume (entrypoint.core.loading.StorageFacts), for KIMI_LOAD_FORMAT other than
    `recipe`; or a function of the selected model that probes it (the node's, at a start)."""
    from entrypoint.core import placement
    from entrypoint.core.vllm_cli import spec_for

    catalog = with_recipe(catalog or load_catalog(), settings.recipe)
    selection = select(settings, catalog, detected_hardware, detected_vllm)
    spec = spec_for(selection.vllm_version)
    placement.check_addresses(settings)
    placement.check_user_args(selection.user)
    decision = None
    if settings.load_format != "recipe":
        from entrypoint.core import loading

        if callable(storage):
            storage = storage(selection.model)
        decision = loading.decide(settings.load_format, selection.vllm_version, selection.user_args, spec,
                                  "://" in selection.model, storage, brand=catalog.hardware[selection.hardware].brand)
    choice = kv.choose(settings, hostname=socket.gethostname())
    from entrypoint.core import fleet  # KIMI_REPLICAS: the copies behind one router (docs/fleet.md)

    fleet_choice = fleet.choose(settings)
    plan = resolve(selection, catalog, kv=choice, load=decision, fleet=fleet_choice)  # the one composition (docs/composition.md)
    placement.check_role(settings, plan)
    placement.check_node_fit(plan, catalog.hardware[plan.hardware].gpu_count, settings)
    return Launch(settings=settings, catalog=catalog, selection=selection, plan=plan, load=decision, kv=choice,
                  fleet=fleet_choice)


def build(environ: Mapping[str, str], user_args: tuple = (), detected_hardware: Optional[str] = None,
          catalog: Optional[Catalog] = None) -> Launch:
    """The launch of an already wired environment (no detection, no cluster wiring)."""
    return compose(read_settings(environ, user_args), detected_hardware, catalog)


def platform_launch(environ: Mapping[str, str], args: tuple = ()) -> Launch:
    """The launch of a container described by its variables alone (a `plan --batch` line, a cloud
    rendering's container): the platform's contract applied as that container would start, never
    this machine's network or GPUs."""
    platform = wire_platform(args, environ)
    return _checked(replace(build(platform.environ, platform.args), platform=platform))


def _checked(launch: Launch) -> Launch:
    """A platform's contract holds for the launch: the vLLM args may not move the port or the
    bind address the platform sends traffic to."""
    if launch.platform is not None and launch.platform.platform:
        from entrypoint.core.vllm_cli import spec_for
        from entrypoint.node.platform import check_contract

        check_contract(launch.platform, launch.plan, spec_for(launch.selection.vllm_version))
    return launch


def wants_detection(settings: Settings) -> bool:
    return (settings.hardware or "").lower() == "auto"


def choices(environ: Mapping[str, str]):
    """The settings and selection a deployment is made of, before any address is known."""
    settings = read_settings(environ)
    return settings, select(settings, with_recipe(load_catalog(), settings.recipe))


def detected_hardware(environ: Mapping[str, str]) -> Optional[str]:
    """The hardware id the node detection found, or None. Only asked when KIMI_HARDWARE=auto."""
    from entrypoint.node.detect import detect_hardware_id

    return detect_hardware_id(environ)


def wire_platform(user_args: tuple = (), environ: Optional[Mapping[str, str]] = None):
    """The cloud platform's contract applied to the environment and the container arguments."""
    from entrypoint.node.platform import apply_platform

    return apply_platform(os.environ if environ is None else environ, tuple(user_args))


def load_launch(user_args: tuple = (), environ: Optional[Mapping[str, str]] = None, wiring=None,
                platform=None) -> Launch:
    """The launch from the environment after the platform's contract and cluster wiring (LWS /
    Slurm / KIMI_IFACE=auto); pass `platform` / `wiring` when the caller has applied them already
    (it also logs the decisions)."""
    from entrypoint.node.cluster import wire

    if platform is None:
        platform = wire_platform(user_args, environ)
    if wiring is None:
        wiring = wire(platform.environ)
    settings = read_settings(wiring.environ, platform.args)
    detected = detected_hardware(wiring.environ) if wants_detection(settings) else None
    vllm = None
    if not settings.vllm_version:
        from entrypoint.node.detect import installed_vllm_version

        vllm = installed_vllm_version()
    def storage(model: str):  # the volume the weights are read from decides `auto`, and the budget
        return weights_storage(model, settings.cache_dir, wiring.environ, sample=False)

    return _checked(replace(compose(settings, detected, detected_vllm=vllm, storage=storage), platform=platform))


def weights_storage(model: str, cache_dir: str, environ: Mapping[str, str], sample: bool = True):
    """The weights' volume on this node: file system, GPUDirect Storage, a bounded read sample."""
    from entrypoint.core.loading import load_data
    from entrypoint.node.storage import probe

    return probe(model, cache_dir, environ, load_data(), sample=sample)


def deployment_launch(render_module, environ: Optional[Mapping[str, str]] = None) -> Launch:
    """The launch a renderer (compose, k8s) draws: the environment plus the addresses the
    deployment gives its own containers."""
    environ = os.environ if environ is None else environ
    return build(render_module.deployment_environ(environ, *choices(environ)))


def deployment_files(render_module, environ: Optional[Mapping[str, str]] = None) -> dict:
    """The files a renderer writes ({name: text}); a cloud platform's container is first started
    here (to its launch, not exec) as the platform will start it, so that a container the platform
    would see exit 2 is refused before anything is written."""
    launch = deployment_launch(render_module, environ)
    files = render_module.render(launch)
    refuse_written_secrets(files, os.environ if environ is None else environ)
    pid = getattr(render_module, "PID", None)
    if pid:
        from entrypoint.core.platforms import platform as platform_data
        from entrypoint.render.deployment import platform_env

        found = platform_data(pid)
        if any(b.binding == "contract" for b in found.contract.values()):  # one container per instance
            platform_launch(platform_env(launch, pid), tuple(found.detect.args[:1]))
    return files


def refuse_written_secrets(files: Mapping[str, str], environ: Mapping[str, str]) -> None:
    """A rendered file that would write a secret down (a URL's password, a credential option's
    value, a secret-named variable's value, a token read from a file) is refused for every format,
    on stdout as under --output: what is printed is what is deployed, and no secret sits in a
    manifest."""
    from entrypoint.core.errors import INVALID_VALUE, KimiError
    from entrypoint.core.mask import written_secret

    for name, text in files.items():
        where = written_secret(text, environ)
        if where:
            raise KimiError(INVALID_VALUE, f"{name} would write down a secret ({where}). Take the credentials "
                            "out of the setting and give them from a secret store: an s3:// or gs:// model's keys as "
                            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or the platform's identity), the API key as "
                            "VLLM_API_KEY, the hub token as HF_TOKEN_PATH's file (a Kubernetes Secret, the shell that "
                            "runs Compose).")


@dataclass(frozen=True)
class ServiceExpectations:
    url: str
    served_model_name: str
    features: frozenset
    chat: Any = None  # entrypoint.verify.checks.ChatFacts of the recipe


def _chat_facts(recipe) -> Any:
    from entrypoint.verify.checks import ChatFacts

    return ChatFacts.of(recipe)


def front_process(launch: Launch) -> Process:
    """The process a client of the deployment talks to: this container's when KIMI_ROLE names it
    (or the plan is one engine per node), else the router, else the first engine."""
    if launch.selection.role or (launch.kv is None and launch.selection.prefill is None):
        return launch.this_process()
    return launch.plan.find("router", 0) or launch.plan.first_engine


def service_expectations(environ: Optional[Mapping[str, str]] = None) -> ServiceExpectations:
    """What a client of this configuration should find: URL, served model name, features."""
    launch = load_launch((), environ)
    proc = front_process(launch)
    return ServiceExpectations(url=local_url(launch, proc), served_model_name=served_name(launch, proc),
                               features=frozenset(launch.plan.features), chat=_chat_facts(launch.catalog.recipe))


@dataclass(frozen=True)
class FleetTargets:
    """A fleet's addresses as a client reaches them (verify and bench --fleet): its router, each copy."""

    url: str  # the fleet's router
    replicas: tuple  # each copy's API root (KIMI_REPLICA_ADDRS at the engines' port)


def fleet_targets(environ: Optional[Mapping[str, str]] = None) -> FleetTargets:
    """The configured fleet's router and copies (core/fleet.py); a clear error without a fleet."""
    from entrypoint.core.errors import MISSING_SETTING, KimiError
    from entrypoint.core.fleet import replica_hosts, router_of
    from entrypoint.core.net import url_host

    launch = load_launch((), environ)
    router = router_of(launch.plan)
    if launch.fleet is None or router is None or not launch.fleet.addrs:
        raise KimiError(MISSING_SETTING, "--fleet checks the configured fleet's router and each copy: set "
                        "KIMI_REPLICA_ADDRS (one address per copy), or give --url (the router) and --replica URL "
                        "for each copy.")
    port = next(p.port for p in launch.plan.engines if p.serves_http)
    replicas = () if launch.selection.prefill is not None else tuple(  # a PD unit has no API of its own
        f"http://{url_host(h)}:{port}" for h in replica_hosts(launch.fleet))
    return FleetTargets(url=local_url(launch, router), replicas=replicas)


@dataclass(frozen=True)
class BenchTarget:
    deployment: Any  # entrypoint.core.bench.Deployment: recipe, hardware, variant, GPUs, TP
    url: str  # the service, as a client on this machine reaches it
    model: str  # what vLLM loads: the tokenizer's source
    trust_remote_code: bool
    cache_env: dict  # the launch's cache variables (HF_HOME ...), so the tokenizer comes from its cache
    engine: str = ""  # the engine whose facts these are (its role and rank)


def bench_target(environ: Optional[Mapping[str, str]] = None) -> BenchTarget:
    """What `bench` compares by and sends, from the configured launch's typed facts: the
    deployment's GPUs (every engine's, over every node and instance), its engines' TP."""
    from entrypoint.core.bench import Deployment
    from entrypoint.node.cache import effective as cache_env

    environ = os.environ if environ is None else environ
    launch = load_launch((), environ)
    plan = launch.plan
    proc = front_process(launch)
    engine = proc if proc.is_engine else plan.first_engine
    deployment = Deployment(recipe=launch.catalog.recipe.id, hardware=plan.hardware, variant=plan.variant,
                            gpus=plan.gpus, tensor_parallel=engine.vllm.tensor_parallel)
    cache = {k: v for k, v in cache_env(launch.settings.cache_dir, environ).items() if k != "HOME"}
    return BenchTarget(deployment, local_url(launch, proc), plan.tokenizer, engine.vllm.trust_remote_code, cache,
                       f"{engine.role} rank {engine.rank}")


def applied_process(user_args: tuple, environ: Mapping[str, str]) -> Process:
    """This container's process with only the env the project applies here (what `print` shows)."""
    from entrypoint.node.exec import as_applied

    return as_applied(load_launch(tuple(user_args), environ).this_process(), environ)


def local_url(launch: Launch, proc: Process, port: Optional[int] = None) -> str:
    """The URL of `proc`'s server as a client on its own machine reaches it (healthcheck, verify);
    `port` overrides the plan's (the port the start recorded)."""
    from entrypoint.core.net import client_url
    from entrypoint.core.plan import Kind

    if proc.kind is Kind.ROUTER:
        host = launch.settings.router_host
    else:
        host = (proc.vllm.host if proc.is_engine else None) or launch.settings.host
    return client_url(host, port or proc.port or 8000)


def served_name(launch: Launch, proc: Process) -> str:
    """The name the server answers to: the engine's effective --served-model-name (its first
    name), else the model argument; the deployment's engines' for any other process."""
    return (proc.served_name if proc.is_engine else None) or launch.plan.served_name


def announce(proc: Process, environ: Mapping[str, str], log) -> None:
    from entrypoint.core.mask import mask_argv, mask_env
    from entrypoint.node.exec import as_applied, split_env
    from entrypoint.render.shell import render_process

    _, kept = split_env(proc.env, environ)
    for key, value in mask_env(kept).items():
        log.info("env", f"keeping {key}={value} as set in the environment (the recipe would set "
                 f"{mask_env({key: proc.env[key]})[key]})", name=key)
    applied = as_applied(proc, environ)
    text = render_process(applied) if log.fmt == "text" else " ".join(mask_argv(applied.argv))
    log.info("launch", f"launching {proc.role} (rank {proc.rank}):" + ("\n" if log.fmt == "text" else " ") + text,
             role=proc.role, rank=proc.rank, argv=mask_argv(applied.argv), env=mask_env(applied.env))


def diagnose(environ: Mapping[str, str]) -> dict:
    """`kimi-serve doctor`'s report: detection, cluster wiring, the launch and every node check
    (whatever KIMI_PREFLIGHT says). A node with no hardware configured is checked as `auto`."""
    from entrypoint.core.errors import KimiError
    from entrypoint.node.cluster import wire
    from entrypoint.node.detect import detect_node
    from entrypoint.node.preflight import node_facts, run_checks

    try:
        settings = read_settings(environ)
        if not (settings.hardware or settings.image_hardware):
            environ = {**environ, BY_NAME["hardware"].env: "auto"}  # a bare node: check what it has
    except KimiError:
        pass  # reported below, as the launch's error
    detection = detect_node(environ)
    report = {"detection": detection.as_dict(), "platform": None, "cluster": {"source": "", "decisions": []},
              "launch": None, "checks": []}
    try:
        platform = wire_platform((), environ)
        report["platform"] = platform.as_dict()
        environ = platform.environ
        wiring = wire(environ)
        report["cluster"] = {"source": wiring.source, "decisions": list(wiring.decisions)}
        launch = load_launch((), wiring=wiring, platform=platform)
        proc = launch.this_process()
    except KimiError as err:
        report["checks"].append({"check": "launch", "status": "error", "message": err.message})
        return report
    report["launch"] = {"recipe": launch.plan.recipe, "model": launch.plan.model,
                        "hardware": launch.plan.hardware, "variant": launch.plan.variant,
                        "strategy": launch.plan.strategy, "nodes": launch.plan.nodes, "role": proc.role,
                        "kind": proc.kind.value, "rank": proc.rank, "local_gpus": proc.local_gpus,
                        "port": proc.port, "ports": {p.value: n for p, n in proc.ports.items()}}
    proc, results = run_checks(launch, proc, environ, node_facts(launch, environ))
    report["checks"] = [r.as_dict() for r in results]
    return report


def start(user_args) -> None:
    """The container's start: wire, build, log, preflight, announce, then exec (never returns
    unless KIMI_DRY_RUN=1)."""
    from entrypoint.node.cluster import wire
    from entrypoint.node.exec import exec_process
    from entrypoint.node.logs import log_decisions
    from entrypoint.node.preflight import preflight_launch

    from entrypoint.node.platform import record_launch

    platform = wire_platform(tuple(user_args))
    environ = platform.environ
    wiring = wire(environ)
    launch = load_launch(tuple(user_args), wiring=wiring, platform=platform)
    proc = launch.this_process()
    log = log_decisions(launch, environ, wiring=wiring, compiled=launch.compile_caches(proc))
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
    exec_process(proc, environ, launch.settings.cache_dir, launch.compile_caches(proc))


def recorded_port() -> Optional[int]:
    """The port this container's start recorded (it saw arguments a later command does not)."""
    from entrypoint.node.platform import recorded_port as recorded

    return recorded()


def platform_entries(platform) -> list:
    from entrypoint.node.logs import Entry

    if not platform.platform:
        return []
    head = Entry("platform", f"platform {platform.platform} ({platform.display_name}), chosen by {platform.reason}",
                 "info", {"platform": platform.platform})
    return [head] + [Entry("platform", f"platform: {line}") for line in platform.decisions]


def _weights(launch, environ: Mapping[str, str]):
    """The launch's hub repositories, the recipe's rules of which files vLLM reads, the hub
    cache the launch uses."""
    from entrypoint.core.errors import UNSUPPORTED_COMBINATION, KimiError
    from entrypoint.core.weights import sources
    from entrypoint.node.cache import uses_modelscope
    from entrypoint.node.hub_cache import hub_dir
    from entrypoint.node.weights import check_token_file

    check_token_file(environ)
    if uses_modelscope(environ):
        raise KimiError(UNSUPPORTED_COMBINATION, "kimi-serve download fetches from the Hugging Face Hub; with "
                        "VLLM_USE_MODELSCOPE=true use `modelscope download --model <id> --cache_dir "
                        "$KIMI_CACHE_DIR/modelscope` (or let vLLM fetch at start).")
    return sources(launch.plan), launch.catalog.recipe.model.files, hub_dir(launch.settings.cache_dir, environ)


def fetch_weights(launch, environ: Mapping[str, str], log, workers: int = 8) -> None:
    """Every hub file the launch reads into its cache (nothing for a local path or object storage)."""
    from entrypoint.node.weights import download

    found, rules, hub = _weights(launch, environ)
    if not found:
        log.info("download.skip", f"nothing to download: the model is {launch.plan.model}")
        return
    for state in download(found, rules, hub, environ, log, max_workers=workers):
        log.info("download.complete", f"{state.source.purpose} {state.source.label}: {len(state.expected)} files "
                 f"complete in {hub}", repo=state.source.repo_id, commit=state.commit)


def download_weights(verify: bool = False, repair: bool = False, workers: int = 8,
                     environ: Optional[Mapping[str, str]] = None) -> int:
    """`kimi-serve download [--verify [--repair]]`: the exit status (1: --verify found bad files)."""
    from entrypoint.node.logs import StartLog

    environ = dict(os.environ if environ is None else environ)
    launch = load_launch((), environ)
    log = StartLog(launch.settings.log_format, environ)
    if verify:
        from entrypoint.node.weights_verify import verify as check

        found, rules, hub = _weights(launch, environ)
        problems = check(found, rules, hub, environ, log, repair=repair, workers=min(workers, 8)) if found else []
        for p in problems:
            log.warning("verify.problem", f"{p.repo_id}: {p.path}: {p.reason}", **p.as_dict())
        if problems and not repair:
            log.warning("verify.failed", f"{len(problems)} file(s) failed verification: run `kimi-serve download "
                        "--verify --repair` to fetch them again", problems=len(problems))
            return 1
        if not problems:
            log.info("verify.ok", f"every file of {', '.join(s.label for s in found) or 'nothing'} matches the "
                     "hub's hashes")
            return 0
    fetch_weights(launch, environ, log, workers)
    return 0
