"""docs/operate.md: every alert the rules carry has its row (and nothing else does), and the
documented plan command renders the operating objects."""

from __future__ import annotations

import re
import shlex

from tests.deploy.k8s_schema import ROOT
from tests.monitoring.operated import objects

DOC = (ROOT / "docs" / "operate.md").read_text()


def test_every_alert_has_its_row_with_what_to_do():
    rule = next(d for d in objects("single-keda") if d["kind"] == "PrometheusRule")
    rendered = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    rows = dict(re.findall(r"^\| `(Kimi\w+)` \|(.*)$", DOC, re.M))
    assert sorted(rows) == sorted(rendered)
    for alert, row in rows.items():
        cells = [c.strip() for c in row.split("|") if c.strip()]
        assert cells[1] == rendered[alert]["labels"]["severity"], alert
        assert len(cells[2]) > 40, alert


def test_documented_plan_command_renders_the_operating_objects():
    from tests.deploy.shapes import documents

    line = re.search(r"`(KIMI_HARDWARE=[^`]*kimi-serve plan --format k8s)`", DOC.replace("\n", " ")).group(1)
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words[:words.index("kimi-serve")])
    kinds = {d["kind"] for d in documents("k8s", env)}
    assert {"PodMonitor", "PrometheusRule", "ConfigMap", "ScaledObject", "PodDisruptionBudget"} <= kinds
