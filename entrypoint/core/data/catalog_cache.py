"""The validated catalog kept as readable data: JSON beside the recipe data (or in the user's
cache), named by a digest of every data file and of the schema's source, so a start whose data
is unchanged reads it back without pydantic or yaml, and any change validates again.

The file is plain JSON anyone can read (`jq . recipes/.validated/catalog-*.json`): a record is
{"$record": kind, "fields": {...}}, a read-only mapping {"$map": [[key, value], ...]} (keys keep
their type), a tuple a list. Reading it builds nothing but records, mappings, tuples and JSON
scalars: unlike a pickle, a file planted in a cache directory cannot run code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from entrypoint.core.base.files import read_capped, write_file
from entrypoint.core.data.record import FrozenDict, Record

FORMAT = 1  # bump when the encoding changes: an old file is then ignored (a new name)
MAX_BYTES = 16 * 1024 * 1024  # the catalog is ~30 KB of JSON


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return {"$record": value._kind, "fields": {k: _encode(v) for k, v in value._fields.items()}}
    if isinstance(value, dict):
        return {"$map": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a {type(value).__name__} in the catalog has no JSON form")


def _tuples(value: Any) -> Any:
    """JSON's lists as tuples, all the way down (mappings and records inside are built already)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _object(found: dict) -> Any:
    """Each JSON object as it is parsed (innermost first, so one pass builds the whole tree): a
    record, a read-only mapping, or (a record's fields, the file's top level) a plain dict."""
    if "$record" in found:
        return Record(found["$record"], {k: _tuples(v) for k, v in found["fields"].items()})
    if "$map" in found:
        return FrozenDict({_tuples(k): _tuples(v) for k, v in found["$map"]})
    return found


def dumps(catalog: Record) -> str:
    return json.dumps({"format": FORMAT, "catalog": _encode(catalog)}, separators=(",", ":"))


def loads(text: str) -> Optional[Record]:
    data = json.loads(text, object_hook=_object)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    found = data["catalog"]
    return found if isinstance(found, Record) else None


def cached(name: str, places: List[Path], validate: Callable[[], Union[Record, Dict[str, Record]]]) -> Record:
    """The catalog (or the part of it) from the first of `places` holding `name`, else
    `validate()` (one record, or every part by file name) written to the first place that takes
    them all (best effort: an unwritable place is skipped), and the one named returned."""
    for place in places:
        try:
            data = read_capped(place / name, MAX_BYTES)  # a FIFO planted there is skipped, not waited on
            found = loads(data.decode("utf-8")) if len(data) <= MAX_BYTES else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue
        if found is not None:
            return found
    parts = validate()
    parts = parts if isinstance(parts, dict) else {name: parts}
    try:
        texts = {part: dumps(record) for part, record in parts.items()}
    except TypeError:
        return parts[name]
    for place in places:
        try:
            place.mkdir(parents=True, exist_ok=True)
            for part, text in texts.items():
                write_file(place / part, text)
            break
        except OSError:
            continue
    return parts[name]
