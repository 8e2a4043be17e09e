"""The image build system behind build.py: target data, host-prepared wheels, docker builds."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    """Progress for people: one line on stderr, flushed."""
    print(msg, file=sys.stderr, flush=True)
