"""Argument lists: tagging, display grouping and placeholder resolution (vLLM's grammar: vllm_cli).

Args travel as (token, source) pairs so that `explain` can say where each flag came from.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from entrypoint.core.vllm.vllm_cli import parse, secret_spec

Tagged = List[Tuple[str, str]]  # (token, source)

_PLACEHOLDER = re.compile(r"\$([A-Z][A-Z0-9_]*)")


def tag(source: str, tokens: Iterable[str]) -> Tagged:
    return [(t, source) for t in tokens if t != ""]


def _flag_key(token: str) -> str:
    return token.split("=", 1)[0] if token.startswith("--") else token


def units(tokens: Tagged) -> List[Tuple[Optional[str], Tagged]]:
    """Group tokens for display, without a grammar (the router's argv): a flag followed by a token
    not starting with '-' is one unit; a lone flag is a unit; anything else is positional (key
    None). vLLM's own argv is grouped by its grammar: `display_units`."""
    out: List[Tuple[Optional[str], Tagged]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i][0]
        if tok.startswith("-"):
            if "=" not in tok and i + 1 < len(tokens) and not tokens[i + 1][0].startswith("-"):
                out.append((_flag_key(tok), tokens[i:i + 2]))
                i += 2
                continue
            out.append((_flag_key(tok), tokens[i:i + 1]))
        else:
            out.append((None, tokens[i:i + 1]))
        i += 1
    return out


def display_units(args: Sequence[str], engine: bool) -> List[Tuple[Optional[str], Tagged]]:
    """(flag as written, tokens) of a process's arguments (after its program words): a vLLM
    engine's by vLLM's grammar (a list option keeps all its values), anything else by `units`."""
    if not engine:
        return units([(t, "") for t in args])
    out: List[Tuple[Optional[str], Tagged]] = []
    for unit in parse([(t, "") for t in args], secret_spec(), strict=False):
        first = unit.tokens[0][0]
        out.append((_flag_key(first) if unit.option is not None or first.startswith("-") else None, unit.tokens))
    return out


def placeholders(text: str) -> List[str]:
    """The names of the `$NAME` placeholders in `text`, in order (what substitute would fill)."""
    return _PLACEHOLDER.findall(text)


def substitute(text: str, lookup: Callable[[str], str]) -> str:
    return _PLACEHOLDER.sub(lambda m: lookup(m.group(1)), text)
