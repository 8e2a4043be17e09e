"""Issue 27, the bounded parts: one catalog of every data file, bounded reads of every input, one
mask for every sink, one writer, and the sweep. Each test is a user's (or an image builder's)
input that used to hang, leak or be read as something else; it runs the real command."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from entrypoint.core.data import datadir

from .harness import base_env, run_proc

H200 = {"KIMI_HARDWARE": "h200"}
EXIT_BROKEN_IMAGE = 3


def recipes_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "recipes"
    shutil.copytree(datadir.default_recipes_dir({}), copy, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    return copy


def broken_image(result, *words):
    """Exit 3 (a defect of the image), one line on stderr, naming what is wrong."""
    assert result.code == EXIT_BROKEN_IMAGE, result.text[-2000:]
    assert "Traceback" not in result.text and len(result.err.strip().splitlines()) == 1, result.err
    for word in words:
        assert word in result.err, result.err
    return result


# ---------------------------------------------------------------- 1: one catalog of every data file

DATA_FILES = ["kv_offload.yaml", "loaders.yaml", "vllm/0.33.0.json", "vllm/0.19.1.json", "bench/benchmarks.yaml",
              "platforms.yaml", "models/kimi-k3.yaml", "strategies/pd_cluster.yaml", "fleet.yaml"]


@pytest.mark.slow
@pytest.mark.parametrize("name", DATA_FILES)
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_data_file_that_is_not_a_regular_file_is_refused(tmp_path, name, kind):
    copy = recipes_copy(tmp_path)
    (copy / name).unlink()
    if kind == "fifo":
        os.mkfifo(copy / name)
    elif kind == "directory":
        (copy / name).mkdir()
    else:
        (copy / name).symlink_to("/dev/zero")
    env = base_env(**H200, KIMI_RECIPES_DIR=str(copy), KIMI_KV_OFFLOAD="simple")
    broken_image(run_proc(["print"], env, timeout=60), str(copy / name), "not a regular file")


@pytest.mark.slow
@pytest.mark.parametrize("name, text, words", [
    ("kv_offload.yaml", "options: [\n", "not valid YAML (line 2"),
    ("loaders.yaml", "load_formats: {}\nextra: 1\n", "is invalid"),
    ("vllm/0.32.0.json", "{", "not valid JSON"),
    ("vllm/0.32.0.json", '{"vllm_version": "0.32.0", "options": [{"dest": "x"}], "env": []}', "options[0]"),
    ("bench/benchmarks.yaml", "a: " + "[" * 40 + "]" * 40 + "\n", "nests deeper than 32"),
    ("bench/benchmarks.yaml", "- 1\n", "must be a mapping"),
    ("models/kimi-k3.yaml", "id: [1, 2]\n", "is invalid"),
])
def test_a_broken_data_file_is_one_line_naming_the_file(tmp_path, name, text, words):
    copy = recipes_copy(tmp_path)
    (copy / name).write_text(text)
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), str(copy / name), words)


def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", ["kv_offload.yaml", "loaders.yaml", "models/kimi-k2.5.yaml", "hardware.yaml"])
def test_yaml_aliases_that_expand_to_billions_are_refused(tmp_path, name):
    copy = recipes_copy(tmp_path)
    (copy / name).write_text(billion_laughs())  # 700 bytes; 9^10 values once expanded
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), str(copy / name),
                 "aliases are expanded")


def test_a_recursive_alias_is_refused(tmp_path):
    copy = recipes_copy(tmp_path)
    (copy / "loaders.yaml").write_text("a: &a [1, *a]\n")
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), "loaders.yaml",
                 "refers to the value that contains it")


def test_a_huge_data_file_is_refused(tmp_path):
    from entrypoint.core.base import limits

    copy = recipes_copy(tmp_path)
    with open(copy / "kv_offload.yaml", "wb") as fh:
        fh.truncate(limits.MAX_DATA_FILE_BYTES + 1)  # sparse: no disk used
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), "kv_offload.yaml",
                 f"larger than {limits.MAX_DATA_FILE_BYTES}")


def _edit_yaml(path: Path, change) -> None:
    import yaml

    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("name, change, words", [
    ("models/kimi-k2.5.yaml", lambda d: d.update(kv_offload_support={"lmcash": "verified"}),
     "kv_offload_support: unknown KV offload option 'lmcash' (valid: lmcache, "),
    ("models/kimi-k2.5.yaml", lambda d: d.update(kv_cache_strategy_hardware={"kv_store_mooncake": ["h200"]}),
     "kv_cache_strategy_hardware: unknown KV store 'kv_store_mooncake' (valid: kv_store_centralized_mooncake"),
    ("models/kimi-k2.5.yaml",
     lambda d: d.update(kv_cache_strategy_hardware={"kv_store_centralized_mooncake": ["h201"]}),
     "kv_cache_strategy_hardware.kv_store_centralized_mooncake: unknown hardware 'h201'"),
    ("kv_offload.yaml", lambda d: d["options"]["lmcache"].update(strategies=["single_node_tpp"]),
     "options.lmcache.strategies: unknown strategy 'single_node_tpp'"),
    ("kv_offload.yaml", lambda d: d["stores"]["kv_store_centralized_mooncake"].update(
        brands=["nvidia", "intel"], install={"nvidia": "x", "intel": "x"}),
     "stores.kv_store_centralized_mooncake.brands: unknown brand 'intel'"),
    ("loaders.yaml", lambda d: d["loaders"]["instanttensor"].update(brands=["nvdia"]),
     "loaders.instanttensor.brands: unknown brand 'nvdia'"),
    ("loaders.yaml", lambda d: d["checkpoints"].update({"kimi-k9": {"default": 1}}),
     "checkpoints: unknown recipe 'kimi-k9'"),
    ("loaders.yaml", lambda d: d["checkpoints"]["kimi-k2.5"].update(fp2=1),
     "checkpoints.kimi-k2.5: unknown variant 'fp2'"),
    ("bench/benchmarks.yaml", lambda d: d["references"][0].update(hardware="h201"),
     "references[0].hardware: unknown hardware 'h201'"),
    ("fleet.yaml", lambda d: d.update(router_of="kv_store_mooncake"),
     "router_of: unknown KV store 'kv_store_mooncake' (valid: kv_store_centralized_mooncake"),
])
@pytest.mark.slow
def test_a_dangling_reference_names_the_file_and_the_key(tmp_path, name, change, words):
    copy = recipes_copy(tmp_path)
    _edit_yaml(copy / name, change)
    broken_image(run_proc(["print"], base_env(**H200, KIMI_RECIPES_DIR=str(copy))), str(copy / name), words)


def test_every_part_of_the_catalog_is_validated_once_and_read_from_the_cache(tmp_path, monkeypatch):
    """One digest covers every data file; the KV, loader, bench, preload, fleet and wiring parts are cached beside the
    catalog, so a KV launch reads JSON, not YAML (and imports neither yaml nor pydantic)."""
    import subprocess
    import sys

    copy = recipes_copy(tmp_path)
    env = base_env(**H200, KIMI_RECIPES_DIR=str(copy), KIMI_KV_OFFLOAD="lmcache", PYTHONPATH=str(Path(__file__).parents[2]))
    assert run_proc(["print"], env).code == 0
    parts = sorted(p.name.split("-", 2)[2] if p.name.count("-") == 2 else "" for p in (copy / ".validated").iterdir())
    assert parts == ["", "bench.json", "fleet.json", "kv_offload.json", "loaders.json", "preload.json", "wiring.json"]
    probe = ("import sys, runpy; sys.argv = ['kimi-serve', 'print']\n"
             "try:\n    runpy.run_module('entrypoint', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "print('yaml' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert out.stderr.strip().splitlines()[-1] == "False False", out.stderr
    (copy / "kv_offload.yaml").write_text((copy / "kv_offload.yaml").read_text() + "\n# a change\n")
    assert run_proc(["print"], env).code == 0  # validated again: a new digest
    assert len(list((copy / ".validated").iterdir())) == 14  # two digests of 7 parts


# ---------------------------------------------------------------- 2: bounded reads of the weights and their search

SHARD = "model-00001-of-00001.safetensors"


def _model_dir(tmp_path: Path, kind: str) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    if kind == "fifo":
        os.mkfifo(model / SHARD)
    elif kind == "device":
        (model / SHARD).symlink_to("/dev/zero")
    elif kind == "link loop":
        (model / SHARD).symlink_to(model / "model-00002-of-00002.safetensors")
        (model / "model-00002-of-00002.safetensors").symlink_to(model / SHARD)
    return model


@pytest.mark.parametrize("kind, words", [("fifo", "is a FIFO (named pipe), not a regular file"),
                                         ("device", "is a device, not a regular file"),
                                         ("link loop", "is a link loop, not a regular file")])
def test_a_weights_file_that_cannot_be_read_is_named_by_doctor_and_the_start(tmp_path, kind, words):
    model = _model_dir(tmp_path, kind)
    env = base_env(**H200, KIMI_MODEL=str(model), KIMI_CACHE_DIR=str(tmp_path / "cache"))
    doctor = run_proc(["doctor"], env, timeout=60).assert_clean({1})
    assert f"weights: {model / SHARD} {words}" in doctor.out, doctor.out
    start = run_proc([], {**env, "KIMI_DRY_RUN": "1"}, timeout=60).assert_clean({0})  # a dry run reports
    assert f"{model / SHARD} {words}" in start.err, start.err
    ran = run_proc([], env, timeout=60).assert_clean({2})  # the start stops before vLLM would wait on it
    assert f"cache: weights: {model / SHARD} {words}" in ran.err, ran.err


def test_a_directory_link_loop_in_the_weights_is_not_followed(tmp_path):
    model = _model_dir(tmp_path, "none")
    (model / "loop").symlink_to(model)
    (model / SHARD).write_bytes(b"\0" * 4096)
    env = base_env(**H200, KIMI_MODEL=str(model), KIMI_CACHE_DIR=str(tmp_path / "cache"))
    doctor = run_proc(["doctor"], env, timeout=60).assert_clean({0, 1})
    assert f"weights present in {model}" in doctor.out and "sample 0 MiB" in doctor.out, doctor.out


def test_the_weights_search_is_bounded_in_entries_and_depth(tmp_path):
    from entrypoint.core.base.files import walk_files

    deep = tmp_path
    for i in range(10):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    (deep / SHARD).write_bytes(b"x")
    assert walk_files(tmp_path, ".safetensors", 1000, 6, 5.0).files == []  # 10 levels down: past the bound
    assert len(walk_files(tmp_path, ".safetensors", 1000, 12, 5.0).files) == 1
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(50):
        (wide / f"f{i}").write_bytes(b"")
    found = walk_files(wide, ".safetensors", 20, 6, 5.0)
    assert found.files == [] and "more than 20 entries" in found.stopped
    assert "passed 0 s" in walk_files(wide, ".safetensors", 1000, 6, 0.0).stopped


def test_a_fifo_in_place_of_a_bench_result_is_refused(tmp_path):
    from entrypoint.core.data.bench import ResultError
    from entrypoint.verify.bench import read_result

    os.mkfifo(tmp_path / "r.json")
    with pytest.raises(ResultError, match="not a regular file"):
        read_result(tmp_path / "r.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ResultError, match=r"too deep|not JSON"):
        read_result(tmp_path / "deep.json")


# ---------------------------------------------------------------- 3: one mask, every sink

PASSWORD = "pw-Secret-27x"
S3_MODEL = f"s3://AKIAEXAMPLE27:{PASSWORD}@bucket/kimi"
FILE_FORMATS = ["k8s", "compose", "skypilot", "k8s-bench", "compose-bench", "sagemaker"]


@pytest.mark.parametrize("fmt", FILE_FORMATS)
@pytest.mark.parametrize("to_dir", [False, True])
def test_a_rendered_file_that_would_write_a_url_password_is_refused(tmp_path, fmt, to_dir):
    """What is printed is what is deployed: the manifest is refused on stdout and under --output
    alike (it was written with the password, exit 0, while stdout showed ****)."""
    out = tmp_path / "out"
    args = ["plan", "--format", fmt] + (["--output", str(out)] if to_dir else [])
    result = run_proc(args, base_env(**H200, KIMI_MODEL=S3_MODEL)).assert_clean({2})
    assert PASSWORD not in result.text and "would write down a secret" in result.err, result.err
    assert "s3://AKIAEXAMPLE27:****@bucket/kimi" in result.err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("extra", [f"--api-key {PASSWORD}", f"--api_key={PASSWORD}", f"--api-k '{PASSWORD}'"])
def test_a_credential_option_in_any_spelling_is_refused_for_every_format(tmp_path, extra):
    for fmt in ("k8s", "compose"):
        result = run_proc(["plan", "--format", fmt, "--output", str(tmp_path / fmt)],
                          base_env(**H200, KIMI_EXTRA_ARGS=extra)).assert_clean({2})
        assert PASSWORD not in result.text and "secret" in result.err
        assert not (tmp_path / fmt).exists() or not any((tmp_path / fmt).iterdir())


def test_a_rendered_file_without_secrets_is_written_and_names_the_token_file(tmp_path):
    """HF_TOKEN_PATH's value is a path, not a secret: a deployment that passes the token that way
    renders (the file's content is what is secret)."""
    token = tmp_path / "token"
    token.write_text("hf_TokenFromFile27\n")
    env = base_env(**H200, HF_TOKEN_PATH=str(token))
    result = run_proc(["plan", "--format", "k8s", "--output", str(tmp_path / "out")], env).assert_clean({0})
    assert (tmp_path / "out" / "kubernetes.yaml").is_file(), result.err


def test_a_token_read_from_hf_token_path_is_masked_in_the_hubs_words(tmp_path):
    from entrypoint.core.vllm.mask import mask_output
    from entrypoint.node.weights import _one_line

    token = tmp_path / "token"
    token.write_text("hf_TokenFromFile27\n")
    echoed = RuntimeError("401 Client Error for url: https://hub/api?token=hf_TokenFromFile27 (Bearer hf_TokenFromFile27)")
    for environ in ({"HF_TOKEN_PATH": str(token)}, {"HF_HOME": str(tmp_path)}):
        assert "hf_TokenFromFile27" not in _one_line(echoed, environ)
        assert "hf_TokenFromFile27" not in mask_output(str(echoed), environ)
    assert mask_output(f"HF_TOKEN_PATH={token}", {"HF_TOKEN_PATH": str(token)}) == f"HF_TOKEN_PATH={token}"


def test_a_token_file_that_is_a_fifo_masks_nothing_and_never_waits(tmp_path):
    from entrypoint.core.vllm.mask import file_secrets

    os.mkfifo(tmp_path / "token")
    assert file_secrets({"HF_TOKEN_PATH": str(tmp_path / "token")}) == []


@pytest.mark.parametrize("text", [
    f"the store said: bad password {PASSWORD}",  # the password alone, without its URL
    f"--api-key {PASSWORD}", f"--api_key={PASSWORD}", f"--api-k '{PASSWORD}'",
    f"model s3://u:{PASSWORD}@b/k",
])
def test_every_spelling_is_masked_in_a_log_line(text, capsys):
    from entrypoint.node.logs import StartLog

    StartLog("json", {"KIMI_MODEL": S3_MODEL}).info("probe", text)
    StartLog("text", {"KIMI_MODEL": S3_MODEL}).warning("probe", text)
    err = capsys.readouterr().err
    assert PASSWORD not in err and "****" in err, err


@pytest.mark.parametrize("args", [["print"], ["explain"], ["plan", "--format", "json"], ["plan"], ["doctor"]])
def test_a_url_password_reaches_no_printed_sink(args, tmp_path):
    result = run_proc(args, base_env(**H200, KIMI_MODEL=S3_MODEL, KIMI_CACHE_DIR=str(tmp_path / "cache")))
    result.assert_clean()
    assert PASSWORD not in result.text and "AKIAEXAMPLE27" in result.text, result.text[-2000:]


# ---------------------------------------------------------------- 6: the sweep

@pytest.mark.parametrize("nodelist, words", [
    ("gpu[5-1]", "runs backwards"), ("gpu[0-999999999]", "more than 65536 hosts"),
    ("a[0-999999999]b[5-1]", "runs backwards"), ("r[0-99999]-n[0-99999]", "more than 65536 hosts"),
    (",", "names no host"), ("gpu[1-65536],x1", "more than 65536 hosts"),
])
def test_a_slurm_host_list_that_names_nothing_or_billions_ends_at_once(nodelist, words):
    """A bound on the expansion (the count is computed first), not on the time."""
    from .harness import run_cli
    from .test_repros_20 import one_line_error

    env = base_env(**H200, KIMI_STRATEGY="multi_node_tp", SLURM_NNODES="2", SLURM_NODEID="0",
                   SLURM_JOB_NODELIST=nodelist, KIMI_IFACE="eth0")
    one_line_error(run_cli(["print"], env), "SLURM_JOB_NODELIST", words, "set KIMI_HEAD_ADDR")


def test_a_host_list_is_counted_before_it_is_expanded():
    from entrypoint.node.cluster import expand_nodelist

    assert expand_nodelist("gpu[1-65536]", limit=2) == ["gpu1", "gpu2"]
    assert len(expand_nodelist("r[1-256]-n[1-256]")) == 65536
    with pytest.raises(ValueError, match="more than"):
        expand_nodelist("r[1-256]-n[1-257]", limit=1)


DOLLARS = ["a$b", "${HOME}", "$HOME", "$$", "x$", "$(HOME)", "a$$b$${HOME}"]


@pytest.mark.slow
@pytest.mark.parametrize("value", DOLLARS)
def test_a_dollar_in_a_value_reads_back_unchanged_through_docker_compose(tmp_path, value):
    """Compose interpolates `$NAME`, `${NAME}` and `$$` in every value; the rendered file escapes
    each `$`, so the real `docker-compose config` resolves it to the value set (it prints the
    resolved file re-escaped: `$$` there is one `$`)."""
    import subprocess

    import yaml

    from tests.conftest import COMPOSE_CONFIG_BOUND_S, IN_CI

    exe = shutil.which("docker-compose")
    if exe is None:
        if IN_CI:
            pytest.fail("CI=true but docker-compose is missing (apt-get install docker-compose)")
        pytest.skip("docker-compose is not installed")
    out = tmp_path / "out"
    env = base_env(**H200, KIMI_MODEL_REVISION=value, KIMI_SERVED_MODEL_NAME=f"kimi{value}",
                   KIMI_EXTRA_ARGS=f"--chat-template 'kimi{value}'")
    run_proc(["plan", "--format", "compose", "--output", str(out)], env).assert_clean({0})
    (out / "hf_token").write_text("")
    done = subprocess.run([exe, "-f", str(out / "compose.yaml"), "config"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/home/nobody"}, timeout=COMPOSE_CONFIG_BOUND_S)
    assert done.returncode == 0, done.stderr
    assert "not set" not in done.stderr, done.stderr  # no variable was looked up
    services = yaml.safe_load(done.stdout)["services"]
    for svc in services.values():
        environment = {k: v.replace("$$", "$") for k, v in svc["environment"].items()}
        assert environment["KIMI_MODEL_REVISION"] == value
        assert environment["KIMI_EXTRA_ARGS"] == f"--chat-template 'kimi{value}'"
        assert environment["KIMI_SERVED_MODEL_NAME"] == f"kimi{value}"


@pytest.mark.parametrize("env, words", [
    ({"KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake", "KIMI_KV_INSTANCES": "2", "KIMI_MOONCAKE_MASTER_ADDR": "10.0.0.9",
      "KIMI_INSTANCE_ADDRS": "10.0.0.1,10.0.0.1."}, "KIMI_INSTANCE_ADDRS lists one host twice: entry 1 (10.0.0.1)"),
    ({"KIMI_KV_OFFLOAD": "kv_store_distributed_mooncake", "KIMI_KV_INSTANCES": "2", "KIMI_MOONCAKE_MASTER_ADDR": "10.0.0.9",
      "KIMI_INSTANCE_ADDRS": "Node-1,node-1."}, "KIMI_INSTANCE_ADDRS lists one host twice"),
    ({"KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "2", "KIMI_PREFILL_ADDRS": "[fd00:0::1],fd00::1",
      "KIMI_DECODE_ADDRS": "10.0.0.2"}, "KIMI_PREFILL_ADDRS lists one host twice: entry 1 ([fd00:0::1]) and entry 2"),
])
def test_every_address_list_refuses_one_host_twice(env, words):
    from .harness import run_cli
    from .test_repros_20 import one_line_error

    one_line_error(run_cli(["plan"], base_env(**H200, **env)), words)


@pytest.mark.parametrize("upper, lower", [("AUTO", "auto"), ("Recipe", "recipe"), ("SafeTensors", "safetensors")])
def test_a_load_format_keyword_reads_the_same_in_any_case(upper, lower):
    """KIMI_LOAD_FORMAT=AUTO chose vLLM's own `--load-format auto` (a different loader), silently."""
    from .harness import run_cli

    given = run_cli(["plan", "--format", "json"], base_env(**H200, KIMI_LOAD_FORMAT=upper)).assert_clean({0})
    same = run_cli(["plan", "--format", "json"], base_env(**H200, KIMI_LOAD_FORMAT=lower)).assert_clean({0})
    assert given.out == same.out


def test_an_unknown_value_never_offers_an_empty_list():
    from .harness import run_cli
    from .test_repros_20 import one_line_error

    result = one_line_error(run_cli(["print"], base_env(**H200, KIMI_RECIPE="kimi-k2-instruct", KIMI_PROFILE="x")),
                            "KIMI_PROFILE", "no valid values", "KIMI_PROFILE unset")
    assert "Valid values: ." not in result.err and "values: ." not in result.err
    from entrypoint.core.base.errors import unknown_value

    assert "Valid values" not in unknown_value("KIMI_X", "y", []).message


def kubelet_expand(value: str, defined: dict) -> str:
    """What the kubelet makes of an env value (a stand-in mirroring Kubernetes 1.30's
    third_party/forked/golang/expansion/expand.go, `Expand`): `$$` is one `$`; `$(NAME)` is NAME's
    value when an earlier variable defines it, else kept as written; any other `$` stays."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = value.find(")", i + 2)
                if end != -1:
                    name = value[i + 2:end]
                    out.append(defined[name] if name in defined else value[i:end + 1])
                    i = end + 1
                    continue
        out.append(value[i])
        i += 1
    return "".join(out)


def test_the_kubelet_stand_in_expands_as_kubernetes_does():
    # expand_test.go's own cases (Kubernetes 1.30): a defined name, an escaped one, an unknown one
    assert kubelet_expand("$(VAR_A)", {"VAR_A": "A"}) == "A"
    assert kubelet_expand("$$(VAR_A)", {"VAR_A": "A"}) == "$(VAR_A)"
    assert kubelet_expand("$(VAR_DNE)", {}) == "$(VAR_DNE)"
    assert kubelet_expand("$$$$", {}) == "$$" and kubelet_expand("x$", {}) == "x$"


@pytest.mark.parametrize("value", DOLLARS)
def test_a_dollar_in_a_value_reads_back_unchanged_through_the_kubelet(value):
    """Kubernetes expands `$(NAME)` and `$$` in every env value (each variable defined before it
    can be named), not in one read from a ConfigMap: the user's settings reach the containers from
    their ConfigMap (KIMI_CONFIG_JSON) untouched, and the manifests write each `$` of a value as
    `$$`, so every container sees the value set, whatever the other variables are called."""
    from entrypoint.core.compose.settings import read_settings
    from tests.deploy.shapes import container_environ, documents

    env = {**H200, "KIMI_MODEL_REVISION": value, "KIMI_SERVED_MODEL_NAME": f"kimi{value}",
           "KIMI_EXTRA_ARGS": f"--chat-template 'kimi{value}'"}
    seen = 0
    docs = documents("k8s", env)
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in [*spec.get("initContainers", ()), *spec.get("containers", ())]:
            defined: dict = {}
            for item in container.get("env", ()):
                if "value" in item:
                    defined[item["name"]] = kubelet_expand(item["value"], {**defined, "HOME": "/home/x"})
                elif "configMapKeyRef" in item.get("valueFrom", {}):
                    defined[item["name"]] = container_environ(docs, {"env": [item]})[item["name"]]
            told = read_settings(defined)
            assert told.model_revision == value
            assert told.values["extra_args"] == f"--chat-template 'kimi{value}'"
            assert told.served_model_name == f"kimi{value}"
            seen += 1
    assert seen >= 1


@pytest.mark.parametrize("kind", ["fifo", "link loop", "directory"])
def test_a_config_file_that_is_not_a_regular_file_ends_at_once_naming_it(tmp_path, kind):
    config = tmp_path / "kimi.toml"
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "link loop":
        os.symlink(tmp_path / "other", config)
        os.symlink(config, tmp_path / "other")
    else:
        config.mkdir()
    result = run_proc(["print"], base_env(**H200, KIMI_CONFIG=str(config)))
    assert result.code == 2 and f"KIMI_CONFIG={config}" in result.err and "Traceback" not in result.err, result.err


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_token_file_that_is_not_a_regular_file_ends_the_download_at_once(tmp_path, kind):
    token = tmp_path / "token"
    if kind == "fifo":
        os.mkfifo(token)
    else:
        token = Path("/dev/zero")  # a device: reading it whole would never end
    result = run_proc(["download"], base_env(**H200, HF_TOKEN_PATH=str(token), KIMI_CACHE_DIR=str(tmp_path / "c"),
                                             HF_HUB_OFFLINE="1"))
    assert result.code == 2 and f"HF_TOKEN_PATH={token} is not a token file" in result.err, result.err
