#!/usr/bin/env python3
"""`kimi-serve print` wall time against its floors (run by hand; not a test).

    python benchmarks/startup.py [--runs 15]                  # this checkout
    python benchmarks/startup.py [--runs 15] --image IMAGE    # inside a built image, arbitrary UID

Each command runs --runs times, interleaved (so machine noise hits all alike); median wall time
of each, and the ratios:
- `python -c pass`                                      the interpreter alone
- `python -c 'import pydantic, yaml, click'`            the dependency-import floor (issue #2)
- `python -c 'import yaml, click; from pydantic import BaseModel; class M(BaseModel): ...'`
                                                        the dependencies with pydantic's model
                                                        machinery, which it loads only with the first
                                                        model class (what validating the recipe data
                                                        costs; a start with unchanged data reads the
                                                        validated-catalog cache and skips it)
- `kimi-serve print` (the image's hardware, or --hardware) the real command
In a checkout the package is byte-compiled first (the image does it at build), since
PYTHONDONTWRITEBYTECODE would otherwise make every run recompile it. In an image everything runs
as the image's `python3 -I` with /opt/kimi/lib first, under an arbitrary UID (which cannot write
.pyc files). Targets (issue #2): print <= 1.3 x the dependency floor, and < 200 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

FLOOR = "import yaml, click\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    x: int = 0"


def commands(inside_image: bool) -> dict:
    if inside_image:
        py = ["python3", "-I", "-c"]
        lib = "import sys; sys.path.insert(0, '/opt/kimi/lib')\n"
        return {"python -c pass": py + ["pass"],
                "import deps": py + [lib + "import pydantic, yaml, click"],
                "import models": py + [lib + FLOOR],
                "kimi-serve print": ["kimi-serve", "print"]}
    return {"python -c pass": [sys.executable, "-c", "pass"],
            "import deps": [sys.executable, "-c", "import pydantic, yaml, click"],
            "import models": [sys.executable, "-c", FLOOR],
            "kimi-serve print": [sys.executable, "-m", "entrypoint", "print"]}


HARDWARE = {}  # KIMI_HARDWARE for a run in a checkout (an image knows its own)


def default_hardware() -> str:
    """The hardware of images/targets.yaml's default target (what scripts/demo.sh builds)."""
    import yaml
    from pathlib import Path

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "images" / "targets.yaml").read_text())
    return data["targets"][data["default_target"]]["hardware"]


def once(argv) -> float:
    env = {**os.environ, **HARDWARE}
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def measure(runs: int, inside_image: bool) -> None:
    cmds = commands(inside_image)
    if not inside_image:
        import compileall
        from pathlib import Path

        compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "entrypoint"), quiet=1)
    samples = {name: [] for name in cmds}
    for argv in cmds.values():  # warm the page cache
        once(argv)
    for _ in range(runs):
        for name, argv in cmds.items():
            samples[name].append(once(argv))
    med = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    for name, ms in med.items():
        print(f"{name:18s} median {ms:7.1f} ms  (min {min(samples[name]) * 1000:.1f}, "
              f"max {max(samples[name]) * 1000:.1f}, runs {runs})")
    ratio = med["kimi-serve print"] / med["import deps"]
    print(f"print / dependency floor = {ratio:.2f} (target <= 1.30)")
    print(f"print / deps with models = {med['kimi-serve print'] / med['import models']:.2f}")
    print(f"print / bare python      = {med['kimi-serve print'] / med['python -c pass']:.2f}")
    print(f"print under 200 ms: {'yes' if med['kimi-serve print'] < 200 else 'no'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--image", help="measure inside this built image (docker run, --network none)")
    parser.add_argument("--hardware", help="KIMI_HARDWARE in a checkout (default: the default target's)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if not (opts.image or opts.inside):
        HARDWARE["KIMI_HARDWARE"] = opts.hardware or default_hardware()
    if opts.image:
        with open(__file__, "rb") as script:
            subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", "--user", "12345",
                            "--entrypoint", "python3", opts.image, "-", "--runs", str(opts.runs), "--inside"],
                           stdin=script, check=True)
        return
    measure(opts.runs, opts.inside)


if __name__ == "__main__":
    main()
