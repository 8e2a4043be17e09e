"""images/targets.yaml and the build.py commands that need no engine (fast)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from buildsys import context, targets
from tests.conftest import ROOT, run_build_py

ISSUE_TABLE = {  # the issue's table: target -> (base kind, platform, default hardware, serves)
    "h100": ("cuda", "linux/amd64", "h100", ["h100"]),
    "h200": ("cuda", "linux/amd64", "h200", ["h200"]),
    "b200": ("cuda", "linux/amd64", "b200", ["b200"]),
    "b300": ("cuda", "linux/amd64", "b300", ["b300"]),
    "gb200": ("cuda", "linux/arm64", "gb200", ["gb200"]),
    "gb300": ("cuda", "linux/arm64", "gb300", ["gb300"]),
    "rocm-gfx942": ("rocm", "linux/amd64", "mi300x", ["mi300x", "mi325x"]),
    "cpu": ("cpu", "linux/amd64", "cpu", ["cpu"]),  # issue 36: vLLM's CPU backend, a target like the others
    "rocm-gfx950": ("rocm-nightly", "linux/amd64", "mi355x", ["mi350x", "mi355x"]),
}


def test_data_matches_the_issue_table():
    data = targets.load()
    got = {n: (t.base, t.platform, t.hardware, t.serves) for n, t in data.targets.items()}
    assert got == ISSUE_TABLE
    assert data.bases["cuda"].name.endswith("vllm/vllm-openai")
    assert data.bases["rocm"].name.endswith("vllm/vllm-openai-rocm")
    assert data.bases["rocm-nightly"].tag == "nightly"
    assert data.bases["cpu"].name.endswith("vllm-cpu-release-repo")  # vLLM's CPU image (docs: deployment/docker)


def _write(tmp_path, mutate):
    raw = yaml.safe_load(targets.TARGETS_FILE.read_text())
    mutate(raw)
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.update(colour="blue"), "colour"),
    (lambda r: r["targets"]["h200"].update(gpu="x"), "gpu"),
    (lambda r: r["targets"]["h200"].update(base="tpu"), "tpu"),
    (lambda r: r["targets"]["h200"].update(platform="linux/s390x"), "s390x"),
    (lambda r: r["targets"]["h200"].update(hardware="h100"), "h100"),
    (lambda r: r.update(vllm_version="0.18.0"), "older"),
    (lambda r: r["bases"]["cuda"].update(digest="sha256:nope"), "digest"),
])
def test_bad_data_is_rejected(tmp_path, mutate, needle):
    with pytest.raises(targets.TargetsError, match=needle):
        targets.load(_write(tmp_path, mutate))


def _recipes(tmp_path, mutate):
    """A copy of the recipe data whose hardware.yaml `mutate` changed."""
    copy = tmp_path / "recipes"
    shutil.copytree(targets.RECIPES_DIR, copy, ignore=shutil.ignore_patterns(".validated"))
    raw = yaml.safe_load((copy / "hardware.yaml").read_text())
    mutate(raw["hardware"])
    (copy / "hardware.yaml").write_text(yaml.safe_dump(raw))
    return copy


def test_unknown_hardware_is_rejected(tmp_path):
    targets.load()  # the real recipe data knows every id we serve
    with pytest.raises(targets.TargetsError, match=r"unknown hardware.*tpu9"):
        targets.load(_write(tmp_path, lambda r: r["targets"]["h200"]["serves"].append("tpu9")))


@pytest.mark.parametrize("hw_id, key, value", [("mi325x", "image_target", "rocm-gfx950"), ("gb200", "arch", "amd64")])
def test_image_target_and_arch_must_agree_with_hardware_data(tmp_path, hw_id, key, value):
    with pytest.raises(targets.TargetsError, match=hw_id):
        targets.load(targets.TARGETS_FILE, _recipes(tmp_path, lambda hw: hw[hw_id].update({key: value})))


def test_published_repository_comes_from_the_recipe_data():
    data = targets.load()
    assert (data.registry, data.image) == ("ghcr.io/kimi-serve", "kimi")
    assert "registry" not in yaml.safe_load(targets.TARGETS_FILE.read_text())


def test_matrix_is_one_entry_per_target():
    out = json.loads(run_build_py("matrix").stdout)
    assert [e["target"] for e in out["include"]] == list(ISSUE_TABLE)
    assert {e["target"]: e["platform"] for e in out["include"]} == {k: v[1] for k, v in ISSUE_TABLE.items()}


@pytest.mark.slow
def test_list_shows_every_tag_a_build_creates():
    rows = json.loads(run_build_py("list", "--format", "json", "--registry", "r.example/x").stdout)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    h200 = next(r for r in rows if r["target"] == "h200")
    assert h200["tags"] == [f"r.example/x/kimi:{targets.load().vllm_version}-h200", "r.example/x/kimi:h200",
                            *([f"r.example/x/kimi:{sha}-h200"] if sha else [])]
    table = run_build_py("list", "--registry", "r.example/x").stdout
    assert all(tag.rsplit(":", 1)[1] in table for r in rows for tag in r["tags"])


@pytest.mark.slow
def test_bake_file(tmp_path):
    out = tmp_path / "bake.json"
    run_build_py("bake", "-o", str(out), "--registry", "r.example/x")
    bake = json.loads(out.read_text())
    assert bake["group"]["default"]["targets"] == list(ISSUE_TABLE)
    assert "_common" in bake["target"]
    for name, (_, platform, hw, serves) in ISSUE_TABLE.items():
        t = bake["target"][name]
        assert t["inherits"] == ["_common"] and t["platforms"] == [platform]
        assert t["args"]["KIMI_IMAGE_HARDWARE"] == hw and t["args"]["KIMI_IMAGE_SERVES"] == ",".join(serves)
        assert Path(t["context"], "Dockerfile").exists() and Path(t["context"], "deps").is_dir()
        assert t["labels"]["org.kimi-serve.target"] == name


def test_lock_writes_digests_in_place(tmp_path):
    path = tmp_path / "t.yaml"
    shutil.copy(targets.TARGETS_FILE, path)
    digest = "sha256:" + "ab" * 32
    targets.save_digests({"rocm": digest}, path)
    assert targets.load(path).bases["rocm"].digest == digest
    assert targets.load(path).bases["cuda"].digest is None
    assert "# Image targets" in path.read_text()  # comments kept


def test_context_holds_code_and_platform_wheels():
    packages = targets.load().loader_packages
    ctx = context.prepare("linux/arm64", "3.12", packages)
    assert (ctx / "code" / "entrypoint" / "__init__.py").exists()
    assert (ctx / "code" / "entrypoint" / "recipes_data").is_dir()
    sos = [p.name for p in (ctx / "deps" / "pydantic_core").glob("*.so")]
    assert sos and all("cpython-312-aarch64" in s for s in sos)
    assert context.size(ctx / "deps") + context.size(ctx / "code") < 40e6
    # The weight loaders for vLLM's Python: each pinned package, for this platform, without torch.
    found = {p.name.split("-")[0].lower().replace("_", "-") for p in (ctx / "loaders").glob("*.dist-info")}
    assert found == {req.split("==")[0] for req in packages}
    sos = [p.name for p in (ctx / "loaders" / "instanttensor").glob("*.so")]
    assert sos and all("aarch64" in s for s in sos) and not (ctx / "loaders" / "torch").exists()


def test_images_carry_every_loader_package_the_loader_data_names():
    from entrypoint.core.compose.loading import load_data

    pinned = {req.split("==")[0] for req in targets.load().loader_packages}
    for loader in load_data().loaders.values():
        assert set(loader.packages) <= pinned, loader


def test_the_dockerfile_puts_the_loaders_after_the_bases_own_packages():
    text = (targets.ROOT / "images" / "Dockerfile").read_text()
    final = text.split("FROM ${BASE_IMAGE}\n", 1)[1]
    assert "COPY loaders/ /opt/kimi/loaders/" in final and "kimi-serve-loaders.pth" in final
    assert final.index("kimi-serve-loaders.pth") < final.index("USER ")  # written as root, before the switch


def test_dockerfile_healthcheck_says_what_the_serving_data_says():
    """HEALTHCHECK flags cannot take build args, so the Dockerfile spells the timings out; they must
    be recipes/serving.yaml's (the same as the Compose and Kubernetes renderings)."""
    import re

    text = (targets.ROOT / "images" / "Dockerfile").read_text()
    flags = dict(re.findall(r"--(interval|timeout|start-period|retries)=(\w+)", text.split("HEALTHCHECK", 1)[1].split("\n")[0]))
    health = yaml.safe_load((targets.RECIPES_DIR / "serving.yaml").read_text())["health"]
    assert flags == {"interval": f"{health['interval_s']}s", "timeout": f"{health['timeout_s']}s",
                     "start-period": f"{health['start_period_s']}s", "retries": str(health["retries"])}
    assert health["start_period_s"] >= 1800  # a 600 GB load is not over in minutes


@pytest.mark.parametrize("release, runs", [("0.33.0", "1"), ("0.19.1", "0")])
def test_the_build_runs_download_kernels_only_where_the_release_has_it(release, runs):
    """vLLM 0.32.0 added `vllm download-kernels` (its CLI's download_kernels module); 0.19.1 has none."""
    from buildsys import engine

    data = targets.load().for_release(release)
    for name in data.targets:
        assert engine.build_args(data, name, "base:tag")["KIMI_DOWNLOAD_KERNELS"] == runs
    dockerfile = (ROOT / "images" / "Dockerfile").read_text()
    assert 'RUN if [ "${KIMI_DOWNLOAD_KERNELS}" = 1 ]; then vllm download-kernels; fi' in dockerfile
    assert "\nSTOPSIGNAL SIGTERM\n" in dockerfile  # what vLLM drains on (docs/day2.md)
