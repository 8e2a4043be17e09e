"""Cluster wiring: LWS and Slurm variables give the same plan as the explicit KIMI_* settings."""

from __future__ import annotations

import pytest

from entrypoint.app.launch import build
from entrypoint.app.launch import load_launch
from entrypoint.node.cluster import default_route_iface, expand_nodelist, iface_for, resolve_iface, wire

from .conftest import route_file

DEFAULT_ROUTE = [("eth0", "00000000", "0102A8C0", "00000000"), ("eth0", "0002A8C0", "00000000", "00FFFFFF"),
                 ("ib0", "0000000A", "00000000", "0000FFFF")]  # default via eth0; 10.0.0.0/16 on ib0
NO_DEFAULT = DEFAULT_ROUTE[1:]


@pytest.mark.parametrize("text, hosts", [
    ("gpu01", ["gpu01"]),
    ("gpu[01-04]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]),
    ("rack[1-2]-n[08-09]", ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]),
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),
    ("", []),
])
def test_expand_nodelist(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.fixture()
def proc_root(tmp_path):
    return str(route_file(tmp_path / "proc", DEFAULT_ROUTE))


def test_iface_from_default_route(proc_root):
    assert default_route_iface(proc_root) == "eth0"
    assert iface_for("10.0.3.4", proc_root) == "ib0"
    assert iface_for("192.168.2.9", proc_root) == "eth0"


def test_iface_from_head_route_without_default(tmp_path):
    root = str(route_file(tmp_path / "proc", NO_DEFAULT))
    assert resolve_iface("10.0.0.5", root) == ("ib0", "the interface that carries the route to 10.0.0.5")
    assert resolve_iface("172.16.0.1", root)[0] is None
    assert resolve_iface(None, str(tmp_path / "missing"))[0] is None


EXPLICIT = {"KIMI_HARDWARE": "h200", "KIMI_NODES": "2", "KIMI_NODE_RANK": "1", "KIMI_HEAD_ADDR": "10.0.0.1",
            "KIMI_IFACE": "eth0"}
LWS = {"KIMI_HARDWARE": "h200", "LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
SLURM = {"KIMI_HARDWARE": "h200", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "10.0.0.[1-2]"}


def _plan(env):
    launch = build(env)
    return launch.plan, launch.this_process()


@pytest.mark.parametrize("scheduler", [LWS, SLURM], ids=["lws", "slurm"])
@pytest.mark.parametrize("strategy", ["multi_node_tp", "multi_node_dep", "multi_node_tp_pp"])
def test_scheduler_gives_the_same_plan_as_explicit_settings(proc_root, scheduler, strategy):
    wired = wire({**scheduler, "KIMI_STRATEGY": strategy}, proc_root).environ
    assert _plan(wired) == _plan({**EXPLICIT, "KIMI_STRATEGY": strategy})


def test_slurm_head_is_the_first_host(proc_root):
    env = wire({"SLURM_JOB_NUM_NODES": "4", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "gpu[07-08,11],x1"},
               proc_root).environ
    assert (env["KIMI_NODES"], env["KIMI_NODE_RANK"], env["KIMI_HEAD_ADDR"]) == ("4", "0", "gpu07")


def test_explicit_settings_win(proc_root):
    wiring = wire({**LWS, "KIMI_HEAD_ADDR": "head.example", "KIMI_NODE_RANK": "0", "KIMI_IFACE": "ib0"}, proc_root)
    env = wiring.environ
    assert (env["KIMI_HEAD_ADDR"], env["KIMI_NODE_RANK"], env["KIMI_NODES"], env["KIMI_IFACE"]) == \
        ("head.example", "0", "2", "ib0")
    assert any("as set" in d and "KIMI_HEAD_ADDR" in d for d in wiring.decisions)


def test_iface_auto_is_resolved(proc_root):
    env = wire({"KIMI_IFACE": "auto"}, proc_root).environ
    assert env["KIMI_IFACE"] == "eth0"


def test_single_node_gets_no_iface(proc_root):
    wiring = wire({"KIMI_HARDWARE": "h200"}, proc_root)
    assert "KIMI_IFACE" not in wiring.environ and wiring.source == "" and wiring.decisions == ()


def test_iface_not_found_is_said(tmp_path):
    wiring = wire({**LWS}, str(tmp_path / "none"))
    assert "KIMI_IFACE" not in wiring.environ
    assert any("KIMI_IFACE not found" in d for d in wiring.decisions)


def test_load_launch_applies_lws(monkeypatch):
    # The real /proc/net/route of this machine names some interface, or none: either way the
    # LWS values reach the plan.
    monkeypatch.setattr("entrypoint.node.cluster.default_route_iface", lambda proc_root="/proc": "eth9")
    launch = load_launch((), LWS)
    assert launch.plan.nodes == 2 and launch.this_process().role == "worker"
    assert launch.settings.head_addr == "10.0.0.1" and launch.settings.iface == "eth9"


def test_pd_side_channel_host_is_the_nodes_own_address(monkeypatch):
    monkeypatch.setattr("entrypoint.node.cluster.default_route_iface", lambda proc_root="/proc": "eth9")
    env = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_ROLE": "prefill", "KIMI_NODE_RANK": "1",
           "KIMI_PREFILL_NODES": "2", "KIMI_PREFILL_ADDRS": "10.0.0.1,10.0.0.3", "KIMI_DECODE_ADDRS": "10.0.0.2"}
    proc = load_launch((), env).this_process()
    assert proc.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.3"
