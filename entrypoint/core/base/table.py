"""Plain-text tables for people: columns padded to their widest cell, the last one left free."""

from __future__ import annotations

from typing import Iterable, Sequence


def text_table(header: Sequence[str], rows: Iterable[Sequence], right: Iterable[int] = ()) -> str:
    """Header and rows, two spaces between columns; columns whose index is in `right` align right."""
    table = [[str(cell) for cell in header]] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    right = set(right)
    lines = []
    for row in table:
        cells = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells + row[len(widths):]).rstrip())
    return "\n".join(lines)
