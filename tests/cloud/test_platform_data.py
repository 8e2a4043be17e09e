"""recipes/platforms.yaml: valid, consistent with the hardware data and the settings model, and the
only place platform facts live."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.settings import EXTERNAL_FIELDS
from entrypoint.core.data.platforms import label, load_platforms, model_source, offering, variables
from entrypoint.core.data.recipe import load_catalog

ROOT = Path(__file__).resolve().parents[2]


def test_offerings_name_known_hardware_with_the_gpu_count_the_recipe_uses():
    data, hardware = load_platforms(), load_catalog().hardware
    for pid, platform in data.platforms.items():
        assert platform.offerings, pid
        for hw, offer in platform.offerings.items():
            assert hw in hardware, (pid, hw)
            count = offer.accelerator_count or (int(offer.accelerators.split(":")[1]) if offer.accelerators else None)
            if count is not None:
                assert count == hardware[hw].gpu_count, (pid, hw)


class _Recording(dict):
    """An environment that records every name the code asks it for (present or not)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.asked.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.asked.add(key)
        return super().__contains__(key)

    def copy(self):
        return self


def test_every_variable_the_platform_code_reads_is_declared_in_settings(tmp_path):
    """Observed, not listed: the platform wiring and the object-store checks run with an
    environment that records each name asked for; every one is a declared setting (a KIMI_* or an
    external variable with its owner), whatever the data names."""
    from entrypoint.node import objectstore
    from entrypoint.node.platform import apply_platform

    declared = {f.env: f.owner for f in EXTERNAL_FIELDS}
    asked = set()
    for pid, found in load_platforms().platforms.items():
        env = _Recording({"KIMI_HARDWARE": "h200", "KIMI_PLATFORM": pid})
        env.update({name: "1" for name in found.detect.env})
        try:
            apply_platform(env, tuple(found.detect.args[:1]))
        except KimiError:
            pass  # a value the contract refuses: the names were still asked
        asked |= env.asked
    for uri in ("s3://bucket/kimi", "gs://bucket/kimi"):
        env = _Recording({"AWS_EC2_METADATA_DISABLED": "true"})
        objectstore.check(uri, env)
        asked |= env.asked
    foreign = {n for n in asked if not n.startswith("KIMI_") and not n.startswith("SM_VLLM_")}
    assert foreign, "the recording saw nothing: the check would pass vacuously"
    assert foreign - set(declared) == set(), "declare these in entrypoint/core/compose/settings.py FIELDS (external=...)"
    assert all(declared[name] for name in foreign), "every external variable names who sets it"
    # the data's own list of what is read is what the code reads
    listed = {name for p in load_platforms().platforms.values() for name in variables(p)}
    assert listed <= asked


def test_a_hardware_with_no_offering_is_a_clear_error_listing_what_is_offered():
    with pytest.raises(KimiError) as err:
        offering("sagemaker", "mi355x")
    assert "mi355x" in err.value.message and "ml.p5e.48xlarge" in err.value.message
    assert err.value.code == "unsupported_combination"


def test_no_platform_fact_is_a_literal_in_python():
    data = load_platforms()
    facts = {label(o) for p in data.platforms.values() for o in p.offerings.values()}
    facts |= {o.accelerator_type for p in data.platforms.values() for o in p.offerings.values() if o.accelerator_type}
    facts |= {name for p in data.platforms.values() for name in variables(p)}
    sources = [p for p in (ROOT / "entrypoint").rglob("*.py") if p.name != "settings.py"]
    for path in sources:
        text = path.read_text()
        for fact in facts:
            assert not re.search(rf"[\"']{re.escape(fact)}[\"']", text), f"{fact} is written in {path}"


@pytest.mark.parametrize("model,kind", [("moonshotai/Kimi-K2.5", "hub"), ("/opt/ml/model", "path"),
                                        ("s3://bucket/kimi", "object"), ("gs://bucket/kimi", "object")])
def test_model_sources(model, kind):
    assert model_source(model).kind == kind


def test_an_unknown_scheme_is_a_clear_error():
    with pytest.raises(KimiError, match="s3://, gs://"):
        model_source("ftp://host/kimi")
