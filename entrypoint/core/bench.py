"""What `kimi-serve bench` measures and compares with: the workloads and published references of
recipes/bench/benchmarks.yaml (validated here), the sweep, and the figures read from the saved result
of vLLM's own benchmark client (`vllm bench serve --save-result`). Pure: no I/O but the data file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from entrypoint.core import limits
from entrypoint.core.errors import INVALID_VALUE, KimiError, unknown_value

DATA_FILE = "bench/benchmarks.yaml"  # a folder of its own: no glob of recipes/*.yaml takes it for a recipe
PERCENTILES = ("p50", "p99")
LATENCIES = ("ttft", "tpot", "itl")  # vLLM's metric names: time to first token, per output token, between tokens


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
        if not self.published():
            raise ValueError(f"a point records none of {', '.join(METRICS)}")
        return self

    def published(self) -> Dict[str, float]:
        """The figures this point records, by metric (METRICS' order)."""
        return {m: getattr(self, m) for m in METRICS if getattr(self, m) is not None}


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


class BenchDataError(Exception):
    """benchmarks.yaml is broken or names what the recipe data does not have (a defect of the image)."""


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


def parse_sweep(text: str) -> tuple:
    """'1,4,16,64' -> (1, 4, 16, 64); anything else is a clear usage error."""
    words = [w.strip() for w in text.split(",")] if len(text) <= limits.MAX_SETTING_CHARS else []
    if not words or any(not re.fullmatch(r"[0-9]{1,%d}" % limits.MAX_INT_DIGITS, w) for w in words):
        raise KimiError(INVALID_VALUE, f"--concurrency {text[:80]!r} is not a comma list of whole numbers "
                        "(e.g. 1,4,16,64)")
    return check_sweep([int(w) for w in words])


def load_bench(directory: Path, catalog=None) -> BenchFile:
    """The validated data; every reference's recipe (recipes/models/<slug>.yaml), hardware and
    variant must exist in the recipe data."""
    import yaml
    from pydantic import ValidationError

    path = directory / DATA_FILE
    try:
        with open(path, "rb") as fh:
            data = BenchFile(**yaml.safe_load(fh.read(limits.MAX_CONFIG_BYTES + 1)))
    except (OSError, yaml.YAMLError, ValidationError, TypeError) as exc:
        raise BenchDataError(f"{path} is invalid: {exc}") from exc
    if catalog is not None:
        for ref in data.references:
            where = f"{path}: reference {ref.recipe}/{ref.hardware}/{ref.variant}"
            if ref.recipe not in catalog.recipes:
                raise BenchDataError(f"{where}: no recipe {ref.recipe!r} (recipes/models/<slug>.yaml)")
            if ref.hardware not in catalog.hardware:
                raise BenchDataError(f"{where}: unknown hardware {ref.hardware!r}")
            if ref.variant not in catalog.recipes[ref.recipe].variants:
                raise BenchDataError(f"{where}: unknown variant {ref.variant!r}")
    return data


@lru_cache(maxsize=2)
def bench_data(directory: Optional[str] = None) -> BenchFile:
    from entrypoint.core.recipe import default_recipes_dir, load_catalog

    root = Path(directory) if directory else default_recipes_dir()
    return load_bench(root, load_catalog(root))


def workload(data: BenchFile, name: str) -> Workload:
    if name not in data.workloads:
        raise unknown_value("--workload", name, data.workloads, "Or give --input-len and --output-len.")
    return data.workloads[name]


def num_prompts(data: BenchFile, concurrency: int, given: Optional[int]) -> int:
    return given if given is not None else max(concurrency * data.defaults.prompts_per_concurrency,
                                               data.defaults.min_prompts)


# --- the reference -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    """What a measured figure is compared by: the launch's recipe, hardware, variant, GPUs, TP."""

    recipe: str
    hardware: str
    variant: str
    gpus: int
    tensor_parallel: Optional[int]


def find_reference(data: BenchFile, deployment: Deployment, workload_name: Optional[str]) -> Optional[Reference]:
    """The published figure for this recipe x hardware x variant x workload (None when there is none;
    a custom --input-len/--output-len run has no workload name and so no reference)."""
    for ref in data.references:
        if (ref.recipe, ref.hardware, ref.variant, ref.workload) == (
                deployment.recipe, deployment.hardware, deployment.variant, workload_name):
            return ref
    return None


def no_reference_reason(data: BenchFile, deployment: Deployment, workload_name: Optional[str]) -> str:
    if workload_name is None:
        return "no reference: a custom --input-len/--output-len has none (use a named --workload)"
    have = sorted({f"{r.hardware}/{r.variant}/{r.workload}" for r in data.references if r.recipe == deployment.recipe})
    listed = f"; published for {deployment.recipe}: {', '.join(have)}" if have else ""
    return (f"no published reference for {deployment.recipe} on {deployment.hardware}, variant "
            f"{deployment.variant}, workload {workload_name}{listed}")


def compare(reference: Reference, results: List[dict]) -> List[dict]:
    """Per reference point and each metric it records: the published figure, the measured figure of
    the same metric and measured/published (never one metric against another)."""
    out = []
    for point in reference.points:
        for metric, published in point.published().items():
            if point.concurrency is None:  # "at high concurrency": the sweep's best
                measured = max((r[metric] for r in results if r.get(metric) is not None), default=None)
            else:
                measured = next((r.get(metric) for r in results if r["concurrency"] == point.concurrency), None)
            ratio = round(measured / published, 3) if measured is not None else None
            out.append({"concurrency": point.concurrency, "metric": metric, "published": published,
                        "measured": measured, "ratio": ratio})
    return out


def reference_json(reference: Reference, results: List[dict], deployment: Deployment) -> dict:
    return {
        "recipe": reference.recipe, "hardware": reference.hardware, "variant": reference.variant,
        "tensor_parallel": reference.tensor_parallel, "engine": reference.engine, "workload": reference.workload,
        "source": reference.source, "url": reference.url, "date": reference.date,
        "same_tensor_parallel": deployment.tensor_parallel in (None, reference.tensor_parallel),
        "points": compare(reference, results),
    }


# --- the figures ---------------------------------------------------------------------------------


class ResultError(Exception):
    """The client's result file lacks a figure or holds one that is not a number."""


def _number(result: dict, key: str) -> float:
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ResultError(f"{key} is {value!r}, not a number of 0 or more")
    return float(value)


def figures(result: dict, concurrency: int, gpus: int) -> dict:
    """One concurrency's figures from `vllm bench serve`'s saved result (its own keys:
    completed, failed, duration, total_output_tokens, output_throughput, p50_/p99_ttft_ms ...).
    tokens/s per user is 1000 / median TPOT (the interactivity axis InferenceX plots)."""
    if not isinstance(result, dict):
        raise ResultError("the result is not a JSON object")
    completed = int(_number(result, "completed"))
    failed = int(_number(result, "failed")) if "failed" in result else 0
    throughput = _number(result, "output_throughput")
    total = _number(result, "total_token_throughput")
    latency = {name: {p: round(_number(result, f"{p}_{name}_ms"), 3) for p in PERCENTILES} for name in LATENCIES}
    tpot = latency["tpot"]["p50"]
    return {
        "concurrency": concurrency,
        "completed": completed,
        "failed": failed,
        "duration_s": round(_number(result, "duration"), 6),
        "output_tokens": int(_number(result, "total_output_tokens")),
        "output_tokens_per_s": round(throughput, 3),
        "output_tokens_per_s_per_gpu": round(throughput / gpus, 3),
        "total_tokens_per_s": round(total, 3),
        # InferenceX's per-GPU rates: tput_per_gpu (total), output_tput_per_gpu, input_tput_per_gpu
        "total_tokens_per_s_per_gpu": round(total / gpus, 3),
        "input_tokens_per_s_per_gpu": round(max(total - throughput, 0.0) / gpus, 3),
        "tokens_per_s_per_user": round(1000.0 / tpot, 3) if tpot > 0 else None,
        "ttft_ms": latency["ttft"],
        "tpot_ms": latency["tpot"],
        "itl_ms": latency["itl"],
    }
