"""YAML text of rendered files: keys in the order written, no anchors, long strings unwrapped."""

from __future__ import annotations

from typing import Iterable

import yaml

from entrypoint.core.record import FrozenDict


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True


# Recipe data is read-only (FrozenDict, tuples): written like the dicts and lists it was.
_Dumper.add_representer(FrozenDict, _Dumper.represent_dict)
_Dumper.add_representer(tuple, _Dumper.represent_list)


def dump(doc) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)


def dump_all(docs: Iterable) -> str:
    return yaml.dump_all(list(docs), Dumper=_Dumper, sort_keys=False, width=1000)
