"""A broad sweep of configurations of every recipe, built from the recipe data itself: every
hardware x variant x strategy each recipe offers there (above its GPU floors) (with node counts and prefill/decode pool shapes), feature sets,
every profile where it applies, and forced memory cases. Each entry: (id, settings)."""

from __future__ import annotations

from typing import Dict, Iterator, Tuple

from entrypoint.core.compose.select import min_gpus, offered_strategies, variant_unsupported
from entrypoint.core.data.recipe import load_catalog, with_recipe

ADDRS = {"KIMI_HEAD_ADDR": "node-0.kimi.internal", "KIMI_IFACE": "eth9"}


def _pd(prefill: int, decode: int) -> Dict[str, str]:
    return {"KIMI_PREFILL_NODES": str(prefill), "KIMI_DECODE_NODES": str(decode),
            "KIMI_PREFILL_ADDRS": ",".join(f"prefill-{i}.kimi.internal" for i in range(max(1, prefill))),
            "KIMI_DECODE_ADDRS": ",".join(f"decode-{i}.kimi.internal" for i in range(max(1, decode))),
            "KIMI_IFACE": "eth9"}


def _feature_sets(recipe, sid: str):
    """None (the defaults), "" (none), and every feature the strategy takes, less declared conflicts."""
    chosen = []
    for fid, feat in recipe.features.items():
        if feat.strategies is not None and sid not in feat.strategies:
            continue
        if not any(other in chosen for other in feat.conflicts_with):
            chosen.append(fid)
    return (None, "", ",".join(chosen))


def configurations(slugs=None) -> Iterator[Tuple[str, Dict[str, str]]]:
    """The sweep of every recipe (or of `slugs`): ids are `<slug>:<variant>/<hw>/<strategy>/...`."""
    catalog = load_catalog()
    for slug in slugs or catalog.recipes:
        for cid, settings in _recipe_configurations(with_recipe(catalog, slug)):
            yield f"{slug}:{cid}", {"KIMI_RECIPE": slug, **settings}


def _recipe_configurations(cat) -> Iterator[Tuple[str, Dict[str, str]]]:
    recipe = cat.recipe
    for hw in recipe.hardware:
        gpus = cat.hardware[hw].gpu_count
        for vid in recipe.variants:
            if variant_unsupported(cat, vid, hw):
                continue
            base = {"KIMI_HARDWARE": hw, "KIMI_VARIANT": vid, "KIMI_SKIP_MEMORY_CHECK": "1"}
            for sid in offered_strategies(cat, hw):
                kind = cat.strategies[sid].deploy_type
                floor = min_gpus(cat, sid, hw)
                if kind == "single_node":
                    shapes = [("n1", {})] if gpus >= floor else []
                elif kind == "multi_node":
                    shapes = [(f"n{n}", {"KIMI_NODES": str(n), **ADDRS}) for n in (2, 4) if n * gpus >= floor]
                else:
                    shapes = [(f"pd{p}{d}-{mode}", {**_pd(p, d), "KIMI_PREFILL_PARALLELISM": mode,
                                                    "KIMI_DECODE_PARALLELISM": mode})
                              for p, d in ((0, 0), (1, 1), (2, 2)) for mode in ("tp", "tep", "dep")]
                for shape, extra in shapes:
                    for feats in _feature_sets(recipe, sid):
                        settings = {**base, "KIMI_STRATEGY": sid, **extra}
                        if feats is not None:
                            settings["KIMI_FEATURES"] = feats
                        yield f"{vid}/{hw}/{sid}/{shape}/{feats if feats is not None else 'defaults'}", settings
    for pid, prof in recipe.profiles.items():
        for hw in prof.hardware:
            for vid in prof.variants:
                for sid in prof.strategies:
                    settings = {"KIMI_HARDWARE": hw, "KIMI_VARIANT": vid, "KIMI_STRATEGY": sid, "KIMI_PROFILE": pid,
                                "KIMI_SKIP_MEMORY_CHECK": "1"}
                    if cat.strategies[sid].deploy_type == "multi_node":
                        settings.update(KIMI_NODES="2", **ADDRS)
                    if prof.required_args:
                        settings["KIMI_EXTRA_ARGS"] = " ".join(f"{flag} {int(rule.min or 1)}"
                                                               for flag, rule in prof.required_args.items())
                    yield f"profile:{pid}/{vid}/{hw}/{sid}", settings
    # Forced memory cases: below the minimum, started anyway; with a vLLM argument of the user's
    # (parallel sizes are the strategy's: a -tp of the user's is refused, issue 37).
    for hw in recipe.hardware:
        if "single_node_tp" in offered_strategies(cat, hw) and cat.hardware[hw].gpu_count >= min_gpus(
                cat, "single_node_tp", hw):
            yield f"forced/{hw}/max-model-len", {"KIMI_HARDWARE": hw, "KIMI_SKIP_MEMORY_CHECK": "1",
                                                 "KIMI_EXTRA_ARGS": "--max-model-len 8192"}
