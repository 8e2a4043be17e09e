"""KV offload (recipes/kv_offload.yaml, entrypoint/core/compose/kv.py): the data says what the recipe site's
data says, every gate is a clear error, and every process of a KV deployment is in the plan."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.kv import load_kv
from entrypoint.core.data.recipe import default_recipes_dir, load_catalog_from
from tests.testdata import KV_STORES, TAXONOMY

STORE = {"KIMI_MOONCAKE_MASTER_ADDR": "master.kv", "KIMI_MOONCAKE_STORE_HOST": "store.kv"}
TWO = {**STORE, "KIMI_INSTANCE_ADDRS": "i0.kv,i1.kv", "KIMI_KV_INSTANCES": "2"}


def plan(**env):
    return build({"KIMI_HARDWARE": "h200", **env}).plan


def refused(code="unsupported_combination", **env) -> str:
    with pytest.raises(KimiError) as err:
        plan(**env)
    assert err.value.code == code, err.value.message
    return err.value.message


def files_of(proc) -> dict:
    return {path: json.loads(text) for path, text in proc.files.items()}


# ---------------------------------------------------------------- the data is the site's


def _upstream_command(text: str) -> list:
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return " ".join(ln.rstrip("\\").strip() for ln in lines).split()


def test_options_are_the_taxonomys():
    upstream = yaml.safe_load(TAXONOMY.read_text())["kv_offload"]
    ours = load_kv().options
    assert set(ours) == set(upstream)
    for oid, up in upstream.items():
        mine = ours[oid]
        assert list(mine.args) == up["args"] and dict(mine.env) == up.get("env", {})
        assert (list(mine.strategies) if mine.strategies is not None else None) == up.get("strategies")
        assert mine.requires_opt_in == up.get("requires_opt_in", False)
        assert (sorted(mine.brands) if mine.brands else None) == (
            sorted(b.lower() for b in up["brands"]) if "brands" in up else None)
        connector = json.loads(up["args"][1])["kv_connector"]
        assert connector in mine.connectors
        if "companion" in up:
            assert list(mine.companion.argv) == _upstream_command(up["companion"]["command"])
            assert up["install"].endswith(mine.install.replace("==", '=="') + '"') or mine.install in up["install"]


@pytest.mark.parametrize("sid", ["kv_store_centralized_mooncake", "kv_store_distributed_mooncake"])
def test_stores_are_the_kv_store_files(sid):
    up = yaml.safe_load((KV_STORES / f"{sid}.yaml").read_text())
    mine = load_kv().stores[sid]
    assert mine.min_vllm_version == up["min_vllm_version"] and mine.default_instances == up["default_instances"]
    assert list(mine.vllm.args) == up["vllm"]["vllm_args"]
    assert dict(mine.vllm.env) == {k: str(v) for k, v in up["vllm"]["env"].items()}
    assert {r: list(a) for r, a in mine.pd.items()} == {r: v["args"] for r, v in up["pd"].items()}
    assert mine.router.policy == up["router"]["policy"] and mine.router.port == up["router"]["port"]
    assert list(mine.master.argv) == _upstream_command(up["mooncake_master"]["command"])
    assert dict(mine.vllm_config.template) == up["mooncake_vllm_config"]["template"]
    for brand, line in up["vllm"]["install"].items():
        assert mine.install[brand] in line
    if "mooncake_store_config" in up:
        assert dict(mine.store.config) == up["mooncake_store_config"]["config"]
        assert " ".join(mine.store.argv) == up["mooncake_store_config"]["command"]
    else:
        assert mine.store is None


# ---------------------------------------------------------------- no option, no change


def test_unset_is_the_plain_launch():
    assert plan().as_dict() == plan(KIMI_KV_OFFLOAD="").as_dict()
    assert all(not p.files for p in plan().processes)


def test_unknown_option_names_the_valid_ones():
    message = refused("unknown_value", KIMI_KV_OFFLOAD="lmcach")
    assert "'lmcache'" in message and "kv_store_distributed_mooncake" in message


def test_store_settings_without_a_store_are_an_error():
    assert "KIMI_KV_OFFLOAD is not set" in refused("invalid_value", KIMI_KV_INSTANCES="2")
    assert "runs beside each engine" in refused("invalid_value", KIMI_KV_OFFLOAD="simple", KIMI_KV_INSTANCES="2")


# ---------------------------------------------------------------- gates


PD = {"KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "1", "KIMI_DECODE_NODES": "1",
      "KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0", "KIMI_HARDWARE": "b200"}


@pytest.mark.parametrize("option", ["simple", "lmcache", "offloading_cpu", "offloading_fs"])
def test_no_option_composes_with_pd(option):
    assert "pd_cluster" in refused(KIMI_KV_OFFLOAD=option, **PD)


def test_lmcache_is_single_node_only():
    message = refused(KIMI_KV_OFFLOAD="lmcache", KIMI_NODES="2", KIMI_HEAD_ADDR="h", KIMI_IFACE="eth0")
    assert "single_node_tp" in message and "multi_node_tp" in message


def test_opt_in_options_are_closed_without_a_verified_run():
    message = refused(KIMI_KV_OFFLOAD="offloading_cpu")
    assert "kv_offload_support" in message and "verified" in message


def _data_copy(tmp_path, edit_recipe=None, edit_kv=None):
    data = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), data, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    for name, edit in (("models/kimi-k2.5.yaml", edit_recipe), ("kv_offload.yaml", edit_kv)):
        if edit:
            doc = yaml.safe_load((data / name).read_text())
            edit(doc)
            (data / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return data


def test_a_verified_run_opens_the_option(tmp_path):
    data = _data_copy(tmp_path, edit_recipe=lambda d: d.update(kv_offload_support={"offloading_fs": "verified"}))
    cat = load_catalog_from(data, use_cache=False)
    got = build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "offloading_fs"}, catalog=cat).plan.processes
    assert [p.role for p in got] == ["single"]
    assert got[0].argv[-2] == "--kv-transfer-config" and "TieringOffloadingSpec" in got[0].argv[-1]
    assert got[0].env["PYTHONHASHSEED"] == "0"


def test_brands_gate_the_option(tmp_path, monkeypatch):
    data = _data_copy(tmp_path, edit_kv=lambda d: d["options"]["simple"].update(brands=["amd"]))
    monkeypatch.setenv("KIMI_RECIPES_DIR", str(data))
    assert "runs on AMD GPUs; h200 is NVIDIA" in refused(KIMI_KV_OFFLOAD="simple")


def test_kv_cache_strategy_hardware_gates_the_store(tmp_path):
    data = _data_copy(tmp_path, edit_recipe=lambda d: d.update(
        kv_cache_strategy_hardware={"kv_store_distributed_mooncake": ["mi355x"]}))
    cat = load_catalog_from(data, use_cache=False)
    with pytest.raises(KimiError) as err:
        build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake", **STORE}, catalog=cat)
    assert err.value.code == "unsupported_combination" and "mi355x" in err.value.message


@pytest.mark.parametrize("store", ["kv_store_centralized_mooncake", "kv_store_distributed_mooncake"])
def test_stores_need_vllm_0_21(store):
    message = refused(KIMI_KV_OFFLOAD=store, KIMI_VLLM_VERSION="0.19.1", **TWO)
    assert "vLLM >= 0.21.0" in message and "0.19.1" in message


def test_memory_is_checked_before_the_gates():
    refused("insufficient_memory", KIMI_HARDWARE="h100", KIMI_STRATEGY="single_node_dep",
            KIMI_KV_OFFLOAD="kv_store_centralized_mooncake", KIMI_VLLM_VERSION="0.19.1", **TWO)


def test_a_second_kv_transfer_config_is_refused():
    # The user's vLLM arguments may not set a KV transfer config at all (it draws the deployment):
    # with KIMI_KV_OFFLOAD set or not, in any spelling, the typed setting is named instead.
    for env in ({"KIMI_KV_OFFLOAD": "simple"}, {}):
        for args in ("--kv-transfer-config '{}'", "--kv_transfer_config={}"):
            message = refused("invalid_value", KIMI_EXTRA_ARGS=args, **env)
            assert "--kv-transfer-config" in message and "KIMI_KV_OFFLOAD" in message


def test_store_settings_are_checked():
    assert "pd_cluster" in refused("invalid_value", KIMI_KV_OFFLOAD="kv_store_distributed_mooncake",
                                   KIMI_KV_INSTANCES="2", KIMI_MOONCAKE_MASTER_ADDR="m", **PD)
    assert "3 addresses" in refused("invalid_value", KIMI_KV_OFFLOAD="kv_store_distributed_mooncake",
                                    KIMI_INSTANCE_ADDRS="a,b,c", KIMI_KV_INSTANCES="2", **STORE)
    assert "KIMI_MOONCAKE_MASTER_ADDR" in refused("missing_setting", KIMI_KV_OFFLOAD="kv_store_distributed_mooncake")
    assert "instance 2" in refused("missing_setting", KIMI_KV_OFFLOAD="kv_store_distributed_mooncake",
                                   KIMI_KV_INSTANCES="2", KIMI_INSTANCE_ADDRS="a", **STORE)


# ---------------------------------------------------------------- the processes


def test_simple_reaches_every_node_of_a_multi_node_strategy():
    procs = plan(KIMI_KV_OFFLOAD="simple", KIMI_NODES="2", KIMI_HEAD_ADDR="h", KIMI_IFACE="eth0").processes
    assert [(p.role, p.rank) for p in procs] == [("head", 0), ("worker", 1)]
    assert all("SimpleCPUOffloadConnector" in p.argv[-1] for p in procs)
    assert procs[0].provenance["--kv-transfer-config"] == "kv_offload:simple"


def test_lmcache_server_is_bound_to_the_engines_node():
    procs = plan(KIMI_KV_OFFLOAD="lmcache").processes
    server = procs[-1]
    assert server.role == "lmcache" and server.argv[:2] == ("lmcache", "server")
    assert server.argv[-2:] == ("--http-host", "127.0.0.1") and server.local_gpus == 0
    port = json.loads(procs[0].argv[-1])["kv_connector_extra_config"]["lmcache.mp.port"]
    assert server.argv[server.argv.index("--port") + 1] == str(port)


def test_centralized_store_processes_and_files():
    procs = plan(KIMI_KV_OFFLOAD="kv_store_centralized_mooncake", KIMI_MOONCAKE_DEVICE_NAME="mlx5_0",
                 KIMI_ROUTER_PORT="9000", **TWO).processes
    assert [(p.role, p.rank) for p in procs] == [("master", 0), ("store", 0), ("instance", 0), ("instance", 1),
                                                 ("router", 0)]
    store = procs[1]
    (path, content), = files_of(store).items()
    assert store.argv[-1] == path and content["local_hostname"] == "store.kv"
    assert content["master_server_address"] == "master.kv:50051" and content["global_segment_size"] == "500GB"
    inst = procs[2]
    (vpath, vcontent), = files_of(inst).items()
    assert inst.env["MOONCAKE_CONFIG_PATH"] == vpath and vpath != path
    assert vcontent["device_name"] == "mlx5_0" and vcontent["global_segment_size"] == 0
    router = procs[-1]
    i = router.argv.index("--worker-urls")
    assert router.argv[i + 1:i + 3] == ("http://i0.kv:8000", "http://i1.kv:8000")
    assert router.argv[router.argv.index("--port") + 1] == "9000" and "--backend-url" not in router.argv


def test_instances_follow_the_engines_port():
    procs = plan(KIMI_KV_OFFLOAD="kv_store_distributed_mooncake", KIMI_PORT="8100", **TWO).processes
    router = procs[-1]
    assert "http://i1.kv:8100" in router.argv and router.argv[router.argv.index("--port") + 1] == "30080"


def test_ipv6_master_and_instances_are_bracketed():
    procs = plan(KIMI_KV_OFFLOAD="kv_store_distributed_mooncake", KIMI_MOONCAKE_MASTER_ADDR="fd00::1",
                 KIMI_INSTANCE_ADDRS="fd00::2,fd00::3", KIMI_KV_INSTANCES="2").processes
    assert files_of(procs[1])[procs[1].env["MOONCAKE_CONFIG_PATH"]]["master_server_address"] == "[fd00::1]:50051"
    assert "http://[fd00::3]:8000" in procs[-1].argv


def test_multi_node_instances_have_their_own_heads():
    procs = plan(KIMI_KV_OFFLOAD="kv_store_distributed_mooncake", KIMI_STRATEGY="multi_node_tp", KIMI_NODES="2",
                 KIMI_IFACE="eth0", **TWO).processes
    inst = [p for p in procs if p.role == "instance"]
    assert [p.rank for p in inst] == [0, 1, 2, 3]
    heads = [p.argv[p.argv.index("--master-addr") + 1] for p in inst]
    assert heads == ["i0.kv", "i0.kv", "i1.kv", "i1.kv"]
    assert ["--headless" in p.argv for p in inst] == [False, True, False, True]
    router = procs[-1]
    assert router.argv.count("--worker-urls") == 1 and "http://i1.kv:8000" in router.argv


def test_pd_keeps_its_router_and_gains_the_store():
    procs = plan(KIMI_KV_OFFLOAD="kv_store_centralized_mooncake", **PD, **STORE).processes
    assert [p.role for p in procs] == ["master", "store", "prefill", "decode", "router"]
    for p in procs[2:4]:
        cfg = json.loads(p.argv[p.argv.index("--kv-transfer-config") + 1])
        assert cfg["kv_connector"] == "MultiConnector" and p.argv.count("--kv-transfer-config") == 1
        assert p.env["PYTHONHASHSEED"] == "0" and p.env["MOONCAKE_CONFIG_PATH"] in p.files
    assert procs[-1].argv[0] == "vllm-router" and "--vllm-pd-disaggregation" in procs[-1].argv


# ---------------------------------------------------------------- which process a container runs


def _launch(**env):
    return build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake", **TWO, **env})


def test_a_store_container_needs_its_role():
    with pytest.raises(KimiError) as err:
        _launch().this_process()
    assert err.value.code == "missing_setting" and "master, store, instance, router" in err.value.message
    assert _launch(KIMI_ROLE="store").this_process().role == "store"
    proc = _launch(KIMI_ROLE="instance", KIMI_NODE_RANK="1").this_process()
    assert (proc.role, proc.rank) == ("instance", 1)
    with pytest.raises(KimiError) as err:
        _launch(KIMI_ROLE="instance", KIMI_NODE_RANK="2").this_process()
    assert "ranks run from 0 to 1" in err.value.message
    with pytest.raises(KimiError):
        build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "simple", "KIMI_ROLE": "store"}).this_process()


@pytest.mark.parametrize("role", ["master", "store", "instance", "lmcache"])
def test_a_kv_role_without_kv_offload_is_an_error(role):
    with pytest.raises(KimiError) as err:
        build({"KIMI_HARDWARE": "h200", "KIMI_ROLE": role, "KIMI_NODE_RANK": "3" if role == "instance" else "0"}
              ).this_process()
    assert err.value.code == "unsupported_combination" and "KIMI_KV_OFFLOAD" in err.value.message


def test_lmcache_container_runs_the_server():
    launch = build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "lmcache"})
    assert launch.this_process().role == "single"
    launch = build({"KIMI_HARDWARE": "h200", "KIMI_KV_OFFLOAD": "lmcache", "KIMI_ROLE": "lmcache"})
    assert launch.this_process().argv[0] == "lmcache"


def test_the_start_writes_the_files_before_exec(tmp_path):
    """A real start: the program exec'd finds its --config file written, with the plan's content."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "record.json"
    prog = bindir / "python3"
    prog.write_text(f"#!{sys.executable}\nimport json, sys\npath = sys.argv[-1]\n"
                    f"json.dump({{'argv': sys.argv, 'file': open(path).read()}}, open({str(record)!r}, 'w'))\n")
    prog.chmod(0o755)
    env = {"PATH": str(bindir), "HOME": str(tmp_path), "KIMI_HARDWARE": "h200", "KIMI_PREFLIGHT": "off",
           "KIMI_CACHE_DIR": str(tmp_path), "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake", "KIMI_ROLE": "store",
           **TWO, **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    proc = subprocess.run([sys.executable, "-m", "entrypoint"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(record.read_text())
    want = _launch(KIMI_ROLE="store").this_process()
    assert seen["argv"][1:] == list(want.argv[1:]) and seen["file"] == want.files[want.argv[-1]]
    assert oct(os.stat(want.argv[-1]).st_mode & 0o777) == "0o600"


def test_kv_addresses_are_one_host_each():
    message = refused("invalid_value", KIMI_KV_OFFLOAD="kv_store_distributed_mooncake",
                      KIMI_MOONCAKE_MASTER_ADDR="master.kv:50051")
    assert "KIMI_MOONCAKE_MASTER_ADDR" in message and "carries a port" in message


# ---------------------------------------------------------------- vLLM's environment is an engine's alone


def _opened(tmp_path, kid):
    """The recipe data with `kid` recorded as verified (an opt-in option opens), as KIMI_RECIPES_DIR."""
    def verified(recipe):
        recipe["kv_offload_support"] = {kid: "verified"}
    return _data_copy(tmp_path, edit_recipe=verified)


_KV_IDS = [*yaml.safe_load((default_recipes_dir() / "kv_offload.yaml").read_text())["options"],
           *yaml.safe_load((default_recipes_dir() / "kv_offload.yaml").read_text())["stores"]]


@pytest.mark.parametrize("pd", [False, True], ids=["serving", "pd"])
@pytest.mark.parametrize("kid", _KV_IDS)
def test_no_process_but_an_engine_carries_vllms_environment(kid, pd, tmp_path, monkeypatch):
    """Every KV option and store, with KIMI_LOAD_FORMAT choosing a loader (which sets vLLM's
    engine-ready wait): the master, the store, the LMCache server and the router get none of
    vLLM's variables and no provenance from the load decision; every engine gets the wait."""
    from entrypoint.core.compose.kv import load_kv as kv_data
    from entrypoint.core.compose.loading import load_data
    from entrypoint.core.vllm.vllm_cli import spec_for

    data = kv_data()
    if pd and kid not in data.stores:
        pytest.skip("an option does not compose with pd_cluster (test_no_option_composes_with_pd)")
    if kid in data.options and data.options[kid].requires_opt_in:
        monkeypatch.setenv("KIMI_RECIPES_DIR", str(_opened(tmp_path, kid)))
    env = {"KIMI_KV_OFFLOAD": kid, "KIMI_LOAD_FORMAT": "safetensors", "KIMI_VLLM_VERSION": "0.32.0"}
    if kid in data.stores:
        env.update(STORE if pd else TWO)
    if pd:
        env.update({"KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0"})
    launch = build({"KIMI_HARDWARE": "h200", **env})
    vllm_env = spec_for("0.32.0").env
    wait = load_data().budget.vllm_env
    assert wait in vllm_env
    others = [p for p in launch.plan.processes if not p.is_engine]
    if kid in data.stores or data.options[kid].companion is not None:
        assert others, "a KV store or a companion runs beside the engines"
    for proc in others:
        assert not set(proc.env) & vllm_env, (proc.role, sorted(set(proc.env) & vllm_env))
        assert not any("KIMI_LOAD_FORMAT" in source for source in proc.provenance.values()), proc.role
    for proc in launch.plan.engines:
        assert wait in proc.env and "KIMI_LOAD_FORMAT" in proc.provenance[wait]
