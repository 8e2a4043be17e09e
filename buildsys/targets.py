"""images/targets.yaml: pydantic models (unknown keys rejected) and the loader with cross-checks
against the recipe data (read through the entrypoint's own loader: hardware served, the published
repository of recipes/serving.yaml)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Literal, Optional

import yaml
from pydantic import ValidationError, field_validator, model_validator

from buildsys import ROOT
from entrypoint.core.recipe import RecipeDataError, load_catalog_from
from entrypoint.core.recipe_schema import Strict

TARGETS_FILE = ROOT / "images" / "targets.yaml"
RECIPES_DIR = ROOT / "recipes"
MIN_VLLM = (0, 19, 1)


class Base(Strict):
    name: str
    tag: str
    digest: Optional[str] = None
    python: str

    @field_validator("digest")
    @classmethod
    def _digest(cls, v):
        if v is not None and not re.fullmatch(r"sha256:[0-9a-f]{64}", v):
            raise ValueError(f"{v!r} is not a sha256 digest")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v):
        if not re.fullmatch(r"3\.\d+", v):
            raise ValueError(f"python {v!r} is not like 3.12")
        return v

    @property
    def ref(self) -> str:
        """The pinned reference: name:tag@digest when locked, else name:tag."""
        return f"{self.name}:{self.tag}@{self.digest}" if self.digest else f"{self.name}:{self.tag}"


class Target(Strict):
    base: str
    platform: Literal["linux/amd64", "linux/arm64"]
    hardware: str
    serves: List[str]
    # Settings the smoke and container tests add to the image's defaults, for targets whose
    # defaults alone need more (e.g. a multi-node deployment needs its head address).
    smoke_env: Dict[str, str] = {}

    @model_validator(mode="after")
    def _serves_default(self):
        if self.hardware not in self.serves:
            raise ValueError(f"default hardware {self.hardware!r} is not in serves {self.serves}")
        return self

    @property
    def arch(self) -> str:
        return self.platform.split("/")[1]


class Targets(Strict):
    image: str
    registry: str
    source: str
    vllm_version: str
    default_target: str
    label_prefix: str
    bases: Dict[str, Base]
    targets: Dict[str, Target]

    @field_validator("vllm_version")
    @classmethod
    def _vllm(cls, v):
        parts = tuple(int(x) for x in re.findall(r"\d+", v)[:3])
        if parts < MIN_VLLM:
            raise ValueError(f"vLLM {v} is older than {'.'.join(map(str, MIN_VLLM))}")
        return v

    @model_validator(mode="after")
    def _refs(self):
        if self.default_target not in self.targets:
            raise ValueError(f"default_target {self.default_target!r} is not one of {sorted(self.targets)}")
        for name, t in self.targets.items():
            if t.base not in self.bases:
                raise ValueError(f"target {name}: base {t.base!r} is not one of {sorted(self.bases)}")
        return self

    def tags(self, target: str, registry: Optional[str] = None, sha: Optional[str] = None) -> List[str]:
        repo = f"{(registry or self.registry).rstrip('/')}/{self.image}"
        tags = [f"{repo}:{self.vllm_version}-{target}", f"{repo}:{target}"]
        if sha:
            tags.append(f"{repo}:{sha}-{target}")
        return tags


class TargetsError(Exception):
    pass


def load(path: Path = TARGETS_FILE, recipes_dir: Path = RECIPES_DIR) -> Targets:
    """targets.yaml validated, with the published repository (recipes/serving.yaml) filled in and
    every target checked against the hardware it serves (recipes/hardware.yaml)."""
    try:
        catalog = load_catalog_from(Path(recipes_dir))
        raw = yaml.safe_load(Path(path).read_text())
        if isinstance(raw, dict):
            raw = {**raw, "image": catalog.serving.image.name, "registry": catalog.serving.image.registry}
        data = Targets.model_validate(raw)
    except (OSError, yaml.YAMLError, ValidationError, RecipeDataError) as exc:
        raise TargetsError(f"{path}: {exc}") from exc
    for name, t in data.targets.items():
        unknown = sorted(set(t.serves) - set(catalog.hardware))
        if unknown:
            raise TargetsError(f"{path}: target {name} serves unknown hardware {unknown}; "
                               f"the recipe data knows {sorted(catalog.hardware)}")
        for hw_id in t.serves:  # both files must agree on which image serves which hardware
            hw = catalog.hardware[hw_id]
            if hw.image_target != name:
                raise TargetsError(f"{path}: target {name} serves {hw_id}, but the recipe data says {hw_id} is "
                                   f"served by image target {hw.image_target!r}")
            if hw.arch != t.arch:
                raise TargetsError(f"{path}: target {name} is {t.arch}, but the recipe data says {hw_id} is {hw.arch}")
    return data


def save_digests(digests: Dict[str, str], path: Path = TARGETS_FILE) -> None:
    """Write base digests into targets.yaml in place, keeping comments and layout."""
    lines = Path(path).read_text().splitlines(keepends=True)
    current = None
    in_bases = False
    for i, line in enumerate(lines):
        if re.match(r"^bases:\s*$", line):
            in_bases = True
            continue
        if in_bases and re.match(r"^\S", line):
            in_bases = False
        if not in_bases:
            continue
        m = re.match(r"^  ([A-Za-z0-9_.-]+):", line)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^(    digest:)\s*\S*(.*)$", line.rstrip("\n"))
        if m and current in digests:
            lines[i] = f"{m.group(1)} {digests[current]}{m.group(2)}\n"
    Path(path).write_text("".join(lines))
    load(path)  # still valid
