"""The metrics a real vLLM 0.32.0 exported (tests/data/vllm-0.32.0/metrics*/, recorded by
tests/verify/record_metrics.py) and the metric names the rendered monitoring queries.

`parse` reads the Prometheus text exposition format (name{labels} value); `queried_names` finds
every metric a PromQL expression selects: each `name{...}` and every vllm:* name anywhere.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.testdata import DATA

RECORDED = DATA / "vllm-0.32.0" / "metrics"
SPECULATIVE = DATA / "vllm-0.32.0" / "metrics-speculative"
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SELECTED = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\{')
_VLLM = re.compile(r'vllm:[a-zA-Z0-9_:]+')
# Prometheus' own series for every scrape target (not in any /metrics page)
PROMETHEUS_OWN = {"up"}


def parse(text: str) -> list:
    """[(name, {label: value}, value)] of an exposition page."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        found = _SAMPLE.match(line)
        assert found, f"not an exposition line: {line!r}"
        name, labels, value = found.groups()
        out.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return out


def names(text: str) -> set:
    return {name for name, _, _ in parse(text)}


def scrapes(directory: Path = RECORDED) -> list:
    """The recorded scrapes, in order: [(meta, samples)]."""
    meta = json.loads((directory / "metrics.json").read_text())
    return [(s, parse((directory / s["file"]).read_text())) for s in meta["scrapes"]]


def recorded_names() -> set:
    return {name for d in (RECORDED, SPECULATIVE) for _, samples in scrapes(d) for name, _, _ in samples}


def queried_names(expr: str) -> set:
    return set(_SELECTED.findall(expr)) | set(_VLLM.findall(expr))
