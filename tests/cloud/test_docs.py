"""docs/cloud.md names the files each render command writes, and the CLI writes exactly those."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "cloud.md"


@pytest.mark.parametrize("fmt", ["sagemaker", "vertex", "azureml", "skypilot"])
def test_render_command_writes_the_documented_files(fmt, tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "KIMI_HARDWARE": "h200"}
    proc = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", fmt, "--output", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    written = {p.name for p in tmp_path.iterdir()}
    text = DOC.read_text()
    assert f"--format {fmt}" in text
    for name in written:
        documented = name.replace("kimi-k2-5.sky.yaml", "<name>.sky.yaml")
        assert f"`{documented}`" in text, f"{name} is not in docs/cloud.md"
    for name in re.findall(r"`([a-z-]+\.(?:json|yml))`", text):
        if name.startswith(fmt):
            assert name in written, f"docs/cloud.md names {name}, which --format {fmt} does not write"
