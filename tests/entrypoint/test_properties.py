"""Property-based: random KIMI_* values always give a launch or one of the documented errors."""

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from entrypoint.app.launch import build
from entrypoint.core.base.errors import KimiError
from entrypoint.core.data.recipe import load_catalog

CODES = {"unknown_value", "unsupported_combination", "conflicting_features", "insufficient_memory",
         "missing_setting", "invalid_value"}
CAT = load_catalog()
junk = st.text(alphabet=string.ascii_letters + string.digits + " ,+-_'\"=$.", max_size=12)


def one_of_or_junk(values):
    return st.one_of(st.sampled_from(list(values)), junk)


feature_entry = st.builds(lambda sign, f: sign + f, st.sampled_from(["", "+", "-"]),
                          one_of_or_junk(CAT.recipe.features))
settings_strategy = st.fixed_dictionaries({}, optional={
    "KIMI_HARDWARE": one_of_or_junk(list(CAT.hardware) + ["auto"]),
    "KIMI_VARIANT": one_of_or_junk(CAT.recipe.variants),
    "KIMI_STRATEGY": one_of_or_junk(CAT.strategies),
    "KIMI_FEATURES": st.lists(feature_entry, max_size=4).map(",".join),
    "KIMI_PROFILE": one_of_or_junk(CAT.recipe.profiles),
    "KIMI_NODES": st.one_of(st.integers(-1, 5).map(str), junk),
    "KIMI_NODE_RANK": st.one_of(st.integers(-1, 5).map(str), junk),
    "KIMI_HEAD_ADDR": st.sampled_from(["10.0.0.1", "head.example"]),
    "KIMI_IFACE": st.sampled_from(["eth0", "ib0"]),
    "KIMI_ROLE": one_of_or_junk(["prefill", "decode", "router"]),
    "KIMI_PREFILL_NODES": st.one_of(st.integers(-1, 3).map(str), junk),
    "KIMI_DECODE_NODES": st.one_of(st.integers(-1, 3).map(str), junk),
    "KIMI_PREFILL_PARALLELISM": one_of_or_junk(["tp", "tep", "dep"]),
    "KIMI_DECODE_PARALLELISM": one_of_or_junk(["tp", "tep", "dep"]),
    "KIMI_PREFILL_ADDRS": st.lists(st.sampled_from(["p0", "p1", "p2"]), max_size=3).map(",".join),
    "KIMI_DECODE_ADDRS": st.lists(st.sampled_from(["d0", "d1", "d2"]), max_size=3).map(",".join),
    "KIMI_MODEL": st.sampled_from(["/models/kimi", "moonshotai/Kimi-K2.5"]),
    "KIMI_EXTRA_ARGS": junk,
    "KIMI_SKIP_MEMORY_CHECK": one_of_or_junk(["0", "1"]),
    "KIMI_PORT": st.one_of(st.integers(-1, 70000).map(str), junk),
})


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(env=settings_strategy, user_args=st.lists(st.sampled_from(["--max-model-len", "4096", "--enforce-eager",
                                                                    "--tensor-parallel-size", "2"]), max_size=4))
def test_any_settings_give_a_launch_or_a_documented_error(env, user_args):
    try:
        launch = build(env, tuple(user_args), detected_hardware=None, catalog=CAT)
    except KimiError as err:
        assert err.code in CODES
        assert err.message and "Traceback" not in err.message
        return
    plan = launch.plan
    assert plan.processes
    for proc in plan.processes:
        text = " ".join(proc.argv) + " ".join(proc.env.values())
        if "$" not in env.get("KIMI_EXTRA_ARGS", ""):
            assert "$" not in text, "no placeholder reaches vLLM"
        if proc.role != "router":
            flags = [t.split("=")[0] for t in proc.argv if t.startswith("--")]
            assert len(flags) == len(set(flags)), "last-wins dedupe leaves one copy of each flag"
            assert proc.argv[:2] == ("vllm", "serve")
            assert ("--served-model-name" in proc.argv) == (plan.served_model_name != plan.model)
    for pool in plan.pools:
        assert pool.vram_gb >= plan.vram_minimum_gb or launch.settings.skip_memory_check
