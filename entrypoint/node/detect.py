"""What GPUs this node has, and which hardware id of recipes/hardware.yaml they are.

Probes, tried in order until one finds GPUs: NVML (nvidia-ml-py), `nvidia-smi`, `amd-smi`,
`rocm-smi`, then the kernel's sysfs (KFD topology + DRM). Each probe tolerates a missing tool or
library and garbage output, and says what it saw. The mapping to a hardware id uses only the data
of recipes/hardware.yaml (`detect.names`, `detect.memory_gb`, `gfx`), never a per-target branch.

Tool look-ups use `environ["PATH"]` and sysfs reads go under `root`, so tests run fake tools and
fake sysfs trees.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from entrypoint.core.base import limits
from entrypoint.core.base.files import read_text_capped
from entrypoint.core.data.recipe import load_catalog

GIB = 1024 ** 3
MIB = 1024 ** 2
TOOL_TIMEOUT_S = limits.TOOL_DEADLINE_S
MEMORY_TOLERANCE = 0.12  # detected per-GPU memory within 12% of the profile's nominal size


@dataclass(frozen=True)
class Gpu:
    index: int  # physical index as the tool numbers it
    name: str  # product name as reported ("" when the probe has none)
    memory_bytes: int
    brand: str  # nvidia | amd
    uuid: str = ""
    gfx: Optional[str] = None  # AMD gfx target, e.g. gfx942

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


@dataclass(frozen=True)
class Probe:
    source: str  # nvml | nvidia-smi | amd-smi | rocm-smi | sysfs
    gpus: tuple  # of Gpu, every GPU the probe saw
    saw: str  # one line: what it found, or why it found nothing


@dataclass(frozen=True)
class Detection:
    hardware: Optional[str]  # hardware id, None when nothing (or nothing known) was found
    gpus: tuple  # of Gpu: those this process may use (visibility variables applied)
    source: str  # the probe that found them ("" when none did)
    reason: str  # how the id was chosen, or why none was
    probes: tuple = field(default_factory=tuple)  # every probe tried, in order

    @property
    def count(self) -> int:
        return len(self.gpus)

    def summary(self) -> str:
        if not self.gpus:
            return "no GPU found (" + "; ".join(f"{p.source}: {p.saw}" for p in self.probes) + ")"
        first = self.gpus[0]
        return f"{self.count} x {first.name or first.gfx or 'GPU'} ({first.memory_gib:.1f} GiB each) via {self.source}"

    def as_dict(self) -> dict:
        return {
            "hardware": self.hardware, "count": self.count, "source": self.source, "reason": self.reason,
            "gpus": [{"index": g.index, "name": g.name, "memory_gib": round(g.memory_gib, 1), "brand": g.brand,
                      "uuid": g.uuid, "gfx": g.gfx} for g in self.gpus],
            "probes": [{"source": p.source, "gpus": len(p.gpus), "saw": p.saw} for p in self.probes],
        }


# ---------------------------------------------------------------- running tools


def _capture(argv: List[str], environ: Mapping[str, str]) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of a tool, within TOOL_TIMEOUT_S in total and
    MAX_TOOL_OUTPUT_BYTES per stream; a tool past either is killed (subprocess.TimeoutExpired /
    ValueError)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(environ))
    out: Dict[Any, bytearray] = {proc.stdout: bytearray(), proc.stderr: bytearray()}  # by stream (a selector key's fileobj)
    deadline = time.monotonic() + TOOL_TIMEOUT_S
    try:
        with selectors.DefaultSelector() as sel:
            for stream in out:
                sel.register(stream, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, TOOL_TIMEOUT_S)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    out[key.fileobj] += data
                    if len(out[key.fileobj]) > limits.MAX_TOOL_OUTPUT_BYTES:
                        raise ValueError(f"more than {limits.MAX_TOOL_OUTPUT_BYTES} bytes of output")
        code = proc.wait(max(deadline - time.monotonic(), 0.1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return code, out[proc.stdout].decode("utf-8", "replace"), out[proc.stderr].decode("utf-8", "replace")


def _run_tool(tool: str, args: Sequence[str], environ: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """(stdout, "") or (None, why it gave nothing)."""
    import subprocess  # noqa: PLC0415 - imported here, with shutil: `print` never runs a tool (tests/architecture)

    exe = shutil.which(tool, path=environ.get("PATH", os.defpath))
    if exe is None:
        return None, "not installed"
    try:
        code, stdout, stderr = _capture([exe, *args], environ)
    except subprocess.TimeoutExpired:
        return None, f"no answer within {TOOL_TIMEOUT_S:g} s (killed)"
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return None, f"could not run ({exc.__class__.__name__}: {exc})"
    if code != 0:
        tail = (stderr or stdout).strip().splitlines()
        return None, f"exit {code}" + (f": {tail[-1][:160]}" if tail else "")
    return stdout, ""


# A number as GPU tools print them: ASCII digits, at most 15 before and 9 after the point (more is
# not a memory size or an index; 400 digits would overflow a float).
_NUMBER = re.compile(r"(?<![0-9])[-+]?[0-9]{1,15}(?:\.[0-9]{1,9})?(?![0-9.])")


def _number(text) -> Optional[float]:
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return float(text) if abs(text) < 10 ** 15 else None
    if isinstance(text, float):
        return text if text == text and abs(text) < 1e15 else None
    match = _NUMBER.search(str(text)[:200])
    return float(match.group(0)) if match else None


_UNIT_BYTES = {"b": 1, "kb": 1024, "kib": 1024, "mb": MIB, "mib": MIB, "gb": GIB, "gib": GIB}


def _bytes(value, default_unit: str) -> Optional[int]:
    """'196592 MB', {'value': 196592, 'unit': 'MB'}, 206158430208 -> bytes (tools say MB for MiB)."""
    unit = default_unit
    if isinstance(value, dict):
        unit = str(value.get("unit", unit))
        value = value.get("value")
    else:
        match = re.search(r"([KMG]i?B|B)\b", str(value), re.I)
        unit = match.group(1) if match else unit
    number = _number(value)
    if number is None or number <= 0:
        return None
    size = int(number * _UNIT_BYTES.get(unit.lower(), 1))
    return size if size <= limits.MAX_GPU_MEMORY_BYTES else None


# ---------------------------------------------------------------- NVIDIA


def probe_nvml(environ: Mapping[str, str]) -> Probe:
    try:
        import pynvml  # noqa: PLC0415 - nvidia-ml-py
    except ImportError:
        return Probe("nvml", (), "nvidia-ml-py not installed")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Probe("nvml", (), f"no driver ({exc})")
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            gpus.append(Gpu(i, name.decode() if isinstance(name, bytes) else str(name),
                            int(pynvml.nvmlDeviceGetMemoryInfo(handle).total), "nvidia",
                            uuid.decode() if isinstance(uuid, bytes) else str(uuid)))
    except Exception as exc:  # noqa: BLE001
        return Probe("nvml", (), f"query failed ({exc})")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return Probe("nvml", tuple(gpus), f"{len(gpus)} GPU(s)")


NVIDIA_SMI_QUERY = ("--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits")


def parse_nvidia_smi(text: str) -> Tuple[tuple, List[str]]:
    gpus, bad = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        mem = _number(parts[2]) if len(parts) >= 3 else None
        if len(parts) < 3 or not re.fullmatch(r"[0-9]{1,4}", parts[0]) or mem is None or mem <= 0 \
                or mem * MIB > limits.MAX_GPU_MEMORY_BYTES:
            bad.append(line.strip()[:80])
            continue
        uuid = parts[3][:200] if len(parts) > 3 else ""
        gpus.append(Gpu(int(parts[0]), parts[1][:200], int(mem * MIB), "nvidia", uuid))
    return _capped(gpus, bad)


def _capped(gpus: list, bad: list) -> Tuple[tuple, List[str]]:
    if len(gpus) > limits.MAX_GPUS_PER_NODE:
        bad.append(f"{len(gpus) - limits.MAX_GPUS_PER_NODE} GPU(s) past {limits.MAX_GPUS_PER_NODE} per node")
        gpus = gpus[:limits.MAX_GPUS_PER_NODE]
    return tuple(gpus), bad


def probe_nvidia_smi(environ: Mapping[str, str]) -> Probe:
    out, why = _run_tool("nvidia-smi", NVIDIA_SMI_QUERY, environ)
    if out is None:
        return Probe("nvidia-smi", (), why)
    gpus, bad = parse_nvidia_smi(out)
    return Probe("nvidia-smi", gpus, _saw(gpus, bad))


def _saw(gpus, bad) -> str:
    text = f"{len(gpus)} GPU(s)"
    if bad:
        text += f"; ignored {len(bad)} unreadable line(s), first: {bad[0]!r}"
    return text


# ---------------------------------------------------------------- AMD


def _ci_get(mapping: dict, *keys, default=None):
    lowered = {str(k).lower(): v for k, v in mapping.items()}
    for key in keys:
        if key.lower() in lowered:
            return lowered[key.lower()]
    return default


def parse_amd_smi(text: str) -> Tuple[tuple, List[str]]:
    """`amd-smi static --asic --vram --json`: a list of GPUs, or {"gpu_data": [...]} (ROCm >= 6.4)."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = _ci_get(data, "gpu_data", default=[data])
    gpus, bad = [], []
    for pos, entry in enumerate(data if isinstance(data, list) else []):
        if not isinstance(entry, dict):
            bad.append(repr(entry)[:80])
            continue
        asic = _ci_get(entry, "asic", default={}) or {}
        vram = _ci_get(entry, "vram", default={}) or {}
        size = _bytes(_ci_get(vram, "size", default=None), "MB") if isinstance(vram, dict) else None
        name = str(_ci_get(asic, "market_name", default="") or "") if isinstance(asic, dict) else ""
        if size is None and not name:
            bad.append(repr(entry)[:80])
            continue
        gfx = _ci_get(asic, "target_graphics_version", default=None) if isinstance(asic, dict) else None
        index = _number(_ci_get(entry, "gpu", default=pos))
        gpus.append(Gpu(int(index if index is not None else pos), name[:200], size or 0, "amd",
                        str(_ci_get(asic, "asic_serial", default="") or "")[:200], _gfx_name(gfx)))
    return _capped(gpus, bad)


def parse_rocm_smi(text: str) -> Tuple[tuple, List[str]]:
    """`rocm-smi --showproductname --showmeminfo vram --json`: {"card0": {...}, ...}."""
    data = json.loads(text)
    gpus, bad = [], []
    for key, card in (data.items() if isinstance(data, dict) else []):
        match = re.fullmatch(r"card([0-9]{1,4})", str(key))
        if not match:
            continue  # "system" and other non-card entries
        if not isinstance(card, dict):
            bad.append(f"{key}: {card!r}"[:80])
            continue
        size = _bytes(_ci_get(card, "VRAM Total Memory (B)", default=""), "B")
        name = str(_ci_get(card, "Card Series", "Card series", "Card SKU", default="") or "")
        if size is None and not name:
            bad.append(f"{key}: {card!r}"[:80])
            continue
        gpus.append(Gpu(int(match.group(1)), name[:200], size or 0, "amd",
                        str(_ci_get(card, "Unique ID", default="") or "")[:200],
                        _gfx_name(_ci_get(card, "GFX Version", default=None))))
    return _capped(gpus, bad)


def _json_probe(source: str, tool: str, args: Sequence[str], parse: Callable, environ) -> Probe:
    out, why = _run_tool(tool, args, environ)
    if out is None:
        return Probe(source, (), why)
    try:
        gpus, bad = parse(out)
    except (ValueError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
        return Probe(source, (), f"unreadable output ({exc.__class__.__name__}: {str(out).strip()[:60]!r})")
    return Probe(source, gpus, _saw(gpus, bad))


def probe_amd_smi(environ: Mapping[str, str]) -> Probe:
    return _json_probe("amd-smi", "amd-smi", ("static", "--asic", "--vram", "--json"), parse_amd_smi, environ)


def probe_rocm_smi(environ: Mapping[str, str]) -> Probe:
    return _json_probe("rocm-smi", "rocm-smi", ("--showproductname", "--showmeminfo", "vram", "--json"),
                       parse_rocm_smi, environ)


def _gfx_name(value) -> Optional[str]:
    """'gfxNNN', 'GFXNNN', a KFD gfx_target_version (90402 = major 9, minor 4, stepping 2) -> 'gfxNNN'."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if re.fullmatch(r"gfx[0-9a-f]+", text):
        return text
    if re.fullmatch(r"[0-9]{1,9}", text) and int(text) > 0:
        v = int(text)
        return f"gfx{v // 10000}{(v // 100) % 100:x}{v % 100:x}"
    return None


def _read(path: Path) -> Optional[str]:
    try:
        return read_text_capped(path, limits.MAX_NODE_FILE_BYTES).strip()
    except OSError:
        return None


def probe_sysfs(root: str = "/") -> Probe:
    """KFD topology nodes with a GPU (gfx_target_version != 0), memory from their DRM device."""
    nodes_dir = Path(root, "sys/class/kfd/kfd/topology/nodes")
    if not nodes_dir.is_dir():
        return Probe("sysfs", (), f"no {nodes_dir.relative_to(root)} (no amdgpu driver)")
    gpus: List[Gpu] = []
    bad: List[str] = []
    def order(p: Path) -> int:
        return int(p.name) if re.fullmatch(r"[0-9]{1,6}", p.name) else 1 << 30

    for node in sorted(nodes_dir.iterdir(), key=order):
        props = {}
        for line in (_read(node / "properties") or "").splitlines():
            parts = line.split()
            if len(parts) == 2:
                props[parts[0]] = parts[1]
        gfx = _gfx_name(props.get("gfx_target_version"))
        if gfx is None:
            if "gfx_target_version" not in props:
                bad.append(f"node {node.name}")
            continue  # a CPU node (gfx_target_version 0)
        device = Path(root, "sys/class/drm", f"renderD{props.get('drm_render_minor', '')}", "device")
        memory = _bytes(_read(device / "mem_info_vram_total") or "", "B")
        gpus.append(Gpu(len(gpus), _read(device / "product_name") or "", memory or 0, "amd",
                        props.get("unique_id", ""), gfx))
    return Probe("sysfs", tuple(gpus), _saw(gpus, bad))


# ---------------------------------------------------------------- visibility


def _select(gpus: Sequence[Gpu], spec: Optional[str]) -> List[Gpu]:
    """Apply one *_VISIBLE_DEVICES value (indices into `gpus` or UUIDs); unset = all."""
    if spec is None or spec.strip().lower() == "all":
        return list(gpus)
    chosen = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            break  # CUDA_VISIBLE_DEVICES="" hides every GPU
        if re.fullmatch(r"[0-9]{1,4}", item):
            if int(item) >= len(gpus):
                break  # CUDA/HIP stop at the first invalid entry
            chosen.append(gpus[int(item)])
            continue
        match = [g for g in gpus if g.uuid and (g.uuid.startswith(item) or g.uuid.startswith("GPU-" + item))]
        if not match:
            break
        chosen.append(match[0])
    return chosen


def visible_gpus(gpus: Sequence[Gpu], environ: Mapping[str, str]) -> tuple:
    """GPUs a process started with `environ` can use (NVML and the tools ignore these variables)."""
    ordered = sorted(gpus, key=lambda g: g.index)
    if ordered and ordered[0].brand == "amd":
        ordered = _select(ordered, environ.get("ROCR_VISIBLE_DEVICES"))
        return tuple(_select(ordered, environ.get("HIP_VISIBLE_DEVICES", environ.get("CUDA_VISIBLE_DEVICES"))))
    return tuple(_select(ordered, environ.get("CUDA_VISIBLE_DEVICES")))


# ---------------------------------------------------------------- hardware id


def _name_tokens(name: str) -> set:
    return {t for t in re.split(r"[^a-z0-9]+", name.lower()) if t}


def match_hardware(gpu: Gpu, catalog) -> Tuple[Optional[str], str]:
    """Hardware id for one GPU from the profiles' detect data: name first, memory to choose among
    several (two products whose names share a token), gfx + memory when the probe gives no name (sysfs)."""
    profiles = {hid: hw for hid, hw in catalog.hardware.items() if hw.brand == gpu.brand and hw.detect is not None}
    tokens = _name_tokens(gpu.name)
    by_name = [hid for hid, hw in profiles.items() if any(n.lower() in tokens for n in hw.detect.names)]
    if by_name:
        candidates, basis = by_name, f"name {gpu.name!r}"
    else:
        candidates = [hid for hid, hw in profiles.items() if gpu.gfx and hw.gfx == gpu.gfx]
        basis = f"{gpu.gfx} and {gpu.memory_gib:.0f} GiB" if candidates else ""
    if not candidates:
        return None, (f"{gpu.brand} GPU {gpu.name or gpu.gfx or '?'!r} ({gpu.memory_gib:.0f} GiB) matches no profile "
                      f"of recipes/hardware.yaml")
    if len(candidates) > 1 and gpu.memory_bytes:
        def distance(hid):
            return abs(gpu.memory_gib - profiles[hid].detect.memory_gb) / profiles[hid].detect.memory_gb
        close = [hid for hid in candidates if distance(hid) <= MEMORY_TOLERANCE]
        nearest = min(close, key=distance) if close else None
        candidates = [hid for hid in close if distance(hid) == distance(nearest)] if close else []
    if len(candidates) != 1:
        names = " or ".join(sorted(set(candidates))) or "none of the profiles"
        return None, f"{basis} fits {names}: set KIMI_HARDWARE explicitly"
    return candidates[0], f"{basis} -> {candidates[0]}"


def identify(probe: Probe, environ: Mapping[str, str], catalog) -> Detection:
    gpus = visible_gpus(probe.gpus, environ)
    if not gpus:
        why = f"{len(probe.gpus)} GPU(s) found but none visible (CUDA/HIP/ROCR_VISIBLE_DEVICES)"
        return Detection(None, (), probe.source, why)
    ids = {match_hardware(g, catalog) for g in gpus}
    if len({hid for hid, _ in ids}) > 1:
        return Detection(None, gpus, probe.source, "mixed GPU models: " + "; ".join(sorted(r for _, r in ids)))
    hid, reason = next(iter(ids))
    return Detection(hid, gpus, probe.source, reason)


def detect(environ: Mapping[str, str], root: str = "/", catalog=None, use_nvml: bool = True) -> Detection:
    """Run the probes in order; the first that finds GPUs decides."""
    catalog = catalog or load_catalog()
    probes = [("nvml", lambda: probe_nvml(environ))] if use_nvml else []
    probes += [("nvidia-smi", lambda: probe_nvidia_smi(environ)), ("amd-smi", lambda: probe_amd_smi(environ)),
               ("rocm-smi", lambda: probe_rocm_smi(environ)), ("sysfs", lambda: probe_sysfs(root))]
    seen = []
    for source, run in probes:
        try:
            probe = run()
        except Exception as exc:  # noqa: BLE001 - whatever a tool or a driver does, detection goes on
            probe = Probe(source, (), f"failed ({exc.__class__.__name__}: {str(exc)[:120]})")
        seen.append(probe)
        if probe.gpus:
            return replace(identify(probe, environ, catalog), probes=tuple(seen))
    return Detection(None, (), "", "no probe found a GPU", tuple(seen))


_MEMO: dict = {}


def detect_node(environ: Mapping[str, str], root: str = "/") -> Detection:
    """Detection for this node (once per process, PATH, root and visibility setting)."""
    key = (root,) + tuple(environ.get(k) for k in ("PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                                   "ROCR_VISIBLE_DEVICES"))
    if key not in _MEMO:
        _MEMO[key] = detect(environ, root=root)
    return _MEMO[key]


def detect_hardware_id(environ: Mapping[str, str]) -> Optional[str]:
    """For KIMI_HARDWARE=auto (entrypoint.app.launch)."""
    return detect_node(environ).hardware


# ---------------------------------------------------------------- AMD firmware


def parse_rocm_smi_fw(text: str) -> List[int]:
    """MEC firmware versions from `rocm-smi --showfw --json`."""
    data = json.loads(text)
    versions = []
    for key, card in (data.items() if isinstance(data, dict) else []):
        if str(key).startswith("card") and isinstance(card, dict):
            value = _ci_get(card, "MEC firmware version", "MEC", default=None)
            number = _number(value) if value is not None else None
            if number is not None:
                versions.append(int(number))
    return versions


def mec_firmware(environ: Mapping[str, str], root: str = "/") -> Tuple[List[int], str]:
    """(MEC firmware version of each AMD GPU, where it was read); [] when unreadable."""
    values = []
    for path in sorted(Path(root, "sys/class/drm").glob("card*/device/fw_version/mec_fw_version")):
        text = (_read(path) or "").lower()
        if re.fullmatch(r"0x[0-9a-f]{1,8}|[0-9]{1,10}", text):
            values.append(int(text, 0) if text.startswith("0x") else int(text))
    if values:
        return values, "sysfs mec_fw_version"
    out, why = _run_tool("rocm-smi", ("--showfw", "--json"), environ)
    if out is None:
        return [], f"rocm-smi --showfw: {why}"
    try:
        found = parse_rocm_smi_fw(out)
    except (ValueError, TypeError, AttributeError, RecursionError, OverflowError):
        return [], "rocm-smi --showfw: unreadable output"
    return found, "rocm-smi --showfw" if found else "rocm-smi --showfw: no MEC version in its output"


# firmware component (recipes/hardware.yaml `firmware.component`) -> its reader
FIRMWARE_READERS = {"mec": mec_firmware}
