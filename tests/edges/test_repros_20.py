"""Issue 20 ("Edges, round three"): each repro as a test that failed on the code before it, with
the class it belongs to checked beside it (other spellings, other sources, other outputs).

In-process through `main` (tests/edges/harness.py) unless a real deadline or subprocess matters."""

from __future__ import annotations

import json

import pytest

from .harness import base_env, run_cli

H200 = {"KIMI_HARDWARE": "h200"}
SECRET = "sk-live-999-SECRET"


def one_line_error(result, *words):
    result.assert_clean({2})
    assert "kimi-serve: error:" in result.err, result.err
    for word in words:
        assert word in result.err, result.err
    return result


def no_secret(result, secret=SECRET):
    assert secret not in result.text, result.text[-2000:]
    return result


# ---------------------------------------------------------------- 2, 3, 13: every spelling masked in every output


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("name", ["SM_VLLM_API_KEY", "SM_VLLM_API_K", "SM_VLLM_HF_TOKEN"])
def test_platform_flag_variables_are_masked_in_explain(fmt, name):
    env = base_env(**H200, KIMI_PLATFORM="sagemaker", **{name: SECRET})
    result = no_secret(run_cli(["explain", "--format", fmt], env).assert_clean({0}))
    assert "****" in result.out
    for command in (["print"], ["plan"], ["doctor"], ["plan", "--format", "json"]):
        no_secret(run_cli(command, env).assert_clean({0, 1}))


SPELLINGS = ["--api_key {s}", "--api_key={s}", "--hf_token {s}", "--hf-tok={s}", "--api-k '{s}'", "--api-ke \"{s}\"",
             "--api-key   {s}", "x --hf_token={s} y"]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("setting", ["KIMI_VARIANT", "KIMI_NODES", "KIMI_VLLM_VERSION", "KIMI_PREFLIGHT",
                                     "KIMI_CACHE_DIR", "KIMI_NAME"])
def test_a_key_typed_into_any_setting_is_masked_in_its_error(setting, spelling):
    env = base_env(**H200, **{setting: spelling.format(s=SECRET)})
    for command in (["print"], ["plan", "--format", "k8s"]):
        no_secret(one_line_error(run_cli(command, env)))
    no_secret(one_line_error(run_cli(["print"], {**env, "KIMI_LOG_FORMAT": "json"})))


@pytest.mark.parametrize("spelling", ["--api_key {s}", "--api-k={s}", "--hf_tok {s}"])
def test_abbreviated_and_underscored_keys_are_masked_in_the_launch(spelling):
    env = base_env(**H200, KIMI_EXTRA_ARGS=spelling.format(s=SECRET), KIMI_PREFLIGHT="off", KIMI_DRY_RUN="1")
    for command in (["print"], ["print", "--format", "json"], ["plan", "--format", "json"], ["explain"], []):
        no_secret(run_cli(command, env).assert_clean({0}))


def test_a_password_in_the_verify_url_is_masked():
    secret = "pa55-SECRET-word"
    for fmt in ("text", "json"):
        result = run_cli(["verify", "--url", f"http://user:{secret}@127.0.0.1:9", "--timeout", "2",
                          "--expect-model", "m", "--features", "", "--format", fmt], base_env(**H200))
        no_secret(result.assert_clean({1}), secret)
        assert "user:****@127.0.0.1" in result.out


# ---------------------------------------------------------------- 1: every read bounded in time and size


def _dripped_body(conn, stop):
    body = b"<ListBucketResult>" + b" " * 4000 + b"</ListBucketResult>"
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode())
    for i in range(len(body)):
        if stop.wait(0.2):
            return
        conn.sendall(body[i:i + 1])


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", ["headers", "body"])
def test_object_store_check_has_a_total_deadline(behaviour):
    """A store that sends its headers (or its body) a byte at a time: per-read timeouts never fire;
    the check ends within its one deadline (made 1 s here) with an error naming the endpoint."""
    from unittest import mock

    from entrypoint.core.base import limits

    from .servers import Server, slow_headers

    with Server(slow_headers if behaviour == "headers" else _dripped_body, lifetime_s=60) as srv, \
            mock.patch.object(limits, "OBJECT_STORE_DEADLINE_S", 1.0, create=True):
        env = base_env(**H200, KIMI_MODEL="s3://bucket/kimi", AWS_ACCESS_KEY_ID="AKIAX", AWS_SECRET_ACCESS_KEY="x",
                       AWS_ENDPOINT_URL_S3=srv.url)
        result = run_cli(["doctor", "--format", "json"], env).assert_clean({1})
    assert result.seconds < 10, result.seconds
    check = [c for c in json.loads(result.out)["checks"] if c["check"] == "model_source"][0]
    assert check["status"] == "error" and srv.url.split("//")[1] in check["message"]


@pytest.fixture()
def fifo(tmp_path):
    import os

    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("variable", ["KIMI_CONFIG", "GOOGLE_APPLICATION_CREDENTIALS"])
def test_a_fifo_named_by_a_variable_is_refused_not_waited_on(fifo, variable):
    from .harness import run_proc

    env = base_env(**H200, **{variable: fifo})
    if variable == "KIMI_CONFIG":
        one_line_error(run_proc(["print"], env, timeout=30), "KIMI_CONFIG", "not a regular file")
    else:
        env["KIMI_MODEL"] = "gs://bucket/kimi"
        result = run_proc(["doctor", "--format", "json"], env, timeout=30).assert_clean({1})
        check = [c for c in json.loads(result.out)["checks"] if c["check"] == "model_source"][0]
        assert check["status"] == "error" and "not a regular file" in check["message"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_as_the_config_file_is_refused(device):
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=device)), "KIMI_CONFIG", "not a regular file")


def test_capped_reads_of_node_files(tmp_path):
    import os

    from entrypoint.core.base.files import read_capped, read_text_capped

    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    assert len(read_capped(big, 100)) == 101
    with pytest.raises(OSError, match="larger than 100"):
        read_text_capped(big, 100)
    os.mkfifo(tmp_path / "p")
    for special in (tmp_path / "p", tmp_path, "/dev/zero"):
        with pytest.raises(OSError, match="not a regular file"):
            read_capped(special, 100)


# ---------------------------------------------------------------- 5, 6: every source of a setting ranked as documented

SCHEDULERS = {
    "Slurm": {"SLURM_NNODES": "4", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "gpu[01-04]"},
    "LeaderWorkerSet": {"LWS_LEADER_ADDRESS": "leader-0", "LWS_GROUP_SIZE": "4", "LWS_WORKER_INDEX": "0"},
}


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "kimi.toml"
    path.write_text(text)
    return str(path)


def _argv(result) -> list:
    return json.loads(result.out)["argv"]


def _flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_the_config_file_beats_the_scheduler(tmp_path, scheduler):
    """defaults < scheduler < KIMI_CONFIG file < environment: the file's nodes, rank and head win."""
    config = _config(tmp_path, 'hardware = "h100"\nnodes = 2\nnode_rank = 1\nhead_addr = "10.0.0.1"\niface = "eth0"\n')
    env = base_env(KIMI_CONFIG=config, **SCHEDULERS[scheduler])
    argv = _argv(run_cli(["print", "--format", "json"], env).assert_clean({0}))
    assert (_flag(argv, "--nnodes"), _flag(argv, "--node-rank"), _flag(argv, "--master-addr")) == ("2", "1", "10.0.0.1")
    assert _flag(argv, "--tensor-parallel-size") == "16"  # 2 nodes of 8, not 4
    plan = json.loads(run_cli(["plan", "--format", "json"], env).assert_clean({0}).out)
    assert len(plan["processes"]) == 2
    # and the environment still beats the file
    argv = _argv(run_cli(["print", "--format", "json"], {**env, "KIMI_NODE_RANK": "0"}).assert_clean({0}))
    assert _flag(argv, "--node-rank") is None or _flag(argv, "--node-rank") == "0"


def test_platform_in_the_config_file_is_followed(tmp_path):
    env = base_env(**H200, KIMI_CONFIG=_config(tmp_path, 'platform = "sagemaker"\n'))
    assert _flag(_argv(run_cli(["print", "--format", "json"], env).assert_clean({0})), "--port") == "8080"
    # `none` in the file turns detection off, as KIMI_PLATFORM=none does
    env = base_env(**H200, KIMI_CONFIG=_config(tmp_path, 'platform = "none"\n'), AIP_MODE="PREDICTION",
                   AIP_HTTP_PORT="7080")
    assert _flag(_argv(run_cli(["print", "--format", "json"], env).assert_clean({0})), "--port") is None


def test_platform_in_a_batch_line_is_followed():
    line = json.dumps({"KIMI_HARDWARE": "h200", "KIMI_PLATFORM": "sagemaker"})
    out = json.loads(run_cli(["plan", "--batch", "-"], base_env(), stdin=line + "\n").assert_clean({0}).out)
    assert _flag(out["processes"][0]["argv"], "--port") == "8080"


def test_log_format_in_the_config_file_formats_the_error_line(tmp_path):
    env = base_env(**H200, KIMI_CONFIG=_config(tmp_path, 'log_format = "json"\n'), KIMI_NODES="99999")
    result = run_cli([], env).assert_clean({2})
    record = json.loads(result.err.strip().splitlines()[-1])
    assert record["level"] == "error" and "KIMI_NODES" in record["message"]


def test_nodes_in_the_config_file_detects_the_interface_as_the_environment_does(tmp_path):
    from unittest import mock

    config = _config(tmp_path, 'hardware = "h100"\nnodes = 2\nhead_addr = "10.0.0.1"\n')
    with mock.patch("entrypoint.node.cluster.default_route_iface", return_value="ethX"):
        by_file = _argv(run_cli(["print", "--format", "json"], base_env(KIMI_CONFIG=config)).assert_clean({0}))
        by_env = _argv(run_cli(["print", "--format", "json"], base_env(
            KIMI_HARDWARE="h100", KIMI_NODES="2", KIMI_HEAD_ADDR="10.0.0.1")).assert_clean({0}))
        env = json.loads(run_cli(["print", "--format", "json"], base_env(KIMI_CONFIG=config)).out)["env"]
    assert by_file == by_env
    assert "ethX" in env.values()  # GLOO/NCCL interface variables


# ---------------------------------------------------------------- 7, 8, 9, 11: a launch the node cannot run is refused

PD = {"KIMI_HARDWARE": "b300", "KIMI_STRATEGY": "pd_cluster"}


@pytest.mark.parametrize("pools", [("0", "1"), ("1", "0")])
@pytest.mark.parametrize("command", [["print"], ["plan"], ["plan", "--format", "k8s"], ["plan", "--format", "compose"]])
def test_pools_on_one_address_never_share_a_gpu(pools, command):
    env = base_env(**PD, KIMI_PREFILL_NODES=pools[0], KIMI_DECODE_NODES=pools[1], KIMI_PREFILL_ADDRS="10.0.0.1",
                   KIMI_DECODE_ADDRS="10.0.0.1", KIMI_ROLE="prefill")
    # Compose runs on one node: it refuses a pool of its own node (KIMI_*_NODES=1) in its own words
    one_line_error(run_cli(command, env), *(() if "compose" in command else ("10.0.0.1", "GPU")))


def test_one_shared_node_splits_its_gpus():
    env = base_env(**PD, KIMI_PREFILL_NODES="0", KIMI_DECODE_NODES="0", KIMI_PREFILL_ADDRS="10.0.0.1",
                   KIMI_DECODE_ADDRS="10.0.0.1")
    procs = json.loads(run_cli(["plan", "--format", "json"], env).assert_clean({0}).out)["processes"]
    visible = [set(p["env"]["CUDA_VISIBLE_DEVICES"].split(",")) for p in procs if p["role"] != "router"]
    assert len(visible) == 2 and not visible[0] & visible[1]


@pytest.mark.parametrize("setting,value", [("KIMI_PREFILL_ADDRS", "p0:9000"), ("KIMI_DECODE_ADDRS", "d0/x"),
                                           ("KIMI_DECODE_ADDRS", "d0,http://d1"), ("KIMI_PREFILL_ADDRS", "[p0]"),
                                           ("KIMI_HEAD_ADDR", "10.0.0.1:29500"), ("KIMI_HOST", "a b"),
                                           ("KIMI_ROUTER_HOST", "host/path"), ("KIMI_PREFILL_ADDRS", "fd00::1::2")])
def test_addresses_are_hosts(setting, value):
    env = base_env(**PD, KIMI_PREFILL_ADDRS="p0", KIMI_DECODE_ADDRS="d0")
    env[setting] = value
    if setting == "KIMI_HEAD_ADDR":
        env = base_env(KIMI_HARDWARE="h100", KIMI_NODES="2", KIMI_IFACE="eth0", KIMI_HEAD_ADDR=value)
    one_line_error(run_cli(["plan"], env), setting)


def test_rendered_router_urls_read_back_as_the_addresses():
    from urllib.parse import urlsplit

    addrs = {"KIMI_PREFILL_ADDRS": "p0.cluster.local", "KIMI_DECODE_ADDRS": "fd00::2"}
    procs = json.loads(run_cli(["plan", "--format", "json"], base_env(**PD, **addrs)).assert_clean({0}).out)["processes"]
    router = next(p["argv"] for p in procs if p["role"] == "router")
    hosts = {flag: urlsplit(router[router.index(flag) + 1]).hostname for flag in ("--prefill", "--decode")}
    assert hosts == {"--prefill": "p0.cluster.local", "--decode": "fd00::2"}


@pytest.mark.parametrize("role", ["router", "prefill", "decode"])
def test_a_role_without_a_pd_cluster_is_refused(role):
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_ROLE=role)), "KIMI_ROLE", "pd_cluster")
    one_line_error(run_cli([], base_env(**H200, KIMI_ROLE=role, KIMI_DRY_RUN="1")), "KIMI_ROLE")


@pytest.mark.parametrize("env", [{**H200, "KIMI_EXTRA_ARGS": "-tp 16"},
                                 {**H200, "KIMI_EXTRA_ARGS": "--tensor-parallel-size=16"},
                                 {"KIMI_HARDWARE": "b300", "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_ADDRS": "p0",
                                  "KIMI_DECODE_ADDRS": "d0", "KIMI_DECODE_PARALLELISM": "dep", "KIMI_EXTRA_ARGS": "-tp 2"}])
@pytest.mark.parametrize("fmt", ["k8s", "compose", "json"])
def test_no_process_asks_more_gpus_than_its_node_has(env, fmt):
    """A TP of the user's is refused before any layout is drawn (issue 37: KIMI_STRATEGY draws it);
    the node-fit check behind it holds for what the recipe data draws (below)."""
    pd_in_compose = fmt == "compose" and "KIMI_STRATEGY" in env  # refused as multi-node first
    one_line_error(run_cli(["plan", "--format", fmt], base_env(**env)),
                   *(() if pd_in_compose else ("--tensor-parallel-size", "KIMI_STRATEGY")))


def test_a_layout_wider_than_the_node_is_refused():
    from entrypoint.app.launch import build
    from entrypoint.core.base.errors import KimiError
    from entrypoint.core.compose.placement import check_node_fit

    launch = build({**H200})
    check_node_fit(launch.plan, 8, launch.settings)
    with pytest.raises(KimiError) as err:
        check_node_fit(launch.plan, 4, launch.settings)
    assert "needs 8 GPUs" in err.value.message and "has 4" in err.value.message


@pytest.mark.parametrize("cache", ["/tmp", "/tmp/", "/home/kimi", "/dev/shm", "//dev/shm", "/"])
@pytest.mark.parametrize("fmt", ["k8s", "compose"])
def test_the_cache_never_shares_a_mount_path(tmp_path, cache, fmt):
    out = tmp_path / "out"
    one_line_error(run_cli(["plan", "--format", fmt, "--output", str(out)], base_env(**H200, KIMI_CACHE_DIR=cache)),
                   "KIMI_CACHE_DIR")
    assert not out.exists()


@pytest.mark.parametrize("cache", ["/cache", "/data/hf", "/tmp/cache", "/home/kimi/cache"])
def test_rendered_pods_mount_each_path_once(cache):
    import yaml

    result = run_cli(["plan", "--format", "k8s"], base_env(**H200, KIMI_CACHE_DIR=cache)).assert_clean({0})
    docs = [d for d in yaml.safe_load_all(result.out.replace("# ---", "---")) if isinstance(d, dict)]
    pods = []
    for doc in docs:
        spec = doc.get("spec", {})
        template = spec.get("template", {}).get("spec") or spec.get("leaderWorkerTemplate", {}).get(
            "workerTemplate", {}).get("spec")
        if template:
            pods.append(template)
    assert pods
    for pod in pods:
        for container in pod.get("initContainers", []) + pod["containers"]:
            paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
            assert len(paths) == len(set(paths)), paths
            if container.get("volumeMounts") and any(m["name"] == "cache" for m in container["volumeMounts"]):
                assert cache in paths


# ---------------------------------------------------------------- 4, 10: what a platform or a setting owns holds

SAGEMAKER = {**H200, "KIMI_PLATFORM": "sagemaker"}


@pytest.mark.parametrize("env,args,setting", [
    ({"KIMI_EXTRA_ARGS": "--port 9000"}, [], "KIMI_PORT"), ({"KIMI_EXTRA_ARGS": "--port=9000"}, [], "KIMI_PORT"),
    ({}, ["serve", "--por", "9000"], "KIMI_PORT"), ({"KIMI_EXTRA_ARGS": "--host 127.0.0.1"}, [], "KIMI_HOST"),
    ({}, ["serve", "--ho=127.0.0.1"], "KIMI_HOST"), ({"SM_VLLM_POR": "9000"}, [], "KIMI_PORT"),
    ({"SM_VLLM_HOS": "127.0.0.1"}, [], "KIMI_HOST"), ({"SM_VLLM_SERVED_MODEL_NAM": "x"}, [], "KIMI_SERVED_MODEL_NAME"),
    ({"SM_VLLM_MODE": "other/Model"}, [], "--model")])
def test_a_platform_contract_cannot_be_bypassed(env, args, setting):
    full = base_env(**SAGEMAKER, **env)
    one_line_error(run_cli(["print", *args], full), setting)
    one_line_error(run_cli([*args], {**full, "KIMI_DRY_RUN": "1", "KIMI_PREFLIGHT": "off"}), setting)


@pytest.mark.parametrize("fmt", ["vertex", "sagemaker"])
@pytest.mark.parametrize("env", [{"KIMI_PORT": "9000"}, {"KIMI_HOST": "127.0.0.1"}, {"KIMI_EXTRA_ARGS": "--port 9000"}])
def test_a_cloud_rendering_its_container_would_refuse_is_refused(tmp_path, fmt, env):
    out = tmp_path / "out"
    one_line_error(run_cli(["plan", "--format", fmt, "--output", str(out)], base_env(**H200, **env)))
    assert not out.exists()
    run_cli(["plan", "--format", fmt], base_env(**H200)).assert_clean({0})


@pytest.mark.parametrize("spelling", ["--model other/Model", "--model=other/Model"])
def test_model_among_the_vllm_args_is_refused(spelling):
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_EXTRA_ARGS=spelling)), "KIMI_MODEL")
    one_line_error(run_cli(["print", *spelling.split()], base_env(**H200)), "KIMI_MODEL")


def test_verify_and_healthcheck_ask_what_the_settings_give():
    """KIMI_SERVED_MODEL_NAME, KIMI_HOST and KIMI_PORT draw the server: the clients of the
    configuration ask that name at that address. The same in the vLLM args is refused (issue 37),
    by the clients too: they do not guess which server to ask."""
    from entrypoint.app.verify import verify_targets
    from entrypoint.core.base.errors import KimiError

    env = base_env(**H200, KIMI_SERVED_MODEL_NAME="kimi", KIMI_HOST="127.0.0.2", KIMI_PORT="8123")
    expected = verify_targets(True, False, env).expected
    assert expected.served_model_name == "kimi"
    assert expected.url == "http://127.0.0.2:8123"
    healthcheck = run_cli(["healthcheck", "--timeout", "1"], env)
    assert "http://127.0.0.2:8123/health" in healthcheck.out
    args = base_env(**H200, KIMI_EXTRA_ARGS="--served-model-name kimi other --host 127.0.0.2 --port 8123")
    with pytest.raises(KimiError) as err:
        verify_targets(True, False, args)
    assert "KIMI_PORT" in err.value.message
    one_line_error(run_cli(["print"], args), "KIMI_PORT")
    healthcheck = run_cli(["healthcheck", "--timeout", "1"], args)
    assert healthcheck.code != 0 and "KIMI_PORT" in healthcheck.text and "127.0.0.2:8123" not in healthcheck.out


# ---------------------------------------------------------------- 12, 14: suggestions that hold; empty is not absent


def test_a_memory_shortfall_from_the_vllm_args_suggests_no_more_nodes(tmp_path):
    """A layout of half a node (TP 4 of the InferenceX lane's data) that cannot hold the variant:
    span the node's GPUs, not more nodes. A TP of the user's own is refused first (issue 37)."""
    import shutil

    import yaml

    from entrypoint.core.data.recipe import default_recipes_dir

    data = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), data, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    doc = yaml.safe_load((data / "models/kimi-k2.5.yaml").read_text())
    doc["variants"]["mxfp4"]["vram_minimum_gb"] = 1200  # more than 4 x 288 GB, less than 8 x 288 GB
    (data / "models/kimi-k2.5.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    lane = base_env(KIMI_RECIPES_DIR=str(data), KIMI_HARDWARE="mi355x", KIMI_VARIANT="mxfp4",
                    KIMI_PROFILE="inferencex", KIMI_EXTRA_ARGS="--max-model-len 9472")
    result = one_line_error(run_cli(["print"], lane), "span all 8 GPUs", "= 4")
    assert "KIMI_NODES=1" not in result.err and "multi-node" not in result.err
    one_line_error(run_cli(["print", "-tp", "4"], base_env(**H200)), "KIMI_STRATEGY")
    # a node that cannot hold the model still gets the nodes it needs
    assert "KIMI_NODES=2" in one_line_error(run_cli(["print"], base_env(KIMI_HARDWARE="h100"))).err


@pytest.mark.parametrize("args", [["plan", "--format", "json", "--batch", ""], ["plan", "--batch", " "],
                                  ["plan", "--format", "k8s", "--output", ""], ["verify", "--url", ""],
                                  ["verify", "--expect-model", ""], ["verify", "--model", "", "--url", "http://x:1"]])
def test_an_empty_option_value_is_an_error_not_absence(args):
    result = one_line_error(run_cli(args, base_env(**H200)), "empty")
    assert result.out == ""


def test_nothing_is_written_through_a_link_in_the_output_directory(tmp_path):
    outside = tmp_path / "outside.yaml"
    outside.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "compose.yaml").symlink_to(outside)
    run_cli(["plan", "--format", "compose", "--output", str(out)], base_env(**H200)).assert_clean({0})
    assert outside.read_text() == "keep me\n"
    assert not (out / "compose.yaml").is_symlink() and "services" in (out / "compose.yaml").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["compose.yaml"]  # no temporary file left


# ---------------------------------------------------------------- loose ends: caches follow KIMI_RECIPES_DIR


def test_vllm_grammar_follows_the_data_directory(tmp_path):
    """A process that has read one data directory's grammar reads another's when
    KIMI_RECIPES_DIR names it (the caches are per directory)."""
    import os
    import shutil
    from unittest import mock

    from entrypoint.core.data import datadir
    from entrypoint.core.vllm import vllm_cli

    copy = tmp_path / "recipes"
    shutil.copytree(datadir.default_recipes_dir({}), copy, ignore=shutil.ignore_patterns(".validated"))
    newest = vllm_cli.available_versions()[-1]
    shutil.copy(copy / "vllm" / f"{newest}.json", copy / "vllm" / "9.9.9.json")
    raw = json.loads((copy / "vllm" / "9.9.9.json").read_text())
    raw["vllm_version"] = "9.9.9"
    raw["options"] = [o for o in raw["options"] if "--api-key" not in o["options"]]
    (copy / "vllm" / "9.9.9.json").write_text(json.dumps(raw))
    before = vllm_cli.available_versions()
    with mock.patch.dict(os.environ, {datadir.RECIPES_DIR_ENV: str(copy)}):
        assert vllm_cli.available_versions()[-1] == "9.9.9"
        assert vllm_cli.load_spec("9.9.9").lookup("--api-key")[0] is None
    assert vllm_cli.available_versions() == before and "9.9.9" not in before
    assert vllm_cli.load_spec(newest).lookup("--api-key")[0] is not None


# ---------------------------------------------------------------- rendered files read back as what was meant

TRICKY = ["0o17", "1e3", "y", "N", "1_000", "0x1F", ".5", "+12", "on", "~", "null", "12:30", "2026-12-01",
          "1.5e", "'quoted'", '"dq"', "a: b", "#x", "[x]", "{x}", "*ref", "&a", "!tag", "%x", "@x", "`x"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["compose", "k8s"])
def test_rendered_environment_values_read_back_as_strings(fmt):
    """Every value a rendered file carries is the same string for YAML 1.1 (PyYAML, and go-yaml
    v2's booleans y/n: Kubernetes) and YAML 1.2 (ruamel, like Compose's go-yaml v3): Compose's
    environment, and Kubernetes' settings ConfigMap (its JSON, a string of either YAML)."""
    import json

    import yaml

    ruamel = pytest.importorskip("ruamel.yaml")
    yaml12 = ruamel.YAML(typ="safe", pure=True)
    for value in TRICKY:
        result = run_cli(["plan", "--format", fmt], base_env(**H200, KIMI_MODEL_REVISION=value)).assert_clean({0})
        text = result.out.replace("# ---", "---")
        for docs in (list(yaml.safe_load_all(text)), list(yaml12.load_all(text))):
            found = []

            def walk(node, found=found):  # this iteration's list
                if isinstance(node, dict):
                    for key, item in node.items():
                        if key == "KIMI_MODEL_REVISION" or (isinstance(item, str) and item == "KIMI_MODEL_REVISION"):
                            found.append(item if key == "KIMI_MODEL_REVISION" else node.get("value"))
                        if key == "settings.json":  # the user's settings, as written (KIMI_CONFIG_JSON)
                            assert isinstance(item, str), item
                            found.append(json.loads(item)["model_revision"])
                        walk(item, found)
                elif isinstance(node, list):
                    for item in node:
                        walk(item, found)

            walk(docs)
            assert found and all(v == value and isinstance(v, str) for v in found), (value, found)
        quoted = f"'{value}'" if "'" not in value else None
        if value in ("y", "N") and quoted:  # go-yaml v2 reads plain y/n as booleans
            assert quoted in text or f'"{value}"' in text


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_the_batch_file_is_refused(device):
    from .harness import run_proc

    one_line_error(run_proc(["plan", "--batch", device], base_env(), timeout=30), device, "device")


def test_a_pipe_is_a_batch_stream(tmp_path):
    import os
    import threading

    fifo = tmp_path / "lines"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text('{"KIMI_HARDWARE": "h200"}\n' * 2))
    writer.start()
    result = run_cli(["plan", "--batch", str(fifo)], base_env()).assert_clean({0})
    writer.join(10)
    assert len(result.out.splitlines()) == 2


def test_the_contract_holds_when_the_file_sets_the_platforms_own_port(tmp_path):
    config = _config(tmp_path, 'platform = "sagemaker"\nport = 8080\n')
    argv = _argv(run_cli(["print", "--format", "json"], base_env(**H200, KIMI_CONFIG=config)).assert_clean({0}))
    assert _flag(argv, "--port") == "8080"
    # another port, from the environment or the vLLM args, is refused
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=config, KIMI_PORT="9000")), "8080")
    one_line_error(run_cli(["print"], base_env(**H200, KIMI_CONFIG=config, KIMI_EXTRA_ARGS="--port 9000")),
                   "KIMI_PORT")


ONE_NODE_PD = {**PD, "KIMI_PREFILL_NODES": "0", "KIMI_DECODE_NODES": "0", "KIMI_PREFILL_ADDRS": "h",
               "KIMI_DECODE_ADDRS": "h"}


@pytest.mark.parametrize("env,fmt", [({"KIMI_ROUTER_PORT": "8001"}, "compose"),
                                     ({"KIMI_PREFILL_DP_RPC_PORT": "29560"}, "shell"),
                                     ({"KIMI_PREFILL_DP_RPC_PORT": "5557"}, "shell"),
                                     ({"KIMI_DECODE_DP_RPC_PORT": "8002"}, "json")])
def test_no_two_listeners_of_one_host_share_a_port(env, fmt):
    one_line_error(run_cli(["plan", "--format", fmt], base_env(**ONE_NODE_PD, **env)), "port")


def test_a_directory_in_the_way_stops_before_any_file_is_written(tmp_path):
    out = tmp_path / "out"
    (out / "sagemaker-endpoint.json").mkdir(parents=True)
    one_line_error(run_cli(["plan", "--format", "sagemaker", "--output", str(out)], base_env(**H200)),
                   "sagemaker-endpoint.json")
    assert sorted(p.name for p in out.iterdir()) == ["sagemaker-endpoint.json"]


@pytest.mark.parametrize("text,secret", [("--api-key 'two words' x", "two words"), ('--api_key="s p"', "s p"),
                                         ("--hf-token   tok-123 y", "tok-123"), ("--api-k=-dash-secret", "-dash-secret")])
def test_quoted_and_spaced_values_are_masked_whole(text, secret):
    from entrypoint.core.vllm.mask import mask_flags

    assert secret not in mask_flags(text) and "****" in mask_flags(text)
    assert mask_flags("--api-key --port 8000") == "--api-key --port 8000"  # the next option is no value


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_token_path_that_is_no_file_is_refused_before_the_download(tmp_path, kind):
    import os

    from .harness import run_proc

    path = {"device": "/dev/zero", "directory": str(tmp_path)}.get(kind, str(tmp_path / "pipe"))
    if kind == "fifo":
        os.mkfifo(path)
    env = base_env(**H200, HF_TOKEN_PATH=path, KIMI_CACHE_DIR=str(tmp_path / "cache"), HF_ENDPOINT="http://127.0.0.1:9")
    one_line_error(run_proc(["download"], env, timeout=60), "HF_TOKEN_PATH")


@pytest.mark.parametrize("value", ["a b", "it's", 'say "hi"', "$(id)", "`id`", "a\\b", "*", "~/x", "a;b", "é ü", "a\nb"])
def test_the_printed_shell_command_reads_back_as_the_argv(value):
    """`print` is a command a person pastes: POSIX shell words (shlex, like sh) give back exactly
    the argv of `print --format json`, whatever the values hold."""
    import shlex

    env = base_env(**H200, KIMI_SERVED_MODEL_NAME=value, KIMI_EXTRA_ARGS=shlex.join(["--chat-template", value]))
    argv = _argv(run_cli(["print", "--format", "json"], env).assert_clean({0}))
    text = run_cli(["print"], env).assert_clean({0}).out
    words = shlex.split(text.replace("\\\n", ""))  # sh drops a backslash-newline (line continuation)
    assert words[words.index("vllm"):] == argv


def test_a_fifo_in_the_data_directory_is_broken_data_not_a_hang(tmp_path):
    import os
    import shutil

    from entrypoint.core.data import datadir

    from .harness import run_proc

    copy = tmp_path / "recipes"
    shutil.copytree(datadir.default_recipes_dir({}), copy, ignore=shutil.ignore_patterns(".validated"))
    (copy / "serving.yaml").unlink()
    os.mkfifo(copy / "serving.yaml")
    result = run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy)), timeout=30).assert_clean({3})
    assert "not a regular file" in result.err


@pytest.mark.slow
def test_a_stalled_name_lookup_is_inside_the_deadline():
    """getaddrinfo has no timeout of its own: a resolver that never answers still ends the
    request (and the object-store check, the metadata probe) within the one deadline."""
    import socket
    import threading
    import time
    from unittest import mock

    from entrypoint.core.base import bounded

    release = threading.Event()
    real = socket.getaddrinfo

    def stalled(host, *args, **kwargs):
        if host == "stalled.invalid":
            release.wait(30)
        return real(host, *args, **kwargs)

    with mock.patch("socket.getaddrinfo", stalled):
        start = time.monotonic()
        with pytest.raises(bounded.HttpError):
            bounded.request("GET", "http://stalled.invalid:8000/health", timeout=1.0)
        assert time.monotonic() - start < 5
        env = base_env(**H200, KIMI_MODEL="s3://bucket/kimi", AWS_ACCESS_KEY_ID="AKIAX", AWS_SECRET_ACCESS_KEY="x",
                       AWS_ENDPOINT_URL_S3="http://stalled.invalid:9000")
        from entrypoint.core.base import limits

        with mock.patch.object(limits, "OBJECT_STORE_DEADLINE_S", 1.0):
            result = run_cli(["doctor", "--format", "json"], env).assert_clean({1})
        assert result.seconds < 8
    release.set()
