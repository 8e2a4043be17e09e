"""Every Kimi plan for a release judged by that release's own parser, where its wheel cannot be
installed by CI (vllm 0.34.0: tests/vllm_contract/verdicts.py): the verdicts vLLM gave, recorded in
tests/data/vllm-<release>/sweep-verdicts.json, cover every `vllm serve` argv the sweep makes today,
and every VLLM_* variable those plans set is one the release knows (but K3's ROCm-build switch) (its grammar, read from the same
wheel). A plan change that makes an argv the release never judged fails here until it is recorded
again (the command is in the file's provenance)."""

from __future__ import annotations

import json

import pytest

from entrypoint.core.vllm.vllm_cli import load_spec

from tests.vllm_contract.test_sweep import UNKNOWN_TO_VLLM
from tests.vllm_contract.verdicts import DATA, digest, sweep_argvs, sweep_env_names

RECORDED = sorted(DATA.glob("vllm-*/sweep-verdicts.json"))


def test_the_release_ci_cannot_install_has_its_verdicts():
    assert [p.parent.name for p in RECORDED] == ["vllm-0.34.0"]


@pytest.mark.slow
@pytest.mark.parametrize("path", RECORDED, ids=[p.parent.name for p in RECORDED])
def test_every_argv_of_the_sweep_was_accepted_by_the_release_itself(path):
    data = json.loads(path.read_text())
    version, accepted = data["vllm_version"], set(data["accepted"])
    assert data["refused"] == [] and len(accepted) > 1000
    argvs = sweep_argvs(version)
    never = [(cid, " ".join(argv)) for argv, cid in argvs.items() if digest(argv) not in accepted]
    assert not never, (f"{len(never)} argv(s) vLLM {version} never judged (record again: "
                       f"{data['provenance']['how'].split(':')[0]}), e.g. {never[:2]}")
    assert any("kimi-k3.1-pro:" in cid for cid in argvs.values())  # the recipe that needs this release


@pytest.mark.slow
@pytest.mark.parametrize("path", RECORDED, ids=[p.parent.name for p in RECORDED])
def test_no_plan_sets_a_variable_the_release_does_not_know(path):
    version = json.loads(path.read_text())["vllm_version"]
    known = set(load_spec(version).env)
    unknown = {name: cid for name, cid in sweep_env_names(version).items() if name not in known}
    assert set(unknown) <= UNKNOWN_TO_VLLM, unknown  # K3's AMD switch, read by ROCm builds only (docs/composition.md)
    assert "VLLM_USE_V2_MODEL_RUNNER" not in known  # removed in 0.34.0: the K3 plans leave it out
