"""A fleet of two copies behind the router (KIMI_REPLICAS=2, the default cache_aware policy): the
fleet plan's engine on two loopback hosts (KIMI_REPLICA_ADDRS) and its vllm-router (KIMI_ROLE=router)
in front, each its own entrypoint. The router reaches both copies; one copy killed under load
costs only the requests it held, and is taken back once started again (issue 38)."""

import pytest

from tests.live.conftest import base_settings
from tests.live.exercise import check_front, check_stop, completion, post
from tests.live.shape import host

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
SYSTEM = "You are a terse assistant for the harbor archive. " + "alpha river stone cloud orbit lemon " * 40


def SHAPE(tiny, cache):
    settings = base_settings(tiny, cache, KIMI_REPLICAS="2", KIMI_REPLICA_ADDRS=f"{host(0)},{host(1)}")
    return settings, lambda proc: host(2), {}


def _served(node) -> float:
    from tests.live.shape import metric

    return metric(node.url(), "vllm:request_success_total")


def test_the_plan_is_one_copy_and_a_cache_aware_router(running):
    assert [n.name for n in running.nodes] == ["single-0-copy0", "single-0-copy1", "router-0"]
    assert running.front.proc.role == "router" and "cache_aware" in running.front.proc.args


def test_the_router_answers_through_the_kimi_parsers(running):
    check_front(running)


def test_the_router_reaches_both_copies(running):
    """A burst: once one copy holds more than the balance thresholds (recipes/fleet.yaml) over the
    other, cache_aware sends to the less loaded copy, whatever the prefix (sequential requests of
    new prefixes all go to one copy: the fleet test of tests/verify measures the policy)."""
    from concurrent.futures import ThreadPoolExecutor

    url, model = running.front.url(), running.plan.served_model_name
    copies = running.engines()
    before = [_served(c) for c in copies]

    def ask(i: int) -> dict:
        return post(url + "/v1/completions", {"model": model, "prompt": f"Question {i}: {SYSTEM}",
                                              "max_tokens": 24, "ignore_eos": True})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(ask, range(16)))
    served = [_served(c) - b for c, b in zip(copies, before)]
    assert sum(served) == 16 and min(served) > 0, served
    for copy in copies:  # and each copy answers on its own
        completion(copy.url(), model)


def test_a_copy_killed_under_load_costs_only_what_it_held(running):
    """Issue 38: clients keep sending through the router while one copy's container is SIGKILLed.
    At most the requests it held, and those the router sent it before its health checks and circuit
    breaker took it out (recipes/fleet.yaml router_fault_args), fail; every request sent 30 s after the
    kill succeeds; nothing hangs; the copy, started again, gets requests again."""
    from tests.live.faults import as_dict, kill_one_copy_under_load

    figures = kill_one_copy_under_load(running)
    running.faults = as_dict(figures)
    assert figures.sent > 20 and figures.failed_before_kill == 0, running.faults
    assert figures.failed_after_settled == 0, running.faults  # taken out well within 30 s
    assert figures.last_failure_s is None or figures.last_failure_s < 30, running.faults
    # the router stops sending to the dead copy within ~15 s (issue 38; recipes/fleet.yaml router_fault_args)
    assert figures.last_routed_s is None or figures.last_routed_s <= 15, running.faults
    assert figures.restart_healthy_s is not None and figures.readmitted_s is not None, running.faults


def test_a_rolling_restart_under_load_fails_no_request(running):
    """Issue 38: each copy stopped as the kubelet stops a pod of a rollout (its preStop hook `kimi-serve
    drain --pause`, then SIGTERM: vLLM drains, with KIMI_DRAIN_TIMEOUT=10) and started again while
    clients send through the router. On hosts nothing watches readiness, so the router still sends the
    draining copy requests (measured: `routed_while_draining`); it retries them on the other copy, and
    no client request fails. Here the first copy (the kill test restarted the other);
    benchmarks/faults.py restarts both (KIMI_ROLLING_ALL=1)."""
    import os

    from tests.live.faults import as_dict, rolling_restart_under_load

    copies = running.engines() if os.environ.get("KIMI_ROLLING_ALL") else running.engines()[:1]
    figures = rolling_restart_under_load(running, copies)
    running.rolling = as_dict(figures)
    assert figures.sent > 20 and figures.failed == 0, running.rolling
    for copy in figures.copies:
        assert copy["exit_code"] == 0, running.rolling  # drained, not cut
        assert copy["sigterm_to_exit_s"] < 10 + 30, running.rolling  # the drain budget and the stop margin
        assert copy["readmitted_s"] is not None, running.rolling


def test_a_stop_drains_every_process(running):
    check_stop(running)
