"""`kimi-serve list`: what can be chosen, and which combinations are valid."""

from __future__ import annotations

import json
import math

import click

from entrypoint.cli._context import guarded


def _variant_cell(catalog, hw_id: str, vid: str) -> str:
    from entrypoint.core.select import variant_unsupported

    if variant_unsupported(catalog, vid, hw_id):
        return "-"
    hw, var = catalog.hardware[hw_id], catalog.recipe.variants[vid]
    nodes = math.ceil(var.vram_minimum_gb / hw.vram_gb)
    return "1 node" if nodes == 1 else f">= {nodes} nodes"


def catalog_summary(catalog) -> dict:
    from entrypoint.core.recipe import default_features

    r = catalog.recipe
    return {
        "hardware": {h: {"name": catalog.hardware[h].display_name, "brand": catalog.hardware[h].brand,
                         "gpus": catalog.hardware[h].gpu_count, "vram_gb": catalog.hardware[h].vram_gb,
                         "arch": catalog.hardware[h].arch, "default_features": list(default_features(r, h)),
                         "variants": {v: _variant_cell(catalog, h, v) for v in r.variants}}
                     for h in r.hardware},
        "variants": {v: {"model": var.model_id or r.model.model_id, "precision": var.precision,
                         "vram_minimum_gb": var.vram_minimum_gb, "description": var.description}
                     for v, var in r.variants.items()},
        "strategies": {s: {"name": catalog.strategies[s].display_name, "type": catalog.strategies[s].deploy_type}
                       for s in r.compatible_strategies},
        "features": {f: {"description": feat.description, "conflicts_with": feat.conflicts_with}
                     for f, feat in r.features.items()},
        "profiles": {p: {"description": prof.description, "hardware": prof.hardware, "variants": prof.variants,
                         "strategies": prof.strategies} for p, prof in r.profiles.items()},
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@guarded
def command(fmt: str) -> None:
    """Hardware, variants, strategies, features and profiles, with the valid combinations."""
    from entrypoint.core.recipe import load_catalog
    from entrypoint.core.table import text_table

    summary = catalog_summary(load_catalog())
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    variants = list(summary["variants"])
    click.echo("Hardware (cells: nodes a variant needs; - = not supported)")
    click.echo(text_table(
        ["id", "name", "gpus", "vram", "arch", *variants, "default features"],
        [[h, d["name"], d["gpus"], f"{d['vram_gb']:g} GB", d["arch"], *[d["variants"][v] for v in variants],
          ",".join(d["default_features"])] for h, d in summary["hardware"].items()]))
    click.echo("\nVariants")
    click.echo(text_table(["id", "model", "precision", "needs"],
                          [[v, d["model"], d["precision"], f"{d['vram_minimum_gb']:g} GB"]
                           for v, d in summary["variants"].items()]))
    click.echo("\nStrategies (KIMI_STRATEGY)")
    click.echo(text_table(["id", "type", "name"], [[s, d["type"], d["name"]] for s, d in summary["strategies"].items()]))
    click.echo("\nFeatures (KIMI_FEATURES)")
    click.echo(text_table(["id", "description"],
                          [[f, d["description"] + (f" (not with {', '.join(d['conflicts_with'])})"
                                                   if d["conflicts_with"] else "")]
                           for f, d in summary["features"].items()]))
    click.echo("\nProfiles (KIMI_PROFILE)")
    click.echo(text_table(["id", "hardware", "variants", "strategies"],
                          [[p, ",".join(d["hardware"]), ",".join(d["variants"]), ",".join(d["strategies"])]
                           for p, d in summary["profiles"].items()]))
