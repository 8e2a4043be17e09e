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
from entrypoint.core.compose.select import left_out
from entrypoint.core.data.recipe import RecipeDataError, load_catalog_from
from entrypoint.core.data.recipe_schema import Strict
from entrypoint.core.data.versions import is_digest, release_refusal, stack_shortfall, version_key

TARGETS_FILE = ROOT / "images" / "targets.yaml"
RECIPES_DIR = ROOT / "recipes"


STACK_VERSION = r"\d+\.\d+(\.\d+)?"


class Base(Strict):
    name: str
    tag: str
    digest: Optional[str] = None
    python: str
    # The base's GPU software stack, as the base image itself says it (its CUDA_VERSION /
    # ROCM_VERSION environment): baked into the image (KIMI_IMAGE_CUDA / KIMI_IMAGE_ROCM), checked
    # against a recipe's min_stack at start, and in the labels' list of recipes the image serves.
    cuda: Optional[str] = None
    rocm: Optional[str] = None

    @field_validator("cuda", "rocm")
    @classmethod
    def _stack(cls, v):
        if v is not None and not re.fullmatch(STACK_VERSION, v):
            raise ValueError(f"{v!r} is not a version like 13.0.2")
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v):
        if v is not None and not is_digest(v):
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


class ReleaseBase(Strict):
    tag: str
    digest: Optional[str] = None
    cuda: Optional[str] = None
    rocm: Optional[str] = None

    # Base's checks, unbound (mypy types a classmethod read off its class as a plain callable)
    _digest = field_validator("digest")(Base._digest.__func__)  # type: ignore[attr-defined]
    _stack = field_validator("cuda", "rocm")(Base._stack.__func__)  # type: ignore[attr-defined]


class Target(Strict):
    base: str
    platform: Literal["linux/amd64", "linux/arm64"]
    hardware: str
    serves: List[str]
    vllm: Optional[List[str]] = None  # releases it builds on; None = every release its base kind has
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
    # The first vLLM release whose CLI has `vllm download-kernels` (FlashInfer's precompiled kernels
    # installed at build, so no engine downloads or compiles them at start; docs/day2.md)
    download_kernels_from: str
    bases: Dict[str, Base]
    other_releases: Dict[str, Dict[str, ReleaseBase]] = {}
    targets: Dict[str, Target]
    # Weight loaders vLLM's Python gets where the base lacks them (name==version, for every base).
    loader_packages: List[str] = []
    default_release: bool = True  # False on a copy for one of other_releases (see for_release)

    @field_validator("vllm_version")
    @classmethod
    def _vllm(cls, v):
        floor = load_catalog_from(RECIPES_DIR).recipe.model.min_vllm_version  # the recipe's, the one floor
        if version_key(v) < version_key(floor):
            raise ValueError(f"vLLM {v} is older than {floor}, the recipe's min_vllm_version")
        return v

    @field_validator("loader_packages")
    @classmethod
    def _pinned(cls, v):
        for req in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+-]*", req):
                raise ValueError(f"loader package {req!r} is not pinned as name==version")
        return v

    @model_validator(mode="after")
    def _refs(self):
        if self.default_target not in self.targets:
            raise ValueError(f"default_target {self.default_target!r} is not one of {sorted(self.targets)}")
        for name, t in self.targets.items():
            if t.base not in self.bases:
                raise ValueError(f"target {name}: base {t.base!r} is not one of {sorted(self.bases)}")
            unknown = sorted(set(t.vllm or ()) - set(self.releases))
            if unknown:
                raise ValueError(f"target {name}: vllm {unknown} is not one of {self.releases}")
        for version, kinds in self.other_releases.items():
            self._vllm(version)
            for kind in kinds:
                if kind not in self.bases:
                    raise ValueError(f"other_releases {version}: base {kind!r} is not one of {sorted(self.bases)}")
        return self

    @property
    def releases(self) -> List[str]:
        """vLLM releases images can be built on, the default first."""
        return [self.vllm_version] + [v for v in self.other_releases if v != self.vllm_version]

    def target_releases(self, target: str) -> List[str]:
        t = self.targets[target]
        if t.vllm is not None:
            return list(t.vllm)
        return [v for v in self.releases if v == self.vllm_version or t.base in self.other_releases.get(v, {})]

    def for_release(self, version: str) -> "Targets":
        """This data as if `version` were the default: its base tags, its version in tags and labels."""
        if version == self.vllm_version and self.default_release:
            return self
        if version not in self.other_releases:
            raise ValueError(f"vLLM {version} is not a release of this data file: {', '.join(self.releases)}")
        bases = {kind: self.bases[kind].model_copy(update=rb.model_dump()) for kind, rb in self.other_releases[version].items()}
        targets = {n: t for n, t in self.targets.items() if version in self.target_releases(n)}
        return self.model_copy(update={"vllm_version": version, "bases": bases, "targets": targets,
                                       "default_release": False})

    def tags(self, target: str, registry: Optional[str] = None, sha: Optional[str] = None) -> List[str]:
        repo = f"{(registry or self.registry).rstrip('/')}/{self.image}"
        if not self.default_release:  # an older release: only tags that carry its version
            return [f"{repo}:{self.vllm_version}-{target}"] + ([f"{repo}:{sha}-{self.vllm_version}-{target}"] if sha else [])
        tags = [f"{repo}:{self.vllm_version}-{target}", f"{repo}:{target}"]
        if sha:
            tags.append(f"{repo}:{sha}-{target}")
        return tags

    # `tags` is the one tagging rule: build, bake, list and smoke all derive their tags from it.
    def ref(self, target: str, registry: Optional[str] = None) -> str:
        """The tag that names the vLLM version (the first): what smoke runs and `smoke --pull` pulls."""
        return self.tags(target, registry)[0]

    def repository(self, registry: Optional[str] = None) -> str:
        return f"{(registry or self.registry).rstrip('/')}/{self.image}"

    def recipes_served(self, target: str, catalog) -> List[str]:
        """The recipes an image of `target` on this release can launch: the recipe offers one of
        the hardware it serves, it runs on this vLLM release (its floor, the releases it refuses)
        and its min_stack is met by the base's."""
        t, base = self.targets[target], self.bases[self.targets[target].base]

        def offered(recipe) -> bool:  # a hardware it serves that the recipe launches on
            return any((h in recipe.hardware or catalog.hardware[h].serves_every_recipe)  # the cpu target: any recipe
                       and not left_out(recipe, catalog, h) for h in t.serves)

        return [slug for slug, recipe in catalog.recipes.items()
                if offered(recipe) and release_refusal(recipe.model, self.vllm_version) is None
                and not stack_shortfall(recipe.model.min_stack, {"cuda": base.cuda, "rocm": base.rocm})]


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
    specs = Path(recipes_dir) / "vllm"
    if specs.is_dir():  # every release an image carries has its grammar checked in (build.py vllm-spec)
        missing = [v for v in data.releases if not (specs / f"{v}.json").is_file()]
        if missing:
            raise TargetsError(f"{path}: no vLLM grammar for {', '.join(missing)} in {specs} "
                               "(run `python build.py vllm-spec --python <venv with that vLLM>/bin/python`)")
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
    built = {v: sorted(n for n in data.targets if v in data.target_releases(n)) for v in data.releases}
    said = {v: sorted(ts) for v, ts in catalog.serving.image.releases.items()}
    if built != said:  # the renderers name <vllm>-<target> from serving.yaml: only images that are built
        raise TargetsError(f"{path} builds {built}, but recipes/serving.yaml image.releases says {said}: "
                           "make them agree (the renderers run only the images listed there)")
    return data


def _entries(lines: List[str], section: str):
    """(index, key of the enclosing `  key:` entry, line) for the lines of a top-level section."""
    inside, key = False, None
    for i, line in enumerate(lines):
        if re.match(rf"^{section}:\s*$", line):
            inside = True
            continue
        if inside and re.match(r"^\S", line):
            inside = False
        if not inside:
            continue
        m = re.match(r"^  ([A-Za-z0-9_.-]+):", line)
        if m:
            key = m.group(1)
            continue
        yield i, key, line.rstrip("\n")


def save_digests(digests: Dict[str, str], path: Path = TARGETS_FILE,
                 release_digests: Optional[Dict[str, Dict[str, str]]] = None) -> None:
    """Write base digests into targets.yaml in place, keeping comments and layout: `bases`
    entries (`    digest: ...`) and `other_releases` ones (`    kind: {tag: ..., digest: ...}`)."""
    lines = Path(path).read_text().splitlines(keepends=True)
    for i, kind, line in list(_entries(lines, "bases")):
        m = re.match(r"^(    digest:)\s*\S*(.*)$", line)
        if m and kind in digests:
            lines[i] = f"{m.group(1)} {digests[kind]}{m.group(2)}\n"
    release_digests = release_digests or {}
    for i, version, line in list(_entries(lines, "other_releases")):
        m = re.match(r"^(    ([A-Za-z0-9_.-]+): \{tag: [^,}]+, digest: )[^}]*(\}.*)$", line)
        if m and m.group(2) in release_digests.get(version, {}):
            lines[i] = f"{m.group(1)}{release_digests[version][m.group(2)]}{m.group(3)}\n"
    Path(path).write_text("".join(lines))
    load(path)  # still valid
