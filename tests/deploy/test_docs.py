"""docs/deploy.md: every documented `kimi-serve plan --format compose|k8s` command renders."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.deploy.k8s_schema import ROOT
from tests.deploy.shapes import render

DOC = ROOT / "docs" / "deploy.md"


def _commands():
    text = DOC.read_text().replace("\\\n", " ")
    for line in re.findall(r"^(KIMI_\S+=.*kimi-serve plan --format .*)$", text, re.M):
        words = shlex.split(line)
        env = dict(w.split("=", 1) for w in words[:words.index("kimi-serve")])
        fmt = words[words.index("--format") + 1]
        yield pytest.param(fmt, env, id=f"{fmt}-{'-'.join(env.values())}")


COMMANDS = list(_commands())


def test_there_is_a_command_per_shape():
    shapes = {(p.values[0], p.values[1].get("KIMI_STRATEGY", "single")[:10]) for p in COMMANDS}
    assert shapes >= {("compose", "single"), ("compose", "pd_cluster"), ("k8s", "single"), ("k8s", "multi_node"),
                      ("k8s", "pd_cluster")}


@pytest.mark.parametrize("fmt,env", COMMANDS)
def test_documented_command_renders(fmt, env):
    assert render(fmt, env)


@pytest.mark.parametrize("fmt,env", COMMANDS)
def test_documented_command_runs_through_the_cli(fmt, env, tmp_path):
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    proc = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", fmt, "--output", str(tmp_path)],
                          env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == render(fmt, env)


def test_the_documented_probe_timings_are_the_rendered_ones():
    from tests.deploy.shapes import documents

    text = " ".join(DOC.read_text().split())
    found = re.search(r"a startupProbe allowing (\d+) s \((\d+) x (\d+) s\) for the load .*?then liveness every "
                      r"(\d+) s \((\d+) failures\) with a (\d+) s timeout .*?and readiness every (\d+) s \((\d+) "
                      r"failures?\) with a (\d+) s timeout: `kimi-serve healthcheck --ready`.*?`kimi-serve drain --pause "
                      r"(\d+)`", text)
    assert found, "docs/deploy.md no longer states the probe timings"
    total, s_fail, s_period, l_period, l_fail, timeout, r_period, r_fail, r_timeout, pause = map(int, found.groups())
    (deployment,) = [d for d in documents("k8s", {"KIMI_HARDWARE": "h200"}) if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    start, ready, live = (container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe"))
    assert (start["failureThreshold"], start["periodSeconds"]) == (s_fail, s_period) and s_fail * s_period == total
    assert (ready["periodSeconds"], ready["failureThreshold"], ready["timeoutSeconds"]) == (r_period, r_fail, r_timeout)
    assert ready["exec"]["command"][:3] == ["kimi-serve", "healthcheck", "--ready"]
    assert (live["periodSeconds"], live["failureThreshold"]) == (l_period, l_fail)
    assert start["timeoutSeconds"] == live["timeoutSeconds"] == timeout
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["kimi-serve", "drain", "--pause", str(pause)]
