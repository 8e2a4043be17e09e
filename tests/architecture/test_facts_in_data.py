"""Facts live in data: no hardware id, gfx target or GPU product name is a string literal in the
Python code (outside tests), and the catalog the loader shares cannot be changed by a caller."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml

from entrypoint.core.recipe import load_catalog

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for d in ("entrypoint", "buildsys", "benchmarks") for p in (ROOT / d).rglob("*.py")] + [ROOT / "build.py"]


def _hardware_words() -> set:
    data = yaml.safe_load((ROOT / "recipes" / "hardware.yaml").read_text())["hardware"]
    words = set(data)
    for hw in data.values():
        words |= {hw.get("gfx"), hw.get("k8s_product"), *hw["detect"]["names"]} - {None}
    return {w.lower() for w in words}


def _string_literals(path: Path):
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING:
            yield tok.start[0], tok.string


def test_no_hardware_literal_in_python():
    words = _hardware_words()
    found = []
    for path in CODE:
        for line, literal in _string_literals(path):
            hits = {w for w in words if re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", literal.lower())}
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{line}: {sorted(hits)}")
    assert not found, "hardware facts belong in recipes/*.yaml:\n" + "\n".join(found)


def test_the_scan_finds_a_literal(tmp_path):
    """The scan is live: a planted literal is found."""
    planted = tmp_path / "x.py"
    planted.write_text('PRODUCT = {"h200": "NVIDIA-H200"}\n')
    assert [s for _, s in _string_literals(planted)] == ['"h200"', '"NVIDIA-H200"']


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
