"""The container's side of each platform's contract (recipes/platforms.yaml), through the one
composition root (entrypoint.app) and the real CLI: detection, the `serve` argument, port, bind
address, model location, flag variables, cluster wiring, routes, conflicts, and object storage."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from entrypoint.app.launch import load_launch
from entrypoint.core.base.errors import KimiError
from entrypoint.core.vllm.vllm_cli import flag_value

BASE = {"KIMI_HARDWARE": "h200", "PATH": os.environ.get("PATH", "")}
SERVED = "moonshotai/Kimi-K2.5"


def launch(env, args=()):
    return load_launch(tuple(args), {**BASE, **env})


def argv(env, args=()):
    return launch(env, args).this_process().argv


def cli(*args, env):
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env={**BASE, **env}, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def checkpoint(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    return str(tmp_path)


def test_sagemaker_serve_argument_is_consumed_and_its_port_and_bind_address_apply():
    la = launch({}, ["serve"])
    a = la.this_process().argv
    assert "serve" not in a[3:]  # vllm serve <model> ...: no stray positional
    assert flag_value(a, "--port") == "8080" and flag_value(a, "--host") == "0.0.0.0"
    assert la.platform.platform == "sagemaker" and "serve" in la.platform.reason
    assert la.this_process().port == 8080


def test_sagemaker_artifacts_in_opt_ml_model_style_dir_are_the_model_and_served_name_stays(checkpoint):
    a = argv({"KIMI_PLATFORM": "sagemaker", "HF_MODEL_ID": checkpoint})
    assert a[2] == checkpoint and flag_value(a, "--served-model-name") == SERVED


def test_sagemaker_sm_vllm_variables_become_flags_and_explicit_kimi_settings_win():
    a = argv({"SM_VLLM_MAX_MODEL_LEN": "4096", "SM_VLLM_ENFORCE_EAGER": "true", "SM_VLLM_DISABLE_LOG_STATS": "false",
              "KIMI_EXTRA_ARGS": "--max-model-len 8192"}, ["serve"])
    assert flag_value(a, "--max-model-len") == "8192"  # the explicit setting wins the dedupe
    assert "--enforce-eager" in a and "--disable-log-stats" not in a


def test_a_sagemaker_flag_variable_may_not_set_what_a_setting_owns():
    with pytest.raises(KimiError, match="KIMI_PORT"):
        launch({"SM_VLLM_PORT": "9000"}, ["serve"])
    # nor any option that draws the deployment (issue 37): each names its typed setting
    for name, value, setting in (("SM_VLLM_TENSOR_PARALLEL_SIZE", "4", "KIMI_STRATEGY"),
                                 ("SM_VLLM_SHUTDOWN_TIMEOUT", "900", "KIMI_DRAIN_TIMEOUT"),
                                 ("SM_VLLM_LOAD_FORMAT", "safetensors", "KIMI_LOAD_FORMAT")):
        with pytest.raises(KimiError, match=setting):
            launch({name: value}, ["serve"])


def test_an_explicit_port_that_differs_from_the_contract_is_an_exit_2_conflict():
    proc = cli("print", env={"KIMI_PLATFORM": "sagemaker", "KIMI_PORT": "8000"})
    assert proc.returncode == 2 and "KIMI_PORT=8000" in proc.stderr and "8080" in proc.stderr
    assert "Traceback" not in proc.stderr
    same = cli("print", env={"KIMI_PLATFORM": "sagemaker", "KIMI_PORT": "8080"})
    assert same.returncode == 0, same.stderr


def test_vertex_port_and_storage_uri_apply_and_the_storage_is_streamed():
    a = argv({"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "7080", "AIP_STORAGE_URI": "gs://bucket/kimi",
              "AIP_HEALTH_ROUTE": "/health", "AIP_PREDICT_ROUTE": "/v1/chat/completions"})
    assert flag_value(a, "--port") == "7080" and a[2] == "gs://bucket/kimi"
    assert flag_value(a, "--load-format") == "runai_streamer" and flag_value(a, "--served-model-name") == SERVED


def test_vertex_default_routes_the_server_does_not_answer_are_a_clear_error():
    proc = cli("print", env={"AIP_HTTP_PORT": "8080", "AIP_HEALTH_ROUTE": "/v1/endpoints/1/deployedModels/2"})
    assert proc.returncode == 2 and "AIP_HEALTH_ROUTE" in proc.stderr and "/health" in proc.stderr


def test_azureml_registered_model_folder_is_the_model(tmp_path):
    folder = tmp_path / "mount" / "Kimi-K2.5"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    a = argv({"AZUREML_MODEL_DIR": str(tmp_path / "mount")})
    assert a[2] == str(folder)  # the one registered folder under the mount
    explicit = argv({"AZUREML_MODEL_DIR": str(folder), "KIMI_MODEL": "moonshotai/Kimi-K2.5"})
    assert explicit[2] == SERVED  # an explicit KIMI_MODEL wins over the platform's location


def test_skypilot_nodes_rank_and_head_come_from_its_variables():
    proc = launch({"KIMI_HARDWARE": "h100", "KIMI_IFACE": "eth0", "SKYPILOT_NUM_NODES": "2",
                   "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6"}).this_process()
    assert proc.role == "worker" and flag_value(proc.argv, "--master-addr") == "10.0.0.5"


def test_no_platform_leaves_the_launch_alone_and_none_turns_detection_off():
    plain = argv({})
    assert flag_value(plain, "--port") is None
    assert flag_value(argv({"KIMI_PLATFORM": "none", "AIP_HTTP_PORT": "8080"}), "--port") is None


def test_unknown_platform_is_a_clear_error():
    proc = cli("print", env={"KIMI_PLATFORM": "sagemker"})
    assert proc.returncode == 2 and "sagemaker" in proc.stderr


def test_object_storage_with_another_load_format_is_a_conflict():
    with pytest.raises(KimiError, match="runai_streamer"):
        launch({"KIMI_MODEL": "s3://bucket/kimi", "KIMI_LOAD_FORMAT": "safetensors"})
    # a --load-format of the user's is refused, with object storage or without (KIMI_LOAD_FORMAT's, issue 37)
    with pytest.raises(KimiError, match="runai_streamer"):
        launch({"KIMI_MODEL": "s3://bucket/kimi", "KIMI_EXTRA_ARGS": "--load-format safetensors"})
    with pytest.raises(KimiError, match="KIMI_LOAD_FORMAT"):
        launch({"KIMI_EXTRA_ARGS": "--load-format safetensors"})


def test_explain_and_doctor_say_which_contract_applied():
    out = cli("explain", env={"KIMI_PLATFORM": "sagemaker"})
    assert out.returncode == 0 and "platform contract: sagemaker" in out.stdout and "KIMI_PORT=8080" in out.stdout
    doc = cli("doctor", "--format", "json", env={"AIP_HTTP_PORT": "8080"})
    report = json.loads(doc.stdout)
    assert report["platform"]["platform"] == "vertex" and "AIP_HTTP_PORT" in report["platform"]["reason"]


def test_object_storage_secrets_are_masked_in_the_start_log():
    proc = cli(env={"KIMI_MODEL": "s3://bucket/kimi", "KIMI_DRY_RUN": "1", "KIMI_PREFLIGHT": "warn",
                    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEYID0000", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-very-secret",
                    "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_EC2_METADATA_DISABLED": "true"})
    assert "wJalrXUtnFEMI-very-secret" not in proc.stdout + proc.stderr
    assert "--load-format runai_streamer" in proc.stderr and "model_source" in proc.stderr
