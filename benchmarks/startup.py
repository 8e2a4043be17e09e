#!/usr/bin/env python3
"""`kimi-serve print` wall time against its floors (run by hand; not a test).

    python benchmarks/startup.py [--runs 15] [--json FILE]    # this checkout
    python benchmarks/startup.py [--runs 15] --image IMAGE    # inside a built image, arbitrary UID
    python benchmarks/startup.py --instructions [--compare DIR] [--json FILE]   # valgrind's count

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
- `kimi-serve print` with KIMI_KV_OFFLOAD=lmcache         a launch that reads the KV part of the
                                                        catalog (from the cache, as JSON)
Wall time and CPU time (user + system of the child: steadier on a machine shared with other work)
are both reported. In a checkout the package is byte-compiled first (the image does it at build), since
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


COMPARE = {}  # --compare DIR: `kimi-serve print` of another checkout, measured in the same runs


def commands(inside_image: bool) -> dict:
    if inside_image:
        py = ["python3", "-I", "-c"]
        lib = "import sys; sys.path.insert(0, '/opt/kimi/lib')\n"
        return {"python -c pass": py + ["pass"],
                "import deps": py + [lib + "import pydantic, yaml, click"],
                "import models": py + [lib + FLOOR],
                "kimi-serve print": ["kimi-serve", "print"],
                "print, KV offload": ["env", "KIMI_KV_OFFLOAD=lmcache", "kimi-serve", "print"]}
    return {"python -c pass": [sys.executable, "-c", "pass"],
            "import deps": [sys.executable, "-c", "import pydantic, yaml, click"],
            "import models": [sys.executable, "-c", FLOOR],
            "kimi-serve print": [sys.executable, "-m", "entrypoint", "print"],
            "print, KV offload": ["env", "KIMI_KV_OFFLOAD=lmcache", sys.executable, "-m", "entrypoint", "print"],
            # run in DIR: `-m` puts the working directory first on sys.path
            **{f"print of {name}": ["env", "-C", path, f"PYTHONPATH={path}", sys.executable, "-m", "entrypoint",
                                    "print"] for name, path in COMPARE.items()}}


HARDWARE = {}  # KIMI_HARDWARE for a run in a checkout (an image knows its own)


def default_hardware() -> str:
    """The hardware of images/targets.yaml's default target (what scripts/demo.sh builds)."""
    import yaml
    from pathlib import Path

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "images" / "targets.yaml").read_text())
    return data["targets"][data["default_target"]]["hardware"]


CPU = {}  # name -> CPU seconds (user + system) of each run: steadier than wall time on a shared machine


def once(argv, name: str = "") -> float:
    env = {**os.environ, **HARDWARE}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv)
    CPU.setdefault(name, []).append(usage.ru_utime + usage.ru_stime)
    return wall


def _compile() -> None:
    import compileall
    from pathlib import Path

    for root in [Path(__file__).resolve().parents[1], *map(Path, COMPARE.values())]:
        compileall.compile_dir(str(root / "entrypoint"), quiet=1)


def measure(runs: int, inside_image: bool, json_path: str = "") -> None:
    cmds = commands(inside_image)
    if not inside_image:
        _compile()
    samples = {name: [] for name in cmds}
    for argv in cmds.values():  # warm the page cache
        once(argv)
    for _ in range(runs):
        for name, argv in cmds.items():
            samples[name].append(once(argv, name))
    med = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    for name, ms in med.items():
        print(f"{name:18s} median {ms:7.1f} ms  (min {min(samples[name]) * 1000:.1f}, "
              f"max {max(samples[name]) * 1000:.1f}, runs {runs})")
    cpu = {name: statistics.median(CPU[name]) * 1000 for name in samples}
    for name, ms in cpu.items():
        print(f"{name:18s} CPU median {ms:7.1f} ms (user + system)")
    ratio = med["kimi-serve print"] / med["import deps"]
    print(f"print / dependency floor = {ratio:.2f} (target <= 1.30); in CPU time "
          f"{cpu['kimi-serve print'] / cpu['import deps']:.2f}")
    if "print, KV offload" in med:
        print(f"print, KV offload / dependency floor = {med['print, KV offload'] / med['import deps']:.2f}; in CPU "
              f"time {cpu['print, KV offload'] / cpu['import deps']:.2f}")
    for name in (n for n in med if n.startswith("print of ")):
        print(f"{name} / dependency floor = {med[name] / med['import deps']:.2f}; in CPU time "
              f"{cpu[name] / cpu['import deps']:.2f}")
    print(f"print / deps with models = {med['kimi-serve print'] / med['import models']:.2f}")
    print(f"print / bare python      = {med['kimi-serve print'] / med['python -c pass']:.2f}")
    print(f"print under 200 ms: {'yes' if med['kimi-serve print'] < 200 else 'no'}")
    if json_path:
        import platform

        figures = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs,
                   "python": platform.python_version(), "machine": platform.machine(),
                   "cpus": os.cpu_count(), "commit": _commit(), **_provenance(),
                   "median_ms": {name: round(ms, 1) for name, ms in med.items()},
                   "min_ms": {name: round(min(v) * 1000, 1) for name, v in samples.items()},
                   "cpu_median_ms": {name: round(ms, 1) for name, ms in cpu.items()},
                   "cpu_ratio_print_to_deps": round(cpu["kimi-serve print"] / cpu["import deps"], 3),
                   **{f"cpu_ratio_{name}_to_deps": round(cpu[name] / cpu["import deps"], 3) for name in cpu
                      if name.startswith("print of ")},
                   "ratio_print_to_deps": round(ratio, 3),
                   "ratio_print_to_deps_min": round(min(samples["kimi-serve print"]) / min(samples["import deps"]), 3),
                   **{f"ratio_{name}_to_deps": round(med[name] / med["import deps"], 3) for name in med
                      if name.startswith("print of ")},
                   "ratio_print_kv_to_deps": round(med.get("print, KV offload", 0) / med["import deps"], 3),
                   "cpu_ratio_print_kv_to_deps": round(cpu.get("print, KV offload", 0) / cpu["import deps"], 3),
                   "target": "print <= 1.30 x import deps"}
        _write_json(json_path, figures)


def _write_json(path: str, figures: dict) -> None:
    import json

    with open(path, "w", encoding="utf-8") as fh:
        json.dump(figures, fh, indent=2)
        fh.write("\n")
    print(f"wrote {path}")


def _commit(where: str = "") -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=where or os.path.dirname(os.path.abspath(__file__)), timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _provenance() -> dict:
    """How the figures were made: the command line, and the commit of each --compare checkout."""
    found = {"command": " ".join(["python", "benchmarks/startup.py", *sys.argv[1:]])}
    if COMPARE:
        found["compare"] = {name: {"path": path, "commit": _commit(path)} for name, path in COMPARE.items()}
    return found


def instructions(argv) -> int:
    """Instructions the command executes (valgrind's callgrind `Collected`): a count that other
    work on the machine does not change, unlike wall or CPU time."""
    import re

    env = {**os.environ, **HARDWARE}
    done = subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", "--callgrind-out-file=/dev/null",
                           *argv], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(re.findall(r"Collected : ([0-9]+)", done.stderr)[-1])  # the program `env` execs, if any


def count(json_path: str = "") -> None:
    cmds = commands(False)
    if COMPARE:
        for name, path in COMPARE.items():
            cmds[f"print of {name}, KV offload"] = ["env", "-C", path, f"PYTHONPATH={path}", "KIMI_KV_OFFLOAD=lmcache",
                                                    sys.executable, "-m", "entrypoint", "print"]
    _compile()
    for argv in cmds.values():  # fill the validated-catalog caches and the .pyc files first
        once(argv)
    counts = {name: instructions(argv) for name, argv in cmds.items()}
    for name, n in counts.items():
        print(f"{name:30s} {n / 1e6:9.1f} M instructions  ({n / counts['import deps']:.2f} x import deps)")
    if json_path:
        import platform

        figures = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": platform.python_version(),
                   "commit": _commit(), **_provenance(),
                   "method": "valgrind --tool=callgrind, instructions of one run each",
                   "instructions": counts,
                   "ratio_to_import_deps": {n: round(c / counts["import deps"], 3) for n, c in counts.items()},
                   "target": "print <= 1.30 x import deps"}
        _write_json(json_path, figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--image", help="measure inside this built image (docker run, --network none)")
    parser.add_argument("--hardware", help="KIMI_HARDWARE in a checkout (default: the default target's)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default="", help="also write the figures to this file (benchmarks/results/)")
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind "
                        "(one run each: a figure other work on the machine does not move) instead of timing")
    parser.add_argument("--compare", metavar="DIR", help="also time `print` of the checkout in DIR (e.g. a "
                        "`git worktree` of the base), interleaved with the others")
    opts = parser.parse_args()
    if opts.compare:
        COMPARE[os.path.basename(os.path.abspath(opts.compare))] = os.path.abspath(opts.compare)
    if not (opts.image or opts.inside):
        HARDWARE["KIMI_HARDWARE"] = opts.hardware or default_hardware()
    if opts.image:
        with open(__file__, "rb") as script:
            subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", "--user", "12345",
                            "--entrypoint", "python3", opts.image, "-", "--runs", str(opts.runs), "--inside"],
                           stdin=script, check=True)
        return
    if opts.instructions:
        count(opts.json)
        return
    measure(opts.runs, opts.inside, opts.json)


if __name__ == "__main__":
    main()
