"""`kimi-serve list`: what can be chosen, and which combinations are valid."""

from __future__ import annotations

import json
import math

import click

from entrypoint.cli._context import guarded


def _variant_cell(catalog, hw_id: str, vid: str) -> str:
    from entrypoint.core.compose.select import variant_unsupported

    if variant_unsupported(catalog, vid, hw_id):
        return "-"
    hw, var = catalog.hardware[hw_id], catalog.recipe.variants[vid]
    if hw.host_backend is not None:  # ranks in the node's RAM (KIMI_CPU_MEMORY_GB), not GPUs
        return f"{var.vram_minimum_gb:g} GB RAM"
    nodes = math.ceil(var.vram_minimum_gb / hw.vram_gb)
    return "1 node" if nodes == 1 else f">= {nodes} nodes"


def _strategy_cell(catalog, hw_id: str) -> list:
    from entrypoint.core.compose.select import min_gpus, offered_strategies

    out = []
    for sid in offered_strategies(catalog, hw_id):
        floor = min_gpus(catalog, sid, hw_id)
        gpus = catalog.hardware[hw_id].gpu_count
        kind = catalog.strategies[sid].deploy_type
        if kind == "single_node" and floor > gpus:
            continue  # a floor a single node cannot reach
        out.append(sid + (f" (>= {math.ceil(floor / gpus)} nodes)" if kind == "multi_node" and floor > gpus else ""))
    return out


def recipes_summary(catalog) -> dict:
    from entrypoint.core.data.versions import release_window

    return {slug: {"title": r.title, "model": r.model.model_id, "min_vllm": r.model.min_vllm_version,
                   "vllm": release_window(r.model), "refused_vllm": dict(r.model.refused_vllm_versions),
                   "min_stack": {k: v for k, v in (("cuda", r.model.min_stack.cuda), ("rocm", r.model.min_stack.rocm))
                                 if v},
                   "variants": list(r.variants), "features": list(r.features),
                   "opt_in_features": list(r.opt_in_features), "default_hardware": r.default_hardware,
                   "description": r.description,
                   "provisional": {"why": r.provisional.why, "until": r.provisional.until} if r.provisional else None}
            for slug, r in catalog.recipes.items()}


def catalog_summary(catalog) -> dict:
    from entrypoint.core.compose.select import hardware_targets
    from entrypoint.core.data.recipe import default_features

    r = catalog.recipe
    return {
        "recipe": r.id,
        "recipes": recipes_summary(catalog),
        "hardware": {h: {"name": catalog.hardware[h].display_name, "brand": catalog.hardware[h].brand,
                         "gpus": catalog.hardware[h].gpu_count, "vram_gb": catalog.hardware[h].vram_gb,
                         "arch": catalog.hardware[h].arch, "default_features": list(default_features(r, h)),
                         "variants": {v: _variant_cell(catalog, h, v) for v in r.variants},
                         "host_backend": {"ranks": hb.ranks_setting, "memory": hb.memory_setting}
                         if (hb := catalog.hardware[h].host_backend) is not None else None,
                         "strategies": _strategy_cell(catalog, h)}
                     for h in hardware_targets(catalog)},
        "variants": {v: {"model": var.model_id or r.model.model_id, "precision": var.precision,
                         "vram_minimum_gb": var.vram_minimum_gb, "description": var.description}
                     for v, var in r.variants.items()},
        "strategies": {s: {"name": catalog.strategies[s].display_name, "type": catalog.strategies[s].deploy_type}
                       for s in dict.fromkeys(x for h in hardware_targets(catalog) for x in _offered(catalog, h))},
        "features": {f: {"description": feat.description, "conflicts_with": list(feat.conflicts_with),
                         "strategies": list(feat.strategies) if feat.strategies is not None else None}
                     for f, feat in r.features.items()},
        "profiles": {p: {"description": prof.description, "hardware": prof.hardware, "variants": prof.variants,
                         "strategies": prof.strategies} for p, prof in r.profiles.items()},
    }


def _offered(catalog, hw_id: str) -> list:
    from entrypoint.core.compose.select import offered_strategies

    return offered_strategies(catalog, hw_id)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--recipe", default=None, metavar="SLUG", help="The recipe to detail (default: KIMI_RECIPE, else the default).")
@guarded
def command(fmt: str, recipe) -> None:
    """The recipes, and for one of them (KIMI_RECIPE): hardware, variants, strategies, features and
    profiles, with the valid combinations."""
    import os

    from entrypoint.core.base.table import text_table
    from entrypoint.core.compose.settings import read_settings
    from entrypoint.core.data.recipe import load_catalog, with_recipe

    slug = recipe or read_settings(os.environ).recipe
    summary = catalog_summary(with_recipe(load_catalog(), slug))
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo("Recipes (KIMI_RECIPE)")
    click.echo(text_table(["id", "model", "vllm", "variants", "features (opt-in: *)"],
                          [[("> " if s == summary["recipe"] else "  ") + s + (" (provisional)" if d["provisional"] else ""),
                            d["model"],
                            d["vllm"] + "".join(f", {k.upper()} >= {v}" for k, v in d["min_stack"].items()),
                            ",".join(d["variants"]),
                            ",".join(f + ("*" if f in d["opt_in_features"] else "") for f in d["features"])]
                           for s, d in summary["recipes"].items()]))
    for s, d in summary["recipes"].items():
        if d["provisional"]:
            click.echo(f"  {s} is provisional: {d['provisional']['why'].rstrip('.')}; until "
                       f"{d['provisional']['until'].rstrip('.')}.")
    title = summary["recipes"][summary["recipe"]]["title"]
    variants = list(summary["variants"])
    click.echo(f"\n{title}: hardware (cells: nodes a variant needs; - = not supported)")
    click.echo(text_table(
        ["id", "name", "gpus", "vram", "arch", *variants, "default features", "strategies"],
        [[h, d["name"], d["host_backend"]["ranks"] if d["host_backend"] else d["gpus"],
          f"RAM ({d['host_backend']['memory']})" if d["host_backend"] else f"{d['vram_gb']:g} GB", d["arch"], *[d["variants"][v] for v in variants],
          ",".join(d["default_features"]), ",".join(d["strategies"])] for h, d in summary["hardware"].items()]))
    click.echo("\nVariants")
    click.echo(text_table(["id", "model", "precision", "needs"],
                          [[v, d["model"], d["precision"], f"{d['vram_minimum_gb']:g} GB"]
                           for v, d in summary["variants"].items()]))
    click.echo("\nStrategies (KIMI_STRATEGY)")
    click.echo(text_table(["id", "type", "name"], [[s, d["type"], d["name"]] for s, d in summary["strategies"].items()]))
    click.echo("\nFeatures (KIMI_FEATURES)")
    if not summary["features"]:
        click.echo(f"none: the {title} recipe has no features (leave KIMI_FEATURES unset or empty)")
    else:
        click.echo(text_table(["id", "description"],
                              [[f, d["description"] + (f" (not with {', '.join(d['conflicts_with'])})"
                                                       if d["conflicts_with"] else "")
                                + (f" (only {', '.join(d['strategies'])})" if d["strategies"] is not None else "")]
                               for f, d in summary["features"].items()]))
    click.echo("\nProfiles (KIMI_PROFILE)")
    if not summary["profiles"]:
        click.echo(f"none: the {title} recipe has no profiles (leave KIMI_PROFILE unset)")
        return
    click.echo(text_table(["id", "hardware", "variants", "strategies"],
                          [[p, ",".join(d["hardware"]), ",".join(d["variants"]), ",".join(d["strategies"])]
                           for p, d in summary["profiles"].items()]))
