"""KV cache beyond the GPU: the recipe site's KV Offload row, as a layer of the one composition.

Pure: no environment reads, no I/O but reading recipes/kv_offload.yaml (only when a launch asks for
KV offload). `choose` checks the settings; `layer` (called by core/compose/resolve.py after the serving
layout's memory check, as the site's errors come) checks the gates (`unsupported_combination`,
never a silently dropped option) and fills the layer composition adds (docs/composition.md):

- a `kv_offload` option: its `--kv-transfer-config` after every other argument of each engine, its
  env after the strategy's; LMCache adds its server (`lmcache`, rank 0) beside the engine;
- a KV store: `master` 0, `store` 0 (centralized) before the engines; a topology step repeats the
  serving engines once per instance (`instance` 0..N-1, node ranks i*nodes+r of a multi-node
  strategy, each instance's head its own address) and puts a `router` 0 in front when N > 1; with
  pd_cluster, the PD pools are the topology and each role gets the MultiConnector config.

Configuration files (the Mooncake config named by MOONCAKE_CONFIG_PATH, the store's --config) are
in each process's `files`; the entrypoint writes them before exec (entrypoint.node.exec).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError, unknown_value
from entrypoint.core.base.net import url_host
from entrypoint.core.compose.plan import Kind, Port, Process, service
from entrypoint.core.compose.select import Selection, version_key
from entrypoint.core.data.recipe import default_recipes_dir, load_section
from entrypoint.core.data.record import Record
from entrypoint.core.vllm.args import substitute


# Env layers the option's env comes after (docs/composition.md: base, variant, strategy, placement).
_BEFORE_OPTION = ("base", "variant", "variant hardware override", "strategy", "pool placement")
# What each KV placeholder of the data is filled from.
KV_PLACEHOLDERS = {
    "MOONCAKE_MASTER_IP": "KIMI_MOONCAKE_MASTER_ADDR",
    "VLLM_INSTANCE_<i>": "KIMI_INSTANCE_ADDRS",
    "MOONCAKE_DEVICE_NAME": "KIMI_MOONCAKE_DEVICE_NAME",
    "MOONCAKE_STORE_DEVICE_NAME": "KIMI_MOONCAKE_STORE_DEVICE_NAME",
    "MOONCAKE_STORE_HOST": "KIMI_MOONCAKE_STORE_HOST",
}


def load_kv(directory: Optional[str] = None) -> Record:
    """recipes/kv_offload.yaml (of `directory`, else of the recipe data), validated and read-only."""
    return _load_kv(str(directory or default_recipes_dir()))


def _load_kv(directory: str) -> Record:
    """The KV part of the one catalog (core/data/recipe: read, validated and cross-checked with the rest)."""
    return load_section("kv_offload", Path(directory))


_STORE_SETTINGS = ("kv_instances", "instance_addrs", "mooncake_master_addr")  # only a KV store reads them


@dataclass(frozen=True)
class KvChoice:
    """What the KV settings ask for, checked against the data (not yet against the launch)."""

    id: str
    store: bool  # a KV-store deployment (else a taxonomy.kv_offload option)
    instances: int
    instances_set: bool  # KIMI_KV_INSTANCES given
    addrs: tuple  # KIMI_INSTANCE_ADDRS
    values: Mapping[str, str]  # KV placeholder -> value
    router_port: Optional[int]  # KIMI_ROUTER_PORT when given


def choose(settings, hostname: str = "", directory: Optional[str] = None) -> Optional[KvChoice]:
    """The KV settings -> a KvChoice, or None when KIMI_KV_OFFLOAD is unset."""
    kid = (settings.kv_offload or "").strip()
    store_settings = [f"KIMI_{n.upper()}" for n in _STORE_SETTINGS if settings.is_set(n)]
    data = load_kv(directory) if kid else None
    if data is not None and kid not in data.options and kid not in data.stores:
        raise unknown_value("KIMI_KV_OFFLOAD", kid, [*data.options, *data.stores], "Unset it for no KV offload.")
    store = data is not None and kid in data.stores
    if store_settings and not store:
        why = f"KIMI_KV_OFFLOAD={kid} runs beside each engine" if kid else "KIMI_KV_OFFLOAD is not set"
        raise KimiError(E.INVALID_VALUE, f"{', '.join(store_settings)} configure a KV store, but {why}. Remove them, "
                        "or set KIMI_KV_OFFLOAD to a kv_store_* deployment (docs/kv-cache.md).")
    if not kid or data is None:  # data is loaded for every KIMI_KV_OFFLOAD
        return None
    addrs = tuple(settings.instance_addrs)
    vals = {"MOONCAKE_DEVICE_NAME": settings.mooncake_device_name or "",
            "MOONCAKE_STORE_DEVICE_NAME": settings.mooncake_store_device_name or ""}
    if settings.mooncake_master_addr:
        vals["MOONCAKE_MASTER_IP"] = url_host(settings.mooncake_master_addr)
    store_host = settings.mooncake_store_host or hostname
    if store_host:
        vals["MOONCAKE_STORE_HOST"] = store_host
    for i, addr in enumerate(addrs, start=1):
        vals[f"VLLM_INSTANCE_{i}"] = addr
    instances = settings.kv_instances or (data.stores[kid].default_instances if store else 1)
    return KvChoice(id=kid, store=store, instances=instances, instances_set=settings.kv_instances is not None,
                    addrs=addrs, values=vals,
                    router_port=settings.router_port if settings.is_set("router_port") else None)


# ---------------------------------------------------------------- gates


def _refuse(message: str) -> KimiError:
    return KimiError(E.UNSUPPORTED_COMBINATION, message)


def _check_common(kid: str, entry: Record, sel: Selection, cat) -> None:
    hw = cat.hardware[sel.hardware]
    if hw.host_backend is not None and hw.host_backend.kv_offload_refused:
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} on {sel.hardware}: {hw.host_backend.kv_offload_refused}. Unset "
                      "KIMI_KV_OFFLOAD (or serve on a GPU target).")
    if entry.brands is not None and hw.brand not in entry.brands:
        names = " or ".join(cat.brands[b].name for b in entry.brands)
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} runs on {names} GPUs; {sel.hardware} is {cat.brands[hw.brand].name}. "
                      "Unset KIMI_KV_OFFLOAD, or use KIMI_KV_OFFLOAD=simple.")
    floor = entry.min_vllm_version
    if floor and version_key(sel.vllm_version) < version_key(floor):
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} needs vLLM >= {floor}, but the launch is for vLLM {sel.vllm_version} "
                      "(KIMI_VLLM_VERSION, or the image's vLLM). Run an image built on a newer vLLM (the default "
                      "tags).")
    if sel.user is not None and sel.user.get("kv_transfer_config") is not None:
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} sets --kv-transfer-config, and the vLLM arguments (KIMI_EXTRA_ARGS or "
                      "container arguments) set it too. Keep one: remove it from the arguments, or unset "
                      "KIMI_KV_OFFLOAD.")


def _check_option(kid: str, opt: Record, sel: Selection, cat, deploy_type: str) -> None:
    if deploy_type == "pd_cluster":
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} does not compose with KIMI_STRATEGY=pd_cluster: each PD role owns "
                      "--kv-transfer-config (NixlConnector). A Mooncake KV store does compose with it: "
                      "KIMI_KV_OFFLOAD=kv_store_distributed_mooncake or kv_store_centralized_mooncake.")
    if opt.strategies is not None and sel.strategy not in opt.strategies:
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} runs only with KIMI_STRATEGY {' or '.join(opt.strategies)} (its "
                      f"server is node-local); KIMI_STRATEGY={sel.strategy}. Use one of those, or "
                      "KIMI_KV_OFFLOAD=simple.")
    if opt.requires_opt_in and cat.recipe.kv_offload_support.get(kid) != "verified":
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} is offered only where the recipe records a verified run "
                      f"(kv_offload_support), and the {cat.recipe.title} recipe records none for it. Use "
                      "KIMI_KV_OFFLOAD=simple or a kv_store_* deployment.")
    _check_common(kid, opt, sel, cat)


def _check_store(choice: KvChoice, store: Record, sel: Selection, cat, deploy_type: str) -> None:
    kid = choice.id
    allowed = cat.recipe.kv_cache_strategy_hardware.get(kid)
    if allowed is not None and sel.hardware not in allowed:
        raise _refuse(f"KIMI_KV_OFFLOAD={kid} is offered on {', '.join(allowed) or 'no hardware'} for this recipe "
                      f"(kv_cache_strategy_hardware), not on {sel.hardware}.")
    _check_common(kid, store, sel, cat)
    if deploy_type == "pd_cluster" and choice.instances_set:
        raise KimiError(E.INVALID_VALUE, "KIMI_KV_INSTANCES does not apply to KIMI_STRATEGY=pd_cluster: its pools "
                        "size the deployment (KIMI_PREFILL_NODES, KIMI_DECODE_NODES). Remove it.")
    if deploy_type != "pd_cluster" and len(choice.addrs) > choice.instances:
        raise KimiError(E.INVALID_VALUE, f"KIMI_INSTANCE_ADDRS lists {len(choice.addrs)} addresses but the KV store "
                        f"has {choice.instances} instance(s). Give one address per instance, or set "
                        f"KIMI_KV_INSTANCES={len(choice.addrs)}.")


# ---------------------------------------------------------------- composition


def _lookup(choice: KvChoice, sel: Selection, extra: Mapping[str, str]):
    def lookup(name: str) -> str:
        for source in (extra, choice.values, sel.values):
            if name in source:
                return source[name]
        if name.startswith("VLLM_INSTANCE_"):
            raise KimiError(E.MISSING_SETTING, f"KIMI_INSTANCE_ADDRS needs an address for instance "
                            f"{name.rsplit('_', 1)[1]} (a comma list, one address per instance of the KV store).")
        setting = KV_PLACEHOLDERS.get(name)
        why = {"KIMI_MOONCAKE_MASTER_ADDR": ": the address of the mooncake_master that every instance and the "
               "store reach (port 50051)", "KIMI_MOONCAKE_STORE_HOST": ": the address the store advertises"}
        raise KimiError(E.MISSING_SETTING, f"{setting or '$' + name} is required for KIMI_KV_OFFLOAD={choice.id}"
                        f"{why.get(setting or '', '')}.")
    return lookup


def _filled(value, lookup):
    if isinstance(value, str):
        return substitute(value, lookup)
    if isinstance(value, Mapping):
        return {k: _filled(v, lookup) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_filled(v, lookup) for v in value]
    return value


def _file_text(obj) -> str:
    return json.dumps(obj, indent=2) + "\n"


def _helper(kind: Kind, role: str, argv, ports: Dict[Port, int], port: int,
            files: Optional[Dict[str, str]] = None) -> Process:
    """A process beside the engines: no GPU, a TCP port (not vLLM's HTTP API), maybe a file."""
    return service(kind, role, argv, ports, port, files=files)


@dataclass(frozen=True)
class KvLayer:
    """What a KV choice adds to the composition (core/compose/resolve.py composes it, docs/composition.md):
    a layer of arguments after every other (the user's included: vLLM's last-wins dedupe keeps
    one --kv-transfer-config) and of env after the strategy's and the pool placement's, on every
    engine; the files every engine reads; the processes beside the engines; and, for a KV store
    without PD pools, a topology step: the serving engines once per instance, behind a router."""

    choice: KvChoice
    source: str  # the layer's tag: kv_offload:<id> | kv_store:<id>
    args: Mapping[str, tuple]  # engine role -> the layer's arguments, placeholders filled ("*": every engine)
    env: Mapping[str, str]  # placeholders filled
    files: Mapping[str, str]  # {path: text} every engine gets
    front: tuple = ()  # processes before the engines (the store's master and store service)
    after: tuple = ()  # processes after them (an option's companion server)
    instances: int = 0  # > 0: a KV store's engine instances (the serving topology once per instance)
    router: Optional[Record] = None  # the store's router data, when more than one instance

    # the env layers the option's env comes after (docs/composition.md: base, variant, strategy, placement)
    env_after = _BEFORE_OPTION

    def engine_args(self, role: str) -> tuple:
        return tuple(self.args.get(role, self.args.get("*", ())))

    def instance_head(self, sel: Selection, i: int) -> str:
        """The address of instance `i`'s head (its own KIMI_INSTANCE_ADDRS entry)."""
        return _lookup(self.choice, sel, {})(f"VLLM_INSTANCE_{i + 1}")

    def router_process(self, sel: Selection, port: int) -> Process:
        """vllm-router in front of the instances (each reached on the engines' `port`)."""
        choice, router = self.choice, self.router
        if router is None:
            raise ValueError(f"KIMI_KV_OFFLOAD={choice.id} with {self.instances} instance(s) has no router")
        urls = [f"http://{url_host(_lookup(choice, sel, {})(f'VLLM_INSTANCE_{i + 1}'))}:{port}"
                for i in range(self.instances)]
        router_port = choice.router_port or router.port
        host = _lookup(choice, sel, {})("ROUTER_HOST")
        argv = [router.program, "--policy", router.policy, router.workers_arg, *urls,
                "--host", host, "--port", str(router_port), *router.args]
        return service(Kind.ROUTER, "router", argv, {Port.HTTP: router_port}, router_port,
                       provenance={"--policy": self.source})


def _store_front(choice: KvChoice, store: Record, sel: Selection, files_dir: str) -> Tuple[List[Process], dict]:
    """master (+ store) and the placeholders their files add."""
    vllm_path = posixpath.join(files_dir, store.vllm_config.file)
    extra = {"MOONCAKE_CONFIG_PATH": vllm_path}
    front = [_helper(Kind.KV_MASTER, "master", store.master.argv, {Port.MASTER_RPC: store.master.port},
                     store.master.port)]
    if store.store is not None:
        store_path = posixpath.join(files_dir, store.store.file)
        extra["MOONCAKE_STORE_CONFIG_PATH"] = store_path
        lookup = _lookup(choice, sel, extra)
        content = _filled({**store.store.config, **store.store.start_config}, lookup)
        front.append(_helper(Kind.KV_STORE, "store", _filled(store.store.argv, lookup),
                             {Port.SERVICE: store.store.port}, store.store.port, {store_path: _file_text(content)}))
    return front, extra


def layer(sel: Selection, cat, choice: KvChoice, deploy_type: str, directory: Optional[str] = None) -> KvLayer:
    """The KV choice checked against the launch (its gates) and filled: the layer composition adds.
    Called after the serving layout's memory check, as the site's errors come."""
    data = load_kv(directory)
    if not choice.store:
        opt = data.options[choice.id]
        _check_option(choice.id, opt, sel, cat, deploy_type)
        lookup = _lookup(choice, sel, {})
        after: Tuple[Process, ...] = ()
        if opt.companion is not None:
            companion = opt.companion
            after = (_helper(Kind.KV_SERVER, companion.role, [*companion.argv, *companion.bind_args],
                             {Port.KV_RPC: companion.ports["mp"], Port.SERVICE: companion.ports["http"]},
                             companion.ports["mp"]),)
        return KvLayer(choice, f"kv_offload:{choice.id}", {"*": tuple(_filled(list(opt.args), lookup))},
                       {k: substitute(v, lookup) for k, v in opt.env.items()}, {}, after=after)
    store = data.stores[choice.id]
    _check_store(choice, store, sel, cat, deploy_type)
    front, extra = _store_front(choice, store, sel, data.files_dir)
    lookup = _lookup(choice, sel, extra)
    files = {extra["MOONCAKE_CONFIG_PATH"]: _file_text(_filled(store.vllm_config.template, lookup))}
    env = {k: substitute(v, lookup) for k, v in store.vllm.env.items()}
    source = f"kv_store:{choice.id}"
    if deploy_type == "pd_cluster":  # each PD role swaps its connector config; the pools are the topology
        args = {role: tuple(_filled(list(role_args), lookup)) for role, role_args in store.pd.items()}
        return KvLayer(choice, source, args, env, files, front=tuple(front))
    return KvLayer(choice, source, {"*": tuple(_filled(list(store.vllm.args), lookup))}, env, files,
                   front=tuple(front), instances=choice.instances,
                   router=store.router if choice.instances > 1 else None)


def engine_needs(choice: Optional[KvChoice], proc: Process) -> Tuple[str, ...]:
    """The Python packages a vLLM process of this KV choice imports for its connector."""
    if choice is None or not proc.is_engine:
        return ()
    data = load_kv()
    entry = data.stores[choice.id] if choice.store else data.options[choice.id]
    return tuple(entry.modules)
