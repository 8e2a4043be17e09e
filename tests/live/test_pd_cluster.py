"""pd_cluster: a prefill engine, a decode engine and the PD router, each its own entrypoint
(KIMI_ROLE) on its own loopback host: the router sends each request to both pools, and the decode
engine takes the prompt's KV cache from the prefill engine over NIXL (host memory, UCX) instead of
computing it."""

import pytest

from tests.live.conftest import base_settings
from tests.live.exercise import check_front, check_stop, completion
from tests.live.shape import host, metric

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
HOSTS = {"prefill": 0, "decode": 1, "router": 2}


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_STRATEGY="pd_cluster", KIMI_PREFILL_ADDRS=host(0),
                             KIMI_DECODE_ADDRS=host(1), KIMI_IFACE="lo")
    return settings, lambda proc: host(HOSTS[proc.role] + proc.rank), {}


def _external_tokens(url: str) -> float:
    return metric(url, 'vllm:prompt_tokens_by_source_total{') if False else sum(
        float(line.rsplit(" ", 1)[1]) for line in _lines(url)
        if line.startswith("vllm:prompt_tokens_by_source") and 'source="external_kv_transfer"' in line)


def _lines(url: str):
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:  # noqa: S310 - loopback
        return answer.read().decode().splitlines()


def test_the_plan_is_a_prefill_a_decode_and_the_router(running):
    assert sorted((n.proc.role, n.addr) for n in running.nodes) == [
        ("decode", host(1)), ("prefill", host(0)), ("router", host(2))]
    assert running.front.proc.role == "router"


def test_the_router_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_the_decode_engine_takes_the_prompt_from_the_prefill_engine(running):
    decode = next(n for n in running.nodes if n.proc.role == "decode")
    before = _external_tokens(decode.url())
    answer = completion(running.front.url(), running.plan.served_model_name)
    prompt = answer["usage"]["prompt_tokens"]
    moved = _external_tokens(decode.url()) - before
    # vLLM computes the last prompt token on the decode side; the rest arrives over the connector
    assert prompt - 1 <= moved <= prompt, (prompt, moved)


def test_a_stop_drains_every_process(running):
    check_stop(running)
