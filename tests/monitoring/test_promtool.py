"""The rendered alerts through Prometheus' own promtool (Debian's prometheus package; scripts/
setup-host.sh installs it): `promtool check rules`, and `promtool test rules` on series recorded
from a real vLLM 0.32.0 (tests/data/vllm-0.32.0/metrics/): the recorded load, replayed, raises no
alert; the same series pushed past each threshold raise each alert, with the labels and the
annotations an operator reads."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from tests.monitoring.operated import objects
from tests.monitoring.recorded import queried_names, scrapes

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The labels Prometheus gives an engine's series when the PodMonitor scrapes it (target labels,
# and the PodMonitor's relabelings of the pod's labels), written out by hand.
TARGET = {"namespace": "kimi-serve", "kimi_deployment": "kimi-k2-5", "kimi_component": "single",
          "job": "kimi-serve/kimi-k2-5-engines", "instance": "10.0.0.7:8000", "pod": "kimi-k2-5-7d9c-abcde"}
DOWN = {**TARGET, "instance": "10.0.0.8:8000", "pod": "kimi-k2-5-7d9c-fghij"}
MINUTES = 30
EVAL = "20m"
ALERTS = ("KimiServerDown", "KimiNoScrapeTarget", "KimiRequestsQueuedLong", "KimiKvCacheNearFull", "KimiPreemptions", "KimiErrorRate",
          "KimiTimeToFirstTokenHigh", "KimiInterTokenLatencyHigh")
SLO_TTFT_S, SLO_ITL_S, QUEUE_S = 2.0, 0.1, 10.0  # the defaults of KIMI_SLO_TTFT_MS, KIMI_SLO_ITL_MS; the data's 10 s


@pytest.fixture(scope="module")
def promtool():
    found = shutil.which("promtool")
    if not found:
        if IN_CI:
            pytest.fail("promtool missing: scripts/setup-host.sh installs Debian's prometheus")
        pytest.skip("promtool missing (apt-get install prometheus)")
    return found


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory):
    rule = next(d for d in objects("single-keda") if d["kind"] == "PrometheusRule")
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path, rule["spec"]["groups"][0]["rules"]


def _series(name: str, labels: dict) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _counter(name: str) -> bool:
    return name.endswith(("_total", "_bucket", "_count", "_sum"))


def _used(rules) -> set:
    return {n for r in rules for n in queried_names(r["expr"])}


def _replayed(rules) -> list:
    """The recorded scrapes as a series each: counters grow by their recorded rate, gauges hold."""
    (_first_meta, first), *_, (_last_meta, last) = scrapes()
    start = {(n, tuple(sorted(lab.items()))): v for n, lab, v in first}
    steps = len(scrapes()) - 1
    out = []
    for name, labels, value in last:
        if name not in _used(rules):
            continue
        if _counter(name):
            v0 = start.get((name, tuple(sorted(labels.items()))), 0.0)  # a series born after the first scrape
            values = f"{v0:g}+{(value - v0) / steps:g}x{MINUTES}"
        else:
            values = f"{value:g}x{MINUTES}"
        out.append({"series": _series(name, {**labels, **TARGET}), "values": values})
    out.append({"series": _series("up", TARGET), "values": f"1x{MINUTES}"})
    return out


def _slow(samples, name: str, above_s: float) -> list:
    """A histogram of the recorded buckets where every new observation is slower than `above_s`."""
    out = []
    for metric, labels, _ in samples:
        if metric != name:
            continue
        le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
        out.append({"series": _series(name, {**labels, **TARGET}), "values": f"0+{10 if le >= above_s else 0}x{MINUTES}"})
    assert out, name
    return out


def _overloaded() -> list:
    samples = scrapes()[-1][1]
    two_xx = next(lab for n, lab, _ in samples if n == "http_requests_total")
    engine = next(lab for n, lab, _ in samples if n == "vllm:kv_cache_usage_perc")
    return [
        {"series": _series("up", TARGET), "values": f"1x{MINUTES}"},
        {"series": _series("up", DOWN), "values": f"0x{MINUTES}"},
        {"series": _series("vllm:kv_cache_usage_perc", {**engine, **TARGET}), "values": f"0.97x{MINUTES}"},
        {"series": _series("vllm:num_preemptions_total", {**engine, **TARGET}), "values": f"0+1x{MINUTES}"},
        {"series": _series("http_requests_total", {**two_xx, **TARGET}), "values": f"0+10x{MINUTES}"},
        # the instrumentator's status label groups codes as 2xx/4xx/5xx
        {"series": _series("http_requests_total", {**two_xx, **TARGET, "status": "5xx"}), "values": f"0+2x{MINUTES}"},
        *_slow(samples, "vllm:time_to_first_token_seconds_bucket", 2 * SLO_TTFT_S),
        *_slow(samples, "vllm:inter_token_latency_seconds_bucket", 2 * SLO_ITL_S),
        *_slow(samples, "vllm:request_queue_time_seconds_bucket", 2 * QUEUE_S),
    ]


def _annotations(rule: dict, labels: dict) -> dict:
    """The rule's annotations as Prometheus expands {{ $labels.x }}."""
    return {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), v)
            for k, v in rule["annotations"].items()}


def _expected(rules) -> dict:
    by = {r["alert"]: r for r in rules}
    labels = {"KimiServerDown": DOWN, "KimiKvCacheNearFull": {"pod": TARGET["pod"]},
              "KimiPreemptions": {"pod": TARGET["pod"]}}
    out = {}
    for alert in ALERTS:
        if alert == "KimiNoScrapeTarget":  # the overload has targets: test_no_target_at_all_alerts
            out[alert] = []
            continue
        alert_labels = {**labels.get(alert, {"kimi_deployment": TARGET["kimi_deployment"]}),
                        "severity": by[alert]["labels"]["severity"]}
        out[alert] = [{"exp_labels": alert_labels, "exp_annotations": _annotations(by[alert], alert_labels)}]
    return out


def _test_file(tmp_path, rules_path, tests: list):
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rules_path)], "evaluation_interval": "1m", "tests": tests},
                                   sort_keys=False))
    return path


def test_promtool_checks_the_rules(promtool, rules_file):
    path, rules = rules_file
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout
    assert sorted(r["alert"] for r in rules) == sorted(ALERTS)


def test_recorded_load_raises_no_alert_and_overload_raises_each(promtool, rules_file, tmp_path):
    path, rules = rules_file
    quiet = {"interval": "1m", "input_series": _replayed(rules),
             "alert_rule_test": [{"eval_time": EVAL, "alertname": a, "exp_alerts": []} for a in ALERTS],
             # the replay is traffic, not silence: requests finish, the p95 time to first token is a number below 1 s
             "promql_expr_test": [{"eval_time": EVAL, "expr": "count(rate(vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"}[5m]) > 0)",
                                   "exp_samples": [{"labels": "{}", "value": 1}]},
                                  {"eval_time": EVAL, "expr": "count(histogram_quantile(0.95, sum by (le) "
                                   "(rate(vllm:time_to_first_token_seconds_bucket[5m]))) < 1)",
                                   "exp_samples": [{"labels": "{}", "value": 1}]}]}
    loud = {"interval": "1m", "input_series": _overloaded(),
            "alert_rule_test": [{"eval_time": EVAL, "alertname": a, "exp_alerts": exp}
                                for a, exp in _expected(rules).items()]}
    done = subprocess.run([promtool, "test", "rules", str(_test_file(tmp_path, path, [quiet, loud]))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "SUCCESS" in done.stdout


def test_a_wrong_expectation_fails(promtool, rules_file, tmp_path):
    """promtool really compares: the overload expected to be quiet fails."""
    path, _rules = rules_file
    wrong = {"interval": "1m", "input_series": _overloaded(),
             "alert_rule_test": [{"eval_time": EVAL, "alertname": "KimiKvCacheNearFull", "exp_alerts": []}]}
    done = subprocess.run([promtool, "test", "rules", str(_test_file(tmp_path, path, [wrong]))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "KimiKvCacheNearFull" in done.stdout + done.stderr


def test_no_target_at_all_alerts(promtool, rules_file, tmp_path):
    """No engine scraped (a PodMonitor that selects nothing, a blocked scrape): no `up` series, so
    KimiServerDown cannot fire; KimiNoScrapeTarget does, naming the deployment and namespace.
    Another deployment's targets do not hide it."""
    path, rules = rules_file
    by = {r["alert"]: r for r in rules}
    other = {**TARGET, "kimi_deployment": "another"}
    labels = {"namespace": TARGET["namespace"], "kimi_deployment": TARGET["kimi_deployment"],
              "severity": by["KimiNoScrapeTarget"]["labels"]["severity"]}
    test = {"interval": "1m", "input_series": [{"series": _series("up", other), "values": f"1x{MINUTES}"}],
            "alert_rule_test": [
                {"eval_time": EVAL, "alertname": "KimiNoScrapeTarget",
                 "exp_alerts": [{"exp_labels": labels, "exp_annotations": _annotations(by["KimiNoScrapeTarget"], labels)}]},
                {"eval_time": EVAL, "alertname": "KimiServerDown", "exp_alerts": []}]}
    healthy = {"interval": "1m", "input_series": [{"series": _series("up", TARGET), "values": f"1x{MINUTES}"}],
               "alert_rule_test": [{"eval_time": EVAL, "alertname": "KimiNoScrapeTarget", "exp_alerts": []}]}
    done = subprocess.run([promtool, "test", "rules", str(_test_file(tmp_path, path, [test, healthy]))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]


def test_the_error_rate_has_data_when_no_request_failed(promtool, rules_file, tmp_path):
    """Only 2xx answers (no `status="5xx"` series yet): the error ratio is 0, a number, not an
    empty result; with 5xx answers it is their share."""
    path, rules = rules_file
    expr = next(r for r in rules if r["alert"] == "KimiErrorRate")["expr"]
    assert expr.endswith(" > 0.05")
    ratio = expr[: -len(" > 0.05")]
    two_xx = next(lab for n, lab, _ in scrapes()[-1][1] if n == "http_requests_total")
    ok = _series("http_requests_total", {**two_xx, **TARGET})
    failed = _series("http_requests_total", {**two_xx, **TARGET, "status": "5xx"})
    want = "{" + f'kimi_deployment="{TARGET["kimi_deployment"]}"' + "}"
    quiet = {"interval": "1m", "input_series": [{"series": ok, "values": f"0+10x{MINUTES}"}],
             "promql_expr_test": [{"eval_time": EVAL, "expr": ratio, "exp_samples": [{"labels": want, "value": 0}]}]}
    failing = {"interval": "1m", "input_series": [{"series": ok, "values": f"0+30x{MINUTES}"},
                                                  {"series": failed, "values": f"0+10x{MINUTES}"}],
               "promql_expr_test": [{"eval_time": EVAL, "expr": ratio, "exp_samples": [{"labels": want, "value": 0.25}]}]}
    done = subprocess.run([promtool, "test", "rules", str(_test_file(tmp_path, path, [quiet, failing]))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
