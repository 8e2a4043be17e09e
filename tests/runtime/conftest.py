"""Helpers for runtime tests: fake GPU tools on PATH, fake sysfs trees, fake /proc files, and
NodeFacts built by hand. Nothing here needs a GPU or a network beyond 127.0.0.1."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TOOLS = FIXTURES / "tools"
NVIDIA_IDS = ("h100", "h200", "b200", "gb200", "b300", "gb300")
AMD_IDS = ("mi300x", "mi325x", "mi350x", "mi355x")
GFX_VERSION = {"gfx942": 90402, "gfx950": 90500}


class FakeTools:
    """A bin directory holding fake executables; `env` is an environment whose PATH is only it."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        bindir.mkdir(exist_ok=True)

    def add(self, name: str, output: str = "", rc: int = 0, by_arg: Optional[dict] = None) -> "FakeTools":
        """`output` (a fixture path or text) on stdout; `by_arg`: {argument: output} picked by the
        first argument seen among the keys (e.g. rocm-smi --showfw)."""
        lines = ["#!/bin/sh"]
        for arg, out in (by_arg or {}).items():
            lines.append(f'case " $* " in *" {arg} "*) exec /bin/cat {shlex.quote(_as_file(self.bindir, out))};; esac')
        lines.append(f"/bin/cat {shlex.quote(_as_file(self.bindir, output))}")
        lines.append(f"exit {rc}")
        exe = self.bindir / name
        exe.write_text("\n".join(lines) + "\n")
        exe.chmod(0o755)
        return self

    @property
    def env(self) -> dict:
        return {"PATH": str(self.bindir)}


def _as_file(bindir: Path, output) -> str:
    if isinstance(output, Path):
        return str(output)
    path = bindir.parent / f"out-{abs(hash(output))}.txt"
    path.write_text(output)
    return str(path)


@pytest.fixture()
def fake_tools(tmp_path):
    return FakeTools(tmp_path / "bin")


def make_kfd_tree(root: Path, gfx: str, vram_bytes: int, count: int = 8, product_name: str = "",
                  mec_fw: Optional[int] = None) -> Path:
    """A sysfs tree as the amdgpu driver lays it out: a CPU node 0, then one KFD node per GPU."""
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0" / "properties").write_text("cpu_cores_count 96\nsimd_count 0\ngfx_target_version 0\n")
    for i in range(count):
        minor = 128 + i
        node = nodes / str(i + 1)
        node.mkdir()
        node.joinpath("properties").write_text(
            f"cpu_cores_count 0\nsimd_count 1216\ngfx_target_version {GFX_VERSION[gfx]}\n"
            f"drm_render_minor {minor}\nunique_id {1000 + i}\n")
        device = root / "sys/class/drm" / f"renderD{minor}" / "device"
        device.mkdir(parents=True)
        device.joinpath("mem_info_vram_total").write_text(f"{vram_bytes}\n")
        if product_name:
            device.joinpath("product_name").write_text(product_name + "\n")
        if mec_fw is not None:
            fw = root / "sys/class/drm" / f"card{i}" / "device" / "fw_version"
            fw.mkdir(parents=True)
            fw.joinpath("mec_fw_version").write_text(f"0x{mec_fw:08x}\n")
    return root


def route_file(proc_root: Path, rows) -> Path:
    """/proc/net/route with rows (iface, dest_hex, gateway_hex, mask_hex)."""
    (proc_root / "net").mkdir(parents=True, exist_ok=True)
    text = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    text += "".join(f"{i}\t{d}\t{g}\t0003\t0\t0\t0\t{m}\t0\t0\t0\n" for i, d, g, m in rows)
    (proc_root / "net" / "route").write_text(text)
    return proc_root
