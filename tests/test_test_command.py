"""The README's test command is scripts/test.sh, .ci/run runs it, and it passes pytest's exit
status and summary line through (run here on a tiny selection, reusing this venv)."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT


def test_readme_and_ci_run_the_same_commands():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Run all tests"):]
    assert re.search(r"```bash\n(.*?)\n```", section, re.S).group(1) == "bash scripts/test.sh"
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    # the fast lane: the README's command is CI's fast job (issue 51)
    section = readme[readme.index("Check a change in minutes"):]
    assert re.search(r"```bash\n(.*?)\n```", section, re.S).group(1) == "bash scripts/fast.sh"
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    assert [step.get("run") for step in ci["jobs"]["fast"]["steps"]][-1] == "bash scripts/fast.sh"
    assert "not slow" in (ROOT / "scripts" / "fast.sh").read_text()


def test_each_of_the_readmes_commands_says_how_long_it_takes():
    """Issue 40 (a newcomer's path): the demo, the fast lane and the tests each say their time beside
    the command; the two test commands as measured from a fresh clone, quiet and busy (issue 51)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Three commands"):readme.index("## What it does")]
    before_demo, rest = section.split("```bash\nbash scripts/demo.sh\n```")
    before_fast, rest = rest.split("```bash\nbash scripts/fast.sh\n```")
    before_tests = rest.split("```bash\nbash scripts/test.sh\n```")[0]
    assert "Time: about 5-6 minutes on a 2-core machine from a fresh clone." in before_demo
    for text in (before_fast, before_tests):
        assert re.search(r"Time: about \d+ minutes on 2 cores \(measured from a\sfresh clone", text), text
        assert re.search(r"\d+ min \d+ s quiet, \d+ min \d+ s busy", text), text


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 and not shutil.which("sudo"), reason="scripts/test.sh sets up the host as root")
def test_the_command_passes_pytests_status_and_summary_through():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_DOCKERD", "PYTEST_"))}
    env["KIMI_VENV"] = sys.prefix  # this venv: nothing to install when pyproject.toml is unchanged
    proc = subprocess.run(["bash", "scripts/test.sh", "tests/test_testdata.py", "-k", "no_such_test"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-2000:]  # pytest: no tests ran
    # pytest's summary line, as one process ("2 deselected in 0.1s") or xdist's workers ("no tests ran in 1s") say it
    assert re.search(r"^=* ?(\d+ deselected|no tests ran) in [\d.]+s", proc.stdout, re.M), proc.stdout[-2000:]
    workers = int(re.search(r" -n (\d+) --dist loadgroup ", proc.stdout).group(1))  # every core, a lane's each and one more
    cores = int(subprocess.run(["nproc"], env=env, capture_output=True, text=True, check=True).stdout)
    assert workers == max(cores, 4), proc.stdout
    assert "pytest exited 5" in proc.stdout


def test_the_live_lane_holds_every_module_that_runs_live_shapes_or_a_real_fleet():
    """The live shapes' and the real fleets' modules bind the well-known ports and the router's metrics
    port (29000 on every address): they are all in the live lane, and nothing else is (tests/conftest.py)."""
    from tests.conftest import LIVE_LANE, lane_of

    live = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
            if re.search(r"^from (tests\.live\.\w+|real_fleet) import", p.read_text(), re.M)}
    assert "tests/live/test_fleet.py" in live, live
    assert {m for m in live if lane_of(m + "::t", {"slow", "vllm"}) != "live"} == set()
    assert not [m for m in LIVE_LANE if not any(x.startswith(m) for x in live)], "a lane entry with no live module"
    assert lane_of("tests/deploy/test_compose_live.py::test_pd_cluster_on_one_node_comes_up", {"slow", "docker"}) == "docker"


def test_the_docker_lane_is_the_engines_tests_and_what_binds_a_plans_pool_ports():
    """Every test on the Docker engine is in its lane; so is the one test elsewhere that binds the plan's
    PD pool ports (as the Compose test's services do), still there under that name. vLLM's parsers,
    the KV components, the scanners and the real servers of tests/verify are the tools lane."""
    from tests.conftest import DOCKER_LANE, lane_of

    assert lane_of("tests/images/test_publish.py::test_the_matrix_job_gives_every_target", {"slow", "docker"}) == "docker"
    assert lane_of("tests/vllm_contract/test_real_parser.py::test_the_checked_in_grammar_is_what_vllm_gives",
                   {"serial"}) == "tools"
    assert lane_of("tests/security/test_checkov.py::test_dockerfile_passes", {"slow", "serial"}) == "tools"
    assert lane_of("tests/verify/test_real_vllm.py::t", {"slow", "vllm"}) == "tools"
    for nodeid in DOCKER_LANE:
        path, name = nodeid.split("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), f"{nodeid} is gone: update DOCKER_LANE"
        assert lane_of(nodeid, {"serial"}) == lane_of(nodeid + "[param]", {"serial"}) == "docker"


@pytest.mark.serial
def test_a_shared_resource_test_runs_in_a_lane(request):
    """Under xdist (scripts/test.sh: --dist loadgroup) a test marked docker/vllm/serial/slow carries
    its lane's group in its nodeid, so one worker runs the lane in turn (tests/conftest.py). It
    failed with pytest 9 (xdist 3.8's group suffix ignored) and without the hook's tryfirst."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not under pytest-xdist: no groups")
    assert request.node.nodeid.endswith("@tools"), request.node.nodeid


@pytest.mark.slow
def test_the_demo_ends_with_what_it_ran_and_three_next_things_that_work(tmp_path):
    """Issue 40 (a newcomer's path): the demo's last step prints one block of what it ran and the
    next three things to try, and each of those commands works as printed."""
    import shlex

    demo = [line for line in (ROOT / "scripts" / "demo.sh").read_text().splitlines() if line.strip()]
    assert demo[-1] == 'scripts/demo-summary.sh "$target" "$image" "$engine"'
    out = subprocess.run(["bash", "scripts/demo-summary.sh", "h200", "kimi.local/kimi:h200", "ran"], cwd=ROOT,
                         capture_output=True, text=True, check=True, env={**os.environ, "KIMI_VENV": ".venv"}).stdout
    ran, _, nxt = out.partition("== next, three things to try:\n")
    assert ran.startswith("== what ran:\n") and "build.py build h200 --smoke" in ran
    assert "docker run --rm --network none kimi.local/kimi:h200 print" in ran and "(KIMI_HARDWARE=cpu): ran" in ran
    commands = re.findall(r"^   \d\. (.*)$", nxt, re.M)
    assert len(commands) == 3 and len(ran.splitlines()) + len(nxt.splitlines()) <= 20
    base = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_")}
    for command in commands:
        words = shlex.split(command)
        env = dict(w.split("=", 1) for w in words if re.fullmatch(r"KIMI_\w+=\S+", w))
        argv = [w for w in words if not re.fullmatch(r"KIMI_\w+=\S+", w)]
        assert argv[0] == ".venv/bin/kimi-serve", command
        args = [str(tmp_path / a) if a == "k8s/" else a for a in argv[1:]]
        options = [a for a in args[1:] if a.startswith("--")]
        if args[0] == "verify":  # it needs a server: the options as printed are its own
            args = ["verify", "--help"]
        proc = subprocess.run([sys.executable, "-m", "entrypoint", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env={**base, **env, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
        assert args[0] != "verify" or all(o in proc.stdout for o in options), proc.stdout
    assert any((tmp_path / "k8s").iterdir())
