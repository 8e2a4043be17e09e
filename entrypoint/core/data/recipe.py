"""Load the recipe data (recipes/*.yaml), validated by the models of `entrypoint.core.data.recipe_schema`.

What callers get is a read-only record tree of the validated data (`entrypoint.core.data.record.Record`,
with the fields of the schema's models; mappings are read-only `FrozenDict`s, lists tuples):
`catalog.recipes[slug]`, `catalog.recipe` (the one chosen: `with_recipe`; the default recipe as
loaded), `catalog.hardware[id]`, `catalog.strategies[id]`. A recipe is one file of
`recipes/models/` (its slug is the file's name).

Validation gives the same result for the same bytes, so its result is kept as readable JSON
(`entrypoint.core.data.catalog_cache`): a cache keyed by a digest of every data file and of the
schema's source. A start whose data is unchanged reads the
cache and imports neither pydantic nor yaml; any change to the data or the schema validates
again. The image fills the cache beside its data at build time (`python -m entrypoint.core.data.recipe`).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Union

from entrypoint.core.base import limits
from entrypoint.core.base.errors import unknown_value
from entrypoint.core.base.files import DataFileError, read_capped, read_data
from entrypoint.core.data import catalog_cache
from entrypoint.core.data.datadir import default_recipes_dir
from entrypoint.core.data.record import FrozenDict, Record

__all__ = ["Catalog", "RecipeDataError", "default_recipes_dir", "default_features", "gpu_vram_gb",
           "load_catalog", "load_catalog_from", "with_host", "with_recipe"]

Catalog = Record  # the validated catalog: fields recipe, hardware, strategies (see recipe_schema.Catalog)
_SCHEMA_SOURCES = tuple(Path(__file__).parent.parent.joinpath(name) for name in (
    "data/recipe.py", "data/recipe_schema.py", "data/platform_schema.py", "data/record.py", "data/catalog_cache.py", "base/files.py",
    "data/kv_schema.py", "data/loading_schema.py", "data/bench.py", "data/preload_schema.py", "data/fleet_schema.py",
    "data/wiring_schema.py"))


class RecipeDataError(Exception):
    """The recipe data itself is broken (a defect of the image, not of the user's settings).
    str() is always one line, whatever the validator underneath said."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


KV_FILE, LOADERS_FILE = "kv_offload.yaml", "loaders.yaml"
PRELOAD_FILE = "vllm/preload.yaml"  # `vllm preload` per release (core/compose/preload.py)
WIRING_FILE = "vllm/wiring.yaml"  # what the vLLM arguments may not set (core/vllm/vllm_cli.py)
FLEET_FILE = "fleet.yaml"  # the router in front of a fleet's copies (core/compose/fleet.py)
BENCH_FILE = "bench/benchmarks.yaml"  # a folder of its own: no glob of recipes/*.yaml takes it for a recipe
# The parts of the one catalog read only by the commands that need them (a start without KV
# offload never decodes the KV part); all are validated, cross-checked and cached together.
SECTIONS = {"kv_offload": KV_FILE, "loaders": LOADERS_FILE, "bench": BENCH_FILE, "preload": PRELOAD_FILE,
            "fleet": FLEET_FILE, "wiring": WIRING_FILE}


def _model_files(directory: Path) -> List[Path]:
    return sorted((directory / "models").glob("*.yaml"))


def _grammar_files(directory: Path) -> List[Path]:
    return sorted((directory / "vllm").glob("*.json"))


def _data_files(directory: Path) -> List[Path]:
    """Every data file of the catalog: what its digest covers and what validation reads."""
    return [*_model_files(directory), directory / "hardware.yaml", directory / "serving.yaml",
            directory / "platforms.yaml", directory / "vllm" / "removed_env.yaml",
            *sorted((directory / "strategies").glob("*.yaml")),
            *(directory / name for name in SECTIONS.values()), *_grammar_files(directory)]


def read_data_file(path: Path):
    """One data file through the one bounded reader (core/base/files.read_data); RecipeDataError
    (one line naming the file) when it is not a regular file, too large, too deep or malformed."""
    try:
        return read_data(path, limits.MAX_DATA_FILE_BYTES, limits.MAX_DATA_DEPTH, limits.MAX_DATA_NODES)
    except DataFileError as exc:
        raise RecipeDataError(f"recipe data {exc}") from None


def _invalid(path: Path, exc: Exception) -> RecipeDataError:
    """One line for a validator's complaint about one file: its first problem, where, and how many more."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            found = errors()
        except Exception:  # noqa: BLE001 - any validator: fall back to its text
            found = []
        if found:
            first = found[0]
            loc = ".".join(str(part) for part in first.get("loc", ()))
            msg = str(first.get("msg", "")).removeprefix("Value error, ")
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            return RecipeDataError(f"recipe data {path} is invalid: {loc + ': ' if loc else ''}{msg}{more}")
    return RecipeDataError(f"recipe data {path} is invalid: {exc}")


def _validated(path: Path, model, raw):
    from pydantic import ValidationError  # noqa: PLC0415 - a third party only this path needs

    if not isinstance(raw, dict):
        raise RecipeDataError(f"recipe data {path}: the file must be a mapping of keys, not "
                              f"{type(raw).__name__}")
    try:
        return model(**raw)
    except ValidationError as exc:
        raise _invalid(path, exc) from None
    except (TypeError, ValueError) as exc:
        raise RecipeDataError(f"recipe data {path} is invalid: {exc}") from None


def _validate_main(directory: Path):
    from pydantic import ValidationError  # noqa: PLC0415 - a third party only this path needs

    from entrypoint.core.data import recipe_schema as schema  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    read = read_data_file
    hardware = _validated(directory / "hardware.yaml", schema.HardwareFile, read(directory / "hardware.yaml"))
    serving = read(directory / "serving.yaml")
    recipes = {p.stem: read(p) for p in _model_files(directory)}
    if not recipes:
        raise RecipeDataError(f"recipe data: no recipe in {directory / 'models'} (one <slug>.yaml per model)")
    strategies = {p.stem: read(p) for p in sorted((directory / "strategies").glob("*.yaml"))}
    platforms = read(directory / "platforms.yaml")
    removed = read(directory / "vllm" / "removed_env.yaml") or {}
    for slug, raw in recipes.items():  # each file's own errors name that file
        _validated(directory / "models" / f"{slug}.yaml", schema.Recipe, raw)
    for sid, raw in strategies.items():
        _validated(directory / "strategies" / f"{sid}.yaml", schema.Strategy, raw)
    _validated(directory / "serving.yaml", schema.Serving, serving)
    _validated(directory / "platforms.yaml", schema.PlatformsFile, platforms)
    try:
        return schema.Catalog(
            recipes=recipes,
            recipe=recipes.get(serving.get("default_recipe")) or next(iter(recipes.values())),
            hardware=hardware.hardware, brands=hardware.brands, architectures=hardware.architectures,
            multi_node_nvlink_args=hardware.multi_node_nvlink_args,
            strategies=strategies, serving=serving, platforms=platforms, vllm_env_removed=removed,
        )
    except ValidationError as exc:
        raise _invalid(directory, exc) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise RecipeDataError(f"recipe data in {directory} is invalid: {exc}") from None


def _dangling(directory: Path, catalog, kv, loaders, bench) -> List[str]:
    """Every reference from one data file into another that names nothing: `file: key: problem`."""
    problems: List[str] = []

    def check(where: str, names, known, what: str) -> None:
        for name in names:
            if name not in known:
                valid = ", ".join(sorted(known)) or "none"
                problems.append(f"{where}: unknown {what} {name!r} (valid: {valid})")

    models = directory / "models"
    for slug, r in catalog.recipes.items():
        check(f"{models / slug}.yaml: kv_offload_support", r.kv_offload_support, kv.options, "KV offload option")
        opted = [k for k in r.kv_offload_support if k in kv.options and not kv.options[k].requires_opt_in]
        for k in opted:
            problems.append(f"{models / slug}.yaml: kv_offload_support.{k}: option {k!r} needs no opt-in "
                            f"({directory / KV_FILE}: requires_opt_in is false)")
        check(f"{models / slug}.yaml: kv_cache_strategy_hardware", r.kv_cache_strategy_hardware, kv.stores,
              "KV store")
        for store, hw in r.kv_cache_strategy_hardware.items():
            check(f"{models / slug}.yaml: kv_cache_strategy_hardware.{store}", hw, catalog.hardware, "hardware")
        check(f"{models / slug}.yaml: hardware_left_out", r.hardware_left_out,
              {**catalog.hardware, **catalog.brands}, "hardware or brand")
    kv_file = directory / KV_FILE
    for oid, opt in kv.options.items():
        check(f"{kv_file}: options.{oid}.strategies", opt.strategies or (), catalog.strategies, "strategy")
        check(f"{kv_file}: options.{oid}.brands", opt.brands or (), catalog.brands, "brand")
    for sid, store in kv.stores.items():
        check(f"{kv_file}: stores.{sid}.brands", store.brands, catalog.brands, "brand")
    loaders_file = directory / LOADERS_FILE
    for lid, loader in loaders.loaders.items():
        check(f"{loaders_file}: loaders.{lid}.brands", loader.brands, catalog.brands, "brand")
    check(f"{loaders_file}: checkpoints", loaders.checkpoints, catalog.recipes, "recipe")
    for slug, sizes in loaders.checkpoints.items():
        if slug in catalog.recipes:
            check(f"{loaders_file}: checkpoints.{slug}", sizes, catalog.recipes[slug].variants, "variant")
    idle = catalog.serving.streams.idle_timeout_s
    for slug, r in catalog.recipes.items():
        silence = r.chat.longest_silence
        if silence is not None and 2 * silence.seconds > idle:
            problems.append(f"{models / slug}.yaml: chat.longest_silence {silence.seconds} s does not fit twice in "
                            f"{directory / 'serving.yaml'} streams.idle_timeout_s ({idle} s): raise the timeout")
    recorded = sorted(p.stem for p in (directory / "vllm").glob("*.json"))
    check(f"{directory / 'serving.yaml'}: default_vllm.release", [catalog.serving.default_vllm.release], recorded,
          "vLLM release (recorded in vllm/<release>.json)")
    bench_file = directory / BENCH_FILE
    for i, ref in enumerate(bench.references):
        where = f"{bench_file}: references[{i}]"
        check(f"{where}.recipe", [ref.recipe], catalog.recipes, "recipe")
        check(f"{where}.hardware", [ref.hardware], catalog.hardware, "hardware")
        if ref.recipe in catalog.recipes:
            check(f"{where}.variant", [ref.variant], catalog.recipes[ref.recipe].variants, "variant")
    return problems


def _check_grammar(path: Path) -> None:
    """A vLLM grammar's shape (core/vllm/vllm_cli reads it at use): the keys it reads, of the right kinds."""
    raw = read_data_file(path)
    options = raw.get("options") if isinstance(raw, dict) else None
    if not isinstance(options, list) or not isinstance(raw.get("env"), list) or \
            not isinstance(raw.get("vllm_version"), str):
        raise RecipeDataError(f"recipe data {path}: needs vllm_version (text), options and env (lists)")
    for i, o in enumerate(options):
        if not isinstance(o, dict) or not all(k in o for k in ("dest", "options", "kind", "nargs")) \
                or not isinstance(o["options"], list):
            raise RecipeDataError(f"recipe data {path}: options[{i}] needs dest, options (a list), kind and nargs")


def _validate(directory: Path) -> dict:
    """Every data file read, validated and cross-checked once: {part name: read-only record},
    the catalog under "" and each of SECTIONS under its name."""
    from entrypoint.core.data import recipe_schema as schema  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.data.bench_schema import BenchFile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.data.fleet_schema import FleetFile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.data.kv_schema import KvFile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.data.loading_schema import LoadersFile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.data.preload_schema import PreloadFile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)
    from entrypoint.core.data.wiring_schema import WiringFile  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

    catalog = _validate_main(directory)
    models = {"kv_offload": KvFile, "loaders": LoadersFile, "bench": BenchFile, "preload": PreloadFile,
              "fleet": FleetFile, "wiring": WiringFile}
    parts = {name: _validated(directory / file, models[name], read_data_file(directory / file))
             for name, file in SECTIONS.items()}
    dests = set()
    for path in _grammar_files(directory):
        _check_grammar(path)
        dests |= {o["dest"] for o in read_data_file(path)["options"]}
    problems = [f"{directory / WIRING_FILE}: {what}.{dest}: no recorded vLLM grammar has this destination"
                for what in ("refused", "allowed") for dest in getattr(parts["wiring"], what) if dest not in dests]
    problems += _dangling(directory, catalog, parts["kv_offload"], parts["loaders"], parts["bench"])
    if parts["fleet"].router_of not in parts["kv_offload"].stores:
        valid = ", ".join(sorted(parts["kv_offload"].stores)) or "none"
        problems.append(f"{directory / FLEET_FILE}: router_of: unknown KV store {parts['fleet'].router_of!r} "
                        f"(valid: {valid})")
    problems += [f"{directory / PRELOAD_FILE}: releases.{version}.brands: unknown brand {name!r}"
                 for version, release in parts["preload"].releases.items() for name in release.brands
                 if name not in catalog.brands]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RecipeDataError(f"recipe data {problems[0]}{more}")
    return {"": schema.freeze(catalog), **{name: schema.freeze(part) for name, part in parts.items()}}


DIGEST_HEX = 24  # the digest in a cache's name: 96 bits, in hex


def _hasher():
    """BLAKE2b, 96 bits: the digest the cache's names carry. Taken from CPython's own _blake2
    module (what hashlib.blake2b is) where it is there: hashlib would load OpenSSL first, and
    with its SHA-256 of the ~370 KB of data that cost `print` ~15M more instructions (benchmarks/startup.py).
    A Python built without _blake2 has no hashlib.blake2b either: it gets hashlib's SHA-256
    (cut to the same length by _digest), so its caches have names of their own."""
    try:
        from _blake2 import blake2b  # noqa: PLC0415 - optional: its ImportError is handled
    except ImportError:
        import hashlib  # noqa: PLC0415 - kimi-serve print's start-up (test_startup_imports)

        return hashlib.sha256()
    return blake2b(digest_size=DIGEST_HEX // 2)


def _digest(directory: Path) -> str:
    h = _hasher()
    for path in [*_SCHEMA_SOURCES, *_data_files(directory)]:
        data = read_capped(path, limits.MAX_DATA_FILE_BYTES)  # a FIFO or a device: an OSError, not a hang
        if len(data) > limits.MAX_DATA_FILE_BYTES:
            raise OSError(f"{path} is larger than {limits.MAX_DATA_FILE_BYTES} bytes")
        h.update(path.name.encode() + b"\0")
        h.update(data)
    return h.hexdigest()[:DIGEST_HEX]


def _cache_dirs(directory: Path) -> List[Path]:
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [directory / ".validated", Path(home) / "kimi-serve"]


def _part_name(digest: str, part: str) -> str:
    return f"catalog-{digest}{'-' + part if part else ''}.json"


def load_catalog_from(directory: Path, use_cache: bool = True, part: str = "") -> Record:
    """The catalog (or one of its SECTIONS) of the data in `directory`: from the cache when the
    data is unchanged, else every file validated and cross-checked, and the cache written."""
    if not use_cache:
        return _validate(directory)[part]
    try:
        digest = _digest(directory)
    except OSError as exc:
        raise RecipeDataError(f"recipe data in {directory} cannot be read: {exc}") from exc

    def validate() -> dict:
        return {_part_name(digest, name): found for name, found in _validate(directory).items()}

    return catalog_cache.cached(_part_name(digest, part), _cache_dirs(directory), validate)


@lru_cache(maxsize=8)
def _load_section(directory: str, part: str) -> Record:
    return load_catalog_from(Path(directory), part=part)


def load_section(part: str, directory: Union[str, Path, None] = None) -> Record:
    """One of SECTIONS of the one catalog (kv_offload, loaders, bench, preload, fleet), validated with the rest."""
    return _load_section(str(directory or default_recipes_dir()), part)


@lru_cache(maxsize=4)
def _load_cached(directory: str) -> Record:
    return load_catalog_from(Path(directory))


def load_catalog(directory: Optional[Path] = None) -> Record:
    return _load_cached(str(directory or default_recipes_dir()))


def with_recipe(catalog: Record, slug: Optional[str]) -> Record:
    """The catalog whose `recipe` is the one named by its slug (None: the default recipe); an
    unknown slug is an error that lists the recipes and the closest one."""
    slug = slug or catalog.serving.default_recipe
    if slug not in catalog.recipes:
        raise unknown_value("KIMI_RECIPE", slug, catalog.recipes)
    if catalog.recipe.id == slug:
        return catalog
    fields = {name: getattr(catalog, name) for name in catalog._fields}
    return Record("Catalog", {**fields, "recipe": catalog.recipes[slug]})


def with_host(catalog: Record, settings, ram_gb: Optional[float] = None, cores: Optional[int] = None) -> Record:
    """The catalog whose host-backend targets (recipes/hardware.yaml `host_backend`: `cpu`) are sized
    for this deployment: ranks per node (KIMI_CPU_RANKS) as its GPUs, the node's memory
    (KIMI_CPU_MEMORY_GB, else `ram_gb`, the node's RAM, else the target's nominal `vram_gb`) as their
    memory, the per-rank environment filled (threads: KIMI_CPU_THREADS, else the node's cores over
    its ranks), and the pod a rendering gives the node as the settings give it, each amount as
    written (cores: KIMI_CPU_CORES, else `cores`, the node's, else the nominal `pod_resources.cpu`;
    memory: `<KIMI_CPU_MEMORY_GB>G`, else the nominal `pod_resources.memory_gib`), so that the chart
    draws it from its values with no arithmetic. `ram_gb` / `cores` None: a node that is not this
    machine (a rendering), sized from the settings and the data alone."""
    hosts = {hid: hw for hid, hw in catalog.hardware.items() if hw.host_backend is not None}
    if not hosts:
        return catalog
    ranks = settings.cpu_ranks
    hardware = dict(catalog.hardware)
    for hid, hw in hosts.items():
        backend, pod = hw.host_backend, hw.pod_resources
        given_gb = settings.cpu_memory_gb or (max(1, round(ram_gb)) if ram_gb is not None else None)
        memory = float(given_gb if given_gb is not None else hw.vram_gb)
        node_cores = settings.cpu_cores or cores or pod.cpu
        threads = settings.cpu_threads or max(1, node_cores // ranks)
        values = {"CPU_THREADS": str(threads),
                  "CPU_KVCACHE_GIB": str(settings.cpu_kvcache_gib or backend.kvcache_gib),
                  "CPU_THREADS_BIND": settings.cpu_threads_bind or backend.threads_bind}
        env = {key: _fill(value, values) for key, value in backend.env.items()}
        fields = {name: getattr(backend, name) for name in backend._fields}
        sized = {name: getattr(hw, name) for name in hw._fields}
        pod_memory = f"{given_gb}G" if given_gb is not None else f"{pod.memory_gib}Gi"
        sized.update(gpu_count=ranks, vram_gb=memory,  # kvcache_gib: what each rank allocates (the memory check)
                     host_backend=Record(backend._kind, {**fields, "env": FrozenDict(env),
                                                         "kvcache_gib": settings.cpu_kvcache_gib or backend.kvcache_gib}),
                     pod_resources=Record("HostPod", {"cpu": node_cores, "memory": pod_memory}))
        hardware[hid] = Record(hw._kind, sized)
    fields = {name: getattr(catalog, name) for name in catalog._fields}
    return Record("Catalog", {**fields, "hardware": FrozenDict(hardware)})


def _fill(value: str, values: dict) -> str:
    for name in sorted(values, key=len, reverse=True):  # $CPU_THREADS_BIND before $CPU_THREADS
        value = value.replace("$" + name, values[name])
    return value


def gpu_vram_gb(hw: Record) -> float:
    """Memory of one GPU of a hardware profile."""
    return hw.vram_gb / hw.gpu_count


def default_features(recipe: Record, hw: str) -> tuple:
    """Every feature in declaration order, less the opt-in ones (everywhere, and on this hardware)."""
    skip = set(recipe.opt_in_features) | set(recipe.hardware_opt_in_features.get(hw, []))
    return tuple(f for f in recipe.features if f not in skip)


if __name__ == "__main__":  # validate the data and fill the cache beside it (run at image build)
    _catalog = load_catalog()
    print(f"recipe data valid: {len(_catalog.recipes)} recipes, {len(_catalog.hardware)} hardware profiles, "
          f"{len(_catalog.strategies)} strategies")
