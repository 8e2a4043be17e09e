"""What `kimi-serve bench` writes: the charts (PNG and SVG, matplotlib), a Markdown summary, the
text table, and a progress bar for a terminal. docs/bench.md says how to read them."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import List, Optional

from entrypoint.core.base.files import write_file
from entrypoint.core.base.table import text_table
from entrypoint.core.data.bench import METRICS, PER_GPU

CHARTS = ("throughput", "latency")
FORMATS = ("png", "svg")
SUMMARY = "summary.md"
RESULTS = "results.json"
BAR_WIDTH = 30


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def headline(run: dict) -> List[str]:
    w = run["workload"]
    lines = [f"kimi-serve bench {run['url']} (model {run['model']}, {w['name'] or 'custom'}: {w['input_len']} in / "
             f"{w['output_len']} out, {run['deployment']['gpus']} GPUs of {run['deployment']['hardware']})"]
    return lines


def table_rows(results: List[dict]) -> List[tuple]:
    return [(str(r["concurrency"]), f"{r['completed']}/{r['completed'] + r['failed']}",
             _fmt(r["output_tokens_per_s"]), _fmt(r.get("total_tokens_per_s_per_gpu")),
             _fmt(r["output_tokens_per_s_per_gpu"]), _fmt(r.get("input_tokens_per_s_per_gpu")),
             _fmt(r["tokens_per_s_per_user"]),
             f"{_fmt(r['ttft_ms']['p50'])} / {_fmt(r['ttft_ms']['p99'])}",
             f"{_fmt(r['tpot_ms']['p50'], 2)} / {_fmt(r['tpot_ms']['p99'], 2)}",
             f"{_fmt(r['itl_ms']['p50'], 2)} / {_fmt(r['itl_ms']['p99'], 2)}") for r in results]


# per GPU: InferenceX's three rates (total = its headline tput_per_gpu, output, input)
HEADERS = ("CONC", "DONE", "OUT TOK/S", "TOTAL/GPU", "OUT/GPU", "IN/GPU", "TOK/S/USER", "TTFT P50/P99 MS",
           "TPOT P50/P99 MS", "ITL P50/P99 MS")


def reference_lines(run: dict) -> List[str]:
    ref = run["reference"]
    if ref is None:
        return [run["reference_note"]]
    lines = [f"reference: {ref['source']} ({ref['date']}, {ref['url']})"]
    if not ref["same_tensor_parallel"]:
        lines.append(f"  note: the reference runs TP{ref['tensor_parallel']}, this deployment TP"
                     f"{run['deployment']['tensor_parallel']}")
    for p in ref["points"]:
        at = f"concurrency {p['concurrency']}" if p["concurrency"] is not None else "high concurrency (best of sweep)"
        measured = "not measured (not in the sweep)" if p["measured"] is None else \
            f"measured {_fmt(p['measured'])} = {p['ratio']:.2f}x"
        lines.append(f"  {at}: published {_fmt(p['published'], 1)} {METRICS[p['metric']]}, {measured}")
    return lines


def to_text(run: dict) -> str:
    lines = headline(run) + [text_table(HEADERS, table_rows(run["results"]), right=(2, 3, 4, 5, 6))]
    lines += reference_lines(run)
    lines += [f"problem: {p}" for p in run["problems"]] + [f"note: {n}" for n in run["notes"]]
    lines += [f"wrote {f}" for f in run["files"]]
    return "\n".join(lines)


def to_markdown(run: dict) -> str:
    w = run["workload"]
    d = run["deployment"]
    out = [f"# kimi-serve bench: {d['recipe']} on {d['gpus']} x {d['hardware']} ({d['variant']})", "",
           f"- server: {run['url']}, model `{run['model']}`",
           f"- workload: {w['name'] or 'custom'}, {w['input_len']} tokens in / {w['output_len']} out "
           "(fixed length, random tokens)",
           f"- client: `vllm bench serve` ({run['client']})", f"- date: {run['date']}", "",
           "| " + " | ".join(HEADERS) + " |", "|" + " --- |" * len(HEADERS)]
    out += ["| " + " | ".join(row) + " |" for row in table_rows(run["results"])]
    out += ["", "## Reference", ""] + [line.strip() and f"- {line.strip()}" for line in reference_lines(run)]
    if run["problems"]:
        out += ["", "## Problems", ""] + [f"- {p}" for p in run["problems"]]
    charts = [f for f in run["files"] if f.endswith(".png")]
    if charts:
        out += ["", "## Charts", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in charts]
    return "\n".join(out) + "\n"


def write_charts(run: dict, output: Path) -> List[str]:
    """throughput.{png,svg}: tokens/s per GPU against tokens/s per user (one point per concurrency,
    the reference's published points as dashed lines); latency.{png,svg}: TTFT, TPOT, ITL p50 and
    p99 per concurrency. [] when there is nothing to draw."""
    results = [r for r in run["results"] if r["tokens_per_s_per_user"] is not None]
    if not results:
        return []
    import matplotlib  # noqa: PLC0415 - a third party only this path needs

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415 - a third party only this path needs

    d, w = run["deployment"], run["workload"]
    title = f"{d['recipe']}, {d['gpus']} x {d['hardware']} ({d['variant']}), {w['input_len']}/{w['output_len']}"
    files = []

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    metric = _chart_metric(run)
    xs = [r["tokens_per_s_per_user"] for r in results]
    ys = [r[metric] for r in results]
    ax.plot(xs, ys, "o-", color="tab:blue", label="measured")
    for r, x, y in zip(results, xs, ys):
        ax.annotate(f"c={r['concurrency']}", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=9)
    ref, tops = run["reference"], [*ys]
    if ref:
        for at, published in _reference_marks(ref, metric):
            label = f"c={at}" if at is not None else "high concurrency"
            tops.append(published[metric])
            if "tokens_per_s_per_user" in published:  # InferenceX's own point: both axes published
                ax.plot([published["tokens_per_s_per_user"]], [published[metric]], "s", color="tab:orange")
                xs.append(published["tokens_per_s_per_user"])
                ax.annotate(f"published {label}", (published["tokens_per_s_per_user"], published[metric]),
                            textcoords="offset points", xytext=(6, -10), fontsize=8, color="tab:orange")
            else:  # a level to reach
                ax.axhline(published[metric], color="tab:orange", linestyle="--", linewidth=1)
                ax.annotate(f"published {label}: {published[metric]:,.0f}", (0, published[metric]),
                            xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(4, 3), fontsize=8,
                            color="tab:orange")
        ax.plot([], [], "s--", color="tab:orange", label=f"reference: {ref['engine']}, TP{ref['tensor_parallel']}")
    ax.set_xlabel("interactivity: output tokens/s per user (1000 / median TPOT)")
    ax.set_ylabel(f"throughput: {METRICS[metric]}")
    ax.set_title(f"Throughput vs interactivity\n{title}", fontsize=10)
    ax.set_xlim(left=0, right=max(xs) * 1.15)
    ax.set_ylim(bottom=0, top=max(tops) * 1.15)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    files += _save(fig, output / "throughput")
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(12, 4.5), dpi=110)
    levels = [str(r["concurrency"]) for r in run["results"]]
    positions = range(len(levels))
    for ax, key, name in zip(axes, ("ttft_ms", "tpot_ms", "itl_ms"),
                             ("time to first token", "time per output token", "inter-token latency")):
        width = 0.38
        for offset, p, colour in ((-width / 2, "p50", "tab:blue"), (width / 2, "p99", "tab:red")):
            bars = ax.bar([i + offset for i in positions], [r[key][p] for r in run["results"]], width, label=p,
                          color=colour)
            ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)  # a value too small to see still reads
        ax.margins(y=0.12)
        ax.set_xticks(list(positions), levels)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("ms")
        ax.set_title(f"{key.split('_')[0].upper()}: {name}", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Latency percentiles per concurrency: {title}", fontsize=10)
    fig.tight_layout()
    files += _save(fig, output / "latency")
    plt.close(fig)
    return files


def _chart_metric(run: dict) -> str:
    """The per-GPU rate the throughput chart plots: the one the reference publishes (InferenceX's
    headline is total), else total tokens/s per GPU."""
    published = [p["metric"] for p in (run["reference"] or {}).get("points", []) if p["metric"] in PER_GPU]
    return published[0] if published else "total_tokens_per_s_per_gpu"


def _reference_marks(ref: dict, metric: str) -> list:
    """(concurrency, {metric: published}) of each reference point that publishes `metric`."""
    marks: dict = {}
    for p in ref["points"]:
        marks.setdefault(p["concurrency"], {})[p["metric"]] = p["published"]
    return [(at, published) for at, published in marks.items() if metric in published]


def _save(fig, stem: Path) -> List[str]:
    paths = []
    for ext in FORMATS:
        path = stem.with_suffix(f".{ext}")
        image = io.BytesIO()  # drawn in memory, written by the one writer (a link there is replaced)
        fig.savefig(image, format=ext, metadata={"Date": None} if ext == "svg" else None)
        write_file(path, image.getvalue())
        paths.append(str(path))
    return paths


class Progress:
    """A one-line bar on stderr for a terminal: the level, its requests done, the sweep's share."""

    def __init__(self, levels: tuple, stream=None):
        self.levels = levels
        self.stream = stream if stream is not None else sys.stderr
        self.shown = False
        self.finished = 0
        self.live = getattr(self.stream, "isatty", lambda: False)()  # a log gets one line per level

    def __call__(self, index: int, count: int, done: int, total: int) -> None:
        if not self.live:
            if index > self.finished:  # the sweep moved on: the level before is done
                self.finished = index
                self.stream.write(f"bench: concurrency {self.levels[index - 1]} done ({index}/{count})\n")
                self.stream.flush()
            return
        share = (index + (done / total if total else 0)) / count if index < count else 1.0
        filled = int(share * BAR_WIDTH)
        level = self.levels[min(index, count - 1)]
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        self.stream.write(f"\rbench [{bar}] {share:4.0%}  concurrency {level} ({min(index + 1, count)}/{count}): "
                          f"{done}/{total} requests ")
        self.stream.flush()
        self.shown = True

    def end(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
