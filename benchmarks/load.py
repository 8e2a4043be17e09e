#!/usr/bin/env python3
"""Cold-start weight loading: GB/s of each loader against the node's two physical limits.

Run by hand on a GPU node (not a test; it needs torch with a GPU and the loader packages):

    python3 benchmarks/load.py [--dir DIR] [--layers 2] [--experts-per-shard 128]
                               [--rounds 3] [--budget-s 480] [--out results.json]

1. Writes a synthetic checkpoint shaped like Kimi-K2.5's to DIR on the machine's local disk:
   safetensors shards of ~3.3 GB, each holding one third of an MoE layer's 384 routed experts in
   the checkpoint's own layout (compressed-tensors pack-quantized INT4, group 32: int32
   `weight_packed` [out, in/8], bf16 `weight_scale` [out, in/32], int32 `weight_shape` [2] for
   gate/up [2048, 7168] and down [7168, 2048]), and in the layer's first shard its bf16 MLA
   attention, router (with the fp32 correction bias), shared expert and norms. The bytes are
   random (drawn on the GPU), so nothing compresses or dedups.
2. Measures, in the same run, the two physical limits:
   - disk: sequential reads of the shards (`--limits`: rawN = O_DIRECT with N threads over 16 MiB
     blocks; buffered1 = one plain reader, the kernel's read-ahead); the best median is the limit;
   - host-to-device: a pinned 4 GiB host buffer copied to the GPU (CUDA events), and pageable.
3. Loads the whole checkpoint into GPU memory, the way vLLM's loaders do, with:
   - `safetensors`: safe_open on the CPU (mmap), each tensor copied to the GPU (vLLM's default
     `--load-format auto`/`safetensors`);
   - `fastsafetensors`: SafeTensorsFileLoader per file, copy_files_to_device, get_tensor; GDS
     first and the no-GDS bounce buffer on a GDS error, as vLLM's iterator does, and the no-GDS
     path on its own;
   - `runai_streamer`: SafetensorsStreamer.stream_files to the CPU, each tensor to the GPU
     (vLLM's `runai_streamer`), at the streamer's default concurrency and at 64;
   - `instanttensor`: instanttensor.safe_open(files, device) and its tensors() (vLLM's
     `instanttensor`).
   Every load is checked: fingerprints (byte sums computed on the GPU at write time) of a sample
   of tensors per shard must match what the loader delivered.
4. Before every cold measurement: `sync`, `echo 3 > /proc/sys/vm/drop_caches` (when permitted)
   and posix_fadvise(DONTNEED) on each shard; the page-cache residency of the shards (mincore)
   is recorded with every figure. One warm (page cache full) safetensors load is measured last.

Loaders run round-robin, one round at a time, so a budget that runs out leaves equal counts;
figures are medians over rounds. Results go to --out (JSON, rewritten after every measurement)
and a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from parallel import timed_threads  # benchmarks/parallel.py (the script's own folder is on sys.path)

GB = 1e9
BLOCK = 16 << 20

# Kimi-K2.5 (moonshotai/Kimi-K2.5 config.json, text_config): DeepSeek-V3 architecture.
HIDDEN = 7168
MOE_INTER = 2048
N_EXPERTS = 384
HEADS = 64
Q_LORA = 1536
KV_LORA = 512
QK_NOPE = 128
QK_ROPE = 64
V_HEAD = 128
GROUP = 32  # compressed-tensors pack-quantized INT4 group size


def expert_tensors(prefix: str, out_f: int, in_f: int) -> list:
    """One INT4 pack-quantized linear: (name, dtype, shape)."""
    return [(f"{prefix}.weight_packed", "I32", [out_f, in_f // 8]),
            (f"{prefix}.weight_scale", "BF16", [out_f, in_f // GROUP]),
            (f"{prefix}.weight_shape", "I32", [2])]


def layer_dense(layer: int) -> list:
    p = f"language_model.model.layers.{layer}"
    return [
        (f"{p}.input_layernorm.weight", "BF16", [HIDDEN]),
        (f"{p}.post_attention_layernorm.weight", "BF16", [HIDDEN]),
        (f"{p}.self_attn.q_a_proj.weight", "BF16", [Q_LORA, HIDDEN]),
        (f"{p}.self_attn.q_a_layernorm.weight", "BF16", [Q_LORA]),
        (f"{p}.self_attn.q_b_proj.weight", "BF16", [HEADS * (QK_NOPE + QK_ROPE), Q_LORA]),
        (f"{p}.self_attn.kv_a_proj_with_mqa.weight", "BF16", [KV_LORA + QK_ROPE, HIDDEN]),
        (f"{p}.self_attn.kv_a_layernorm.weight", "BF16", [KV_LORA]),
        (f"{p}.self_attn.kv_b_proj.weight", "BF16", [HEADS * (QK_NOPE + V_HEAD), KV_LORA]),
        (f"{p}.self_attn.o_proj.weight", "BF16", [HIDDEN, HEADS * V_HEAD]),
        (f"{p}.mlp.gate.weight", "BF16", [N_EXPERTS, HIDDEN]),
        (f"{p}.mlp.gate.e_score_correction_bias", "F32", [N_EXPERTS]),
        (f"{p}.mlp.shared_experts.gate_proj.weight", "BF16", [MOE_INTER, HIDDEN]),
        (f"{p}.mlp.shared_experts.up_proj.weight", "BF16", [MOE_INTER, HIDDEN]),
        (f"{p}.mlp.shared_experts.down_proj.weight", "BF16", [HIDDEN, MOE_INTER]),
    ]


def shard_layout(layers: int, experts_per_shard: int) -> list:
    """[[(name, dtype, shape), ...] per shard]."""
    shards = []
    for layer in range(1, layers + 1):  # layer 0 of K2.5 is dense; the MoE layers start at 1
        for first in range(0, N_EXPERTS, experts_per_shard):
            tensors = layer_dense(layer) if first == 0 else []
            for e in range(first, min(first + experts_per_shard, N_EXPERTS)):
                p = f"language_model.model.layers.{layer}.mlp.experts.{e}"
                tensors += expert_tensors(f"{p}.gate_proj", MOE_INTER, HIDDEN)
                tensors += expert_tensors(f"{p}.up_proj", MOE_INTER, HIDDEN)
                tensors += expert_tensors(f"{p}.down_proj", HIDDEN, MOE_INTER)
            shards.append(tensors)
    return shards


ITEMSIZE = {"BF16": 2, "F32": 4, "I32": 4, "U8": 1}


def nbytes(dtype: str, shape: list) -> int:
    n = ITEMSIZE[dtype]
    for s in shape:
        n *= s
    return n


def write_shard(torch, path: Path, tensors: list, sample_every: int) -> dict:
    """Writes one safetensors file (header + data, 8-byte aligned); returns {name: byte sum}."""
    header, offset = {}, 0
    for name, dtype, shape in tensors:
        n = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    fingerprints = {}
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        pending, pending_bytes = [], 0

        def flush():
            nonlocal pending, pending_bytes
            if not pending:
                return
            buf = torch.randint(0, 256, (pending_bytes,), dtype=torch.uint8, device="cuda")
            pos = 0
            for i, (name, dtype, shape) in enumerate(pending):
                n = nbytes(dtype, shape)
                if name.endswith("weight_shape"):  # the real value: [out, in]
                    rows = shape_of[name]
                    buf[pos:pos + n] = torch.tensor(rows, dtype=torch.int32, device="cuda").view(torch.uint8)
                if (i % sample_every == 0) or name.endswith("o_proj.weight"):
                    fingerprints[name] = int(buf[pos:pos + n].to(torch.int64).sum().item())
                pos += n
            f.write(buf.cpu().numpy().data)
            del buf
            pending, pending_bytes = [], 0

        shape_of = {}
        for name, dtype, shape in tensors:
            if name.endswith("weight_shape"):
                base = name.rsplit(".", 1)[0]
                shape_of[name] = ([MOE_INTER, HIDDEN] if not base.endswith("down_proj")
                                  else [HIDDEN, MOE_INTER])
            pending.append((name, dtype, shape))
            pending_bytes += nbytes(dtype, shape)
            if pending_bytes >= 1 << 30:
                flush()
        flush()
        f.flush()
        os.fsync(f.fileno())
    return fingerprints


# ---- page cache -----------------------------------------------------------------------------

def drop_caches(files: list) -> dict:
    subprocess.run(["sync"], check=False)
    dropped = False
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        dropped = True
    except OSError:
        pass
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return {"drop_caches": dropped, "fadvise_dontneed": True}


_libc = ctypes.CDLL(None, use_errno=True)


def resident_fraction(files: list) -> float:
    """Share of the shards' pages in the page cache (mincore over a read-only mapping)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = resident = 0
    for p in files:
        size = os.path.getsize(p)
        if not size:
            continue
        with open(p, "rb") as f:
            mm = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
            try:
                pages = (size + page - 1) // page
                vec = (ctypes.c_ubyte * pages)()
                base = _mmap_address(mm)
                if _libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(size), vec) != 0:
                    return -1.0
                flags = bytes(vec)
                resident += len(flags) - flags.count(0)
                total += pages
            finally:
                mm.close()
    return resident / total if total else 0.0


def _mmap_address(mm) -> int:
    import numpy as np
    return np.frombuffer(mm, dtype=np.uint8).ctypes.data


# ---- the limits -----------------------------------------------------------------------------

def raw_read(files: list, threads: int, direct: bool = True) -> float:
    """Bytes/s of a sequential read of every shard, `threads` readers over 16 MiB blocks
    (O_DIRECT unless `direct` is False)."""
    jobs = []
    for p in files:
        size = os.path.getsize(p)
        jobs += [(p, off, min(BLOCK, size - off)) for off in range(0, size, BLOCK)]
    lock, total = threading.Lock(), [0]
    cursor = [0]

    def worker():
        buf = mmap.mmap(-1, BLOCK)
        fds = {}
        try:
            while True:
                with lock:
                    if cursor[0] >= len(jobs):
                        return
                    p, off, n = jobs[cursor[0]]
                    cursor[0] += 1
                if p not in fds:
                    fds[p] = os.open(p, os.O_RDONLY | (os.O_DIRECT if direct else 0))
                want = (n + 4095) // 4096 * 4096
                got = os.preadv(fds[p], [memoryview(buf)[:want]], off)
                with lock:
                    total[0] += min(got, n)
        finally:
            for fd in fds.values():
                os.close(fd)
            buf.close()

    return total[0] / timed_threads(worker, threads)


def h2d(torch, pinned: bool, size: int = 4 << 30, reps: int = 8) -> float:
    host = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
    host.fill_(7)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    for _ in range(2):
        dev.copy_(host, non_blocking=pinned)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dev.copy_(host, non_blocking=pinned)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del host, dev
    torch.cuda.empty_cache()
    return size / statistics.median(times)


# ---- the loaders ----------------------------------------------------------------------------

def load_safetensors(torch, files):
    from safetensors import safe_open
    out = {}
    for p in files:
        with safe_open(p, framework="pt", device="cpu") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k).to("cuda")
    return out, {}


def _fst(torch, files, nogds):
    from fastsafetensors import SafeTensorsFileLoader
    out = {}
    for p in files:
        loader = SafeTensorsFileLoader(None, "cuda:0", nogds=nogds, framework="pytorch")
        try:
            loader.add_filenames({0: [p]})
            fb = loader.copy_files_to_device()
            try:
                for k in list(fb.key_to_rank_lidx.keys()):
                    out[k] = fb.get_tensor(k)
            finally:
                fb.close()
        finally:
            loader.close()
    return out


def load_fastsafetensors(torch, files):
    """vLLM's iterator: GDS first, the no-GDS bounce buffer on a GDS error."""
    try:
        return _fst(torch, files, nogds=False), {"copier": "gds"}
    except RuntimeError as e:
        return _fst(torch, files, nogds=True), {"copier": "nogds", "gds_error": str(e)[:300]}


def load_fastsafetensors_nogds(torch, files):
    return _fst(torch, files, nogds=True), {"copier": "nogds"}


def _runai(torch, files, concurrency):
    if concurrency:
        os.environ["RUNAI_STREAMER_CONCURRENCY"] = str(concurrency)
    else:
        os.environ.pop("RUNAI_STREAMER_CONCURRENCY", None)
    from runai_model_streamer import SafetensorsStreamer
    out = {}
    with SafetensorsStreamer() as s:
        s.stream_files(list(files), device="cpu")
        for k, t in s.get_tensors():
            out[k] = t.to("cuda")
    return out, {"concurrency": concurrency or "default"}


def load_runai(torch, files):
    return _runai(torch, files, None)


def load_runai_c64(torch, files):
    return _runai(torch, files, 64)


def load_instanttensor(torch, files):
    import instanttensor
    out = {}
    with instanttensor.safe_open(list(files), framework="pt", device=0) as f:
        for k, t in f.tensors():
            out[k] = t
    return out, {}


LOADERS = {
    "safetensors": load_safetensors,
    "fastsafetensors": load_fastsafetensors,
    "fastsafetensors_nogds": load_fastsafetensors_nogds,
    "runai_streamer": load_runai,
    "runai_streamer_c64": load_runai_c64,
    "instanttensor": load_instanttensor,
}


def check(torch, loaded: dict, fingerprints: dict) -> str:
    missing = [k for k in fingerprints if k not in loaded]
    if missing:
        return f"missing {len(missing)} tensors, e.g. {missing[0]}"
    for k, want in fingerprints.items():
        t = loaded[k]
        if t.device.type != "cuda":
            return f"{k} on {t.device}"
        got = int(t.contiguous().view(torch.uint8).to(torch.int64).sum().item())
        if got != want:
            return f"{k}: byte sum {got} != {want}"
    return "ok"


# ---- facts ----------------------------------------------------------------------------------

def sh(*cmd) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({e})"


def version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version as v
    try:
        return v(dist)
    except PackageNotFoundError:
        return "absent"


def facts(torch, ckpt: Path) -> dict:
    cpu = [ln.split(":", 1)[1].strip() for ln in sh("lscpu").splitlines() if ln.startswith("Model name")]
    mem = [ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")]
    return {
        "gpu": torch.cuda.get_device_name(0),
        "nvidia_smi": sh("nvidia-smi", "--format=csv,noheader", "--query-gpu=name,memory.total,driver_version,"
                         "pcie.link.gen.current,pcie.link.width.current"),
        "cpu": cpu[0] if cpu else platform.processor(), "cores": os.cpu_count(),
        "memtotal": mem[0] if mem else "", "kernel": platform.release(),
        "filesystem": sh("findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "-T", str(ckpt)),
        "df": sh("df", "-hT", str(ckpt)),
        "lsblk": sh("lsblk", "-d", "-o", "NAME,MODEL,SIZE,ROTA,TRAN,TYPE,SCHED"),
        "nvidia_fs": Path("/proc/driver/nvidia-fs").exists(),
        "lsmod_nvidia_fs": "nvidia_fs" in sh("lsmod"),
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "versions": {d: version(d) for d in ("safetensors", "fastsafetensors", "runai-model-streamer",
                                             "instanttensor", "nvidia-cufile", "numpy")},
    }


def pick_dir() -> Path:
    best, free = None, -1
    for cand in ("/var/tmp", "/tmp", os.getcwd(), "/root", "/mnt", "/data"):
        p = Path(cand)
        if not p.is_dir() or not os.access(p, os.W_OK):
            continue
        fstype = sh("findmnt", "-n", "-o", "FSTYPE", "-T", cand)
        if fstype in ("tmpfs", "ramfs", "overlay", "9p", "virtiofs", "fuse"):
            continue
        f = shutil.disk_usage(p).free
        if f > free:
            best, free = p, f
    return (best or Path(os.getcwd())) / "kimi-load-bench"


# ---- main -----------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts-per-shard", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--limits", default="raw1,raw8,raw32,buffered1",
                    help="disk limits: rawN = O_DIRECT with N threads; buffered1 = one plain reader "
                         "(the kernel's readahead); raw1 and buffered1 run in the first round only")
    ap.add_argument("--out", type=Path, default=Path("load-results.json"))
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint afterwards")
    a = ap.parse_args()
    start = time.monotonic()
    import torch

    ckpt = a.dir or pick_dir()
    ckpt.mkdir(parents=True, exist_ok=True)
    res = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "dir": str(ckpt),
           "facts": facts(torch, ckpt), "limits": {}, "runs": [], "errors": {}}

    def save():
        a.out.write_text(json.dumps(res, indent=1))

    layout = shard_layout(a.layers, a.experts_per_shard)
    files, fps = [], {}
    t0 = time.perf_counter()
    for i, tensors in enumerate(layout):
        p = ckpt / f"model-{i + 1:05d}-of-{len(layout):05d}.safetensors"
        fps.update(write_shard(torch, p, tensors, sample_every=97))
        files.append(str(p))
    total = sum(os.path.getsize(p) for p in files)
    res["checkpoint"] = {"shards": len(files), "bytes": total, "tensors": sum(map(len, layout)),
                         "write_s": round(time.perf_counter() - t0, 2),
                         "shard_bytes": [os.path.getsize(p) for p in files],
                         "fingerprinted": len(fps)}
    print(f"checkpoint: {len(files)} shards, {total / GB:.2f} GB, {res['checkpoint']['tensors']} tensors, "
          f"written in {res['checkpoint']['write_s']} s", flush=True)
    save()

    res["limits"]["h2d_pinned"] = [h2d(torch, True)]
    res["limits"]["h2d_pageable"] = [h2d(torch, False, reps=3)]
    save()

    names = [n for n in a.loaders.split(",") if n]
    for mod in ("safetensors", "fastsafetensors", "runai_model_streamer", "instanttensor"):
        try:  # imported once up front, so no round pays a module's first import
            __import__(mod)
        except Exception as e:  # noqa: BLE001 - recorded; that loader's runs then fail and say why
            res["errors"][f"import {mod}"] = repr(e)
    last = {}
    for rnd in range(a.rounds):
        for what in [x for x in a.limits.split(",") if x] + names:
            if what in ("raw1", "buffered1") and rnd > 0:
                continue
            est = last.get(what, total / (0.5 * GB))
            if time.monotonic() - start + est + 10 > a.budget_s:
                res.setdefault("skipped", []).append(f"round {rnd} {what}: budget")
                continue
            if what in res["errors"]:
                continue
            cache = drop_caches(files)
            resident = resident_fraction(files)
            rec = {"round": rnd, "what": what, "page_cache": cache, "resident_before": round(resident, 4)}
            try:
                if what.startswith(("raw", "buffered")):
                    t = time.perf_counter()
                    bps = raw_read(files, 1, direct=False) if what == "buffered1" else raw_read(files, int(what[3:]))
                    rec.update(seconds=round(time.perf_counter() - t, 3), gbps=round(bps / GB, 3))
                else:
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    loaded, info = LOADERS[what](torch, files)
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t
                    rec.update(seconds=round(dt, 3), gbps=round(total / dt / GB, 3), info=info,
                               tensors=len(loaded), check=check(torch, loaded, fps))
                    del loaded
                    torch.cuda.empty_cache()
                last[what] = rec["seconds"]
                res["runs"].append(rec)
                print(json.dumps(rec), flush=True)
            except Exception as e:  # one loader's failure must not cost the others' figures
                res["errors"][what] = "".join(traceback.format_exception(e))[-3000:]
                print(f"{what}: FAILED {e!r}", flush=True)
            save()

    # One warm load: the page cache filled by a plain read, then safetensors.
    if time.monotonic() - start + last.get("safetensors", 60) * 1.5 + 10 < a.budget_s and "safetensors" in names:
        for p in files:
            with open(p, "rb") as f:
                while f.read(BLOCK):
                    pass
        resident = resident_fraction(files)
        t = time.perf_counter()
        loaded, _ = load_safetensors(torch, files)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        res["runs"].append({"round": 0, "what": "safetensors_warm", "resident_before": round(resident, 4),
                            "seconds": round(dt, 3), "gbps": round(total / dt / GB, 3),
                            "check": check(torch, loaded, fps)})
        del loaded
        torch.cuda.empty_cache()
    res["elapsed_s"] = round(time.monotonic() - start, 1)
    save()
    if not a.keep:
        shutil.rmtree(ckpt, ignore_errors=True)
    print(table(res))
    return 0


def table(res: dict) -> str:
    disk = max([statistics.median(r["gbps"] for r in res["runs"] if r["what"] == w)
                for w in {r["what"] for r in res["runs"] if r["what"].startswith(("raw", "buffered"))}]
               or [float("nan")])
    pinned = statistics.median(res["limits"]["h2d_pinned"]) / GB
    rows = ["| loader | runs | median s | median GB/s | / disk | / pinned H2D | check |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    by = {}
    for r in res["runs"]:
        by.setdefault(r["what"], []).append(r)
    for what, rs in by.items():
        g = statistics.median(r["gbps"] for r in rs)
        s = statistics.median(r["seconds"] for r in rs)
        rows.append(f"| {what} | {len(rs)} | {s:.2f} | {g:.2f} | {g / disk:.2f} | {g / pinned:.2f} | "
                    f"{','.join(sorted({r.get('check', '-') for r in rs}))} |")
    rows.append(f"\nlimits: disk (best sequential read, median) {disk:.2f} GB/s; pinned H2D {pinned:.2f} GB/s; "
                f"pageable H2D {statistics.median(res['limits']['h2d_pageable']) / GB:.2f} GB/s")
    for k, v in res["errors"].items():
        rows.append(f"error {k}: {v.strip().splitlines()[-1]}")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
