"""The plan carries its topology (core/compose/plan.py `Topology`): a consumer of a launch (the renderers,
verify, the composition root, the commands, the build system) asks `plan.topology` whether it is
PD, multi-node, which pools, groups, router and helpers it has and which process a role names, and
never works it out again from the selection's pools (`launch.selection.prefill`), its node count
(`launch.selection.is_multi_node`), a scan by role (`plan.find`) or a role's name written out
(`proc.role == "prefill"`). The functions that make a rendering's environment, before there is a
plan (`deployment_environ(environ, settings, sel)`), read the selection they are given. An AST
scan, shown live on planted code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSUMERS = sorted(p for d in ("render", "verify", "app", "cli") for p in (ROOT / "entrypoint" / d).rglob("*.py")) \
    + sorted((ROOT / "buildsys").rglob("*.py"))
# The engines' roles as the resolver names them (core/compose/plan.py SINGLE ... DECODE).
ENGINE_ROLES = {"single", "head", "worker", "instance", "prefill", "decode"}
SELECTION_TOPOLOGY = {"prefill", "decode", "is_multi_node"}


def _chain(node) -> list:
    names = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.insert(0, node.id)
    return names


def rederivations(path: Path) -> list:
    """`line: what` for each re-derivation of the topology in a consumer."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            # a launch's selection (launch.selection.prefill, self.selection...), not a selection given
            # to a function that runs before the plan is made (`sel`, `selection`)
            if len(chain) >= 3 and chain[-2] == "selection" and chain[-1] in SELECTION_TOPOLOGY:
                found.append(f"{node.lineno}: {'.'.join(chain)}")
            if len(chain) >= 2 and chain[-2] == "plan" and chain[-1] == "find":
                found.append(f"{node.lineno}: {'.'.join(chain)}")
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "role":
            for right in node.comparators:
                words = [right] if isinstance(right, ast.Constant) else getattr(right, "elts", [])
                if any(isinstance(w, ast.Constant) and w.value in ENGINE_ROLES for w in words):
                    found.append(f"{node.lineno}: role compared to {ast.unparse(right)}")
    return sorted(set(found), key=lambda hit: int(hit.split(":")[0]))


def test_consumers_read_the_plans_topology():
    found = [f"{p.relative_to(ROOT)}:{hit}" for p in CONSUMERS for hit in rederivations(p)]
    assert not found, "read launch.plan.topology (pd, multi_node, pools, router, helpers, process):\n" + "\n".join(found)


def test_the_scan_is_live(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f(launch, sel, proc, role):\n"
                       "    a = launch.selection.prefill is not None\n"
                       "    b = launch.selection.is_multi_node\n"
                       "    c = launch.plan.find('router', 0)\n"
                       "    d = proc.role == 'prefill'\n"
                       "    e = proc.role in ('head', 'worker')\n"
                       "    f = sel.prefill, proc.role == role, launch.plan.topology.pd, proc.role == 'router'\n"
                       "    g = selection.prefill is not None  # a selection given, before the plan\n")
    assert [hit.split(":")[0] for hit in rederivations(planted)] == ["2", "3", "4", "5", "6"]
