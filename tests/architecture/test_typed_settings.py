"""Settings are typed statically and declared once (issues 40, 51): each setting is one attribute of
Settings (`text`, `number`, `choice`, `flag`, `items`, `spec`), whose type mypy reads from the kind
and the default, so mypy checks every `settings.<name>`; FIELDS is made from those attributes, never
written a second time; no attribute is attached by name at import."""

from __future__ import annotations

import ast
from pathlib import Path

from entrypoint.core.compose import settings
from entrypoint.core.compose.settings import FIELDS, Settings, read_settings

SOURCE = Path(settings.__file__)
KIND_TYPES = {"str": str, "choice": str, "spec": str, "int": int, "bool": bool, "list": tuple}
DECLARERS = {"text", "number", "choice", "flag", "items", "spec"}


def _declarations() -> list:
    """(attribute, declaring function) of every assignment in the Settings class body, in order."""
    cls = next(n for n in ast.parse(SOURCE.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    return [(a.targets[0].id, a.value.func.id) for a in cls.body if isinstance(a, ast.Assign)
            and isinstance(a.value, ast.Call) and isinstance(a.value.func, ast.Name)]


def test_each_setting_is_declared_once_and_fields_follow_the_declarations():
    declared = _declarations()
    assert {func for _, func in declared} <= DECLARERS
    names = [name for name, _ in declared]
    assert len(names) == len(set(names)) == len(FIELDS) > 100
    assert [f.name for f in FIELDS] == names  # in the order written: the README's tables follow it
    # no second list: no module-level tuple of declarations (FIELDS is made from the attributes)
    module = ast.parse(SOURCE.read_text()).body
    listed = [n.lineno for n in module if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Tuple)
              and any(isinstance(e, ast.Call) for e in n.value.elts)]
    assert listed == []


def test_an_attribute_reads_its_value_as_read_settings_converted_it():
    s = read_settings({"KIMI_NODES": "2", "KIMI_PREFILL_ADDRS": "a, b", "KIMI_DRY_RUN": "yes"})
    assert (s.nodes, s.prefill_addrs, s.dry_run, s.recipe, s.variant) == (2, ("a", "b"), True, None, "default")
    assert Settings.nodes.__doc__ == settings.BY_NAME["nodes"].help == "Number of nodes of a multi-node deployment."


def test_every_default_is_its_kinds_type_or_unset():
    defaults = read_settings({})
    for field in FIELDS:
        value = getattr(defaults, field.name)
        assert value is None or isinstance(value, KIND_TYPES[field.kind]), field.name
        assert value == field.default, field.name
    assert isinstance(defaults.nodes, int) and defaults.recipe is None and defaults.prefill_addrs == ()


def test_no_attribute_is_set_by_name():
    calls = [n for n in ast.walk(ast.parse(SOURCE.read_text())) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "setattr"]
    assert calls == [], [c.lineno for c in calls]
