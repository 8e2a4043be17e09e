"""Pydantic models of recipes/bench/benchmarks.yaml: bench's workloads, defaults and published
reference figures. Every model rejects unknown keys. The one catalog (core/data/recipe) validates the
file with these and checks each reference's recipe, hardware and variant; core/data/bench reads it.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, KimiError


def check_sweep(levels, label: str = "--concurrency") -> tuple:
    """Concurrency levels: whole numbers from 1 to the bound, none repeated, at most MAX_BENCH_LEVELS."""
    levels = tuple(levels)
    if not levels or len(levels) > limits.MAX_BENCH_LEVELS:
        raise KimiError(INVALID_VALUE, f"{label} needs 1 to {limits.MAX_BENCH_LEVELS} concurrency levels, "
                        f"not {len(levels)}")
    bad = [c for c in levels if isinstance(c, bool) or not isinstance(c, int)
           or not 1 <= c <= limits.MAX_BENCH_CONCURRENCY]
    if bad:
        raise KimiError(INVALID_VALUE, f"{label}: {bad[0]!r} is not a concurrency from 1 to "
                        f"{limits.MAX_BENCH_CONCURRENCY}")
    if len(set(levels)) != len(levels):
        raise KimiError(INVALID_VALUE, f"{label}: a level repeats ({', '.join(map(str, levels))})")
    return levels



class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Workload(_Strict):
    input_len: int = Field(ge=1, le=limits.MAX_BENCH_TOKENS)
    output_len: int = Field(ge=1, le=limits.MAX_BENCH_TOKENS)
    description: str


class Defaults(_Strict):
    workload: str
    concurrency: List[int] = Field(min_length=1)
    prompts_per_concurrency: int = Field(ge=1)
    min_prompts: int = Field(ge=1)


# The figures a published point may record, each the measured figure of the same name compares with
# (like with like). InferenceX's headline `tput_per_gpu` is total (input + output) tokens/s per GPU
# (utils/process_result.py: total token throughput / GPUs), `output_tput_per_gpu` and
# `input_tput_per_gpu` beside it; tokens/s per user is its interactivity axis.
METRICS = {"total_tokens_per_s_per_gpu": "total (input + output) tokens/s per GPU",
           "output_tokens_per_s_per_gpu": "output tokens/s per GPU",
           "input_tokens_per_s_per_gpu": "input tokens/s per GPU",
           "tokens_per_s_per_user": "output tokens/s per user"}
PER_GPU = tuple(m for m in METRICS if m.endswith("_per_gpu"))


class Point(_Strict):
    concurrency: Optional[int] = Field(ge=1)  # None: "at high concurrency", compared with the sweep's best
    total_tokens_per_s_per_gpu: Optional[float] = Field(default=None, gt=0)
    output_tokens_per_s_per_gpu: Optional[float] = Field(default=None, gt=0)
    input_tokens_per_s_per_gpu: Optional[float] = Field(default=None, gt=0)
    tokens_per_s_per_user: Optional[float] = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _some_metric(self) -> "Point":
        if not published(self):
            raise ValueError(f"a point records none of {', '.join(METRICS)}")
        return self


def published(point) -> Dict[str, float]:
    """The figures a point records, by metric (METRICS' order): of a Point, or of the catalog's
    read-only record of one."""
    return {m: getattr(point, m) for m in METRICS if getattr(point, m, None) is not None}


class Reference(_Strict):
    recipe: str
    hardware: str
    variant: str
    tensor_parallel: int = Field(ge=1)
    engine: str
    workload: str
    points: List[Point] = Field(min_length=1)
    source: str
    url: str
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")


class BenchFile(_Strict):
    workloads: Dict[str, Workload] = Field(min_length=1)
    defaults: Defaults
    references: List[Reference] = []

    @model_validator(mode="after")
    def _named_workloads_exist(self) -> "BenchFile":
        named = [self.defaults.workload, *(r.workload for r in self.references)]
        missing = sorted(set(named) - set(self.workloads))
        if missing:
            raise ValueError(f"workloads named but not defined: {', '.join(missing)}")
        check_sweep(self.defaults.concurrency, "defaults.concurrency")
        for ref in self.references:
            levels = [p.concurrency for p in ref.points]
            if len(set(levels)) != len(levels):
                raise ValueError(f"reference {ref.recipe}/{ref.hardware}/{ref.variant}: a concurrency repeats")
        return self
