"""`kimi-serve bench`: measure a running deployment with vLLM's own benchmark client over a sweep
of concurrencies, compare with the published reference, write charts and a summary (docs/bench.md)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import click

from entrypoint.cli._context import guarded, say
from entrypoint.cli._fleet import fleet_urls, targets, with_fleet
from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, KimiError


def _check_timeout(ctx, param, value: float) -> float:
    if not (math.isfinite(value) and 0 < value <= limits.MAX_BENCH_TIMEOUT_S):
        raise click.BadParameter(f"must be more than 0 and at most {limits.MAX_BENCH_TIMEOUT_S:g} seconds, not {value}")
    return value


def _lengths(data, workload: str | None, input_len: int | None, output_len: int | None):
    """(workload name or None for a custom one, input_len, output_len)."""
    from entrypoint.core.data.bench import workload as named

    if (input_len is None) != (output_len is None):
        raise KimiError(INVALID_VALUE, "--input-len and --output-len go together (or name a --workload)")
    if input_len is not None:
        if workload is not None:
            raise KimiError(INVALID_VALUE, "give --workload or --input-len/--output-len, not both")
        return None, input_len, output_len
    name = workload or data.defaults.workload
    chosen = named(data, name)
    return name, chosen.input_len, chosen.output_len


def _target(url, gpus, replicas: tuple, fleet: bool):
    """(the BenchTarget of the configured launch, the fleet's copies): with --fleet the configured
    fleet's router and copies come from the same launch (app/bench.py). With --url and --gpus
    bench works without a launch (then there is no reference: the hardware is unknown)."""
    from entrypoint.app.bench import BenchTarget, bench_target
    from entrypoint.core.data.bench import Deployment

    try:
        target = bench_target(fleet=fleet)
    except KimiError as error:
        if fleet:
            raise
        if not (url and gpus):
            raise KimiError(error.code, f"{error.message} (bench reads the GPUs and the hardware from the "
                            "configured launch; outside one, give --url, --gpus and --tokenizer)") from None
        return BenchTarget(Deployment("unknown", "unknown", "unknown", gpus, None), url, None, False, {}), replicas
    url, replicas = with_fleet(url, replicas, target.fleet)
    if gpus:
        target = replace(target, deployment=replace(target.deployment, gpus=gpus))
    return replace(target, url=url or target.url), replicas


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", help="Server root URL.  [default: the configured host and port]")
@click.option("--model", help="Model name to send.  [default: the one id /v1/models lists]")
@click.option("--workload", help="A named workload of recipes/bench/benchmarks.yaml (docs/bench.md).  [default: the data's]")
@click.option("--input-len", type=click.IntRange(1, limits.MAX_BENCH_TOKENS), help="Tokens per prompt (custom workload).")
@click.option("--output-len", type=click.IntRange(1, limits.MAX_BENCH_TOKENS), help="Tokens per answer (custom workload).")
@click.option("--concurrency", "sweep", help="Comma list of concurrencies, one client run each.  [default: the data's]")
@click.option("--num-prompts", type=click.IntRange(1, limits.MAX_BENCH_PROMPTS),
              help="Requests per concurrency.  [default: a multiple of the concurrency, from the data]")
@click.option("--tokenizer", help="Tokenizer (a directory or a hub id).  [default: the launch's model, from the cache]")
@click.option("--gpus", type=click.IntRange(1, limits.MAX_NODES * limits.MAX_GPUS_PER_NODE),
              help="GPUs serving the deployment (per-GPU figures).  [default: the launch plan's]")
@click.option("--output", "output_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the client's results, the charts and the summary.  [default: ./kimi-bench-TIME]")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--no-charts", is_flag=True, help="Write no PNG/SVG charts.")
@click.option("--timeout", type=float, callback=_check_timeout, default=6 * 3600.0, show_default=True,
              help="Seconds the whole sweep may take; the client is stopped when they run out.")
@click.option("--replica", "replicas", multiple=True, callback=fleet_urls,
              help="A fleet's copy (its API root; repeatable): the sweep also runs against it (its GPUs: --gpus or "
                   "one copy's), and --url is the fleet's address (its router; all copies' GPUs). docs/fleet.md")
@click.option("--fleet", is_flag=True, help="Sweep the configured fleet: its router and each copy (KIMI_REPLICA_ADDRS).")
@guarded
def command(url, model, workload, input_len, output_len, sweep, num_prompts, tokenizer, gpus, output_dir,
            output_format, no_charts, timeout, replicas, fleet):
    """Run `vllm bench serve` at each concurrency against a running server and report, per
    concurrency, throughput (also per GPU), TTFT, TPOT and ITL p50/p99, with the published reference.

    Exit code 0 when every request of every level completed, 1 when some failed or the client
    failed or ran out of time, 2 on bad input (also an unreachable server), 127 without `vllm`.
    """
    from entrypoint.core.data.bench import bench_data, num_prompts as prompts_for, parse_sweep
    from entrypoint.verify.bench import Spec, check_server, client_program, run_bench
    from entrypoint.verify.bench_report import Progress, to_text
    from entrypoint.core.base.bounded import parse_url
    from entrypoint.verify.client import normalize_url

    data = bench_data()
    levels = parse_sweep(sweep) if sweep is not None else tuple(data.defaults.concurrency)
    name, ilen, olen = _lengths(data, workload, input_len, output_len)
    prompts = tuple(prompts_for(data, level, num_prompts) for level in levels)
    short = [lv for lv, n in zip(levels, prompts) if n < lv]
    if short:
        raise KimiError(INVALID_VALUE, f"--num-prompts {num_prompts} is below concurrency {short[0]}: that level "
                        "would never be reached (give more prompts, or leave --num-prompts out)")
    target, replicas = _target(url, gpus, replicas, fleet)
    deployment, url = target.deployment, target.url
    runs_on = []  # (name, URL, GPUs): the server, or the fleet (every copy's GPUs) then each copy
    for label, where in targets(url, replicas):
        try:
            parse_url(where)
        except ValueError as exc:
            raise KimiError(INVALID_VALUE, f"--url: {exc}. Give the server root, e.g. http://127.0.0.1:8000") from None
        copies = len(replicas) if label == "fleet" else 1
        runs_on.append((label, normalize_url(where), deployment.gpus * copies))
    client_program()  # 127 before anything else when there is no client
    served = [check_server(where, model) for _, where, _ in runs_on]
    if not (tokenizer or target.model):
        raise KimiError(INVALID_VALUE, "--tokenizer is needed: there is no configured launch to take the model from")
    output = output_dir or Path(f"kimi-bench-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    runs = []
    for (label, where, n_gpus), model_name in zip(runs_on, served):
        spec = Spec(url=where, model=model_name, tokenizer=tokenizer or target.model, input_len=ilen, output_len=olen,
                    concurrency=levels, prompts=prompts,
                    output=output if not replicas else output / label.replace(" ", "-"), gpus=n_gpus,
                    trust_remote_code=target.trust_remote_code and not tokenizer, extra_env=dict(target.cache_env))
        progress = Progress(levels) if output_format == "text" else (lambda *_: None)
        try:
            run = run_bench(spec, workload_name=name, deployment=replace(deployment, gpus=n_gpus), data=data,
                            timeout=timeout, progress=progress, charts=not no_charts)
        finally:
            if isinstance(progress, Progress):  # the text format's
                progress.end()
        runs.append((label, run))
    from entrypoint.cli._context import ARGV
    from entrypoint.core.vllm.mask import mask_output

    first = ("results", "reference", "files")

    def ordered(run: dict) -> dict:
        return {key: run[key] for key in first} | {k: v for k, v in run.items() if k not in first}

    if output_format == "json":
        text = json.dumps(ordered(runs[0][1]) if not replicas else
                          {"targets": [{"name": label, **ordered(run)} for label, run in runs]}, indent=2)
    else:
        text = to_text(runs[0][1]) if not replicas else \
            "\n\n".join(f"== {label}: {run['url']}\n{to_text(run)}" for label, run in runs)
    click.echo(mask_output(text, os.environ, ARGV))  # the one mask: the client's words could carry one
    problems = [p for _, run in runs for p in run["problems"]]
    for problem in problems if output_format == "json" else ():  # text mode lists them in its report
        say(problem, level="warning")
    sys.exit(1 if problems else 0)
