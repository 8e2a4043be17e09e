"""vLLM's own grammar (recipes/vllm/<version>.json, extracted from vLLM's `serve` parser) used
wherever arguments are handled: one test per item of issue 10's "Why" list, each of which failed
with the hand-written grammar (dash-only long flags, one value each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import shutil

import pytest
import yaml

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.compose.select import default_release
from entrypoint.core.data.recipe import default_recipes_dir, load_catalog, load_catalog_from
from entrypoint.core.vllm.args import tag
from entrypoint.core.vllm.vllm_cli import available_versions, dedupe, engine_args, load_spec, newest_version

SECRET = "sk-Sup3rSecretValue"


def plan(env, args=()):
    return build(env, tuple(args)).plan


def run(args, env):
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "KIMI_PREFLIGHT": "off"}
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env={**base, **env}, capture_output=True,
                          text=True, timeout=60)


# ---------------------------------------------------------------- dedupe by destination


@pytest.mark.parametrize("spelling", [["-tp", "4"], ["--tensor_parallel_size", "4"], ["--tensor-parallel-size=4"],
                                      ["-tp=4"], ["--tensor-parallel", "4"]])
def test_an_alias_of_tp_replaces_the_recipes_and_preflight_counts_it(spelling):
    """The grammar reads every spelling of TP as one destination (a later one replaces the
    recipe's, preflight counts its GPUs); the user's arguments may not set it (issue 37): the same
    spelling is refused as a container argument and in KIMI_EXTRA_ARGS."""
    spec = load_spec(newest_version())
    recipe = list(plan({"KIMI_HARDWARE": "h200"}).processes[0].argv[3:])  # after `vllm serve <model>`
    assert "--tensor-parallel-size" in recipe
    merged = [t for t, _ in dedupe(tag("recipe", recipe) + tag("later", spelling), spec)]
    assert "--tensor-parallel-size" not in merged and merged[-len(spelling):] == spelling
    assert engine_args(merged, spec).gpus_needed == 4  # what preflight asks the node for
    for env, args in (({}, spelling), ({"KIMI_EXTRA_ARGS": " ".join(spelling)}, ())):
        with pytest.raises(KimiError) as err:
            plan({"KIMI_HARDWARE": "h200", "KIMI_SKIP_MEMORY_CHECK": "1", **env}, args)
        assert err.value.code == "invalid_value" and "KIMI_STRATEGY" in err.value.message


def _catalog_with(tmp_path, edit):
    """The checked-in recipe data with one edit of kimi-k2.5.yaml."""
    data = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), data, ignore=shutil.ignore_patterns(".validated", "__pycache__"))
    doc = yaml.safe_load((data / "models/kimi-k2.5.yaml").read_text())
    edit(doc)
    (data / "models/kimi-k2.5.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_catalog_from(data, use_cache=False)


INFERENCEX = {"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "inferencex"}  # TP 4 of 8 GPUs


def test_a_smaller_tp_is_memory_checked(tmp_path):
    """The layout the launch's arguments give is checked, not the node's: the InferenceX lane's
    TP 4, with a variant that needs more than 4 x 288 GB."""
    catalog = _catalog_with(tmp_path, lambda d: d["variants"]["mxfp4"].update(vram_minimum_gb=1200))
    with pytest.raises(KimiError) as err:
        build(INFERENCEX, ("--max-model-len", "9472"), catalog=catalog)
    assert err.value.code == "insufficient_memory" and "4 x mi355x" in err.value.message
    assert "span all 8 GPUs" in err.value.message
    assert build(INFERENCEX, ("--max-model-len", "9472")).plan.processes[0].local_gpus == 4  # 669 GB fit
    with pytest.raises(KimiError) as err:  # a TP of the user's is refused before the memory check
        plan({"KIMI_HARDWARE": "h200"}, ["--tensor-parallel-size", "2"])
    assert err.value.code == "invalid_value"


def test_repeatable_options_accumulate_and_lists_replace_whole():
    argv = list(plan({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--middleware a.b --middleware c.d "
                      "--allowed-media-domains x y"}, ["--allowed-media-domains", "z"]).processes[0].argv)
    assert [argv[i + 1] for i, t in enumerate(argv) if t == "--middleware"] == ["a.b", "c.d"]
    assert argv.count("--allowed-media-domains") == 1 and argv[-2:] == ["--allowed-media-domains", "z"]
    # a list option that names the server (--served-model-name) is KIMI_SERVED_MODEL_NAME's (issue 37)
    with pytest.raises(KimiError) as err:
        plan({"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": "--served-model-name x y"})
    assert "KIMI_SERVED_MODEL_NAME" in err.value.message


def test_boolean_pairs_share_one_destination():
    argv = list(plan({"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "aiter-mxfp4"},
                     ["--enable-prefix-caching"]).processes[0].argv)
    assert "--no-enable-prefix-caching" not in argv and argv[-1] == "--enable-prefix-caching"


# ---------------------------------------------------------------- secrets in every spelling and output


SECRET_SPELLINGS = [["--api_key", SECRET], [f"--api_key={SECRET}"], ["--hf_token", SECRET], ["--api-key", "k1", SECRET],
                    [f"--api-key={SECRET}"], ["--api-k", SECRET]]


@pytest.mark.slow
@pytest.mark.parametrize("args", SECRET_SPELLINGS, ids=[" ".join(a) for a in SECRET_SPELLINGS])
def test_secrets_are_masked_in_print_plan_and_explain(args):
    env = {"KIMI_HARDWARE": "h200"}
    outputs = [run(["print", *args], env), run(["print", "--format", "json", *args], env),
               run(["explain"], {**env, "KIMI_EXTRA_ARGS": " ".join(args)}),
               run(["plan"], {**env, "KIMI_EXTRA_ARGS": " ".join(args)}),
               run(["plan", "--format", "json"], {**env, "KIMI_EXTRA_ARGS": " ".join(args)})]
    for out in outputs:
        assert out.returncode == 0, out.stderr
        assert SECRET not in out.stdout + out.stderr
        assert "****" in out.stdout
    assert "k1" not in outputs[0].stdout  # every value of the list option


def test_secrets_are_masked_in_the_start_log():
    out = run(["--api_key", SECRET], {"KIMI_HARDWARE": "h200", "KIMI_DRY_RUN": "1"})
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stdout + out.stderr and "--api_key '****'" in out.stderr


@pytest.mark.parametrize("fmt", ["compose", "k8s"])
@pytest.mark.parametrize("extra", ["--api_key sk-1234", "--api_key=sk-1234", "--hf_token hf_1234", "--api-k sk-1234"])
def test_rendered_files_refuse_secrets_in_every_spelling(fmt, extra):
    out = run(["plan", "--format", fmt], {"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": extra})
    assert out.returncode == 2 and "1234" not in out.stdout + out.stderr


# ---------------------------------------------------------------- refused before anything starts


@pytest.mark.parametrize("extra, words", [
    ("--tensor-paralel-size 4", ["--tensor-paralel-size", "Did you mean --tensor-parallel-size?"]),
    ("--enforce-eager=1", ["takes no value"]),
    ("--mm-encoder-tp-mode datta", ["'datta'", "Did you mean data?"]),
    ("--max-model-len", ["needs a value"]),
    ("--tokenizer --enforce-eager", ["looks like an option"]),
    ("--data-parallel", ["ambiguous"]),
    ("--enforce-eager stray", ["'stray'", "unrecognized arguments"]),
])
def test_bad_vllm_args_exit_2_before_the_launch(extra, words):
    out = run(["print"], {"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": extra})
    assert out.returncode == 2, out.stdout
    assert "Traceback" not in out.stderr
    for word in words:
        assert word in out.stderr
    assert f"vLLM {default_release(load_catalog(), 'h200')}" in out.stderr  # the release a plan is for when unset


def test_container_args_are_checked_too_and_nothing_is_execd(tmp_path):
    marker = tmp_path / "ran"
    fake = tmp_path / "vllm"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    out = run(["--no-such-option"], {"KIMI_HARDWARE": "h200", "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert out.returncode == 2 and "--no-such-option is not an option of `vllm serve`" in out.stderr
    assert not marker.exists()


@pytest.mark.parametrize("env", [{"KIMI_SERVED_MODEL_NAME": "--enforce-eager"}, {"KIMI_MODEL": "-x"},
                                 {"KIMI_HOST": "--port"}])
def test_setting_values_that_look_like_flags_are_refused(env):
    out = run(["print"], {"KIMI_HARDWARE": "h200", **env})
    assert out.returncode == 2 and "starts with '-'" in out.stderr


# ---------------------------------------------------------------- version awareness


def test_flydsl_needs_its_vllm_and_the_grammar_agrees():
    env = {"KIMI_HARDWARE": "mi355x", "KIMI_PROFILE": "flydsl"}
    with pytest.raises(KimiError) as err:
        plan({**env, "KIMI_VLLM_VERSION": "0.19.1"})
    assert "needs vLLM >= 0.24.0" in err.value.message
    argv = plan({**env, "KIMI_VLLM_VERSION": newest_version()}).processes[0].argv
    assert "flydsl" in argv


def test_flashinfer_fp4_env_only_where_vllm_knows_it():
    env = {"KIMI_HARDWARE": "b200", "KIMI_VARIANT": "nvfp4"}
    old = plan({**env, "KIMI_VLLM_VERSION": "0.19.1"}).processes[0]
    new = plan({**env, "KIMI_VLLM_VERSION": newest_version()}).processes[0]
    assert old.env.get("VLLM_USE_FLASHINFER_MOE_FP4") == "1"
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in new.env
    assert "VLLM_USE_FLASHINFER_MOE_FP4" in load_spec("0.19.1").env
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in load_spec(newest_version()).env


@pytest.mark.parametrize("hardware", ["h200", "b300"])
def test_k3_v2_runner_env_only_where_vllm_knows_it(hardware):
    """Kimi-K3's recipe sets VLLM_USE_V2_MODEL_RUNNER=1; vLLM 0.34.0 removed it (removed_env.yaml)."""
    env = {"KIMI_RECIPE": "kimi-k3", "KIMI_HARDWARE": hardware, "KIMI_SKIP_MEMORY_CHECK": "1"}
    old = plan({**env, "KIMI_VLLM_VERSION": "0.33.0"}).processes[0]
    new = plan({**env, "KIMI_VLLM_VERSION": "0.34.0"}).processes[0]
    assert old.env.get("VLLM_USE_V2_MODEL_RUNNER") == "1" and "VLLM_USE_V2_MODEL_RUNNER" not in new.env
    assert "VLLM_USE_V2_MODEL_RUNNER" in load_spec("0.33.0").env
    assert "VLLM_USE_V2_MODEL_RUNNER" not in load_spec("0.34.0").env


@pytest.mark.parametrize("value, code", [("0.18.0", "unsupported_combination"), ("latest", "invalid_value")])
def test_bad_vllm_version(value, code):
    with pytest.raises(KimiError) as err:
        plan({"KIMI_HARDWARE": "h200", "KIMI_VLLM_VERSION": value})
    assert err.value.code == code


def test_version_detected_from_the_installed_vllm_metadata(tmp_path):
    """A `vllm` distribution on the path (metadata only: vllm is never imported) sets the version."""
    info = tmp_path / "vllm-0.19.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.19.1\n")
    out = run(["print", "--format", "json"], {"KIMI_HARDWARE": "b200", "KIMI_VARIANT": "nvfp4",
                                              "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["env"].get("VLLM_USE_FLASHINFER_MOE_FP4") == "1"
    out = run(["print", "--format", "json"], {"KIMI_HARDWARE": "b200", "KIMI_VARIANT": "nvfp4",
                                              "PYTHONPATH": str(tmp_path), "KIMI_VLLM_VERSION": newest_version()})
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in json.loads(out.stdout)["env"]


def test_supported_versions_are_checked_in():
    assert {"0.19.1", newest_version()} <= set(available_versions())
    for version in available_versions():
        spec = load_spec(version)
        assert spec.version == version and spec.options["-tp"].dest == "tensor_parallel_size"
        assert {o.dest for o in spec.options.values() if o.secret} >= {"api_key", "hf_token"}


@pytest.mark.slow
def test_preflight_names_the_effective_tp_in_any_spelling():
    """Preflight asks the node for the GPUs of the launch's TP (here the InferenceX lane's 4); a
    TP of the user's, in any spelling, is the launch's error in doctor's report instead."""
    out = run(["doctor"], {**INFERENCEX, "KIMI_EXTRA_ARGS": "--max-model-len 9472"})
    assert "needs 4 GPU(s) on its node (TP 4)" in out.stdout + out.stderr
    for spelling in ("-tp 4", "--tensor_parallel_size=4", "--tensor-parallel 4"):
        out = run(["doctor"], {"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": spelling, "KIMI_SKIP_MEMORY_CHECK": "1"})
        assert out.returncode != 0 and "KIMI_STRATEGY" in out.stdout + out.stderr
        assert "needs 4 GPU(s)" not in out.stdout + out.stderr


def test_every_option_read_is_the_one_its_constructor_builds():
    """The grammar's options are built without Option's __init__ (core/vllm_cli._option): each is
    equal to, hashes as, shows as and holds the same fields as the one Option(...) builds."""
    from dataclasses import fields

    from entrypoint.core.vllm.vllm_cli import Option, specs_dir

    for version in available_versions():
        raw = json.loads((specs_dir() / f"{version}.json").read_text())
        read = load_spec(version).options
        for o in raw["options"]:
            built = Option(dest=o["dest"], strings=tuple(o["options"]), kind=o["kind"], nargs=o["nargs"],
                           choices=tuple(o["choices"]) if o.get("choices") is not None else None,
                           choice_key=o.get("choice_key"), secret=bool(o.get("secret")),
                           negative=tuple(o.get("negative", ())))
            got = read[o["options"][0]]
            assert (got, hash(got), repr(got), vars(got)) == (built, hash(built), repr(built), vars(built))
            assert [f.name for f in fields(got)] == list(vars(got))
