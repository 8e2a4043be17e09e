"""images/targets.yaml: pydantic models (unknown keys rejected) and the loader with cross-checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from buildsys import ROOT

TARGETS_FILE = ROOT / "images" / "targets.yaml"
HARDWARE_FILE = ROOT / "recipes" / "hardware.yaml"
MIN_VLLM = (0, 19, 1)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    platform: str
    hardware: str
    serves: List[str]
    # Settings the smoke and container tests add to the image's defaults, for targets whose
    # defaults alone need more (e.g. a multi-node deployment needs its head address).
    smoke_env: Dict[str, str] = {}

    @field_validator("platform")
    @classmethod
    def _platform(cls, v):
        if v not in ("linux/amd64", "linux/arm64"):
            raise ValueError(f"platform {v!r} is not linux/amd64 or linux/arm64")
        return v

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


def hardware_entries(path: Path = HARDWARE_FILE) -> Optional[dict]:
    """{hardware id: entry} from recipes/hardware.yaml, or None when that file does not exist."""
    if not path.exists():
        return None
    data = yaml.safe_load(path.read_text()) or {}
    if isinstance(data, dict) and "hardware" in data:
        data = data["hardware"]
    if isinstance(data, dict):
        return {str(k): (v if isinstance(v, dict) else {}) for k, v in data.items()}
    if isinstance(data, list):
        return {str(i["id"]): i for i in data if isinstance(i, dict) and i.get("id")}
    return None


def hardware_ids(path: Path = HARDWARE_FILE) -> Optional[set]:
    entries = hardware_entries(path)
    return None if entries is None else set(entries)


class TargetsError(Exception):
    pass


def load(path: Path = TARGETS_FILE, hardware_file: Path = HARDWARE_FILE) -> Targets:
    try:
        raw = yaml.safe_load(Path(path).read_text())
        data = Targets.model_validate(raw)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise TargetsError(f"{path}: {exc}") from exc
    entries = hardware_entries(hardware_file)
    if entries is not None:
        known = set(entries)
        for name, t in data.targets.items():
            unknown = sorted(set(t.serves) - known)
            if unknown:
                raise TargetsError(f"{path}: target {name} serves unknown hardware {unknown}; "
                                   f"{hardware_file.name} knows {sorted(known)}")
            for hw in t.serves:  # both files must agree on which image serves which hardware
                want = entries[hw].get("image_target")
                if want is not None and want != name:
                    raise TargetsError(f"{path}: target {name} serves {hw}, but {hardware_file.name} "
                                       f"says {hw} is served by image target {want!r}")
                arch = entries[hw].get("arch")
                if arch is not None and arch != t.arch:
                    raise TargetsError(f"{path}: target {name} is {t.arch}, but {hardware_file.name} "
                                       f"says {hw} is {arch}")
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
