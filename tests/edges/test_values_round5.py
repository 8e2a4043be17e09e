"""Issue 40's value classes (repros s5-01, s5-02, s5-20, and the rest of each class): every address
a setting carries is checked as a host, and a `user:password@` typed into any setting never comes
back in a message; the weight cache's socket is the plan's alone; the container that reads the
checkpoint checks its cache; choices and lower-cased values are ASCII (KELVIN SIGN is no 'k')."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

H200 = {"KIMI_HARDWARE": "h200"}
PW = "R5PASSWORD"


def run(args, **env):
    full = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **H200, **env}
    return subprocess.run([sys.executable, "-m", "entrypoint", *args], env=full, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("addrs, words", [
    ("a:9000,b", ["carries a port"]),
    ("a,A.", ["lists one host twice", "entry 1 (a) and entry 2 (A.)"]),
    ("--evil,b", ["is not a host name"]),
    (f"u:{PW}@h1,h2", ["carries user information", "'****@h1'"]),
    (f"{PW}@h1,h2", ["carries user information"]),
])
@pytest.mark.parametrize("fmt", ["shell", "compose"])
def test_replica_addresses_are_hosts(addrs, words, fmt):
    done = run(["plan", "--format", fmt], KIMI_REPLICAS="2", KIMI_REPLICA_ADDRS=addrs)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith("kimi-serve: error: KIMI_REPLICA_ADDRS") and done.stderr.count("\n") == 1
    for word in words:
        assert word in done.stderr, done.stderr
    assert PW not in done.stderr


@pytest.mark.parametrize("setting, value", [
    ("KIMI_NODE_ADDR", f"u:{PW}@x"), ("KIMI_HEAD_ADDR", f"u:{PW}@x"), ("KIMI_CACHE_DIR", f"rel:{PW}@x"),
    ("KIMI_NAME", f"u:{PW}@x"), ("KIMI_ROUTER_HOST", f"admin:{PW}@10.0.0.1"),
])
def test_a_password_typed_into_any_setting_is_never_echoed(setting, value):
    done = run(["plan"], **{setting: value, "KIMI_NODES": "2", "KIMI_STRATEGY": "multi_node_tp", "KIMI_IFACE": "eth0"})
    assert done.returncode == 2 and setting in done.stderr and "Traceback" not in done.stderr
    assert PW not in done.stderr and "****@" in done.stderr


@pytest.mark.parametrize("spelling", ["--model-loader-extra-config", "--model_loader_extra_config",
                                      "--model-loader-extra"])
def test_the_weight_caches_socket_is_not_replaced_by_the_users_loader_config(spelling):
    done = run(["plan", "--format", "json"], KIMI_PRELOAD="1", KIMI_VLLM_VERSION="0.32.0",
               KIMI_EXTRA_ARGS=f"{spelling} '{{\"socket_dir\":\"/tmp/elsewhere\"}}'")
    assert done.returncode == 2 and "KIMI_PRELOAD=1" in done.stderr and "load every weight from disk" in done.stderr
    # without KIMI_PRELOAD the option is the user's to give
    ok = run(["plan", "--format", "json"], KIMI_EXTRA_ARGS=f"{spelling} '{{\"enable_multithread_load\":true}}'")
    assert ok.returncode == 0, ok.stderr


def test_the_weight_cache_container_checks_the_cache_it_reads(tmp_path):
    (tmp_path / "not-a-dir").write_text("")
    done = run(["doctor", "--format", "json"], KIMI_ROLE="preload", KIMI_PRELOAD="1", KIMI_VLLM_VERSION="0.32.0",
               KIMI_CACHE_DIR=str(tmp_path / "not-a-dir"))
    cache = next(c for c in json.loads(done.stdout)["checks"] if c["check"] == "cache")
    assert cache["status"] == "error" and "is not a directory" in cache["message"]
    router = run(["doctor", "--format", "json"], KIMI_ROLE="router", KIMI_REPLICAS="2", KIMI_REPLICA_ADDRS="a,b",
                 KIMI_CACHE_DIR=str(tmp_path / "not-a-dir"))
    cache = next(c for c in json.loads(router.stdout)["checks"] if c["check"] == "cache")
    assert cache["status"] == "skipped"  # the router reads no weights


@pytest.mark.parametrize("setting, value", [
    ("KIMI_AUTOSCALING", "\u212aeda"),            # KELVIN SIGN + "eda": 'keda' after case folding
    ("KIMI_ROUTER", "vllm-router\u0130"[:-1] + "\u212a"),
    ("KIMI_LOAD_FORMAT", "\u212aauto"),
    ("KIMI_RECIPE", "\u212aimi-k3"),
])
def test_choices_and_folded_values_are_ascii(setting, value):
    done = run(["plan"], **{setting: value})
    assert done.returncode == 2 and setting in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("port", ["5557", "5560", "5564"])
def test_the_kv_event_publishers_ports_are_counted_among_the_engines(port):
    """kv_aware: each engine publishes its KV events on 5557 + its local DP rank (8 ranks of DEP on one
    H200 node: 5557-5564), so an API port among them is refused, as any other collision."""
    env = {"KIMI_REPLICA_ADDRS": "a,b", "KIMI_ROUTER_POLICY": "kv_aware", "KIMI_STRATEGY": "single_node_dep"}
    done = run(["plan"], KIMI_PORT=port, **env)
    assert done.returncode == 2 and f"would listen twice on port {port}" in done.stderr
    assert run(["plan"], KIMI_PORT="5565", **env).returncode == 0


DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


@pytest.mark.parametrize("image, ok", [
    ("ghcr.io/kimi-serve/kimi:0.34.0-h200", True), ("kimi", True), ("localhost:5000/kimi:h200@" + DIGEST_A, True),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/kimi:b200", True), ("registry.example/team/kimi@" + DIGEST_A, True),
    ("registry.example/kimi:v3 --privileged", False),       # a blank: two words
    (f"r.example/kimi@{DIGEST_A}@{DIGEST_B}", False),        # two digests
    ("r.example/kimi:a:b", False),                           # two tags
    ("Kimi:UP", False),                                      # a repository name is lower case
    ("r.example/kimi:" + "t" * 129, False),                  # a tag is at most 128 characters
])
def test_image_references_follow_the_oci_grammar(image, ok):
    done = run(["plan", "--format", "k8s"], KIMI_IMAGE=image)
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert "KIMI_IMAGE=" in done.stderr and "image reference" in done.stderr and "Traceback" not in done.stderr
        assert "****" not in done.stderr  # a digest is no password (mask_value)


def test_one_mask_of_user_information_in_messages():
    """Review (issue 40): the address checks quote an entry through core/vllm/mask.py's mask_value, the
    one mask of user information in messages, instead of a masking of their own."""
    import inspect

    from entrypoint.core.compose import placement
    from entrypoint.core.vllm.mask import mask_value

    assert mask_value(f"{PW}@h1", host=True) == "****@h1" and mask_value(f"u:{PW}@h1") == "****@h1"
    assert mask_value("ghcr.io/kimi-serve/kimi:h200@sha256:" + "a" * 64).endswith("@sha256:" + "a" * 64)
    source = inspect.getsource(placement)
    assert not hasattr(placement, "shown") and "rsplit(\"@\"" not in source and "MASK" not in source
