"""A broad sweep of configurations, built from the recipe data itself: every hardware x variant x
strategy the recipe offers (with node counts and prefill/decode pool shapes), feature sets,
every profile where it applies, and forced memory cases. Each entry: (id, settings)."""

from __future__ import annotations

from typing import Dict, Iterator, Tuple

from entrypoint.core.recipe import load_catalog
from entrypoint.core.select import variant_unsupported

ADDRS = {"KIMI_HEAD_ADDR": "node-0.kimi.internal", "KIMI_IFACE": "eth9"}


def _pd(prefill: int, decode: int) -> Dict[str, str]:
    return {"KIMI_PREFILL_NODES": str(prefill), "KIMI_DECODE_NODES": str(decode),
            "KIMI_PREFILL_ADDRS": ",".join(f"prefill-{i}.kimi.internal" for i in range(max(1, prefill))),
            "KIMI_DECODE_ADDRS": ",".join(f"decode-{i}.kimi.internal" for i in range(max(1, decode))),
            "KIMI_IFACE": "eth9"}


def configurations() -> Iterator[Tuple[str, Dict[str, str]]]:
    cat = load_catalog()
    recipe = cat.recipe
    for hw in recipe.hardware:
        for vid in recipe.variants:
            if variant_unsupported(cat, vid, hw):
                continue
            base = {"KIMI_HARDWARE": hw, "KIMI_VARIANT": vid, "KIMI_SKIP_MEMORY_CHECK": "1"}
            for sid in recipe.compatible_strategies:
                kind = cat.strategies[sid].deploy_type
                if kind == "single_node":
                    shapes = [("n1", {})]
                elif kind == "multi_node":
                    shapes = [(f"n{n}", {"KIMI_NODES": str(n), **ADDRS}) for n in (2, 4)]
                else:
                    shapes = [(f"pd{p}{d}-{mode}", {**_pd(p, d), "KIMI_PREFILL_PARALLELISM": mode,
                                                    "KIMI_DECODE_PARALLELISM": mode})
                              for p, d in ((0, 0), (1, 1), (2, 2)) for mode in ("tp", "tep", "dep")]
                for shape, extra in shapes:
                    for feats in (None, "+text_only,-encoder_parallel", ""):
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
    # Forced memory cases: below the minimum, started anyway; and user parallel sizes.
    for hw in recipe.hardware:
        yield f"forced/{hw}/tp2", {"KIMI_HARDWARE": hw, "KIMI_SKIP_MEMORY_CHECK": "1",
                                   "KIMI_EXTRA_ARGS": "-tp 2 --max-model-len 8192"}
