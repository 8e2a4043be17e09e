"""The README's settings table is the one the settings model generates."""

from pathlib import Path

from entrypoint.core.compose.settings import FIELDS
from entrypoint.core.compose.settings_doc import render_section

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_settings_table_is_generated_from_the_model():
    text = README.read_text()
    assert render_section() in text, "run: python -m entrypoint.core.compose.settings_doc README.md"


def test_every_setting_documented_once():
    text = README.read_text()
    for field in FIELDS:
        assert text.count(f"| `{field.env}` |") == 1
