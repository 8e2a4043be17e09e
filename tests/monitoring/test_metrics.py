"""Every metric the rules, the dashboard and the autoscalers query is one a real vLLM 0.32.0
exports (the recorded scrapes; tests/verify/test_real_vllm.py checks the live server too)."""

from __future__ import annotations

import json

import pytest

from tests.monitoring.operated import OPERATED, objects, queries
from tests.monitoring.recorded import PROMETHEUS_OWN, queried_names, recorded_names


@pytest.mark.parametrize("case", sorted(OPERATED))
def test_every_queried_metric_is_exported_by_vllm(case):
    exported = recorded_names()
    found = queries(objects(case))
    kinds = {where.split("/")[0] for where in found}
    assert "dashboard" in kinds and len(found) > 20
    for where, expr in found.items():
        used = queried_names(expr)
        assert used, f"{where}: no metric found in {expr!r}"
        missing = used - exported - PROMETHEUS_OWN
        assert not missing, f"{where} queries {sorted(missing)}, which vLLM 0.32.0 does not export: {expr}"


def test_the_check_finds_a_metric_vllm_no_longer_exports():
    """Older vLLM docs' dashboards query vllm:gpu_cache_usage_perc (renamed kv_cache_usage_perc)."""
    old = 'avg(vllm:gpu_cache_usage_perc{namespace="x"}) * 100'
    assert queried_names(old) == {"vllm:gpu_cache_usage_perc"}
    assert not queried_names(old) <= recorded_names()


def test_recordings_hold_the_families_an_operator_needs():
    exported = recorded_names()
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket", "vllm:prefix_cache_hits_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "http_requests_total"):
        assert name in exported


def test_dashboard_is_grafana_json_with_the_panels_the_issue_lists():
    docs = objects("single-keda")
    dash = json.loads(next(d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"])
                      ["data"]["kimi-serve.json"])
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for word in ("throughput", "time to first token", "inter-token", "queue", "kv-cache", "prefix-cache",
                 "speculative"):
        assert word in titles
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource", "namespace", "deployment"]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
