"""The golden launches (tests/data/golden, see tests/data/PROVENANCE.md)."""

import json

from tests.testdata import GOLDEN


def golden_cases():
    return json.loads(GOLDEN.read_text())["cases"]
