"""vLLM argument lists: the last-wins dedupe, placeholder resolution and a few read-only queries.

Args travel as (token, source) pairs so that `explain` can say where each flag came from.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

Tagged = List[Tuple[str, str]]  # (token, source)

_PLACEHOLDER = re.compile(r"\$([A-Z][A-Z0-9_]*)")


def tag(source: str, tokens: Iterable[str]) -> Tagged:
    return [(t, source) for t in tokens if t != ""]


def _flag_key(token: str) -> str:
    return token.split("=", 1)[0] if token.startswith("--") else token


def units(tokens: Tagged) -> List[Tuple[Optional[str], Tagged]]:
    """Group tokens: a flag followed by a token not starting with '-' is one unit; a lone flag is a
    unit; anything else is positional (key None)."""
    out = []
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


def dedupe(tokens: Tagged) -> Tagged:
    """Keep only the last unit of each flag, in its position; positionals are kept."""
    grouped = units(tokens)
    last = {key: idx for idx, (key, _) in enumerate(grouped) if key is not None}
    return [pair for idx, (key, unit) in enumerate(grouped) if key is None or last[key] == idx for pair in unit]


def flag_value(argv: Sequence[str], flag: str) -> Optional[str]:
    """The value of the last occurrence of `flag` (``--flag v`` or ``--flag=v``); "" for a lone flag."""
    found = None
    for i, tok in enumerate(argv):
        if tok == flag:
            found = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else ""
        elif tok.startswith(flag + "="):
            found = tok.split("=", 1)[1]
    return found


def int_flag(argv: Sequence[str], flag: str, default: int) -> int:
    value = flag_value(argv, flag)
    try:
        return int(value) if value else default
    except ValueError:
        return default


def gpus_needed(argv: Sequence[str]) -> int:
    """GPUs one vLLM process needs visible on its node: TP x PP x local DP, split over --nnodes."""
    tp = int_flag(argv, "--tensor-parallel-size", 1)
    pp = int_flag(argv, "--pipeline-parallel-size", 1)
    dp_local = int_flag(argv, "--data-parallel-size-local", 0) or int_flag(argv, "--data-parallel-size", 1)
    nnodes = int_flag(argv, "--nnodes", 1)
    world = tp * pp * dp_local
    return max(1, world // max(1, nnodes))


def substitute(text: str, lookup: Callable[[str], str]) -> str:
    return _PLACEHOLDER.sub(lambda m: lookup(m.group(1)), text)
