"""Where the recipe data lives: a leaf module (it imports nothing of the project), so that every
reader of the data (the catalog loader, vLLM's grammar files, the masking of secrets) can find it
without importing the settings.

The one variable read here, KIMI_RECIPES_DIR, is declared in `entrypoint.core.compose.settings` (FIELDS,
`recipes_dir`) like every other; tests/architecture/test_imports.py checks the two names agree.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional

RECIPES_DIR_ENV = "KIMI_RECIPES_DIR"


def default_recipes_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """KIMI_RECIPES_DIR when set; else recipes/ of a source checkout; else the copy shipped
    inside the package."""
    override = (os.environ if environ is None else environ).get(RECIPES_DIR_ENV)
    if override:
        return Path(override)
    return _shipped()


@lru_cache(maxsize=1)
def _shipped() -> Path:
    """recipes/ of a source checkout, else the package's copy: found once per process (the
    package does not move; every reader of the data asks, a start some 20 times)."""
    here = Path(__file__).resolve().parent.parent.parent  # the entrypoint package
    checkout = here.parent / "recipes"
    if (checkout / "hardware.yaml").is_file():
        return checkout
    return here / "recipes_data"
