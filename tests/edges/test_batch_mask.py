"""Issue 40 (repro s5-05): `plan --batch` prints through the one mask, as `plan --format json` does:
a URL password in a line's KIMI_MODEL or vLLM arguments never reaches standard output, and every
line stays one valid JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PASSWORD = "BATCHPW40"


@pytest.mark.parametrize("line", [
    {"KIMI_HARDWARE": "h200", "KIMI_MODEL": f"s3://AKIAEXAMPLE40:{PASSWORD}@bucket/kimi"},
    {"KIMI_HARDWARE": "h200", "KIMI_EXTRA_ARGS": f"--tokenizer https://u:{PASSWORD}@hub.example/tok"},
    {"KIMI_HARDWARE": "nope", "KIMI_MODEL": f"https://u:{PASSWORD}@hub.example/m"},  # an error line
])
def test_batch_masks_what_plan_json_masks(tmp_path, line):
    batch = tmp_path / "in.jsonl"
    batch.write_text(json.dumps(line) + "\n")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    done = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "json", "--batch", str(batch)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    (out,) = [json.loads(text) for text in done.stdout.splitlines()]
    assert ("processes" in out) != ("error" in out)
    single = subprocess.run([sys.executable, "-m", "entrypoint", "plan", "--format", "json"], env={**env, **line},
                            capture_output=True, text=True, timeout=120)
    if single.returncode == 0:  # the same plan as one run prints, masked alike
        assert json.loads(single.stdout)["processes"] == out["processes"]
