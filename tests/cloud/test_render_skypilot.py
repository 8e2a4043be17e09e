"""SkyPilot task YAML parsed by SkyPilot itself (sky.Task.from_yaml), one node and several."""

from __future__ import annotations

import pytest

from tests.cloud.conftest import need, render


@pytest.fixture(scope="module")
def sky():
    return need("sky")


def task(sky, env, tmp_path):
    """As `sky launch TASK.yaml --env HF_TOKEN` reads it (sky.Task.from_yaml_config with the
    --env overrides, what sky.Task.from_yaml calls)."""
    import yaml

    (_, text), = render("skypilot", env).items()
    return sky.Task.from_yaml_config(yaml.safe_load(text), env_overrides=[("HF_TOKEN", "from-the-shell")])


@pytest.mark.slow
def test_single_node_task(sky, tmp_path):
    t = task(sky, {"KIMI_HARDWARE": "h200"}, tmp_path)
    res, = t.resources
    assert res.accelerators == {"H200": 8} and res.disk_size >= 600 and t.num_nodes == 1
    assert res.extract_docker_image() == "ghcr.io/kimi-serve/kimi:0.33.0-h200"
    assert t.envs["KIMI_PLATFORM"] == "skypilot" and t.run.strip() == "kimi-serve"


def test_multi_node_is_skypilots_node_count_and_no_head_address_is_written(sky, tmp_path):
    t = task(sky, {"KIMI_HARDWARE": "h100", "KIMI_NODES": "2"}, tmp_path)
    assert t.num_nodes == 2 and t.envs["KIMI_NODES"] == "2" and t.envs["KIMI_IFACE"] == "auto"
    assert "KIMI_HEAD_ADDR" not in t.envs  # each node maps SKYPILOT_NODE_IPS itself


@pytest.mark.slow
def test_hf_token_is_required_at_launch_never_written(sky, tmp_path):
    import yaml

    (_, text), = render("skypilot", {"KIMI_HARDWARE": "h200", "HF_TOKEN": "hf_secret"}).items()
    assert "hf_secret" not in text and "HF_TOKEN" in text
    with pytest.raises(ValueError, match="HF_TOKEN"):  # without --env HF_TOKEN SkyPilot refuses the task
        sky.Task.from_yaml_config(yaml.safe_load(text))
