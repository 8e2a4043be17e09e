"""Pydantic models of recipes/loaders.yaml: vLLM's load formats per release, the loaders this
project chooses among, the storage kinds, `auto`'s rules, the measured speeds, the start-up
budget and the checkpoints' sizes. Every model rejects unknown keys. Nothing here decides.
"""

from __future__ import annotations

from typing import Annotated, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

STORAGE_KINDS = ("object", "local", "local_gds", "network", "memory", "unknown")
StorageKind = Literal["object", "local", "local_gds", "network", "memory", "unknown"]
ValueKind = Literal["bool", "positive_int", "memory_limit"]
GBps = Annotated[float, Field(gt=0)]  # 1e9 bytes per second


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Loader(Strict):
    load_format: str
    packages: List[str] = []
    brands: List[str] = []  # GPU brands it runs on; empty: every brand


class ExtraConfig(Strict):
    formats: List[str]  # the load formats this vLLM loader class serves
    keys: Dict[str, Dict[str, ValueKind]]  # vLLM release -> key -> value kind


class Storage(Strict):
    network_fs: List[str]
    memory_fs: List[str]
    gds_fs: List[str]
    gds_driver: str = Field(pattern=r"^/")


class Rule(Strict):
    rule: str  # a loader id
    extra_config: Dict[str, int] = {}
    measured_as: Optional[StorageKind] = None


class Limits(Strict):
    """The two physical limits measured in the same run (and the pageable copy, for reference)."""

    disk_gbps: GBps
    h2d_pinned_gbps: GBps
    h2d_pageable_gbps: GBps


class Measurement(Strict):
    id: str
    source: str
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    command: str
    storage: StorageKind
    page_cache: Literal["cold", "warm"]
    machine: str
    disk: str
    checkpoint: str
    versions: Dict[str, str]
    limits: Limits
    loaders: Dict[str, GBps]  # loader id -> GB/s


class Budget(Strict):
    vllm_env: str = Field(pattern=r"^VLLM_[A-Z0-9_]+$")
    engine_overhead_s: int = Field(ge=0)
    margin: float = Field(ge=1)
    planning_gbps: Dict[StorageKind, GBps]


class LoadersFile(Strict):
    load_formats: Dict[str, List[str]]  # vLLM release -> load formats it registers
    extra_config: Dict[str, ExtraConfig]  # vLLM loader class -> what its extra config takes
    loaders: Dict[str, Loader]
    vllm_default: str
    storage: Storage
    auto: Dict[StorageKind, Rule]
    measurements: List[Measurement]
    budget: Budget
    checkpoints: Dict[str, Dict[str, int]]  # recipe slug -> variant -> GB on disk

    @model_validator(mode="after")
    def _references_exist(self):
        problems = []
        for kind in STORAGE_KINDS:
            if kind not in self.auto:
                problems.append(f"auto has no rule for storage kind {kind}")
            if kind not in self.budget.planning_gbps:
                problems.append(f"budget.planning_gbps has no figure for storage kind {kind}")
        for kind, rule in self.auto.items():
            if rule.rule not in self.loaders:
                problems.append(f"auto.{kind}.rule names loader {rule.rule!r}, which loaders does not declare")
        if self.vllm_default not in self.loaders:
            problems.append(f"vllm_default names loader {self.vllm_default!r}, which loaders does not declare")
        for m in self.measurements:
            for lid in m.loaders:
                if lid not in self.loaders:
                    problems.append(f"measurement {m.id} names loader {lid!r}, which loaders does not declare")
        for cls, per_class in self.extra_config.items():
            for release in per_class.keys:
                if release not in self.load_formats:
                    problems.append(f"extra_config.{cls} names vLLM {release}, which load_formats does not list")
        if problems:
            raise ValueError("; ".join(problems))
        return self
