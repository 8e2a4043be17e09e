"""Where the shared golden launches live (read-only, beside the repository)."""

import json
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
GOLDEN = SHARED / "golden" / "kimi-k2.5.json"


def golden_cases():
    return json.loads(GOLDEN.read_text())["cases"]
