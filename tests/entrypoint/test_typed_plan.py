"""The typed plan (entrypoint/core/compose/plan.py): each process's kind, ports by purpose and effective
vLLM arguments, and the Plan's facts, against values worked out by hand from the recipe data."""

import shlex

import pytest

from entrypoint.app.launch import build
from entrypoint.core.base.errors import INVALID_VALUE, KimiError
from entrypoint.core.compose.plan import Kind, Port
from entrypoint.core.vllm.vllm_cli import engine_args, load_spec, newest_version

STORE = {"KIMI_MOONCAKE_MASTER_ADDR": "m.kv", "KIMI_MOONCAKE_STORE_HOST": "s.kv", "KIMI_INSTANCE_ADDRS": "i0,i1"}


def plan(**env):
    return build({"KIMI_HARDWARE": "h200", **env}).plan


def test_a_kv_store_knows_what_each_process_is():
    p = plan(KIMI_KV_OFFLOAD="kv_store_centralized_mooncake", **STORE)
    assert [(q.role, q.kind) for q in p.processes] == [
        ("master", Kind.KV_MASTER), ("store", Kind.KV_STORE), ("instance", Kind.ENGINE), ("instance", Kind.ENGINE),
        ("router", Kind.ROUTER)]
    master, store, first, _, router = p.processes
    assert master.ports == {Port.MASTER_RPC: 50051} and master.vllm is None and not master.serves_http
    assert store.ports == {Port.SERVICE: 8080} and store.program == ("python3",)
    assert first.program == ("vllm", "serve", "moonshotai/Kimi-K2.5") and first.model == "moonshotai/Kimi-K2.5"
    assert first.ports == {Port.HTTP: 8000, Port.METRICS: 8000} and first.vllm.tensor_parallel == 8
    assert router.ports == {Port.HTTP: 30080} and router.program == ("vllm-router",)
    assert [q.role for q in p.engines] == ["instance", "instance"] and p.gpus == 16 and p.tensor_parallel == 8
    assert p.served_name == "moonshotai/Kimi-K2.5" and p.tokenizer == "moonshotai/Kimi-K2.5" and p.trust_remote_code


def test_lmcaches_server_is_a_kv_cache_server_with_its_two_ports():
    server = plan(KIMI_KV_OFFLOAD="lmcache").processes[-1]
    assert server.kind is Kind.KV_SERVER and server.ports == {Port.KV_RPC: 5555, Port.SERVICE: 8080}
    assert server.local_gpus == 0 and server.vllm is None


def test_pd_pools_listen_on_their_http_dp_rpc_and_side_channel_ports():
    p = plan(KIMI_STRATEGY="pd_cluster", KIMI_PREFILL_ADDRS="p0,p1", KIMI_DECODE_ADDRS="d0", KIMI_PREFILL_NODES="2",
             KIMI_DECODE_NODES="1", KIMI_IFACE="eth0", KIMI_PREFILL_DP_RPC_PORT="13345")
    prefill = [q for q in p.processes if q.role == "prefill"]
    # the strategy's prefill port 8001 and NIXL side channel 5557; the DP head (rank 0) also its RPC port
    assert prefill[0].ports == {Port.HTTP: 8001, Port.METRICS: 8001, Port.DP_RPC: 13345, Port.KV_SIDE_CHANNEL: 5557}
    assert prefill[1].ports == {Port.HTTP: 8001, Port.METRICS: 8001, Port.KV_SIDE_CHANNEL: 5557}
    assert prefill[0].listens == [8001, 13345, 5557]
    assert prefill[0].vllm.data_parallel == 16 and prefill[0].vllm.data_parallel_local == 8


def test_a_headless_worker_serves_no_http():
    head, worker = plan(KIMI_HARDWARE="h100", KIMI_STRATEGY="multi_node_tp", KIMI_NODES="2", KIMI_HEAD_ADDR="h",
                        KIMI_IFACE="eth0").processes
    assert head.serves_http and head.port == 8000 and head.vllm.nnodes == 2 and head.local_gpus == 8
    assert worker.vllm.headless and not worker.serves_http and worker.port is None and worker.ports == {}


@pytest.mark.parametrize("args", ["-tp 4 --port=9100 --served-model-name kimi --host 127.0.0.2",
                                  "--tensor-parallel-size=4 --port 9100 --served_model_name=kimi --host=127.0.0.2",
                                  "--tensor_parallel_size 4 --por 9100 --served-model kimi --host 127.0.0.2"])
def test_the_users_arguments_count_in_any_spelling(args):
    """Arguments are parsed once, by vLLM's grammar: aliases, `=`, `_` for `-`, unambiguous
    abbreviations. These options draw the deployment: the same spellings in the user's arguments
    are refused (issue 37), and the typed settings give what they gave."""
    found = engine_args(shlex.split(args), load_spec(newest_version()))
    assert (found.tensor_parallel, found.gpus_needed, found.port, found.host, found.served_name) == (
        4, 4, 9100, "127.0.0.2", "kimi")
    with pytest.raises(KimiError) as err:
        plan(KIMI_EXTRA_ARGS=args, KIMI_SKIP_MEMORY_CHECK="1")
    assert err.value.code == INVALID_VALUE and "KIMI_STRATEGY" in err.value.message
    options = []  # each option with its value, as given
    for word in shlex.split(args):
        options.append([word]) if word.startswith("-") else options[-1].append(word)
    assert len(options) == 4
    for option, setting in zip(options, ("KIMI_STRATEGY", "KIMI_PORT", "KIMI_SERVED_MODEL_NAME", "KIMI_HOST")):
        with pytest.raises(KimiError) as err:  # each alone, as a container argument too
            build({"KIMI_HARDWARE": "h200", "KIMI_SKIP_MEMORY_CHECK": "1"}, tuple(option))
        assert err.value.code == INVALID_VALUE and f"set {setting}" in err.value.message, option
    proc, = plan(KIMI_PORT="9100", KIMI_SERVED_MODEL_NAME="kimi", KIMI_HOST="127.0.0.2").processes
    assert (proc.port, proc.vllm.host, proc.served_name, proc.ports[Port.HTTP]) == (9100, "127.0.0.2", "kimi", 9100)
    proc, = build({"KIMI_HARDWARE": "mi355x", "KIMI_VARIANT": "mxfp4", "KIMI_PROFILE": "inferencex"},
                  ("--max-model-len", "9472")).plan.processes  # a TP of the recipe's data
    assert (proc.vllm.tensor_parallel, proc.local_gpus) == (4, 4)
