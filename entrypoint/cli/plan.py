"""`kimi-serve plan`: every process of the configured deployment, or a batch of configurations."""

from __future__ import annotations

import importlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Optional

import click

from entrypoint.app.launch import load_launch
from entrypoint.cli._context import echo, guarded, not_empty, say
from entrypoint.core.base import limits
from entrypoint.core.base.errors import INVALID_VALUE, KimiError

# Deployment renderers: format -> module exposing `render(launch) -> {filename: text}`.
FILE_RENDERERS = {"compose": "entrypoint.render.docker_compose", "k8s": "entrypoint.render.k8s",
                  "sagemaker": "entrypoint.render.sagemaker", "vertex": "entrypoint.render.vertex",
                  "azureml": "entrypoint.render.azureml", "skypilot": "entrypoint.render.skypilot",
                  "k8s-bench": "entrypoint.render.bench_job:K8sBench",
                  "compose-bench": "entrypoint.render.bench_job:ComposeBench",
                  "k8s-verify": "entrypoint.render.bench_job:K8sVerify"}


def _plan_json(launch) -> dict:
    from entrypoint.core.vllm.mask import mask_argv, mask_env

    return {"recipe": launch.plan.recipe,
            "processes": [{"role": p.role, "rank": p.rank, "argv": mask_argv(p.argv), "env": mask_env(p.env),
                           **({"files": dict(p.files)} if p.files else {})} for p in launch.plan.processes]}


def _line_env(line) -> dict:
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KimiError(INVALID_VALUE, f"not UTF-8 text (byte {exc.start})") from None
    if not line.strip():
        raise KimiError(INVALID_VALUE, "an empty line, not a JSON object of KIMI_* variables")
    try:
        env = json.loads(line)
    except RecursionError:
        raise KimiError(INVALID_VALUE, "JSON nested too deep: a line is one flat object") from None
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's digit limit
        raise KimiError(INVALID_VALUE, f"not a JSON object: {str(exc)[:120]}") from None
    if not isinstance(env, dict):
        raise KimiError(INVALID_VALUE, "each line must be a JSON object of KIMI_* variables")
    bad = [k for k, v in env.items() if v is not None and not isinstance(v, (str, int, float, bool))]
    if bad:
        raise KimiError(INVALID_VALUE, f"{bad[0][:80]}: values are strings, numbers or booleans")
    return {str(k): ("" if v is None else str(v)) for k, v in env.items()}


def batch_line(line) -> dict:
    """One JSON-lines entry: an object of KIMI_* variables -> the plan, or an error object. Never
    raises: a line that breaks anything yields an error object for that line."""
    from entrypoint.app.launch import platform_launch
    from entrypoint.core.base.errors import INTERNAL_ERROR
    from entrypoint.core.vllm.mask import mask_output

    env: dict = {}
    try:
        env = _line_env(line)
        # through the one mask, with this line's own secrets: a URL password in KIMI_MODEL or the vLLM
        # arguments is masked here as `plan --format json` masks it (masking keeps the JSON valid)
        return json.loads(mask_output(json.dumps(_plan_json(platform_launch(env))), env))
    except KimiError as err:
        error = err.as_dict()
    except (RecursionError, MemoryError) as err:
        error = {"code": INVALID_VALUE, "message": f"too deep or too large ({type(err).__name__})"}
    except Exception as err:  # noqa: BLE001 - one line must not end the batch
        error = {"code": INTERNAL_ERROR, "message": f"{type(err).__name__}: {str(err)[:200]} (a bug in "
                 "kimi-serve: please report it)"}
    error["message"] = mask_output(error["message"], env)
    return {"error": error}


def _lines(stream):
    """Lines of at most MAX_BATCH_LINE_BYTES; a longer one is skipped to its end and yields None."""
    limit = limits.MAX_BATCH_LINE_BYTES
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = stream.readline(limit)
            yield None
            continue
        yield line.rstrip(b"\r\n")


def _open_batch(path: str):
    if path == "-":
        stdin = sys.stdin
        return getattr(stdin, "buffer", None) or io.BytesIO(stdin.read().encode("utf-8", "surrogateescape"))
    import stat

    try:
        mode = os.stat(path).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):  # /dev/zero: one endless line; a pipe is a stream
            raise KimiError(INVALID_VALUE, f"--batch {path} is a device, not a file of JSON lines: give a file, a "
                            "pipe, or - for standard input.")
        return open(path, "rb")
    except OSError as exc:
        raise KimiError(INVALID_VALUE, f"--batch {path}: cannot read it ({exc.strerror or exc}). Give a file of "
                        "JSON lines, or - for standard input.") from None


def _run_batch(path: str) -> None:
    too_long = {"error": {"code": INVALID_VALUE, "message": f"a line longer than {limits.MAX_BATCH_LINE_BYTES} "
                                                            "bytes"}}
    with _open_batch(path) as stream:
        try:
            for line in _lines(stream):
                echo(json.dumps(batch_line(line) if line is not None else too_long))  # the one mask, as every print
        except OSError as exc:  # a directory opens but cannot be read
            raise KimiError(INVALID_VALUE, f"--batch {path}: cannot read it ({exc.strerror or exc}). Give a file "
                            "of JSON lines, or - for standard input.") from None


def _write_files(files: dict, output: Optional[str]) -> None:
    if output is None:
        for name, text in files.items():
            if len(files) > 1:
                echo(f"# --- {name}")
            echo(text.rstrip("\n"))
        return
    out = Path(output)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in files:  # every target checked before the first is written
            if (out / name).is_dir() and not (out / name).is_symlink():
                raise IsADirectoryError(21, "a directory is in the way", str(out / name))
        for name, text in files.items():
            _write_inside(out, name, text)
            echo(f"wrote {out / name}", err=True)
    except OSError as exc:
        where = exc.filename or output
        raise KimiError(INVALID_VALUE, f"--output {output}: cannot write {where} ({exc.strerror or exc}). Give a "
                        "directory this user can write (it is created if missing), or leave --output out to print "
                        "the files.") from None


def _write_inside(out: Path, name: str, text: str) -> None:
    """`out/name` replaced by a new file through the one writer (core/base/files.write_file): a
    symbolic link already there is replaced, never followed."""
    from entrypoint.core.base.files import write_file

    write_file(out / name, text)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--format", "fmt", type=click.Choice(["shell", "json", *FILE_RENDERERS]), default="shell",
              show_default=True)
@click.option("--batch", "batch", metavar="FILE", callback=not_empty,
              help="JSON lines of KIMI_* objects ('-' = stdin); prints one JSON line per input line.")
@click.option("--output", "output", metavar="DIR", callback=not_empty,
              help="Write the rendered files (compose, k8s, sagemaker, vertex, azureml, skypilot, k8s-bench, "
              "compose-bench, k8s-verify) into DIR.")
@click.option("--check", "check", is_flag=True,
              help="Judge the settings only: render the deployment in memory and print one line (exit 0), or "
              "plan's refusal (exit 2). The Helm chart's pre-install/pre-upgrade hook runs it.")
@guarded
def command(fmt: str, batch: Optional[str], output: Optional[str], check: bool) -> None:
    """Print every process of the deployment: head and workers, prefill, decode and router."""
    if output is not None and (batch is not None or fmt not in FILE_RENDERERS):
        what = "--batch" if batch is not None else f"--format {fmt}"
        raise KimiError(INVALID_VALUE, f"--output writes the files of a rendering ({', '.join(FILE_RENDERERS)}); "
                        f"{what} prints to standard output: redirect it (> FILE), or drop --output.")
    if batch is not None:
        _run_batch(batch)
        return
    if check and output is not None:
        raise KimiError(INVALID_VALUE, "--check writes nothing: give --check or --output, not both.")
    if fmt in FILE_RENDERERS:
        _render_files(fmt, output, check)
        return
    launch = load_launch()
    if check:
        echo(f"ok: {launch.plan.headline(launch.catalog.recipe.title)}")
        return
    for note in launch.notes:  # the interface this machine's routing chose (KIMI_IFACE unset)
        say(note, level="note")
    if fmt == "json":
        echo(json.dumps(_plan_json(launch), indent=2))
    elif fmt == "shell":
        from entrypoint.render.shell import render_plan

        echo(render_plan(launch.plan, [launch.plan.headline(launch.catalog.recipe.title)]))


def _render_files(fmt: str, output: Optional[str], check: bool = False) -> None:
    """A deployment is built from the rendering environment plus the addresses it gives its own
    containers (pod DNS names, loopback); never from this machine's network (no cluster wiring)."""
    from entrypoint.app.deploy import deployment_files

    path, _, attribute = FILE_RENDERERS[fmt].partition(":")
    module = importlib.import_module(path)
    module = getattr(module, attribute) if attribute else module
    notes: list = []
    files = deployment_files(module, notes=notes)
    for note in notes:  # the interface between the nodes, when KIMI_IFACE is unset
        say(note, level="note")
    if check:
        echo(f"ok: kimi-serve plan renders the {fmt} deployment ({', '.join(sorted(files))}); every "
             "container judges its own launch again when it starts")
        return
    _write_files(files, output)
