"""The plan's topology (entrypoint/core/compose/plan.py `Topology`), computed once when the plan is made: its
engine pools and their groups, the router in front of them, the processes beside them and the one
role-to-process lookup, for each shape a strategy gives. The plans are the renderings' own (the
deploy tests' shapes, whose environments give the addresses), so the processes are the resolver's."""

from __future__ import annotations

import dataclasses

import pytest

from entrypoint.app.launch import build
from entrypoint.core.compose.plan import Kind
from tests.deploy.shapes import COMPOSE, K8S, launch_for

H200 = {"KIMI_HARDWARE": "h200"}
MULTI = {"KIMI_HARDWARE": "h100", "KIMI_STRATEGY": "multi_node_tp", "KIMI_NODES": "2"}


def plan(environ, fmt: str = ""):
    """The plan a rendering draws (`fmt`), else the one the container itself launches."""
    return launch_for(fmt, environ).plan if fmt else build(environ).plan


def shape(topology) -> list:
    """(pool, [nodes of each group as role:rank]) for each pool."""
    return [(pool.name, [[f"{p.role}:{p.rank}" for p in g.nodes] for g in pool.groups]) for pool in topology.pools]


def test_one_node_is_one_pool_of_one_group_and_its_engine_is_the_front():
    p = plan(K8S["single-h200"], "k8s")
    t = p.topology
    assert shape(t) == [("deployment", [["single:0"]])]
    assert t.router is None and t.helpers == () and not t.pd and not t.multi_node and not t.kv_store
    assert t.front is p.processes[0] is p.front
    assert t.process("single", 0) is p.processes[0] and t.process("single", 1) is None
    assert t.roles() == ["single"] and t.count("single") == 1


@pytest.mark.parametrize("case", ["multi_node_tp-h100x2", "multi_node_tp_pp-h100x2", "multi_node_tp-gb200x4"])
def test_multi_node_tp_and_pp_are_one_group_headed_by_rank_0_which_alone_serves(case):
    p = plan(K8S[case], "k8s")
    t = p.topology
    nodes = int(K8S[case]["KIMI_NODES"])
    assert shape(t) == [("deployment", [["head:0"] + [f"worker:{r}" for r in range(1, nodes)]])]
    group = t.pools[0].groups[0]
    assert t.multi_node and not t.pd and t.router is None and t.pools[0].group_nodes == nodes
    assert group.leader is p.processes[0] is t.front and not group.serves_every_node
    assert t.process("worker", 1) is p.processes[1] and t.process("head", 0) is p.processes[0]


def test_dep_is_one_group_whose_every_node_serves():
    t = plan(K8S["multi_node_dep-h100x2"], "k8s").topology
    assert shape(t) == [("deployment", [["head:0", "worker:1"]])]
    assert t.multi_node and t.pools[0].groups[0].serves_every_node


@pytest.mark.parametrize("case, prefill, decode", [("pd-h200", 1, 1), ("pd-h200-2x1", 2, 1), ("pd-mi355x-2x2", 2, 2)])
def test_pd_is_a_prefill_and_a_decode_pool_behind_the_router(case, prefill, decode):
    p = plan(K8S[case], "k8s")
    t = p.topology
    assert shape(t) == [("prefill", [[f"prefill:{r}" for r in range(prefill)]]),
                        ("decode", [[f"decode:{r}" for r in range(decode)]])]
    assert t.pd and not t.multi_node and not t.kv_store and t.helpers == ()
    assert t.router.kind is Kind.ROUTER and t.front is t.router is p.front
    assert not any(pool.shares_node for pool in t.pools)
    assert [pool.nodes for pool in t.pools] == [prefill, decode]  # KIMI_PREFILL_NODES, KIMI_DECODE_NODES
    assert t.process("router", 3) is t.router  # one per deployment: any rank asks for it
    assert t.process("decode", decode - 1) is t.pool("decode").engines[-1] and t.process("decode", decode) is None


def test_pd_pools_of_0_nodes_share_one_node():
    t = plan(COMPOSE["pd-shared-b200"], "compose").topology
    assert t.pd and [pool.shares_node for pool in t.pools] == [True, True] and [pool.nodes for pool in t.pools] == [0, 0]
    assert shape(t) == [("prefill", [["prefill:0"]]), ("decode", [["decode:0"]])]


@pytest.mark.parametrize("environ, group", [({**H200, "KIMI_REPLICAS": "3"}, ["single:0"]),
                                            ({**MULTI, "KIMI_REPLICAS": "2"}, ["head:0", "worker:1"])])
def test_a_fleet_is_one_copy_behind_its_router_and_the_copy_is_the_plan_without_it(environ, group):
    p = plan(environ, "k8s")
    t = p.topology
    assert shape(t) == [("deployment", [group])] and t.router is p.processes[-1] and t.front is t.router
    assert t.multi_node == (len(group) > 1) and not t.pd
    copy = p.without_router()
    assert copy.topology.router is None and shape(copy.topology) == shape(t) and copy.processes == p.processes[:-1]
    assert dataclasses.replace(p, processes=copy.processes).topology == copy.topology  # recomputed, never stale


def test_a_pd_fleet_is_one_unit_behind_the_pd_router():
    t = plan({**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_REPLICAS": "2"}, "k8s").topology
    assert t.pd and [pool.name for pool in t.pools] == ["prefill", "decode"] and t.router.kind is Kind.ROUTER


def test_a_kv_store_is_its_instances_behind_the_router_with_master_and_store_beside():
    p = plan(K8S["kv-centralized-h200x3"], "k8s")
    t = p.topology
    assert shape(t) == [("instance", [["instance:0"], ["instance:1"], ["instance:2"]])]
    assert t.kv_store and not t.pd and not t.multi_node
    assert [h.kind for h in t.helpers] == [Kind.KV_MASTER, Kind.KV_STORE]
    assert t.helper(Kind.KV_MASTER).role == "master" and t.helper(Kind.KV_STORE).role == "store"
    assert t.router.kind is Kind.ROUTER and t.front is t.router
    assert t.process("instance", 2) is t.pools[0].groups[2].leader and t.process("store", 5) is t.helper(Kind.KV_STORE)


def test_a_distributed_kv_store_has_a_master_and_no_store_process():
    t = plan(K8S["kv-distributed-mi355x"], "k8s").topology
    assert t.kv_store and t.helper(Kind.KV_MASTER) is not None and t.helper(Kind.KV_STORE) is None


def test_a_kv_store_with_pd_pools_is_pd_and_a_kv_store():
    t = plan(K8S["kv-centralized-pd-b200"], "k8s").topology
    assert t.pd and t.kv_store and [pool.name for pool in t.pools] == ["prefill", "decode"]


def test_multi_node_kv_instances_are_a_group_each():
    t = plan({**MULTI, "KIMI_KV_OFFLOAD": "kv_store_centralized_mooncake", "KIMI_KV_INSTANCES": "2",
              "KIMI_HEAD_ADDR": "h0", "KIMI_IFACE": "eth0", "KIMI_MOONCAKE_MASTER_ADDR": "m",
              "KIMI_MOONCAKE_STORE_HOST": "s", "KIMI_INSTANCE_ADDRS": "h0,h1"}).topology
    assert shape(t) == [("instance", [["instance:0", "instance:1"], ["instance:2", "instance:3"]])]
    assert t.multi_node and t.kv_store


@pytest.mark.parametrize("environ, kind", [(K8S["kv-lmcache-h200"], Kind.KV_SERVER), (K8S["preload-h200"], Kind.PRELOAD)])
def test_a_helper_beside_the_engine_is_no_pool_and_no_router(environ, kind):
    p = plan(environ, "k8s")
    t = p.topology
    assert shape(t) == [("deployment", [["single:0"]])] and t.router is None and not t.kv_store
    assert [h.kind for h in t.helpers] == [kind] and t.helper(kind) is p.processes[-1]
    assert t.front is p.processes[0]


# ---------------------------------------------------------------- one pool type, carried from the selection (issue 51)


@pytest.mark.parametrize("environ, fmt", [(K8S["single-h200"], "k8s"), (COMPOSE["pd-shared-b200"], "compose"),
                                          ({**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "2",
                                            "KIMI_DECODE_NODES": "1", "KIMI_DECODE_PARALLELISM": "dep"}, "k8s"),
                                          (K8S["kv-centralized-h200x3"], "k8s")])
def test_the_plans_pools_are_the_selections_sized_and_filled(environ, fmt):
    launch = launch_for(fmt, environ)
    pools, chosen = launch.plan.pools, launch.selection.pools
    assert pools is launch.plan.topology.pools  # one set of pools: Plan.pools is the topology's
    assert type(pools[0]) is type(chosen[0])  # one pool type from the selection to the plan
    assert [(p.nodes, p.parallelism) for p in pools] == [(c.nodes, c.parallelism) for c in chosen]
    for pool in pools:
        assert pool.engines and all(p.pool == pool.name for p in pool.engines)
        head = pool.groups[0].leader
        per_gpu = {"h200": 141, "b200": 180}[launch.plan.hardware]  # GB of one GPU (1128 / 8, 1440 / 8)
        assert pool.gpus == head.vllm.world_size and pool.vram_gb == pytest.approx(pool.gpus * per_gpu)


def test_the_pools_engines_are_found_by_the_pool_they_were_made_for_not_by_their_role():
    p = plan({**H200, "KIMI_STRATEGY": "pd_cluster", "KIMI_PREFILL_NODES": "2", "KIMI_DECODE_NODES": "1"}, "k8s")
    renamed = tuple(dataclasses.replace(proc, role=f"x-{proc.role}") if proc.is_engine else proc for proc in p.processes)
    t = dataclasses.replace(p, processes=renamed).topology
    assert [(pool.name, [[f"{e.role}:{e.rank}" for e in g.nodes] for g in pool.groups]) for pool in t.pools] == [
        ("prefill", [["x-prefill:0", "x-prefill:1"]]), ("decode", [["x-decode:0"]])]
