"""build.py says what to do instead of showing a traceback: the build extra when the Docker SDK
is missing, the stand-in bases when the base registry cannot be reached."""

import subprocess
import sys

import pytest

from buildsys import targets
from tests.conftest import ROOT, run_build_py

WITHOUT_SDK = ("import runpy, sys; sys.modules['docker'] = None; sys.argv = ['build.py', *sys.argv[1:]]; "
               "runpy.run_path('build.py', run_name='__main__')")


def _without_sdk(*args):
    """build.py in an interpreter where `import docker` fails as if the SDK were not installed."""
    return subprocess.run([sys.executable, "-c", WITHOUT_SDK, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("command", [["build", "h200"], ["smoke", "h200"], ["lock", "--dry-run"]])
def test_engine_commands_name_the_build_extra(command):
    proc = _without_sdk(*command)
    assert proc.returncode != 0
    assert "pip install -e '.[build]'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_list_matrix_and_bake_need_no_sdk(tmp_path):
    assert _without_sdk("matrix").returncode == 0
    assert _without_sdk("list").returncode == 0
    proc = _without_sdk("bake", "-o", str(tmp_path / "bake.json"))
    assert proc.returncode == 0 and (tmp_path / "bake.json").exists(), proc.stderr


@pytest.mark.slow
@pytest.mark.docker
def test_an_unreachable_base_registry_points_at_the_standins(docker_client, tmp_path):
    data = tmp_path / "targets.yaml"  # a base on a host that never resolves (.invalid, RFC 2606)
    data.write_text(targets.TARGETS_FILE.read_text().replace("docker.io/", "registry.invalid/"))
    proc = run_build_py("--targets-file", str(data), "build", "h200", check=False, timeout=300)
    assert proc.returncode == 1
    assert "cannot be reached" in proc.stderr and "build.py standins" in proc.stderr, proc.stderr[-2000:]
    assert "--base-override" in proc.stderr and "Traceback" not in proc.stderr
