"""YAML text of rendered files: keys in the order written, no anchors, long strings unwrapped."""

from __future__ import annotations

import re
from typing import Iterable

import yaml

from entrypoint.core.data.record import FrozenDict


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True


# A plain scalar that some consumer reads as something other than this string is quoted: PyYAML
# quotes what YAML 1.1 resolves (yes, on, 1.5, null), but Kubernetes (go-yaml v2) also reads y/n
# as booleans and Compose (YAML 1.2) reads 0o17 and 1e3 as numbers.
_NOT_A_STRING = re.compile(r"""(?x)
    [yYnN]                                              # go-yaml v2 booleans
  | [-+]?(0o[0-7_]+|0x[0-9a-fA-F_]+|0b[01_]+)           # 1.1 / 1.2 integers in other bases
  | [-+]?([0-9][0-9_]*)?(\.[0-9_]*)?([eE][-+]?[0-9]+)?  # decimal numbers, exponent or not
  | [-+]?\.(inf|Inf|INF|nan|NaN|NAN)
  | (?i:yes|no|on|off|true|false|null|~)
""")


def _str(dumper, data: str):
    if data and _NOT_A_STRING.fullmatch(data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    return dumper.represent_str(data)


_Dumper.add_representer(str, _str)
# Recipe data is read-only (FrozenDict, tuples): written like the dicts and lists it was.
_Dumper.add_representer(FrozenDict, _Dumper.represent_dict)
_Dumper.add_representer(tuple, _Dumper.represent_list)


def dump(doc) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)


def dump_all(docs: Iterable) -> str:
    return yaml.dump_all(list(docs), Dumper=_Dumper, sort_keys=False, width=1000)
