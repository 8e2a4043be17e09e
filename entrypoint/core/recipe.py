"""Load the recipe data (recipes/*.yaml), validated by the models of `entrypoint.core.recipe_schema`.

What callers get is a read-only record tree of the validated data (`entrypoint.core.record.Record`,
with the fields of the schema's models; mappings are read-only `FrozenDict`s, lists tuples):
`catalog.recipes[slug]`, `catalog.recipe` (the one chosen: `with_recipe`; the default recipe as
loaded), `catalog.hardware[id]`, `catalog.strategies[id]`. A recipe is one file of
`recipes/models/` (its slug is the file's name).

Validation gives the same result for the same bytes, so its result is kept as readable JSON
(`entrypoint.core.catalog_cache`): a cache keyed by a digest of every data file and of the
schema's source. A start whose data is unchanged reads the
cache and imports neither pydantic nor yaml; any change to the data or the schema validates
again. The image fills the cache beside its data at build time (`python -m entrypoint.core.recipe`).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import List, Optional

from entrypoint.core import catalog_cache, limits
from entrypoint.core.datadir import default_recipes_dir
from entrypoint.core.files import read_capped
from entrypoint.core.record import Record

__all__ = ["Catalog", "RecipeDataError", "default_recipes_dir", "default_features", "gpu_vram_gb",
           "load_catalog", "load_catalog_from", "with_recipe"]

Catalog = Record  # the validated catalog: fields recipe, hardware, strategies (see recipe_schema.Catalog)
_SCHEMA_SOURCES = (Path(__file__), Path(__file__).with_name("recipe_schema.py"),
                   Path(__file__).with_name("platform_schema.py"), Path(__file__).with_name("record.py"),
                   Path(__file__).with_name("catalog_cache.py"))


class RecipeDataError(Exception):
    """The recipe data itself is broken (a defect of the image, not of the user's settings)."""


def _model_files(directory: Path) -> List[Path]:
    return sorted((directory / "models").glob("*.yaml"))


def _data_files(directory: Path) -> List[Path]:
    return [*_model_files(directory), directory / "hardware.yaml", directory / "serving.yaml",
            directory / "platforms.yaml", directory / "vllm" / "removed_env.yaml",
            *sorted((directory / "strategies").glob("*.yaml"))]


def _validate(directory: Path) -> Record:
    import yaml
    from pydantic import ValidationError

    from entrypoint.core import recipe_schema as schema

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader where libyaml is there

    def read(path: Path):
        data = read_capped(path, limits.MAX_DATA_FILE_BYTES)  # a FIFO or a device: an OSError, not a hang
        if len(data) > limits.MAX_DATA_FILE_BYTES:
            raise OSError(f"{path} is larger than {limits.MAX_DATA_FILE_BYTES} bytes")
        return yaml.load(data, Loader=loader)

    try:
        hardware = schema.HardwareFile(**read(directory / "hardware.yaml"))
        serving = read(directory / "serving.yaml")
        recipes = {p.stem: read(p) for p in _model_files(directory)}
        if not recipes:
            raise OSError(f"no recipe in {directory / 'models'} (one <slug>.yaml per model)")
        catalog = schema.Catalog(
            recipes=recipes,
            recipe=recipes.get(serving.get("default_recipe") if isinstance(serving, dict) else None)
            or next(iter(recipes.values())),
            hardware=hardware.hardware, brands=hardware.brands, architectures=hardware.architectures,
            multi_node_nvlink_args=hardware.multi_node_nvlink_args,
            strategies={p.stem: read(p) for p in sorted((directory / "strategies").glob("*.yaml"))},
            serving=serving,
            platforms=read(directory / "platforms.yaml"),
            vllm_env_removed=read(directory / "vllm" / "removed_env.yaml") or {},
        )
    except (OSError, yaml.YAMLError, ValidationError, TypeError, AttributeError) as exc:
        raise RecipeDataError(f"recipe data in {directory} is invalid: {exc}") from exc
    return schema.freeze(catalog)


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in [*_SCHEMA_SOURCES, *_data_files(directory)]:
        h.update(path.name.encode() + b"\0")
        h.update(read_capped(path, limits.MAX_DATA_FILE_BYTES))
    return h.hexdigest()[:24]


def _cache_dirs(directory: Path) -> List[Path]:
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [directory / ".validated", Path(home) / "kimi-serve"]


def load_catalog_from(directory: Path, use_cache: bool = True) -> Record:
    if not use_cache:
        return _validate(directory)
    try:
        name = f"catalog-{_digest(directory)}.json"
    except OSError as exc:
        raise RecipeDataError(f"recipe data in {directory} cannot be read: {exc}") from exc
    return catalog_cache.cached(name, _cache_dirs(directory), lambda: _validate(directory))


@lru_cache(maxsize=4)
def _load_cached(directory: str) -> Record:
    return load_catalog_from(Path(directory))


def load_catalog(directory: Optional[Path] = None) -> Record:
    return _load_cached(str(directory or default_recipes_dir()))


def with_recipe(catalog: Record, slug: Optional[str]) -> Record:
    """The catalog whose `recipe` is the one named by its slug (None: the default recipe); an
    unknown slug is an error that lists the recipes and the closest one."""
    from entrypoint.core.errors import unknown_value

    slug = slug or catalog.serving.default_recipe
    if slug not in catalog.recipes:
        raise unknown_value("KIMI_RECIPE", slug, catalog.recipes)
    if catalog.recipe.id == slug:
        return catalog
    fields = {name: getattr(catalog, name) for name in catalog._fields}
    return Record("Catalog", {**fields, "recipe": catalog.recipes[slug]})


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
