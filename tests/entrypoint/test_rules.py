"""Composition rules beyond the golden set: larger clusters, every rank, PD pools, features,
profiles and user arguments. Expected values are written out from the rules, not computed."""

import shutil

import pytest
import yaml

from entrypoint.core.compose.settings import given_settings
from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.data.recipe import default_recipes_dir, load_catalog_from

CLUSTER = {"KIMI_HEAD_ADDR": "10.0.0.1", "KIMI_IFACE": "ib0"}
SPEC = '{"model":"lightseekorg/kimi-k2.5-eagle3-mla","method":"eagle3","num_speculative_tokens":3}'
FEATURE_ARGS = ["--tool-call-parser", "kimi_k2", "--enable-auto-tool-choice", "--reasoning-parser", "kimi_k2",
                "--speculative-config", SPEC, "--mm-encoder-tp-mode", "data"]
DRAIN = ["--shutdown-timeout", "300"]  # KIMI_DRAIN_TIMEOUT's default on every engine (docs/day2.md)


def plan(env, args=()):
    return build(env, tuple(args)).plan


def error_code(env, args=()):
    with pytest.raises(KimiError) as info:
        build(env, tuple(args))
    return info.value.code


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_four_node_dep_every_rank(rank):
    procs = plan({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "multi_node_dep", "KIMI_NODES": "4", **CLUSTER}).processes
    assert [p.role for p in procs] == ["head", "worker", "worker", "worker"]
    start = ["--data-parallel-start-rank", str(8 * rank)] if rank else []
    assert list(procs[rank].argv) == ["vllm", "serve", "moonshotai/Kimi-K2.5", "--trust-remote-code",
                                      "--enable-expert-parallel", "--data-parallel-hybrid-lb",
                                      "--data-parallel-size", "32", "--data-parallel-size-local", "8",
                                      "--data-parallel-address", "10.0.0.1", *start, *FEATURE_ARGS, *DRAIN]
    assert procs[rank].env == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0"}
    assert procs[rank].local_gpus == 8


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_four_node_tp_every_rank(rank):
    proc = plan({"KIMI_HARDWARE": "gb200", "KIMI_NODES": "4", **CLUSTER}).processes[rank]
    headless = ["--headless"] if rank else []
    assert list(proc.argv[3:]) == ["--trust-remote-code", "--tensor-parallel-size", "16", "--nnodes", "4",
                                   "--node-rank", str(rank), "--master-addr", "10.0.0.1", *headless,
                                   *FEATURE_ARGS[:7], *DRAIN]
    assert proc.serves_http is (rank == 0)
    assert proc.local_gpus == 4


def test_tp_pp_and_amd_env_on_four_nodes():
    procs = plan({"KIMI_HARDWARE": "mi325x", "KIMI_STRATEGY": "multi_node_tp_pp", "KIMI_NODES": "4",
                  **CLUSTER}).processes
    assert list(procs[3].argv[4:15]) == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "4",
                                         "--nnodes", "4", "--node-rank", "3", "--master-addr", "10.0.0.1",
                                         "--headless"]
    assert procs[3].env == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0", "VLLM_ROCM_USE_AITER": "1",
                            "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "INT4"}


PD = {"KIMI_STRATEGY": "pd_cluster", "KIMI_IFACE": "ib0",
      "KIMI_PREFILL_ADDRS": "p0", "KIMI_DECODE_ADDRS": "d0,d1,d2"}


def test_pd_uneven_pools_order_and_side_channel():
    procs = plan({"KIMI_HARDWARE": "b200", "KIMI_PREFILL_NODES": "1", "KIMI_DECODE_NODES": "3", **PD}).processes
    assert [(p.role, p.rank) for p in procs] == [("prefill", 0), ("decode", 0), ("router", 0), ("decode", 1),
                                                 ("decode", 2)]
    decode2 = procs[4]
    assert decode2.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "d2"
    assert decode2.env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert "NCCL_MNNVL_ENABLE" not in decode2.env  # NVL4-tray settings only on GB200/GB300
    argv = list(decode2.argv)
    i = argv.index("--data-parallel-size")
    assert argv[i:i + 12] == ["--data-parallel-size", "24", "--data-parallel-size-local", "8",
                              "--data-parallel-start-rank", "16", "--data-parallel-address", "d0",
                              "--data-parallel-rpc-port", "29560", "--data-parallel-hybrid-lb",
                              "--enable-expert-parallel"]
    assert "--all2all-backend" not in argv
    router = list(procs[2].argv)
    assert router == ["vllm-router", "--policy", "round_robin", "--vllm-pd-disaggregation",
                      "--prefill", "http://p0:8001", "--decode", "http://d0:8002", "--decode", "http://d1:8002",
                      "--decode", "http://d2:8002", "--host", "0.0.0.0", "--port", "8000",
                      "--intra-node-data-parallel-size", "8"]


def test_pd_tep_pool_over_two_nodes():
    env = {"KIMI_HARDWARE": "h200", **PD, "KIMI_DECODE_ADDRS": "d0,d1", "KIMI_PREFILL_NODES": "1",
           "KIMI_DECODE_NODES": "2", "KIMI_DECODE_PARALLELISM": "tep", "KIMI_PREFILL_PARALLELISM": "tp"}
    procs = {(p.role, p.rank): p for p in plan(env).processes}
    worker = list(procs[("decode", 1)].argv)
    i = worker.index("--tensor-parallel-size")
    assert worker[i:i + 10] == ["--tensor-parallel-size", "16", "--enable-expert-parallel", "--nnodes", "2",
                                "--node-rank", "1", "--master-addr", "d0", "--headless"]
    assert procs[("decode", 1)].env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "d0"  # only DEP nodes rebind
    prefill = list(procs[("prefill", 0)].argv)
    assert "--enable-expert-parallel" not in prefill and "--nnodes" not in prefill
    router = list(procs[("router", 0)].argv)
    assert router.count("--decode") == 1 and router[-1] == "1"  # TP pools: head only, local DP 0


def test_pd_on_gb300_keeps_nvlink_settings():
    procs = plan({"KIMI_HARDWARE": "gb300", **PD, "KIMI_DECODE_ADDRS": "d0"}).processes
    decode = procs[1]
    assert decode.env["NCCL_MNNVL_ENABLE"] == "1"
    assert decode.argv[decode.argv.index("--all2all-backend") + 1] == "flashinfer_nvlink_one_sided"


def test_pd_pool_addresses_are_required_per_node():
    env = {"KIMI_HARDWARE": "h200", **PD, "KIMI_DECODE_ADDRS": "d0", "KIMI_DECODE_NODES": "2"}
    with pytest.raises(KimiError) as info:
        build(env)
    assert info.value.code == "missing_setting" and "KIMI_DECODE_ADDRS" in info.value.message


def test_pd_each_pool_checked_for_memory():
    env = {"KIMI_HARDWARE": "h200", **PD, "KIMI_DECODE_ADDRS": "d0", "KIMI_PREFILL_NODES": "0",
           "KIMI_DECODE_NODES": "0"}
    with pytest.raises(KimiError) as info:
        build(env)
    assert info.value.code == "insufficient_memory"
    assert "714" in info.value.message and "564" in info.value.message


@pytest.mark.parametrize("spec, expected", [
    ("", []),
    ("reasoning", ["--reasoning-parser", "kimi_k2"]),
    ("reasoning,tool_calling", ["--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2",
                                "--enable-auto-tool-choice"]),
    ("-spec_decoding,-encoder_parallel", FEATURE_ARGS[:5]),
    ("-encoder_parallel,+text_only", FEATURE_ARGS[:7] + ["--language-model-only"]),
])
def test_feature_lists(spec, expected):
    proc = plan({"KIMI_HARDWARE": "h200", "KIMI_FEATURES": spec}).processes[0]
    assert list(proc.argv[6:]) == expected + DRAIN


def test_conflicting_features():
    assert error_code({"KIMI_HARDWARE": "h200", "KIMI_FEATURES": "+text_only"}) == "conflicting_features"


def test_gb200_leaves_encoder_parallel_opt_in():
    proc = plan({"KIMI_HARDWARE": "gb200", "KIMI_FEATURES": "+encoder_parallel"}).processes[0]
    assert list(proc.argv[-4:]) == ["--mm-encoder-tp-mode", "data", *DRAIN]


@pytest.mark.parametrize("env, code", [
    ({"KIMI_HARDWARE": "h200", "KIMI_VARIANT": "nvfp4"}, "unsupported_combination"),
    ({"KIMI_HARDWARE": "mi300x", "KIMI_VARIANT": "mxfp4"}, "unsupported_combination"),
    ({"KIMI_HARDWARE": "mi350x", "KIMI_VARIANT": "mxfp4"}, "unsupported_combination"),
    ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "multi_node_tp_dp", "KIMI_NODES": "2"}, "unsupported_combination"),
    ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "single_node_tep", "KIMI_NODES": "2"}, "unsupported_combination"),
    ({"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "tensor"}, "unknown_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_VARIANT": "fp8"}, "unknown_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_FEATURES": "tools"}, "unknown_value"),
    ({"KIMI_HARDWARE": "tpu"}, "unknown_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_NODES": "2"}, "missing_setting"),
    ({"KIMI_HARDWARE": "h200", "KIMI_NODES": "2", "KIMI_HEAD_ADDR": "h"}, "missing_setting"),
    ({"KIMI_HARDWARE": "h200", "KIMI_NODES": "2", "KIMI_NODE_RANK": "2", **CLUSTER}, "invalid_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_NODE_RANK": "one"}, "invalid_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_NODES": "0"}, "invalid_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--max-model-len '128000"}, "invalid_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_SKIP_MEMORY_CHECK": "maybe"}, "invalid_value"),
    ({"KIMI_HARDWARE": "h200", "KIMI_PORT": "tcp://10.0.0.3:8000"}, "invalid_value"),
    ({"KIMI_HARDWARE": "h100"}, "insufficient_memory"),
    ({}, "missing_setting"),
])
def test_bad_settings(env, code):
    assert error_code(env) == code


def test_skip_memory_check_allows_h100():
    proc = plan({"KIMI_HARDWARE": "h100", "KIMI_SKIP_MEMORY_CHECK": "1"}).processes[0]
    assert proc.argv[4:6] == ("--tensor-parallel-size", "8")


def test_memory_error_names_need_capacity_and_way_out():
    with pytest.raises(KimiError) as info:
        build({"KIMI_HARDWARE": "h100"})
    msg = info.value.message
    assert "714" in msg and "640" in msg and "KIMI_NODES=2" in msg and "KIMI_SKIP_MEMORY_CHECK=1" in msg


def test_model_path_keeps_the_served_name():
    proc = plan({"KIMI_HARDWARE": "h200", "KIMI_MODEL": "/models/Kimi-K2.5"}).processes[0]
    assert proc.argv[:3] == ("vllm", "serve", "/models/Kimi-K2.5")
    i = proc.argv.index("--served-model-name")
    assert proc.argv[i + 1] == "moonshotai/Kimi-K2.5"
    same = plan({"KIMI_HARDWARE": "h200", "KIMI_SERVED_MODEL_NAME": "moonshotai/Kimi-K2.5"}).processes[0]
    assert "--served-model-name" not in same.argv


def test_user_args_pass_through_untouched():
    proc = plan({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--chat-template '$HOME/t.jinja'"}).processes[0]
    assert list(proc.argv[-2:]) == ["--chat-template", "$HOME/t.jinja"]


def test_user_args_come_last_and_win():
    proc = plan({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--mm-encoder-tp-mode weights --max-model-len '128000'",
                 "KIMI_PORT": "9000"}, ["--gpu-memory-utilization", "0.9"]).processes[0]
    assert list(proc.argv[-10:]) == ["--port", "9000", *DRAIN, "--mm-encoder-tp-mode", "weights", "--max-model-len",
                                     "128000", "--gpu-memory-utilization", "0.9"]
    assert proc.argv.count("--mm-encoder-tp-mode") == 1  # the feature's `data` is replaced by the user's
    assert proc.local_gpus == 8


def test_user_args_may_not_draw_the_layout():
    # A TP of the user's would size the pod: refused (KIMI_STRATEGY and the recipe's data draw it).
    for env, args in (({"KIMI_EXTRA_ARGS": "--tensor-parallel-size 4"}, ()), ({}, ["-tp", "4"])):
        with pytest.raises(KimiError) as info:
            build({"KIMI_HARDWARE": "h200", "KIMI_SKIP_MEMORY_CHECK": "1", **env}, tuple(args))
        assert info.value.code == "invalid_value" and "KIMI_STRATEGY" in info.value.message


def test_flydsl_profile():
    proc = plan({"KIMI_HARDWARE": "mi350x", "KIMI_PROFILE": "flydsl"}).processes[0]
    argv = list(proc.argv)
    assert argv[argv.index("--moe-backend") + 1] == "flydsl"
    assert argv[argv.index("--compilation-config") + 1] == '{"pass_config": {"fuse_allreduce_rms": false}}'
    assert error_code({"KIMI_HARDWARE": "mi355x", "KIMI_PROFILE": "flydsl",
                       "KIMI_STRATEGY": "single_node_dep"}) == "unsupported_combination"
    assert error_code({"KIMI_HARDWARE": "mi355x", "KIMI_PROFILE": "flydsl",
                       "KIMI_STRATEGY": "single_node_tep"}) == "unsupported_combination"
    # expert parallelism is a strategy's (TEP, DEP): the user's --enable-expert-parallel is refused
    assert error_code({"KIMI_HARDWARE": "mi355x", "KIMI_PROFILE": "flydsl"},
                      ["--enable-expert-parallel"]) == "invalid_value"
    assert error_code({"KIMI_HARDWARE": "mi300x", "KIMI_PROFILE": "flydsl"}) == "unsupported_combination"


def test_aiter_mxfp4_rmsnorm_follows_tp(tmp_path):
    base = {"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "aiter-mxfp4"}
    tp8 = plan(base).processes[0]
    assert "VLLM_ROCM_USE_AITER_RMSNORM" not in tp8.env and tp8.env["AITER_MOE_SORT_BACKEND"] == "auto"
    # TP 4 from the recipe's data (a variant of TP 4; the user's --tensor-parallel-size is refused)
    data = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), data, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    doc = yaml.safe_load((data / "models/kimi-k2.5.yaml").read_text())
    doc["variants"]["mxfp4"]["tp"] = 4
    (data / "models/kimi-k2.5.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    tp4 = build(base, catalog=load_catalog_from(data, use_cache=False)).plan.processes[0]
    assert tp4.vllm.tensor_parallel == 4 and tp4.env["VLLM_ROCM_USE_AITER_RMSNORM"] == "0"
    assert error_code({**base, "KIMI_EXTRA_ARGS": "--tensor-parallel-size 4"}) == "invalid_value"
    assert error_code({**base, "KIMI_VARIANT": "default"}) == "unsupported_combination"


def test_inferencex_needs_max_model_len():
    base = {"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "inferencex"}
    assert error_code(base) == "missing_setting"
    assert error_code(base, ["--max-model-len", "8192"]) == "invalid_value"
    proc = plan(base, ["--max-model-len", "9472"]).processes[0]
    assert proc.argv[proc.argv.index("--tensor-parallel-size") + 1] == "4"
    assert proc.env["VLLM_ROCM_USE_AITER_RMSNORM"] == "0" and proc.env["OMP_NUM_THREADS"] == "1"


def test_image_default_and_served_hardware():
    image = {"KIMI_IMAGE_TARGET": "rocm-gfx950", "KIMI_IMAGE_HARDWARE": "mi355x", "KIMI_IMAGE_SERVES": "mi350x,mi355x"}
    assert plan(image).hardware == "mi355x"
    assert plan({**image, "KIMI_HARDWARE": "mi350x"}).hardware == "mi350x"
    with pytest.raises(KimiError) as info:
        build({**image, "KIMI_HARDWARE": "h200"})
    assert info.value.code == "unsupported_combination"
    assert "rocm-gfx950" in info.value.message and "mi350x, mi355x" in info.value.message


def test_toml_file_below_environment(tmp_path):
    cfg = tmp_path / "kimi.toml"
    cfg.write_text('hardware = "mi300x"\nvariant = "default"\nfeatures = ["reasoning"]\nnodes = 1\n')
    p = plan({"KIMI_CONFIG": str(cfg)})
    assert p.hardware == "mi300x" and p.features == ("reasoning",)
    assert plan({"KIMI_CONFIG": str(cfg), "KIMI_HARDWARE": "h200"}).hardware == "h200"
    cfg.write_text('hardware = "mi300x\n')
    assert error_code({"KIMI_CONFIG": str(cfg)}) == "invalid_value"
    cfg.write_text('hardwre = "mi300x"\n')
    with pytest.raises(KimiError) as info:
        build({"KIMI_CONFIG": str(cfg)})
    assert "hardware" in info.value.message


def test_config_json_is_over_the_file_and_under_the_variables(tmp_path):
    """KIMI_CONFIG_JSON (a Kubernetes deployment's settings ConfigMap, issue 50): the file's keys and
    verdicts, over the KIMI_CONFIG file, under every other variable."""
    cfg = tmp_path / "kimi.toml"
    cfg.write_text('hardware = "mi300x"\nfeatures = ["reasoning"]\n')
    inline = '{"hardware": "mi355x", "nodes": 1, "skip_memory_check": true}'
    p = plan({"KIMI_CONFIG": str(cfg), "KIMI_CONFIG_JSON": inline})
    assert p.hardware == "mi355x" and p.features == ("reasoning",)
    assert plan({"KIMI_CONFIG": str(cfg), "KIMI_CONFIG_JSON": inline, "KIMI_HARDWARE": "h200"}).hardware == "h200"
    assert given_settings({"KIMI_CONFIG": str(cfg), "KIMI_CONFIG_JSON": inline, "KIMI_NODES": "1"}) == {
        "hardware": "mi355x", "features": ["reasoning"], "nodes": "1", "skip_memory_check": True}  # as written
    for bad, words in (('{"hardwre": "h200"}', ["key in KIMI_CONFIG_JSON='hardwre'", "hardware"]),
                       ('["h200"]', ["KIMI_CONFIG_JSON is not a JSON object"]),
                       ('{"hardware": ', ["KIMI_CONFIG_JSON is not valid JSON"]),
                       ('{"config": "/etc/x.toml"}', ["key in KIMI_CONFIG_JSON='config'"]),
                       ('{"model": ' + "[" * 100000 + "]" * 100000 + "}", ["KIMI_CONFIG_JSON nests deeper"]),
                       ('{"model": [[["x"]]]}', ["KIMI_CONFIG_JSON nests deeper"]),
                       ('{"hardware": "h200", "port": "x"}', ["port in KIMI_CONFIG_JSON must be a whole number"]),
                       ('{"extra_args": "' + "x" * 1024 * 1024 + '"}', ["KIMI_CONFIG_JSON is larger than"])):
        with pytest.raises(KimiError) as info:
            build({"KIMI_CONFIG_JSON": bad})
        assert info.value.code in ("invalid_value", "unknown_value") and "\n" not in info.value.message
        assert all(w in info.value.message for w in words), info.value.message


def test_json_file_is_read_as_the_toml_one(tmp_path):
    """A .json KIMI_CONFIG (the Helm chart's settings, rendered by toJson): the same keys and verdicts."""
    cfg = tmp_path / "settings.json"
    cfg.write_text('{"hardware": "mi300x", "variant": "default", "features": ["reasoning"], "nodes": 1}')
    p = plan({"KIMI_CONFIG": str(cfg)})
    assert p.hardware == "mi300x" and p.features == ("reasoning",)
    assert plan({"KIMI_CONFIG": str(cfg), "KIMI_HARDWARE": "h200"}).hardware == "h200"
    for text, why in (('{"hardware": "mi300x"', "not valid JSON"), ('["hardware"]', "not a JSON object"),
                      ('{"hardware": null}', "no null"), ('{"hardwre": "mi300x"}', "hardware")):
        cfg.write_text(text)
        with pytest.raises(KimiError) as info:
            build({"KIMI_CONFIG": str(cfg)})
        assert why in info.value.message and "\n" not in info.value.message, text
