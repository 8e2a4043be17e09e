"""Read-only records: what the recipe schema accepted, without the schema's import cost."""

from __future__ import annotations

from typing import Any, Dict


class FrozenDict(dict):
    """A dict that refuses every change (the catalog's mappings)."""

    __slots__ = ()

    def _read_only(self, *args, **kwargs):
        raise TypeError("the recipe catalog is read-only")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only
    __hash__ = None

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


class Record:
    """One validated model's fields as read-only attributes; equal when kind and fields are."""

    __slots__ = ("_kind", "_fields")

    def __init__(self, kind: str, fields: Dict[str, Any]):
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_fields", fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"{self._kind} has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._kind} is read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and (self._kind, self._fields) == (other._kind, other._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{self._kind}({', '.join(f'{k}={v!r}' for k, v in self._fields.items())})"

    def __reduce__(self):
        return (Record, (self._kind, self._fields))
