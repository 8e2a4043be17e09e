"""What `kimi-serve bench` measures and compares with: the workloads and published references of
recipes/bench/benchmarks.yaml (validated here), the sweep, and the figures read from the saved result
of vLLM's own benchmark client (`vllm bench serve --save-result`). Pure: no I/O but the data file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, cast

from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, KimiError, unknown_value
from entrypoint.core.data.bench_schema import (METRICS, PER_GPU, BenchFile, Defaults, Point, Reference, Workload,  # noqa: F401
                                        check_sweep, published as published_figures)
from entrypoint.core.data.recipe import load_section, RecipeDataError

DATA_FILE = "bench/benchmarks.yaml"  # core/data/recipe.BENCH_FILE: a folder of its own (no glob of recipes/*.yaml takes it)
PERCENTILES = ("p50", "p99")
LATENCIES = ("ttft", "tpot", "itl")  # vLLM's metric names: time to first token, per output token, between tokens


BenchDataError = RecipeDataError  # benchmarks.yaml broken: a defect of the image, as any data file


def parse_sweep(text: str) -> tuple:
    """'1,4,16,64' -> (1, 4, 16, 64); anything else is a clear usage error."""
    words = [w.strip() for w in text.split(",")] if len(text) <= limits.MAX_SETTING_CHARS else []
    if not words or any(not re.fullmatch(r"[0-9]{1,%d}" % limits.MAX_INT_DIGITS, w) for w in words):
        raise KimiError(INVALID_VALUE, f"--concurrency {text[:80]!r} is not a comma list of whole numbers "
                        "(e.g. 1,4,16,64)")
    return check_sweep([int(w) for w in words])


def load_bench(directory: Optional[Path] = None, catalog=None) -> BenchFile:
    """The validated data: the bench part of the one catalog (core/data/recipe), where every
    reference's recipe (recipes/models/<slug>.yaml), hardware and variant is checked against the
    recipe data. `catalog` is accepted for the callers that have one; the check is the catalog's."""
    return cast(BenchFile, load_section("bench", directory))


def bench_data(directory: Optional[str] = None) -> BenchFile:
    return load_bench(Path(directory) if directory else None)


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
        for metric, published in published_figures(point).items():
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
