#!/usr/bin/env python3
"""Image size and rebuild benchmark (run by hand; needs a Docker engine and the stand-in bases).

    python benchmarks/images.py [--runs 3] [--targets all|TARGET,...]   (targets of images/targets.yaml)

Works on a copy of the tracked tree (so editing an entrypoint file never touches the real
checkout) with its own build-context cache. Reports, as medians over --runs:
- the project's layer bytes on top of its base, per layer (target: <= 40 MB);
- a cold build of all targets (`build.py build --no-cache`);
- a warm rebuild of one target after changing one entrypoint source file (target: < 15 s),
  and how many filesystem layers changed (target: 1, the code layer).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from buildsys import standin, targets  # noqa: E402

REGISTRY = "kimi-bench.local/kimi"


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file() or src.is_symlink():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f, follow_symlinks=False)


def build(tree: Path, env: dict, *args) -> tuple:
    started = time.monotonic()
    out = tree / "result.json"
    proc = subprocess.run([sys.executable, str(tree / "build.py"), "build", "--registry", REGISTRY, *args,
                           "--json-out", str(out)], cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"build failed:\n{proc.stderr[-4000:]}")
    return seconds, json.loads(out.read_text())


def project_layers(cli, image: str, base: str):
    """(created_by, bytes) for each layer of image that is not in base."""
    base_n = len(cli.images.get(base).history())
    hist = cli.images.get(image).history()
    ours = hist[: len(hist) - base_n]
    return [(h["CreatedBy"].replace("/bin/sh -c #(nop) ", "")[:60], h["Size"]) for h in reversed(ours) if h["Size"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--targets", default="all")
    ap.add_argument("--warm-target", default=None, help="target for the warm rebuild (default: the first)")
    args = ap.parse_args()
    data = targets.load()
    names = list(data.targets) if args.targets == "all" else args.targets.split(",")
    warm_target = args.warm_target or names[0]
    cli = docker.from_env()
    overrides = []
    for arch in sorted({data.targets[n].arch for n in names}):
        standin.ensure(arch)
    for kind in data.bases:
        overrides += ["--base-override", f"{kind}={standin.image_name('{arch}')}"]

    with tempfile.TemporaryDirectory(prefix="kimi-bench-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(tree)
        env = dict(os.environ, KIMI_BUILD_CACHE=str(Path(tmp) / "cache"))

        # Cold builds of all targets (engine cache off; the first run also prepares the wheels).
        cold = []
        for i in range(args.runs):
            secs, res = build(tree, env, *names, *overrides, "--no-cache")
            cold.append(secs)
            print(f"cold build of {len(names)} targets, run {i + 1}: {secs:.1f}s", flush=True)

        # Layer bytes on top of the base.
        sizes = {}
        for r in res:
            base = standin.image_name(data.targets[r["target"]].arch)
            layers = project_layers(cli, r["image_id"], base)
            sizes[r["target"]] = (sum(b for _, b in layers), layers)

        # Warm rebuilds after changing one entrypoint source file.
        src = tree / "entrypoint" / "__init__.py"
        original = src.read_text()
        build(tree, env, warm_target, *overrides)
        warm, changed_layers, steps = [], [], []
        for i in range(args.runs):
            before = cli.images.get(f"{REGISTRY}/{data.image}:{warm_target}").attrs["RootFS"]["Layers"]
            src.write_text(original + f"\n# benchmark edit {time.time()}\n")
            secs, res = build(tree, env, warm_target, *overrides)
            after = cli.images.get(res[0]["image_id"]).attrs["RootFS"]["Layers"]
            diff = sum(1 for a, b in zip(before, after) if a != b) + abs(len(before) - len(after))
            warm.append(secs)
            changed_layers.append(diff)
            steps.append(res[0]["steps_run"])
            print(f"warm rebuild of {warm_target} after an edit, run {i + 1}: {secs:.1f}s, "
                  f"{diff} layer(s) changed, {res[0]['steps_cached']} steps from cache", flush=True)
        src.write_text(original)

    print("\n== results (medians of", args.runs, "runs)")
    for name, (total, layers) in sizes.items():
        print(f"{name:12} project layers: {total / 1e6:6.2f} MB  " + ", ".join(f"{c.split()[0]} {b / 1e6:.2f} MB" for c, b in layers))
    worst = max(t for t, _ in sizes.values())
    print(f"largest project addition: {worst / 1e6:.2f} MB (target <= 40 MB): {'OK' if worst <= 40e6 else 'OVER'}")
    print(f"cold build of {len(names)} targets: median {statistics.median(cold):.1f}s (runs: {', '.join(f'{x:.1f}' for x in cold)})")
    w = statistics.median(warm)
    print(f"warm rebuild of {warm_target} after one source edit: median {w:.1f}s (runs: {', '.join(f'{x:.1f}' for x in warm)}); "
          f"layers changed: {changed_layers} (target < 15 s, 1 layer): {'OK' if w < 15 and set(changed_layers) == {1} else 'MISSED'}")


if __name__ == "__main__":
    main()
