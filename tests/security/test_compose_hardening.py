"""Compose files are hardened like the Kubernetes pods where Compose can be (checkov has no
Compose framework, so these are the checks): the image's non-root user, a read-only root
filesystem with exec-able tmpfs scratch, every capability dropped, no new privileges, the token
as a secret file; AMD's two exceptions are the ones docs/security.md lists, and nothing else.
tests/deploy/test_compose_live.py runs a rendered file with all of it on the Docker engine."""

from __future__ import annotations

import re

import pytest
import yaml

from entrypoint.core.data.recipe import load_catalog
from tests.deploy.shapes import COMPOSE, launch_for, render
from tests.security.scanner import ROOT

DOCKERFILE = (ROOT / "images" / "Dockerfile").read_text()
SECRET = "hf_do_not_render_me_123"


def _image_user() -> tuple:
    """(uid, home) of the image: its last USER, and HOME from its ENV."""
    uid = re.findall(r"^USER\s+(\S+)", DOCKERFILE, re.M)[-1]
    if uid.startswith("${"):
        uid = re.search(rf"^ARG {uid[2:-1]}=(\d+)", DOCKERFILE, re.M).group(1)
    home = re.search(r"^ENV HOME=(\S+)", DOCKERFILE, re.M).group(1)
    return uid, home


def test_the_image_runs_as_a_high_numeric_uid_which_the_data_names():
    uid, home = _image_user()
    assert uid.isdigit() and int(uid) >= 10000 and home.startswith("/home/")
    user = load_catalog().serving.image.user  # what the renderers run as
    assert (str(user.uid), user.home) == (uid, home)


@pytest.mark.parametrize("case", sorted(COMPOSE))
def test_every_service_is_hardened(case):
    environ = {**COMPOSE[case], "HF_TOKEN": SECRET}
    text = render("compose", environ)["compose.yaml"]
    assert SECRET not in text
    doc = yaml.safe_load(text)
    uid, home = _image_user()
    amd = launch_for("compose", environ).catalog.hardware[environ["KIMI_HARDWARE"]].brand == "amd"
    for name, svc in doc["services"].items():
        assert svc["user"] == uid, name
        assert svc["read_only"] is True
        assert sorted(svc["tmpfs"]) == sorted(f"{p}:exec,mode=1777" for p in ("/tmp", home))
        assert svc["cap_drop"] == ["ALL"] and "privileged" not in svc
        assert "no-new-privileges:true" in svc["security_opt"]
        token = svc["environment"]["HF_TOKEN_PATH"]
        assert svc["secrets"] == [{"source": "hf_token", "target": token}] and "HF_TOKEN" not in svc["environment"]
        exceptions = {k: svc[k] for k in ("cap_add", "security_opt") if k in svc}
        if amd and "devices" in svc:
            assert exceptions == {"cap_add": ["SYS_PTRACE"], "security_opt": ["seccomp=unconfined",
                                                                              "no-new-privileges:true"]}
            assert svc["group_add"] == ["video"]
        else:
            assert exceptions == {"security_opt": ["no-new-privileges:true"]}, name
    assert doc["secrets"] == {"hf_token": {"file": "./hf_token"}}


def test_the_amd_exceptions_are_documented():
    doc = (ROOT / "docs" / "security.md").read_text().split("## Reasoned skips", 1)[1]
    assert "`cap_add: [SYS_PTRACE]`, `security_opt: [seccomp=unconfined]`" in doc
