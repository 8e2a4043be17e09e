"""Issue 37: free text never decides a deployment's shape. Every vLLM option the plan reads to draw
the deployment (vllm_cli.SHAPE_DESTS: parallel sizes, ports, host, drain, load format, KV
transfer, model, served name, revision) is refused in the user's vLLM arguments, KIMI_EXTRA_ARGS
and the container arguments alike, in every spelling vLLM's grammar accepts, with exit 2 and the
typed setting to use instead. Other vLLM arguments still pass, last."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import List

import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.vllm.vllm_cli import SHAPE_DESTS, Option, load_spec, newest_version

SPEC = load_spec(newest_version())
ENV = {"KIMI_HARDWARE": "h200", "KIMI_SKIP_MEMORY_CHECK": "1"}


def _options(dest: str) -> List[Option]:
    """The grammar's options of `dest`, once each."""
    found = {id(o): o for o in SPEC.options.values() if o.dest == dest}
    return list(found.values())


def _value(option: Option) -> str:
    """A value the option's grammar takes: one of its choices, a JSON object for a config, else a
    number (every other shape option is a size, a port, a count of seconds or free text)."""
    if option.choices:
        return option.choices[0]
    return '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}' if option.dest.endswith("_config") else "4"


def _abbreviation(long: str, option: Option) -> str:
    """The shortest unique prefix of `long` vLLM's parser reads as this option, or "" (none: the
    name is a prefix of another option's)."""
    for end in range(3, len(long)):
        found, _ = SPEC.lookup(long[:end])
        if found is not None and found.dest == option.dest and long[:end] not in SPEC.options:
            return long[:end]
    return ""


def spellings(dest: str) -> List[List[str]]:
    """Every way to give `dest` a value (or set its flag): the long option, a unique-prefix
    abbreviation, the `_` spelling, the `=` form, each short alias."""
    out: List[List[str]] = []
    for option in _options(dest):
        flag = option.nargs == 0
        value = [] if flag else [_value(option)]
        positives = [s for s in option.strings if s not in option.negative]
        longs = [s for s in positives if s.startswith("--")]
        shorts = [s for s in positives if not s.startswith("--")]
        for long in longs:
            out.append([long, *value])
            abbrev = _abbreviation(long, option)
            if abbrev:
                out.append([abbrev, *value])
            underscored = "--" + long[2:].replace("-", "_")
            if underscored != long:
                out.append([underscored, *value])
            if not flag:
                out.append([f"{long}={value[0]}"])
        for short in shorts:
            out.append([short, *value])
            if not flag:
                out.append([f"{short}={value[0]}"])
    return out


def test_the_shape_destinations_are_the_ones_the_plan_reads():
    assert {"port", "tensor_parallel_size", "shutdown_timeout", "host", "served_model_name",
            "kv_transfer_config", "load_format"} <= set(SHAPE_DESTS)
    for dest, setting in SHAPE_DESTS.items():
        assert _options(dest), f"{dest} is not an option of vLLM {SPEC.version}"
        assert "KIMI_" in setting, dest  # each names the typed setting that owns it
    # the grammar gives the spellings this test claims to cover
    assert ["-tp", "4"] in spellings("tensor_parallel_size")
    assert ["--tensor_parallel_size", "4"] in spellings("tensor_parallel_size")
    assert ["--por", "4"] in spellings("port") and ["--port=4"] in spellings("port")
    assert ["--shutdown_timeout", "4"] in spellings("shutdown_timeout")


def _refused(env: dict, args=()) -> str:
    with pytest.raises(KimiError) as err:
        build({**ENV, **env}, tuple(args))
    assert err.value.code == INVALID_VALUE, err.value.message
    return err.value.message


@pytest.mark.parametrize("dest", list(SHAPE_DESTS))
def test_every_spelling_of_a_shape_option_is_refused_naming_its_setting(dest):
    setting = SHAPE_DESTS[dest]
    cases = spellings(dest)
    assert cases
    for words in cases:
        message = _refused({"KIMI_EXTRA_ARGS": shlex.join(words)})
        assert setting in message, (words, message)
        message = _refused({}, words)  # the container arguments
        assert setting in message, (words, message)
        # beside harmless ones, on either side
        assert setting in _refused({"KIMI_EXTRA_ARGS": shlex.join(["--max-model-len", "4096", *words])})
        assert setting in _refused({"KIMI_EXTRA_ARGS": "--max-model-len 4096"}, words)


def test_the_refusal_is_exit_2_of_plan_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **ENV,
           "KIMI_EXTRA_ARGS": "--por 9000"}
    for command in (["plan"], ["plan", "--format", "compose", "--output", str(out)], ["print"]):
        done = subprocess.run([sys.executable, "-m", "entrypoint", *command], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "--port" in done.stderr and "set KIMI_PORT instead" in done.stderr
    assert not out.exists()


def test_a_harmless_option_is_accepted_and_comes_last():
    proc = build({**ENV, "KIMI_EXTRA_ARGS": "--max-model-len 4096"}).plan.processes[0]
    assert proc.argv[-2:] == ("--max-model-len", "4096") and proc.vllm.get("max_model_len") == "4096"
    proc = build(ENV, ("--max-model-len", "4096")).plan.processes[0]
    assert proc.argv[-2:] == ("--max-model-len", "4096")


@pytest.mark.parametrize("negative", ["--no-enable-expert-parallel", "--disable-expert-parallel"])
def test_the_negative_form_of_a_shape_flag_is_refused_too(negative):
    assert SHAPE_DESTS["enable_expert_parallel"] in _refused({"KIMI_STRATEGY": "single_node_tep",
                                                               "KIMI_EXTRA_ARGS": negative})
