"""The README's test command is scripts/test.sh, .ci/run runs it, and it passes pytest's exit
status and summary line through (run here on a tiny selection, reusing this venv)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_readme_and_ci_run_the_same_command():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Run all tests"):]
    assert re.search(r"```bash\n(.*?)\n```", section, re.S).group(1) == "bash scripts/test.sh"
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.skipif(os.geteuid() != 0 and not shutil.which("sudo"), reason="scripts/test.sh sets up the host as root")
def test_the_command_passes_pytests_status_and_summary_through():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_DOCKERD", "PYTEST_"))}
    env["KIMI_VENV"] = sys.prefix  # this venv: nothing to install when pyproject.toml is unchanged
    proc = subprocess.run(["bash", "scripts/test.sh", "tests/test_testdata.py", "-k", "no_such_test"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-2000:]  # pytest: no tests ran
    # pytest's summary line, as one process ("2 deselected in 0.1s") or xdist's workers ("no tests ran in 1s") say it
    assert re.search(r"^=* ?(\d+ deselected|no tests ran) in [\d.]+s", proc.stdout, re.M), proc.stdout[-2000:]
    assert " -n auto --dist loadgroup " in proc.stdout  # the whole suite runs on every core
    assert "pytest exited 5" in proc.stdout


@pytest.mark.serial
def test_a_shared_resource_test_runs_in_the_one_serial_group(request):
    """Under xdist (scripts/test.sh: --dist loadgroup) a test marked docker/vllm/serial/slow carries
    the `serial` group in its nodeid, so one worker runs the group in turn (tests/conftest.py). It
    failed with pytest 9 (xdist 3.8's group suffix ignored) and without the hook's tryfirst."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not under pytest-xdist: no groups")
    assert request.node.nodeid.endswith("@serial"), request.node.nodeid
