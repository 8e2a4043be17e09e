"""Shared fixtures for tests that need a real Docker engine (images, runtime, compose).

Fixtures (all session-scoped, so the expensive ones run once per pytest session):

- ``docker_client``: a ``docker.DockerClient`` for a reachable engine. If none answers and
  ``dockerd`` is installed and we are root, it starts one with ``scripts/docker-engine.sh``
  (reusing a running one) and stops it at the end of the session. Without an engine
  the test is skipped locally, but FAILS when ``CI=true`` (CI must never skip these silently).
- ``standin_images``: ``{"amd64": IMAGE, "arm64": IMAGE}`` stand-in vLLM base images (Debian
  bookworm + python3 + the stand-in ``vllm``/``vllm-router`` of ``images/standin/``), built by
  ``build.py standins`` logic and cached in the engine by a content hash (a rerun is instant).
  The stand-in ``vllm`` records its argv/env as JSON to ``$KIMI_STANDIN_DIR`` (default
  ``/tmp/kimi-standin``) and prints it as one stdout line ``KIMI-STANDIN-RECORD {...}``;
  answers ``GET /health`` on ``--port`` (default 8000); on SIGTERM prints
  ``KIMI-STANDIN-SIGTERM`` and exits 0. Use ``read_standin_record(logs)`` to parse the record.
- ``standin_overrides``: the ``--base-override KIND=IMAGE`` arguments (a list) that point every
  base kind of images/targets.yaml at the stand-ins.
- ``built_images``: every target of images/targets.yaml built once with the real ``build.py``
  from the stand-ins and smoke-tested (``build --smoke``); ``{target: {"image_id", "tags",
  ...}}``. Tags are ``TEST_REGISTRY/kimi:<target>`` etc. (TEST_REGISTRY below).
  ``KIMI_TEST_TARGETS=h200,b200`` builds only those (a local run of the tests that need them).
- ``local_registry``: an open registry (docker-registry package) on ``127.0.0.1:<free port>``
  started with ``scripts/registry.sh`` and stopped at the end; value ``"127.0.0.1:PORT"``.

Helpers: ``read_standin_record(text)``, ``wait_standin_record(container)``, ``run_build_py(*args)``, and ``NO_GPU_ENV``: settings to
add to ``docker run`` of the default launch on this GPU-less machine (preflight warns instead of
stopping the start).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Tag namespace of the images the tests build; KIMI_TEST_REGISTRY keeps parallel checkouts apart.
TEST_REGISTRY = os.environ.get("KIMI_TEST_REGISTRY", "kimi-test.local/kimi")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# A bound on a hang of `docker-compose config`, not a speed: docker-compose v1 (Python) needs about a
# CPU-second, and took over 60 s of wall time on the busy 2-core CI machine (ci11, issue 51).
COMPOSE_CONFIG_BOUND_S = 300
RECORD_PREFIX = "KIMI-STANDIN-RECORD "
NO_GPU_ENV = {"KIMI_PREFLIGHT": "warn"}

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# A test that shares something (the Docker engine, a registry, images, build contexts, a tool's venv,
# a real vLLM server's ports) carries one of these markers; under pytest-xdist it runs in a lane (an
# xdist group: one worker runs the lane's tests one after another), and the rest spread over the
# other workers. Three lanes, which share no port, engine, image, registry or venv install, so they
# run beside one another (scripts/test.sh gives them a worker each and one more for the rest):
SERIAL_MARKERS = ("docker", "vllm", "serial")
# - `live`: the live shapes and every test that runs a real fleet router. They bind the recipes'
#   well-known ports on their own loopback hosts (127.0.1.x: 8000-8002, NIXL's side channel) and the
#   fleet router's metrics port (29000, on every address), which nothing in another lane binds (the
#   Compose test's host-network services bind 127.0.0.1 only, tests/deploy/test_compose_live.py).
LIVE_LANE = ("tests/live/",)
# - `docker`: every test on the Docker engine (its images, the registry, the builds), and the one test
#   outside it that binds the plan's own PD pool ports (8001/8002 on 127.0.0.1) as the Compose test's
#   services do.
DOCKER_LANE = ("tests/vllm_contract/test_router.py::test_the_real_router_runs_a_plans_argv_without_an_api_key",)
# - `tools`: the rest that shares something: vLLM's own parsers and the KV components
#   (tests/vllm_contract: the parser environment and .cache/kv-components, made once by the first of
#   them), the scanners' and the build extra's venvs, mypy, and the real vLLM servers of tests/verify
#   (free ports on 127.0.0.1; the vLLM venv is made once, scripts/vllm-env.sh locks it). Measured
#   (issue 51): with the real servers and the scanners in the Docker engine's lane, that lane was
#   the run's critical path by ten minutes while a core idled.
LANES = ("live", "docker", "tools")


def lane_of(nodeid: str, markers=()) -> str:
    """The xdist group (LANES) of a test that shares a resource, from its nodeid and its markers."""
    if nodeid.startswith(LIVE_LANE):
        return "live"
    if "docker" in markers or nodeid.split("[")[0] in DOCKER_LANE:
        return "docker"
    return "tools"


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group into the nodeid
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (--dist loadgroup, scripts/test.sh), every test that uses a shared
    resource is in one lane (LANES), so one worker runs each lane's tests one after another while
    others run the other lanes; the rest spread over the workers."""
    if not config.pluginmanager.hasplugin("xdist"):  # -p no:xdist: one process, no groups (nor their marker)
        return
    for item in items:
        markers = {name for name in SERIAL_MARKERS if item.get_closest_marker(name)}
        if markers:
            item.add_marker(pytest.mark.xdist_group(lane_of(item.nodeid, markers)))


# ---------------------------------------------------------------- CPU per test (issue 51)
# CPU_PER_TEST=FILE: every test's CPU seconds (its worker's, and its waited-for children's: helm, the
# scanners, kimi-serve runs), one JSON line per test and phase appended to FILE. On two shared cores a
# test's wall time says more about what ran beside it than about its cost; this says what it costs.
_CPU_FILE = os.environ.get("CPU_PER_TEST")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _CPU_FILE:
        yield
        return
    import json
    import resource
    import time

    def now():
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, time.monotonic()

    before = now()
    yield
    after = now()
    with open(_CPU_FILE, "a") as out:
        out.write(json.dumps({"test": item.nodeid, "self_s": round(after[0] - before[0], 2),
                              "children_s": round(after[1] - before[1], 2),
                              "wall_s": round(after[2] - before[2], 2)}) + "\n")


# ---------------------------------------------------------------- nothing outside tmp (issue 40)
# The images' cache mount, KIMI_CACHE_DIR's default. A test on the host never creates it (nor
# anything under it): a test that reaches the exec edge or a download gives KIMI_CACHE_DIR a tmp_path.
HOST_CACHE = "/cache"
_MADE_UNDER_CACHE: list = []


def _record_host_cache_mkdir(event: str, args: tuple) -> None:
    """An audit hook (in this process: every os.mkdir, so os.makedirs and Path.mkdir too)."""
    if event != "os.mkdir" or not args or isinstance(args[0], int) or (len(args) > 2 and args[2] not in (None, -1)):
        return
    path = os.fsdecode(args[0])
    path = os.path.normpath(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))
    if path == HOST_CACHE or path.startswith(HOST_CACHE + "/"):
        _MADE_UNDER_CACHE.append(path)


sys.addaudithook(_record_host_cache_mkdir)


@pytest.fixture(autouse=True)
def _creates_nothing_under_the_host_cache():
    """Fails the test that made a directory under /cache in this process (whether /cache was there)."""
    start = len(_MADE_UNDER_CACHE)
    yield
    made = _MADE_UNDER_CACHE[start:]
    del _MADE_UNDER_CACHE[start:]
    if made:
        pytest.fail(f"the test created {made[0]} on the host ({len(made)} directories under {HOST_CACHE}): give it "
                    "KIMI_CACHE_DIR in tmp_path (plan time creates nothing; the exec edge and a download do)",
                    pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _host_cache_absent_stays_absent():
    """A run (its subprocesses too) that began without /cache ends without it."""
    existed = os.path.lexists(HOST_CACHE)
    yield
    if not existed and os.path.lexists(HOST_CACHE):
        pytest.fail(f"{HOST_CACHE} did not exist when the tests began and does now: a test (or a process it ran) "
                    "created it on the host; give it KIMI_CACHE_DIR in tmp_path", pytrace=False)


def _no_engine(reason: str):
    if IN_CI:
        pytest.fail(f"CI=true but no Docker engine: {reason}", pytrace=False)
    pytest.skip(f"no Docker engine: {reason}")


def read_standin_record(text: str):
    """The stand-in's JSON record from container logs (None if it did not start)."""
    for line in text.splitlines():
        if line.startswith(RECORD_PREFIX):
            return json.loads(line[len(RECORD_PREFIX):])
    return None


def wait_standin_record(container, timeout=60):
    """Wait until a container's stand-in vLLM has printed its record (None if it exited first)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()
        record = read_standin_record(container.logs().decode())
        if record or container.status == "exited":
            return record
        time.sleep(0.5)
    return None


def run_build_py(*args, check=True, timeout=3600):
    """Run the real build.py; returns CompletedProcess (stdout/stderr as text)."""
    proc = subprocess.run([sys.executable, str(ROOT / "build.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"build.py {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}\n{proc.stdout[-2000:]}")
    return proc


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker
    except ImportError:
        _no_engine("the docker SDK is not installed (pip install -e '.[test]')")
    started = False
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        if shutil.which("dockerd") and os.geteuid() == 0:
            subprocess.run([str(ROOT / "scripts" / "docker-engine.sh"), "start"], check=True,
                           env=dict(os.environ, KS_DOCKERD_PIDFILE="/tmp/kimi-dockerd-pytest.pid"))
            started = True
            client = docker.from_env(timeout=600)
            client.ping()
        else:
            _no_engine(str(exc))
    yield client
    client.close()
    if started:
        subprocess.run([str(ROOT / "scripts" / "docker-engine.sh"), "stop"],
                       env=dict(os.environ, KS_DOCKERD_PIDFILE="/tmp/kimi-dockerd-pytest.pid"))


@pytest.fixture(scope="session")
def standin_images(docker_client):
    from buildsys import standin, targets

    only = [t for t in os.environ.get("KIMI_TEST_TARGETS", "").split(",") if t]
    arches = sorted({t.arch for name, t in targets.load().targets.items() if not only or name in only})
    if not shutil.which("debootstrap") and not all(standin.image_exists(standin.image_name(a)) for a in arches):
        _no_engine("debootstrap is not installed (apt-get install debootstrap) and stand-ins are not cached")
    return {arch: standin.ensure(arch) for arch in arches}


@pytest.fixture(scope="session")
def standin_overrides(standin_images):
    from buildsys import standin, targets

    pattern = standin.image_name("{arch}")
    args = []
    for kind in targets.load().bases:
        args += ["--base-override", f"{kind}={pattern}"]
    return args


@pytest.fixture(scope="session")
def built_images(standin_overrides, tmp_path_factory):
    out = tmp_path_factory.mktemp("build") / "results.json"
    only = [t for t in os.environ.get("KIMI_TEST_TARGETS", "").split(",") if t]  # local runs: a subset
    proc = run_build_py("build", *only, "--smoke", "--registry", TEST_REGISTRY, *standin_overrides, "--json-out",
                        str(out), check=False)
    sys.stderr.write(proc.stderr[-4000:])
    results = {r["target"]: r for r in json.loads(out.read_text())} if out.exists() else {}
    results["_stderr"] = proc.stderr
    results["_returncode"] = proc.returncode
    return results


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def local_registry(docker_client, tmp_path_factory):
    if not shutil.which("docker-registry"):
        _no_engine("docker-registry is not installed (apt-get install docker-registry)")
    port = _free_port()
    env = dict(os.environ, KIMI_REGISTRY_DIR=str(tmp_path_factory.mktemp("registry")))
    subprocess.run([str(ROOT / "scripts" / "registry.sh"), "start", str(port)], check=True, env=env)
    yield f"127.0.0.1:{port}"
    subprocess.run([str(ROOT / "scripts" / "registry.sh"), "stop", str(port)], env=env)


def base_hosts(data) -> set:
    """The registries the bases of images/targets.yaml live on (each release's), for tests that
    move them to a local registry."""
    return {base.name.split("/", 1)[0] for version in data.releases
            for base in data.for_release(version).bases.values()}


# ---------------------------------------------------------------- real vLLM (tests/verify, tests/live)

def vllm_timings(config) -> dict:
    """What the real-vLLM fixtures measured, kept on the run's config (tests/verify/conftest.py prints them)."""
    if not hasattr(config, "kimi_vllm_timings"):
        config.kimi_vllm_timings = {}
    return config.kimi_vllm_timings


def _vllm_unavailable(why: str):
    """Real vLLM fixtures skip when the venv cannot be made (no PyPI), but FAIL when CI=true."""
    if IN_CI:
        pytest.fail(f"real vLLM unavailable in CI: {why}")
    pytest.skip(f"real vLLM unavailable: {why}")


@pytest.fixture(scope="session")
def vllm_venv(pytestconfig) -> Path:
    """vLLM's CPU build with kimi-serve and NIXL beside it (made or reused by scripts/vllm-env.sh):
    $KIMI_VLLM_VENV, else .venv-vllm in the repository root; reused across sessions."""
    import time

    venv = Path(os.environ.get("KIMI_VLLM_VENV") or ROOT / ".venv-vllm")
    start = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "scripts" / "vllm-env.sh"), str(venv)], capture_output=True,
                          text=True, timeout=1800)
    vllm_timings(pytestconfig)["vllm-env.sh (install or reuse)"] = time.monotonic() - start
    if done.returncode != 0:
        _vllm_unavailable(f"scripts/vllm-env.sh failed:\n{done.stderr[-3000:]}")
    return venv


@pytest.fixture(scope="session")
def host_caches(tmp_path_factory) -> Dict[str, str]:
    """The host's vLLM and inductor caches (VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR: kimi-serve keeps
    each when it is set, as an operator sets them on a node) for every real vLLM server a worker starts,
    as the env to add. kimi-serve's own keys them per release, model and layout under KIMI_CACHE_DIR
    (recipes/serving.yaml compile_caches, tests/runtime/test_compile_caches.py), so every start of a run
    began cold. Measured in a busy CI run (ci11, issue 51): vLLM's model-info probe on a cold start
    (`python -m vllm.model_executor.models.registry`, a subprocess importing torch and vLLM, ~9
    CPU-seconds, kept under VLLM_CACHE_ROOT/modelinfos) ran ~21 times, 190 CPU-seconds; the C++
    compiler, for the vocabulary mask vLLM compiles with inductor under tensor parallelism, 72."""
    root = tmp_path_factory.mktemp("host-caches")
    return {"VLLM_CACHE_ROOT": str(root / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor")}


@pytest.fixture(scope="session")
def tiny_models(vllm_venv, tmp_path_factory, pytestconfig) -> Path:
    """The tiny models of tests/verify/tiny_models.py, built in seconds: kimi (DeepSeek-V3, Kimi-K2's
    architecture), scripted and random (Llama)."""
    import time

    out = tmp_path_factory.mktemp("tiny-models")
    start = time.monotonic()
    subprocess.run([str(vllm_venv / "bin" / "python"), str(ROOT / "tests" / "verify" / "tiny_models.py"), str(out)],
                   check=True, capture_output=True, timeout=600)
    vllm_timings(pytestconfig)["tiny models"] = time.monotonic() - start
    return out
