"""recipes/platforms.yaml: valid, consistent with the hardware data and the settings model, and the
only place platform facts live."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from entrypoint.core.platforms import label, load_platforms, model_source, offering, variables
from entrypoint.core.errors import KimiError
from entrypoint.core.recipe import load_catalog
from entrypoint.core.settings import EXTERNAL_FIELDS

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


def test_every_platform_variable_the_entrypoint_reads_is_declared_in_settings():
    declared = {f.env for f in EXTERNAL_FIELDS}
    data = load_platforms()
    read = {name for p in data.platforms.values() for name in variables(p)}
    read |= {f"{p.flag_prefix}<NAME>" for p in data.platforms.values() if p.flag_prefix}
    for store in data.object_storage.schemes.values():
        read |= set(store.endpoint_env + store.region_env + store.key_env + store.other_credentials_env)
        read |= {n for n in (store.session_env, store.metadata_disabled_env) if n}
    assert read - declared == set(), "declare these in entrypoint/core/settings.py FIELDS (external=...)"
    owners = {f.env: f.owner for f in EXTERNAL_FIELDS}
    assert {owners[name] for name in read} <= {"SageMaker", "Vertex AI", "Azure ML", "SkyPilot", "you (S3)",
                                               "you / the platform (S3)", "EKS / the platform (S3)",
                                               "ECS / the platform (S3)", "the platform (S3)", "you (GCS)"}


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
