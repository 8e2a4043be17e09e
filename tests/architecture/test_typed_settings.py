"""Settings are typed statically (issue 40): each field of FIELDS is a declared attribute of
Settings whose type is its value's (python_type), so mypy checks every `settings.<name>`; no
attribute is attached by name at import. declaration_errors holds FIELDS and the declarations
together (the module refuses to import otherwise), shown here on planted disagreements."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Optional, Tuple

from entrypoint.core.compose import settings
from entrypoint.core.compose.settings import FIELDS, Field, Settings, declaration_errors, python_type, read_settings

SOURCE = Path(settings.__file__)


def test_every_field_is_a_declared_attribute_of_its_type():
    assert declaration_errors() == []
    for field in FIELDS:
        assert Settings.__dict__[field.name].type == python_type(field), field.name
    assert python_type(settings.BY_NAME["nodes"]) is int  # default 1: never unset
    assert python_type(settings.BY_NAME["recipe"]) == Optional[str]
    assert python_type(settings.BY_NAME["prefill_addrs"]) == Tuple[str, ...]


def test_an_attribute_reads_its_value_as_read_settings_converted_it():
    s = read_settings({"KIMI_NODES": "2", "KIMI_PREFILL_ADDRS": "a, b", "KIMI_DRY_RUN": "yes"})
    assert (s.nodes, s.prefill_addrs, s.dry_run, s.recipe, s.variant) == (2, ("a", "b"), True, None, "default")
    assert Settings.nodes.__doc__ == settings.BY_NAME["nodes"].help


def test_declaration_errors_finds_a_missing_a_stray_and_a_mistyped_attribute():
    extra = Field("brand_new", "int", None, "", "")
    retyped = dataclasses.replace(settings.BY_NAME["nodes"], default=None)  # an int that may be unset
    fields = tuple(f for f in FIELDS if f.name not in ("recipe", "nodes")) + (extra, retyped)
    errors = declaration_errors(fields)
    assert errors == ["brand_new: no Settings attribute", "recipe: a Settings attribute without a field",
                      "nodes: declared <class 'int'>, a int with default None reads typing.Optional[int]"]


def test_no_attribute_is_set_by_name():
    calls = [n for n in ast.walk(ast.parse(SOURCE.read_text())) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "setattr"]
    assert calls == [], [c.lineno for c in calls]

