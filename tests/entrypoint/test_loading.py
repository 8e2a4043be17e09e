"""KIMI_LOAD_FORMAT: the loader `auto` picks for every storage kind, the flags against each supported
vLLM release's grammar, the loader's extra config checked by vLLM's own rules, the start-up budget
in the launch and in every rendering, and the weights-volume sample (bounded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from entrypoint.core.compose.launch import NodeFacts, compose_launch
from entrypoint.core.base import errors as E
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose import loading
from entrypoint.core.compose.loading import StorageFacts
from entrypoint.core.compose.settings import read_settings
from entrypoint.core.vllm.vllm_cli import available_versions, parse, spec_for, values
from tests.deploy.shapes import launch_for, render

ALL = ("safetensors", "fastsafetensors", "runai_streamer", "instanttensor")
H200 = {"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": "0.33.0"}


def launch(env, storage=None, user_args=()):
    return compose_launch(read_settings({**H200, **env}, user_args), NodeFacts(storage=storage))


def argv_values(launch_):
    proc = launch_.plan.processes[0]
    return values(list(proc.argv[2:]), spec_for(launch_.selection.vllm_version))


def local(fstype="ext4", gds=False, installed=ALL, **kw):
    return StorageFacts(path="/weights", fstype=fstype, gds_driver=gds, installed=installed, **kw)


# ------------------------------------------------------------------------- the data


def test_every_supported_release_has_load_formats_and_config_rules():
    data = loading.load_data()
    for version in available_versions():
        assert version in data.load_formats, version
        for cls in data.extra_config.values():
            assert version in cls.keys, version
        for lid, loader in data.loaders.items():
            assert loader.load_format in data.load_formats[version], (version, lid)
            assert any(loader.load_format in c.formats for c in data.extra_config.values()), lid


@pytest.mark.parametrize("version", available_versions())
@pytest.mark.parametrize("fmt", ["auto", "runai_streamer", "fastsafetensors", "instanttensor", "safetensors"])
def test_emitted_flags_parse_with_each_releases_grammar(version, fmt):
    env = {"KIMI_VLLM_VERSION": version, "KIMI_LOAD_FORMAT": fmt}
    found = launch(env, storage=local("nfs4"))
    proc = found.plan.processes[0]
    spec = spec_for(version)
    parse([(t, "x") for t in proc.argv[2:]], spec, strict=True)  # vLLM's parser would accept every token
    got = argv_values(found)
    want = "runai_streamer" if fmt == "auto" else fmt
    assert got["load_format"] == want
    if fmt == "auto":  # a network volume: the streamer with its concurrency raised
        assert json.loads(got["model_loader_extra_config"]) == {"concurrency": 32}


def test_measurements_name_their_result_files_and_match_them():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for m in loading.load_data().measurements:
        result = json.loads((root / m.source).read_text())
        assert result["facts"]["gpu"] and result["checkpoint"]["bytes"] > 10 ** 10
        runs = [r for r in result["runs"] if r.get("resident_before", 1) == 0]
        assert all(r.get("check", "ok") == "ok" for r in runs)
        for lid, gbps in m.loaders.items():
            what = {"fastsafetensors": "fastsafetensors_nogds"}.get(lid, lid)
            import statistics

            median = statistics.median(r["gbps"] for r in runs if r["what"] == what)
            assert abs(median - gbps) < 0.01, (m.id, lid, median, gbps)


# ------------------------------------------------------------------------- the choice


@pytest.mark.parametrize("facts,kind", [
    (StorageFacts(object_store=True), "object"),
    (StorageFacts(fstype="ext4"), "local"),
    (StorageFacts(fstype="xfs", gds_driver=True), "local_gds"),
    (StorageFacts(fstype="ext4", gds_driver=False), "local"),
    (StorageFacts(fstype="overlay", gds_driver=True), "local"),
    (StorageFacts(fstype="nfs4"), "network"),
    (StorageFacts(fstype="lustre"), "network"),
    (StorageFacts(fstype="fuse.someday"), "network"),
    (StorageFacts(fstype="tmpfs"), "memory"),
    (StorageFacts(), "unknown"),
    (None, "unknown"),
])
def test_storage_kinds(facts, kind):
    assert loading.storage_kind(facts) == kind


@pytest.mark.parametrize("storage,want,config", [
    (local("ext4"), "runai_streamer", None),  # measured fastest on local disk (1.89 GB/s vs 1.72, 1.41, 1.33)
    (local("xfs", gds=True), "runai_streamer", None),  # GDS is off in vLLM for TP > 1: the local figures decide
    (local("nfs"), "runai_streamer", {"concurrency": 32}),
    (local("tmpfs"), "safetensors", None),
    (local(""), "safetensors", None),
    (local("ext4", installed=("safetensors", "instanttensor")), "instanttensor", None),  # the next fastest there
    (local("ext4", installed=("safetensors",)), "safetensors", None),
    (local("nfs", installed=("safetensors",)), "safetensors", None),  # the rule's loader is missing: vLLM's default
])
def test_auto_picks_per_storage_kind(storage, want, config):
    got = argv_values(launch({"KIMI_LOAD_FORMAT": "auto"}, storage))
    assert got["load_format"] == want
    assert (json.loads(got["model_loader_extra_config"]) if "model_loader_extra_config" in got else None) == config


def test_auto_for_object_storage_streams():
    found = launch({"KIMI_LOAD_FORMAT": "auto", "KIMI_MODEL": "s3://bucket/kimi"}, None)
    assert argv_values(found)["load_format"] == "runai_streamer" and found.load.storage == "object"


def test_auto_is_the_fastest_measured_loader_for_local_storage():
    data = loading.load_data()
    chosen = argv_values(launch({"KIMI_LOAD_FORMAT": "auto"}, local("ext4")))["load_format"]
    speeds = {lid: loading.measured_gbps(lid, "local") for lid in data.loaders}
    assert chosen == max(speeds, key=speeds.get)


def test_auto_without_node_facts_leaves_the_choice_to_the_node():
    found = launch({"KIMI_LOAD_FORMAT": "auto"}, None)
    assert "load_format" not in argv_values(found) and found.load.reason.startswith("decided on the node")


def test_user_extra_config_replaces_autos_and_is_checked():
    args = ("--model-loader-extra-config", '{"concurrency": 8}')
    got = argv_values(launch({"KIMI_LOAD_FORMAT": "auto"}, local("nfs"), args))
    assert json.loads(got["model_loader_extra_config"]) == {"concurrency": 8}


# ------------------------------------------------------------------------- default launches


@pytest.mark.parametrize("env", [{}, {"KIMI_NODES": "2", "KIMI_STRATEGY": "multi_node_tp", "KIMI_HEAD_ADDR": "10.0.0.1",
                                      "KIMI_IFACE": "eth0"}])
def test_recipe_is_the_default_and_changes_nothing(env):
    default, explicit = launch(env), launch({**env, "KIMI_LOAD_FORMAT": "recipe"}, local("nfs"))
    assert default.plan == explicit.plan and default.load is None and explicit.load is None
    for proc in default.plan.processes:
        assert "VLLM_ENGINE_READY_TIMEOUT_S" not in proc.env and "--load-format" not in proc.argv


def test_recipe_changes_no_pd_cluster_either():
    env = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster"}
    assert launch_for("k8s", env).plan == launch_for("k8s", {**env, "KIMI_LOAD_FORMAT": "recipe"}).plan


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("env,args,code,words", [
    ({"KIMI_LOAD_FORMAT": "fastest"}, (), E.UNKNOWN_VALUE, "not a load format of vLLM 0.33.0"),
    ({"KIMI_LOAD_FORMAT": "bitsandbytes"}, (), E.UNKNOWN_VALUE, "not a load format of vLLM 0.33.0"),
    ({"KIMI_LOAD_FORMAT": "auto"}, ("--load-format", "pt"), E.INVALID_VALUE, "set KIMI_LOAD_FORMAT"),
    ({"KIMI_LOAD_FORMAT": "recipe"}, ("--load_format=pt",), E.INVALID_VALUE, "set KIMI_LOAD_FORMAT"),
    ({"KIMI_LOAD_FORMAT": "instanttensor", "KIMI_MODEL": "gs://b/m"}, (), E.UNSUPPORTED_COMBINATION, "object storage"),
    ({"KIMI_LOAD_FORMAT": "runai_streamer"}, ("--model-loader-extra-config", '{"concurency": 8}'), E.INVALID_VALUE,
     "concurency, which --load-format runai_streamer does not take"),
    ({"KIMI_LOAD_FORMAT": "runai_streamer"}, ("--model-loader-extra-config", '{"concurrency": 0}'), E.INVALID_VALUE,
     "above 0"),
    ({"KIMI_LOAD_FORMAT": "runai_streamer"}, ("--model-loader-extra-config", '{"memory_limit": -2}'), E.INVALID_VALUE,
     "-1 for no limit"),
    ({"KIMI_LOAD_FORMAT": "runai_streamer"}, ("--model-loader-extra-config.distributed", "yes"), E.INVALID_VALUE,
     "true or false"),
    ({"KIMI_LOAD_FORMAT": "safetensors"}, ("--model-loader-extra-config", "[1]"), E.INVALID_VALUE, "JSON object"),
    ({"KIMI_LOAD_FORMAT": "safetensors"}, ("--model-loader-extra-config", "{x"), E.INVALID_VALUE, "not JSON"),
    ({"KIMI_LOAD_FORMAT": "safetensors", "KIMI_VLLM_VERSION": "0.19.1"},
     ("--model-loader-extra-config", '{"enable_weights_track": true}'), E.INVALID_VALUE, "in vLLM 0.19.1"),
])
def test_bad_input_is_one_clear_error(env, args, code, words):
    with pytest.raises(KimiError) as err:
        launch(env, local("ext4"), args)
    assert err.value.code == code and words in err.value.message


def test_the_same_config_is_accepted_where_the_release_has_the_key():
    args = ("--model-loader-extra-config", '{"enable_weights_track": true}')
    assert argv_values(launch({"KIMI_LOAD_FORMAT": "safetensors"}, local(), args))["load_format"] == "safetensors"


def test_cli_bad_load_format_exits_2_with_one_line():
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **H200, "KIMI_LOAD_FORMAT": "nope"}
    run = subprocess.run([sys.executable, "-m", "entrypoint", "print"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "KIMI_LOAD_FORMAT=nope is not a load format" in run.stderr


# ------------------------------------------------------------------------- the start-up budget


def test_budget_follows_size_and_loader():
    cat = launch({}).catalog
    data = loading.load_data()
    floor = cat.serving.health.start_period_s
    small = loading.startup_budget_s(floor, 30, 100, "runai_streamer", "local")
    big = loading.startup_budget_s(floor, 30, 5000, "runai_streamer", "local")
    slow = loading.startup_budget_s(floor, 30, 5000, "safetensors", "local")
    network = loading.startup_budget_s(floor, 30, 5000, "runai_streamer", "network")
    assert small == floor < big < slow and big < network
    load_s = 5000 / loading.measured_gbps("runai_streamer", "local")
    assert big >= data.budget.engine_overhead_s + data.budget.margin * load_s and big % 30 == 0


def test_engine_ready_timeout_is_the_budget_on_every_vllm_process():
    env = {"KIMI_HARDWARE": "h200", "KIMI_LOAD_FORMAT": "safetensors", "KIMI_STRATEGY": "pd_cluster"}
    found = launch_for("k8s", env)
    budget = loading.launch_budget_s(found.plan, found.catalog, found.load)
    assert budget > found.catalog.serving.health.start_period_s  # storage unknown: a conservative figure
    assert {p.role for p in found.plan.processes} >= {"router", "prefill", "decode"}
    for proc in found.plan.processes:
        if proc.role == "router":  # vllm-router takes no vLLM arguments and no engine
            assert "VLLM_ENGINE_READY_TIMEOUT_S" not in proc.env and "--load-format" not in proc.argv
        else:
            assert proc.env["VLLM_ENGINE_READY_TIMEOUT_S"] == str(budget)


def _compose_start(env):
    doc = yaml.safe_load(render("compose", env)["compose.yaml"])
    return {int(s["healthcheck"]["start_period"].rstrip("s")) for s in doc["services"].values() if "healthcheck" in s}


def _k8s_start(env):
    out = set()
    for text in render("k8s", env).values():
        for doc in yaml.safe_load_all(text):
            for c in _containers(doc):
                if "startupProbe" in c:
                    out.add(c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"])
    return out


def _containers(node):
    if isinstance(node, dict):
        if "containers" in node and isinstance(node["containers"], list):
            yield from node["containers"]
        for v in node.values():
            yield from _containers(v)
    elif isinstance(node, list):
        for v in node:
            yield from _containers(v)


def _vertex_start(env):
    spec = json.loads(render("vertex", env)["vertex-model-upload.json"])["model"]["containerSpec"]["startupProbe"]
    return {spec["periodSeconds"] * spec["failureThreshold"]}


def _azureml_start(env):
    doc = yaml.safe_load(render("azureml", env)["azureml-deployment.yml"])
    return {doc["liveness_probe"]["initial_delay"]}


RENDERINGS = {"compose": _compose_start, "vertex": _vertex_start, "azureml": _azureml_start}


@pytest.mark.parametrize("fmt", sorted(RENDERINGS))
def test_every_rendering_follows_the_budget(fmt):
    floor = launch({}).catalog.serving.health.start_period_s
    assert RENDERINGS[fmt](H200) == {floor}  # default launches: serving.yaml's start period, unchanged
    env = {**H200, "KIMI_LOAD_FORMAT": "safetensors"}
    want = loading.launch_budget_s(launch_for(fmt, env).plan, launch_for(fmt, env).catalog, launch_for(fmt, env).load)
    assert want > floor  # storage unknown at render: a conservative figure for 595 GB
    got = RENDERINGS[fmt](env)
    assert min(got) >= want and max(got) - want < 60  # whole probe periods


@pytest.mark.parametrize("env", [{"KIMI_HARDWARE": "h200"}, {"KIMI_HARDWARE": "h200", "KIMI_LOAD_FORMAT": "safetensors"},
                                 {"KIMI_HARDWARE": "h200", "KIMI_LOAD_FORMAT": "runai_streamer", "KIMI_MODEL": "s3://b/m"},
                                 {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_LOAD_FORMAT": "safetensors"},
                                 {"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": "b200", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
                                  "KIMI_LOAD_FORMAT": "safetensors"}])
def test_kubernetes_probes_a_start_by_the_recipes_bound(env):
    """Issue 50: the startupProbe is the recipe's bound on any start, whatever the launch's budget (the
    container keeps that itself: node/startup.py), so the chart looks it up by recipe."""
    found = launch_for("k8s", env)
    bound = loading.startup_bound_s(found.catalog)
    assert _k8s_start(env) == {bound}
    assert bound >= loading.launch_budget_s(found.plan, found.catalog, found.load) >= 3600


def test_the_bound_holds_every_budget_of_the_recipe():
    """No launch's budget passes its recipe's bound: every variant x loader x storage kind, one node's
    share and two pools' copies on one node."""
    from entrypoint.core.data.recipe import load_catalog, with_recipe

    data, catalog = loading.load_data(), load_catalog()
    for slug in catalog.recipes:
        cat = with_recipe(catalog, slug)
        h, bound = cat.serving.health, loading.startup_bound_s(cat)
        assert bound % h.interval_s == 0
        for vid, var in cat.recipe.variants.items():
            size = loading.checkpoint_gb(cat.recipe.id, vid, var.vram_minimum_gb, data)
            for kind in data.budget.planning_gbps:
                if kind in ("unknown", "object"):  # what a rendering plans for
                    for loader in data.loaders:
                        assert loading.startup_budget_s(h.start_period_s, h.interval_s, size * 2, loader, kind) <= bound


def test_a_bigger_share_per_node_gets_a_bigger_budget():
    one = launch_for("k8s", {"KIMI_HARDWARE": "h200", "KIMI_LOAD_FORMAT": "runai_streamer"})
    two = launch_for("k8s", {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2",
                             "KIMI_LOAD_FORMAT": "runai_streamer"})
    b1, b2 = (loading.launch_budget_s(x.plan, x.catalog, x.load) for x in (one, two))
    assert b2 < b1  # each of two nodes reads half the checkpoint


def test_sagemaker_keeps_its_apis_hour():
    files = render("sagemaker", {**H200, "KIMI_LOAD_FORMAT": "safetensors"})
    body = json.loads(next(v for k, v in files.items() if "endpoint-config" in k))
    assert body["ProductionVariants"][0]["ContainerStartupHealthCheckTimeoutInSeconds"] == 3600


# ------------------------------------------------------------------------- the data's own checks


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["auto"]["local"].update(rule="nosuch"), "auto.local.rule names loader 'nosuch'"),
    (lambda d: d["auto"].pop("network"), "auto has no rule for storage kind network"),
    (lambda d: d["measurements"][0]["loaders"].update(fastest=9.9), "names loader 'fastest'"),
    (lambda d: d["loaders"]["safetensors"].update(speed=1), "Extra inputs are not permitted"),
    (lambda d: d["measurements"][0]["limits"].update(disk_gbps=0), "greater than 0"),
])
def test_bad_loader_data_is_rejected(tmp_path, mutate, needle):
    from pathlib import Path

    from entrypoint.core.data.recipe import RecipeDataError

    import shutil

    shutil.copytree(Path(loading.__file__).resolve().parents[3] / "recipes", tmp_path / "recipes",
                    ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    src = tmp_path / "recipes" / "loaders.yaml"  # one file of the one catalog, the others as shipped
    data = yaml.safe_load(src.read_text())
    mutate(data)
    src.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeDataError, match="invalid") as err:
        loading.load_data(tmp_path / "recipes")
    assert "\n" not in str(err.value) and str(src) in str(err.value)  # one line, naming the file
    assert needle in str(err.value)


def test_cuda_only_loaders_are_not_picked_for_amd_gpus():
    env = {"KIMI_HARDWARE": "mi355x", "KIMI_VLLM_VERSION": "0.33.0", "KIMI_LOAD_FORMAT": "auto"}
    found = compose_launch(read_settings(env),
                           NodeFacts(storage=local("ext4", installed=("safetensors", "instanttensor", "fastsafetensors"))))
    assert argv_values(found)["load_format"] == "safetensors"  # the streamer absent; instanttensor is CUDA-only
    brands = {lid: list(ld.brands) for lid, ld in loading.load_data().loaders.items()}  # read-only: tuples
    assert brands["instanttensor"] == ["nvidia"] and brands["runai_streamer"] == []


def test_a_recipes_own_engine_wait_is_never_shortened():
    env = {"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": "b300", "KIMI_SKIP_MEMORY_CHECK": "1"}
    recipe = launch(env).plan.processes[0]
    assert recipe.env.get("VLLM_ENGINE_READY_TIMEOUT_S") == "3600"  # the K3 recipe sets its own
    assert "--load-format" in recipe.argv  # and loads with fastsafetensors on Blackwell
    found = launch({**env, "KIMI_LOAD_FORMAT": "instanttensor"}, local("nfs")).plan.processes[0]
    budget = int(found.env["VLLM_ENGINE_READY_TIMEOUT_S"])
    assert budget > 3600 and values(list(found.argv[2:]), spec_for("0.33.0"))["load_format"] == "instanttensor"
    # the budget's layer: a longer wait of the recipe's stays (nothing set), a shorter one is raised
    spec = spec_for("0.33.0")
    assert loading.ready_wait({**recipe.env, "VLLM_ENGINE_READY_TIMEOUT_S": "99999"}, 4000, spec) == {}
    assert loading.ready_wait({**recipe.env, "VLLM_ENGINE_READY_TIMEOUT_S": "60"}, 4000, spec) == {
        "VLLM_ENGINE_READY_TIMEOUT_S": "4000"}
    assert found.provenance["VLLM_ENGINE_READY_TIMEOUT_S"] == "settings (KIMI_LOAD_FORMAT: start-up budget)"
