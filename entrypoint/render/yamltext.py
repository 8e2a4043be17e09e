"""YAML text of rendered files: keys in the order written, no anchors, long strings unwrapped."""

from __future__ import annotations

from typing import Iterable

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True


def dump(doc) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)


def dump_all(docs: Iterable) -> str:
    return yaml.dump_all(list(docs), Dumper=_Dumper, sort_keys=False, width=1000)
