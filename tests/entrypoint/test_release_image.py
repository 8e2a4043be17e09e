"""The release a plan is for, and the image every rendering runs (issue 39): recipes/serving.yaml
`default_vllm` (0.33.0, the site's commands) unless the recipe's floor is later or no image of it
is built for the hardware; every rendering names <vllm>-<target> of the release the launch is
judged by, and a release without a built image is refused; Kimi-K3.1-Pro, the provisional eighth
recipe. Expected values are written by hand from recipes/serving.yaml, images/targets.yaml and
recipes/models/kimi-k3.1-pro.yaml."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.select import default_release
from entrypoint.core.data.recipe import load_catalog
from tests.deploy.shapes import render

PUBLISHED = re.compile(r"ghcr\.io/kimi-serve/kimi:[^\s\"',]+")
FORMATS = ["k8s", "compose", "sagemaker", "vertex", "azureml", "skypilot", "k8s-bench", "compose-bench", "k8s-verify"]


def images(fmt: str, env: dict) -> set:
    return {m for text in render(fmt, env).values() for m in PUBLISHED.findall(text)}


@pytest.mark.parametrize("recipe, hw, want", [
    ("kimi-k2.5", "h200", "0.33.0"),          # serving.yaml default_vllm
    ("kimi-k2.5", "mi300x", "0.33.0"),
    ("kimi-k2.5", "mi355x", "0.34.0"),        # rocm-gfx950 is built on 0.34.0 only (the ROCm nightly base)
    ("kimi-k3", "b300", "0.33.0"),            # the site's K3 commands (VLLM_USE_V2_MODEL_RUNNER) are 0.33.0's
    ("kimi-k3.1-pro", "b300", "0.34.0"),      # its floor is later than the default
    ("kimi-k3.1-pro", "h200", "0.34.0"),
])
def test_the_release_a_plan_is_for_when_nothing_names_one(recipe, hw, want):
    from entrypoint.core.data.recipe import with_recipe

    assert default_release(with_recipe(load_catalog(), recipe), hw) == want
    env = {"KIMI_RECIPE": recipe, "KIMI_HARDWARE": hw, "KIMI_SKIP_MEMORY_CHECK": "1"}
    assert build(env).selection.vllm_version == want


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_rendering_runs_the_image_of_the_release_it_is_judged_by(fmt):
    hw = "h200"
    for release in ("0.19.1", "0.32.0", "0.33.0", "0.34.0"):
        env = {"KIMI_HARDWARE": hw, "KIMI_VLLM_VERSION": release}
        assert images(fmt, env) == {f"ghcr.io/kimi-serve/kimi:{release}-h200"}, (fmt, release)
    assert images(fmt, {"KIMI_HARDWARE": hw}) == {"ghcr.io/kimi-serve/kimi:0.33.0-h200"}


def test_a_release_with_no_image_built_is_refused_with_the_ones_that_are():
    with pytest.raises(KimiError) as info:  # recorded grammar, but gfx950 has no 0.33.0 image
        render("k8s", {"KIMI_HARDWARE": "mi355x", "KIMI_VLLM_VERSION": "0.33.0"})
    assert info.value.code == "unsupported_combination"
    assert "no kimi image is built on vLLM 0.33.0 for mi355x" in info.value.message and "built: 0.34.0" in info.value.message
    with pytest.raises(KimiError) as info:  # an unrecorded release: planned with a note, no image of it
        render("compose", {"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.33.1"})
    assert "built: 0.34.0, 0.33.0, 0.32.0, 0.19.1" in info.value.message and "KIMI_IMAGE" in info.value.message
    # the user's own image of that release is theirs to name
    assert images("k8s", {"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.33.1",
                          "KIMI_IMAGE": "registry.example/kimi:0.33.1-h200"}) == set()


def test_preload_runs_on_the_release_its_gate_accepts():
    """The preload sidecar (recipes/vllm/preload.yaml: 0.32.0 and 0.34.0) runs the image of that release."""
    for release in ("0.32.0", "0.34.0"):
        docs = [d for t in render("k8s", {"KIMI_HARDWARE": "h200", "KIMI_PRELOAD": "1", "KIMI_VLLM_VERSION": release}).values()
                for d in yaml.safe_load_all(t)]
        (dep,) = [d for d in docs if d["kind"] == "Deployment"]
        pod = dep["spec"]["template"]["spec"]
        assert {c["image"] for c in pod["containers"] + pod["initContainers"]} == {f"ghcr.io/kimi-serve/kimi:{release}-h200"}


def test_digests_are_keyed_by_a_built_tag(tmp_path):
    from entrypoint.core.data.recipe_schema import ImageRepo

    user = {"uid": 10001, "gid": 10001, "home": "/home/kimi"}
    ok = ImageRepo(registry="r", name="kimi", user=user, releases={"0.34.0": ["h200"]},
                   digests={"0.34.0-h200": "sha256:" + "a" * 64})
    assert ok.digests
    with pytest.raises(ValueError, match=re.escape("0.33.0-h200 is none of them")):
        ImageRepo(registry="r", name="kimi", user=user, releases={"0.34.0": ["h200"]},
                  digests={"0.33.0-h200": "sha256:" + "a" * 64})


# ---------------------------------------------------------------- Kimi-K3.1-Pro (provisional)

K31 = {"KIMI_RECIPE": "kimi-k3.1-pro"}


def test_k31_plans_on_b300_with_vllm_034():
    launch = build({**K31, "KIMI_HARDWARE": "b300"})
    (engine,) = launch.plan.engines
    assert list(engine.argv[:3]) == ["vllm", "serve", "moonshotai/Kimi-K3.1-Pro"]
    assert engine.vllm.tensor_parallel == 8
    args = list(engine.argv)
    assert args[args.index("--tool-call-parser") + 1] == "kimi_k3" and args[args.index("--reasoning-parser") + 1] == "kimi_k3"
    assert not [k for k in engine.env if k == "VLLM_USE_V2_MODEL_RUNNER"]
    assert any("provisional" in note for note in launch.notes)
    two = build({**K31, "KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
                 "KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "eth0"})
    assert two.plan.nodes == 2
    assert images("k8s", {**K31, "KIMI_HARDWARE": "b300"}) == {"ghcr.io/kimi-serve/kimi:0.34.0-b300"}


@pytest.mark.parametrize("env, words", [
    ({"KIMI_HARDWARE": "b300", "KIMI_VLLM_VERSION": "0.33.0"}, ["needs vLLM >= 0.34.0", "0.33.0"]),
    ({"KIMI_HARDWARE": "mi355x"}, ["no launch for mi355x", "CUDA only", "Supported: h100"]),
    ({"KIMI_HARDWARE": "cpu", "KIMI_MODEL": "/models/tiny"}, ["no launch for cpu", "refuses sparse attention"]),
    ({"KIMI_HARDWARE": "h200"}, ["1680 GB", "KIMI_NODES=2"]),  # one H200 node does not hold it
])
def test_k31_is_refused_where_the_sources_say_it_cannot_run(env, words):
    with pytest.raises(KimiError) as info:
        build({**K31, **env})
    for word in words:
        assert word in info.value.message, info.value.message


def test_list_and_the_readme_say_which_recipe_is_provisional_and_why():
    out = subprocess.run([sys.executable, "-m", "entrypoint", "list", "--format", "json"], capture_output=True,
                         text=True, timeout=120)
    recipes = json.loads(out.stdout)["recipes"]
    assert [s for s, r in recipes.items() if r["provisional"]] == ["kimi-k3.1-pro"]
    assert "no vLLM recipe page" in recipes["kimi-k3.1-pro"]["provisional"]["why"]
    text = subprocess.run([sys.executable, "-m", "entrypoint", "list"], capture_output=True, text=True, timeout=120).stdout
    assert "kimi-k3.1-pro (provisional)" in text and "kimi-k3.1-pro is provisional:" in text
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "| `kimi-k3.1-pro` (provisional) |" in readme and "*Provisional:* `kimi-k3.1-pro`" in readme


def test_a_provisional_recipe_cites_its_sources():
    from entrypoint.core.data.recipe_schema import Recipe

    raw = yaml.safe_load((load_catalog_dir() / "models" / "kimi-k3.1-pro.yaml").read_text())
    assert {"architecture", "min_vllm_version", "hardware", "vram_minimum_gb", "parsers"} <= set(raw["sources"])
    assert "W: vllm/model_executor/models/registry.py" in raw["sources"]["architecture"]
    with pytest.raises(ValueError, match="cites its sources"):
        Recipe.model_validate({**raw, "sources": {}})


def load_catalog_dir():
    from entrypoint.core.data.recipe import default_recipes_dir

    return default_recipes_dir()


def test_a_recipes_longest_silence_fits_twice_in_the_proxies_idle_timeout(tmp_path):
    """Issue 38: Kimi-K3 (and K3.1-Pro, same tool parser) may stream nothing for ~32 s (vllm#50604);
    recipes/serving.yaml streams.idle_timeout_s (600 s) must hold it twice, or the data is refused."""
    import shutil

    from entrypoint.core.data.recipe import RecipeDataError, default_recipes_dir, load_catalog_from

    silences = {s: r.chat.longest_silence.seconds for s, r in load_catalog().recipes.items() if r.chat.longest_silence}
    assert silences == {"kimi-k3.1-pro": 32, "kimi-k3": 32}
    data = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), data, ignore=shutil.ignore_patterns(".validated"))
    serving = data / "serving.yaml"
    serving.write_text(serving.read_text().replace("idle_timeout_s: 600", "idle_timeout_s: 60"))
    with pytest.raises(RecipeDataError, match="longest_silence 32 s does not fit twice"):
        load_catalog_from(data)
