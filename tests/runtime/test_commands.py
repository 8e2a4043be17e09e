"""`kimi-serve doctor`, `kimi-serve healthcheck` and the start-up preflight, as a user runs them."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from entrypoint.cli import doctor, healthcheck
from entrypoint.node.detect import Probe

from .conftest import TOOLS

NO_NVML = Probe("nvml", (), "disabled in tests")


@pytest.fixture(autouse=True)
def no_nvml(monkeypatch):
    monkeypatch.setattr("entrypoint.node.detect.probe_nvml", lambda environ: NO_NVML)


def _clean_env(monkeypatch, **env):
    for key in list(os.environ):
        if key.startswith(("KIMI_", "LWS_", "SLURM_", "CUDA_", "HIP_", "ROCR_", "HF_")):
            monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def run_doctor(monkeypatch, fake_tools, hw_file, *args, **env):
    if hw_file:
        fake_tools.add("nvidia-smi", hw_file)
    _clean_env(monkeypatch, PATH=str(fake_tools.bindir), **env)
    return CliRunner().invoke(doctor.command, list(args))


def test_doctor_json_on_a_bare_node_detects_and_checks(monkeypatch, fake_tools, tmp_path):
    result = run_doctor(monkeypatch, fake_tools, TOOLS / "nvidia-smi" / "h200.csv", "--format", "json",
                        KIMI_CACHE_DIR=str(tmp_path), KIMI_HARDWARE="auto")
    report = json.loads(result.output)
    assert report["detection"]["hardware"] == "h200" and report["detection"]["count"] == 8
    assert report["launch"]["hardware"] == "h200"  # KIMI_HARDWARE=auto: the detected one
    names = [c["check"] for c in report["checks"]]
    assert names == ["hardware", "gpu_count", "vram", "host_limits", "shm", "platform", "firmware", "cache", "model_source",
                     "kv_components", "load_time", "compile_cache"]
    load = next(c for c in report["checks"] if c["check"] == "load_time")
    assert "595 GB checkpoint" in load["message"] and "Start-up budget 3600 s" in load["message"]
    assert result.exit_code == (0 if report["ok"] else 1)


def test_doctor_table_and_exit_1_with_one_gpu(monkeypatch, fake_tools, tmp_path):
    one = tmp_path / "one.csv"
    one.write_text((TOOLS / "nvidia-smi" / "h200.csv").read_text().splitlines()[0] + "\n")
    result = run_doctor(monkeypatch, fake_tools, one, KIMI_HARDWARE="h200", KIMI_CACHE_DIR=str(tmp_path))
    assert result.exit_code == 1
    assert "detected: h200: 1 GPU(s) via nvidia-smi" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("gpu_count"))
    assert "error" in row and "needs 8 GPU(s)" in row


def test_doctor_reports_a_launch_that_cannot_be_built(monkeypatch, fake_tools):
    result = run_doctor(monkeypatch, fake_tools, None, "--format", "json", KIMI_HARDWARE="auto")
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["checks"][0]["check"] == "launch"
    message = report["checks"][0]["message"]
    assert "no supported GPU was detected" in message and "set KIMI_HARDWARE to its target, one of: " in message
    assert {p["source"]: p["saw"] for p in report["detection"]["probes"]}["nvidia-smi"] == "not installed"


def _print(monkeypatch, **env):
    from entrypoint.cli import print_launch

    _clean_env(monkeypatch, **env)
    return CliRunner().invoke(print_launch.command, [])


@pytest.mark.parametrize("hw_file", [None, TOOLS / "nvidia-smi" / "h200.csv"])
def test_doctor_never_tells_the_user_to_run_doctor(monkeypatch, fake_tools, tmp_path, hw_file):
    """Issue 40: doctor's messages say what to set; `run kimi-serve doctor` is for the other commands."""
    for env in ({"KIMI_HARDWARE": "auto"}, {"KIMI_HARDWARE": "h200"}, {}):
        result = run_doctor(monkeypatch, fake_tools, hw_file, "--format", "json", KIMI_CACHE_DIR=str(tmp_path), **env)
        report = json.loads(result.output)
        assert report["checks"] and result.exit_code in (0, 1), result.output
        for check in report["checks"]:
            assert "kimi-serve doctor" not in check["message"], (env, check)
    if hw_file is None:  # the other commands point at doctor, which shows what each probe saw
        printed = _print(monkeypatch, KIMI_HARDWARE="auto", PATH=str(fake_tools.bindir))
        assert printed.exit_code == 2 and "`kimi-serve doctor` shows what each probe saw" in printed.output


def test_doctor_and_print_agree_on_an_unset_hardware(monkeypatch, fake_tools, tmp_path):
    """Issue 40: with neither KIMI_HARDWARE nor an image target, print refuses and doctor's launch
    is the same refusal (naming what detection found), not a launch print would not make."""
    printed = _print(monkeypatch, PATH=str(fake_tools.bindir), KIMI_CACHE_DIR=str(tmp_path))
    assert printed.exit_code == 2 and "KIMI_HARDWARE is not set" in printed.output
    result = run_doctor(monkeypatch, fake_tools, TOOLS / "nvidia-smi" / "h200.csv", "--format", "json",
                        KIMI_CACHE_DIR=str(tmp_path))
    report = json.loads(result.output)
    assert result.exit_code == 1 and report["launch"] is None and report["detection"]["hardware"] == "h200"
    message = report["checks"][0]["message"]
    assert message.startswith("KIMI_HARDWARE is not set") and "This node has h200: KIMI_HARDWARE=h200" in message
    # an image's own target: both use it
    image = {"KIMI_IMAGE_HARDWARE": "h200", "KIMI_CACHE_DIR": str(tmp_path)}
    printed = _print(monkeypatch, PATH=str(fake_tools.bindir), **image)
    assert printed.exit_code == 0 and "tensor-parallel-size 8" in printed.output.replace("=", " ")
    result = run_doctor(monkeypatch, fake_tools, TOOLS / "nvidia-smi" / "h200.csv", "--format", "json", **image)
    assert json.loads(result.output)["launch"]["hardware"] == "h200"


def test_doctor_passes_on_a_good_node(monkeypatch, fake_tools, tmp_path):
    from entrypoint.node.facts import CacheFacts, NodeFacts

    def good(launch, environ):
        from entrypoint.node.detect import detect_node

        det = detect_node(environ)
        return NodeFacts(det, det.gpus, "amd64", 64 * 2**30, frozenset({"/dev/nvidiactl"}),
                         cache=CacheFacts("/cache", True, "/cache", "xfs", 10**13, None))

    monkeypatch.setattr("entrypoint.node.preflight.node_facts", good)
    result = run_doctor(monkeypatch, fake_tools, TOOLS / "nvidia-smi" / "h200.csv", KIMI_HARDWARE="h200")
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- healthcheck


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def health_server():
    servers = []

    def start(status=200):
        handler = type("H", (_Health,), {"status": status})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_health(monkeypatch, **env):
    _clean_env(monkeypatch, **env)
    return CliRunner().invoke(healthcheck.command, ["--timeout", "2"])


def test_healthy(monkeypatch, health_server):
    port = health_server(200)
    result = run_health(monkeypatch, KIMI_HARDWARE="h200", KIMI_PORT=str(port))
    assert result.exit_code == 0 and result.output == f"healthy: single http://127.0.0.1:{port}/health: HTTP 200\n"


def test_unhealthy_status(monkeypatch, health_server):
    port = health_server(503)
    result = run_health(monkeypatch, KIMI_HARDWARE="h200", KIMI_PORT=str(port))
    assert result.exit_code == 1 and "HTTP 503" in result.output and len(result.output.splitlines()) == 1


def test_nothing_listening(monkeypatch):
    result = run_health(monkeypatch, KIMI_HARDWARE="h200", KIMI_PORT=str(_free_port()))
    assert result.exit_code == 1 and result.output.startswith("unhealthy:")


def test_router_role_uses_the_router_port(monkeypatch, health_server):
    port = health_server(200)
    result = run_health(monkeypatch, KIMI_HARDWARE="h200", KIMI_STRATEGY="pd_cluster", KIMI_ROLE="router",
                        KIMI_ROUTER_PORT=str(port), KIMI_PREFILL_ADDRS="127.0.0.1", KIMI_DECODE_ADDRS="127.0.0.2",
                        KIMI_IFACE="lo")
    assert result.exit_code == 0 and f":{port}/health" in result.output and "router" in result.output


def test_ready_with_the_rendered_port_composes_no_launch(monkeypatch, health_server):
    """Issue 40 review: the readiness probe runs every 5 s; the rendering writes the server's port
    into it (`healthcheck --ready --port N`), so it asks that port without composing the launch."""
    from entrypoint.app import healthcheck as app

    port = health_server(200)
    monkeypatch.setattr(app, "load_launch", lambda *a, **k: pytest.fail("composed the launch"))
    _clean_env(monkeypatch)  # not even a hardware: a probe needs none
    result = CliRunner().invoke(healthcheck.command, ["--ready", "--timeout", "2", "--port", str(port)])
    assert result.exit_code == 0 and result.output == f"healthy: server http://127.0.0.1:{port}/health: HTTP 200\n"
    _clean_env(monkeypatch, KIMI_ROLE="router", KIMI_ROUTER_HOST="127.0.0.1")
    result = CliRunner().invoke(healthcheck.command, ["--ready", "--port", str(_free_port())])
    assert result.exit_code == 1 and result.output.startswith("unhealthy: router http://127.0.0.1:")
    bad = CliRunner().invoke(healthcheck.command, ["--port", "0"])
    assert bad.exit_code == 2 and "--port" in bad.output


def test_the_rendered_readiness_probe_names_each_servers_port():
    """plan's k8s rendering gives each serving container's readiness probe its own port."""
    from entrypoint.app.deploy import deployment_launch
    from entrypoint.render import k8s, k8s_pod

    env = {"KIMI_HARDWARE": "h200", "KIMI_STRATEGY": "pd_cluster", "KIMI_PORT": "8123", "KIMI_ROUTER_PORT": "8111"}
    launch = deployment_launch(k8s, env)
    ports = set()
    for proc in launch.plan.processes:
        if proc.serves_http:
            ready = k8s_pod.pod_spec(launch, proc, "c")["containers"][0]["readinessProbe"]["exec"]["command"]
            assert ready[:3] == k8s_pod.READY and ready[-2:] == ["--port", str(proc.port)]
            ports.add(proc.port)
    assert 8111 in ports and len(ports) >= 2


def test_bad_settings_are_unhealthy_not_exit_2(monkeypatch):
    result = run_health(monkeypatch, KIMI_HARDWARE="h20")
    assert result.exit_code == 1 and result.output.startswith("unhealthy: cannot tell")


# ---------------------------------------------------------------- the start itself


def _serve(env):
    env = {**env, **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    return subprocess.run([sys.executable, "-m", "entrypoint"], env=env, capture_output=True, text=True, timeout=60)


def test_start_fails_preflight_before_loading(fake_tools, tmp_path):
    one = tmp_path / "one.csv"
    one.write_text((TOOLS / "nvidia-smi" / "h200.csv").read_text().splitlines()[0] + "\n")
    fake_tools.add("nvidia-smi", one)
    fake_tools.add("vllm", "should not run", rc=99)
    proc = _serve({**fake_tools.env, "HOME": str(tmp_path), "KIMI_HARDWARE": "auto", "KIMI_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 2
    assert "preflight found" in proc.stderr and "needs 8 GPU(s)" in proc.stderr and "only 1 usable" in proc.stderr
    assert "hardware h200 (KIMI_HARDWARE=auto)" in proc.stderr


def test_start_with_warn_execs_with_the_cache_env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "record.json"
    vllm = bindir / "vllm"
    vllm.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"json.dump({{'argv': sys.argv, 'env': dict(os.environ)}}, open({str(record)!r}, 'w'))\n")
    vllm.chmod(0o755)
    env = {"PATH": str(bindir), "HOME": "/nonexistent", "KIMI_HARDWARE": "h200", "KIMI_PREFLIGHT": "warn",
           "KIMI_CACHE_DIR": str(tmp_path / "cache"), "KIMI_LOG_FORMAT": "json", "HF_TOKEN": "hf_secretvalue9"}
    (tmp_path / "cache").mkdir()
    proc = _serve(env)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(record.read_text())["env"]
    assert seen["HF_HOME"] == f"{tmp_path}/cache/huggingface" and seen["HOME"] == f"{tmp_path}/cache/home"
    assert os.path.isdir(seen["HOME"]) and os.path.isdir(seen["VLLM_CACHE_ROOT"])
    logs = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert {"hardware", "cache", "preflight.gpu_count"} <= {e["event"] for e in logs}
    assert "hf_secretvalue9" not in proc.stderr


def test_a_refused_start_writes_its_line_to_the_termination_log(tmp_path, monkeypatch):
    """Issue 38: Kubernetes shows the termination log in `kubectl get pods` / `describe`; the
    start's one-line refusal goes there too (masked), only into a regular file the runtime made."""
    from entrypoint.cli._context import run_guarded
    from entrypoint.core.base.errors import KimiError

    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_written_0000")
    log = tmp_path / "termination-log"
    log.write_text("")

    def refuse():
        raise KimiError("invalid_value", "KIMI_NODES=0 is below 1 (hf_secret_never_written_0000)")

    with pytest.raises(SystemExit) as info:
        run_guarded(refuse, termination_log=str(log))
    assert info.value.code == 2
    assert log.read_text() == "KIMI_NODES=0 is below 1 (****)\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("kept")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(SystemExit):
        run_guarded(refuse, termination_log=str(link))
    assert elsewhere.read_text() == "kept"  # a link is never followed
    with pytest.raises(SystemExit):
        run_guarded(refuse, termination_log=str(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists()  # no file made where the runtime made none
